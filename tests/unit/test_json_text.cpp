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

// Every finite double reads back (through the same Boost.JSON parser the config and checkpoint
// loaders use) to the same bits: checkpoints keep their state exactly.
BOOST_AUTO_TEST_CASE(doubles_read_back_bit_exactly) {
  std::mt19937_64 rng(20261126);
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const double x = std::bit_cast<double>(rng());
    if (!std::isfinite(x)) continue;
    const std::string text = plexus::json_number_text(x);
    const json::value back = json::parse(text);
    BOOST_TEST_REQUIRE(back.is_double(), text);
    BOOST_TEST_REQUIRE(std::bit_cast<std::uint64_t>(back.get_double()) == std::bit_cast<std::uint64_t>(x), text);
    ++checked;
  }
  // and the values configs hold: learning rates, betas, epsilons
  for (double x : {2e-3, 3e-4, 0.9, 0.95, 0.999, 1e-8, 1e-5, 0.1, 0.02, 6e-4, 1.0 / 3.0}) {
    const json::value back = json::parse(plexus::json_number_text(x));
    BOOST_TEST(std::bit_cast<std::uint64_t>(back.get_double()) == std::bit_cast<std::uint64_t>(x));
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
