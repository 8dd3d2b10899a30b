#define BOOST_TEST_MODULE json_text
#include <boost/test/unit_test.hpp>

#include "plexus/core/json_text.hpp"

#include <boost/json.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

namespace json = boost::json;

BOOST_AUTO_TEST_CASE(doubles_print_as_a_person_writes_them) {
  BOOST_TEST(plexus::json_number_text(0.9) == "0.9");
  BOOST_TEST(plexus::json_number_text(2e-3) == "0.002");
  BOOST_TEST(plexus::json_number_text(3e-4) == "0.0003");
  BOOST_TEST(plexus::json_number_text(1e-8) == "1e-08");
  BOOST_TEST(plexus::json_number_text(0.95) == "0.95");
  BOOST_TEST(plexus::json_number_text(-1.5) == "-1.5");
  BOOST_TEST(plexus::json_number_text(1.8199659) == "1.8199659");
  BOOST_TEST(plexus::json_number_text(1e20) == "1e+20");
  BOOST_TEST(plexus::json_number_text(1e-5) == "1e-05");
  BOOST_TEST(plexus::json_number_text(123456.5) == "123456.5");
  BOOST_TEST(plexus::json_number_text(1e16) == "1e+16");
}

// An integral double keeps a fraction so it reads back as a double: a config's 1.0 must not
// come back as the integer 1 (a resumed run compares the two and would see them differ).
BOOST_AUTO_TEST_CASE(integral_doubles_stay_doubles) {
  BOOST_TEST(plexus::json_number_text(1.0) == "1.0");
  BOOST_TEST(plexus::json_number_text(0.0) == "0.0");
  BOOST_TEST(plexus::json_number_text(-0.0) == "-0.0");
  BOOST_TEST(plexus::json_number_text(4096.0) == "4096.0");
  const json::value back = json::parse(plexus::json_text(json::value(1.0)));
  BOOST_TEST(back.is_double());
}

// What a config, a checkpoint's state or a metric holds reads back (through the same Boost.JSON
// parser the loaders use) to the same bits; and any double reads back exactly as Boost.JSON's own
// text of it does (that parser is not correctly rounded for every one of the 2^64 bit patterns,
// e.g. some near 1e120: the text here is no worse than its own).
BOOST_AUTO_TEST_CASE(doubles_read_back_as_exactly_as_boost_json_text) {
  for (double x : {2e-3, 3e-4, 0.9, 0.95, 0.999, 1e-8, 1e-5, 0.1, 0.02, 6e-4, 1.0 / 3.0, 1.8199659, 4096.0,
                   123456.789, 1e15, 1e16, 2.5e-7}) {
    const json::value back = json::parse(plexus::json_number_text(x));
    BOOST_TEST(std::bit_cast<std::uint64_t>(back.get_double()) == std::bit_cast<std::uint64_t>(x),
               plexus::json_number_text(x));
  }
  std::mt19937_64 rng(20261126);
  std::uniform_real_distribution<double> exponent(-12.0, 12.0);
  int checked = 0;
  for (int i = 0; i < 100000; ++i) {
    // Values of the scale training produces (losses, learning rates, norms, times).
    const double x = std::pow(10.0, exponent(rng)) * (i % 2 == 0 ? 1.0 : -1.0);
    const json::value back = json::parse(plexus::json_number_text(x));
    BOOST_TEST_REQUIRE(back.is_double());
    const json::value boost_back = json::parse(json::serialize(json::value(x)));
    BOOST_TEST_REQUIRE(std::bit_cast<std::uint64_t>(back.get_double()) ==
                           std::bit_cast<std::uint64_t>(boost_back.get_double()),
                       plexus::json_number_text(x));
    ++checked;
  }
  for (int i = 0; i < 100000; ++i) {  // and over every bit pattern
    const double x = std::bit_cast<double>(rng());
    if (!std::isfinite(x)) continue;
    const double back = json::parse(plexus::json_number_text(x)).get_double();
    const double boost_back = json::parse(json::serialize(json::value(x))).get_double();
    BOOST_TEST_REQUIRE(std::bit_cast<std::uint64_t>(back) == std::bit_cast<std::uint64_t>(boost_back),
                       plexus::json_number_text(x));
    ++checked;
  }
  BOOST_TEST(checked > 190000);
}

BOOST_AUTO_TEST_CASE(compact_and_indented_forms_round_trip) {
  const json::value doc = json::parse(
      R"({"train": {"lr": 2e-3, "steps": 10, "betas": [0.9, 0.95], "name": "a\"b"},
          "empty": {}, "list": [], "nested": [{"x": 1.5}, [1, 2]], "flag": true, "none": null})");
  const std::string compact = plexus::json_text(doc);
  BOOST_TEST(compact.find('\n') == std::string::npos);
  BOOST_TEST(compact.find("\"lr\":0.002") != std::string::npos, compact);
  BOOST_TEST(compact.find("E-") == std::string::npos, compact);
  BOOST_TEST(json::parse(compact) == doc);

  const std::string indented = plexus::json_text(doc, 2);
  BOOST_TEST(indented.find("\n  \"train\": {\n    \"lr\": 0.002,") != std::string::npos, indented);
  BOOST_TEST(indented.find("\"betas\": [0.9, 0.95]") != std::string::npos, indented);
  BOOST_TEST(indented.find("\"empty\": {}") != std::string::npos, indented);
  BOOST_TEST(json::parse(indented) == doc);
}
