#define BOOST_TEST_MODULE config_fuzz
#include <boost/test/unit_test.hpp>

#include "plexus/core/config.hpp"

#include <boost/json.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

// Deterministic fuzzing of the config module: mutated config text, mutated
// schemas, random override strings and random paths. Each input may be
// rejected, but only with the documented exception type (ConfigError for
// configs and overrides, std::invalid_argument for schemas and find() paths),
// and every ConfigError must keep its message invariants. Both outcomes are
// counted and required, so a regression that makes everything fail (or pass)
// is noticed too.

namespace cfg = plexus::config;
namespace json = boost::json;

namespace {

// SplitMix64: tiny and fully specified, so the sequence (and thus the test)
// is identical on every platform and standard library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31U);
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
  char byte() { return static_cast<char>(next() & 0xFFU); }

 private:
  std::uint64_t state_;
};

constexpr std::string_view schema_text = R"({
  "type": "object",
  "properties": {
    "model": {
      "type": "object",
      "properties": {
        "hidden_size": {"type": "integer", "minimum": 1},
        "activation": {"type": "string", "enum": ["gelu", "swiglu"], "default": "gelu"},
        "dropout": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.1},
        "layers": {"type": "array", "default": [], "items": {
          "type": "object",
          "properties": {"kind": {"type": "string"}, "width": {"type": "integer", "default": 64}},
          "required": ["kind"]}}
      },
      "required": ["hidden_size"]
    },
    "train": {"type": "object", "properties": {
      "steps": {"type": "integer", "minimum": 1, "default": 100},
      "lr": {"type": ["number", "null"], "exclusive_minimum": 0, "default": 0.001},
      "tags": {"type": "object", "additional_properties": {"type": "string"}}}},
    "extra": {"type": "any"}
  },
  "required": ["model"]
})";

constexpr std::string_view config_text = R"({
  // comment
  "model": {"hidden_size": 64, "activation": "swiglu", "layers": [{"kind": "mlp", "width": 8}, {"kind": "attn"}]},
  "train": {"steps": 10, "lr": 3e-4, "tags": {"a": "b"}, /* inline */},
  "extra": [1, "two", {"three": null}, true, -1.5e3, "\u00e9\n"]
})";

// Bytes that are likely to change how JSON is structured, plus anything else.
constexpr std::string_view interesting = "{}[]\":,0123456789.-+eE tfnul\\/*\n\t";

std::string mutate(std::string text, Rng& rng) {
  const std::size_t rounds = 1 + rng.below(4);
  for (std::size_t r = 0; r < rounds; ++r) {
    const std::size_t at = rng.below(text.size() + 1);
    switch (rng.below(6)) {
      case 0:  // overwrite with a random byte
        if (at < text.size()) text[at] = rng.byte();
        break;
      case 1:  // overwrite with a structural byte
        if (at < text.size()) text[at] = interesting[rng.below(interesting.size())];
        break;
      case 2:  // insert
        text.insert(at, 1, interesting[rng.below(interesting.size())]);
        break;
      case 3:  // delete a short run
        text.erase(at, 1 + rng.below(8));
        break;
      case 4:  // truncate
        text.resize(at);
        break;
      default: {  // duplicate a slice elsewhere (creates duplicate keys, nesting)
        const std::size_t from = rng.below(text.size() + 1);
        const std::string slice = text.substr(from, rng.below(40));
        text.insert(at, slice);
        break;
      }
    }
  }
  return text;
}

constexpr std::array<std::string_view, 34> override_tokens{"model",
                                                           "train",
                                                           "layers",
                                                           "hidden_size",
                                                           "activation",
                                                           "steps",
                                                           "lr",
                                                           "tags",
                                                           "extra",
                                                           ".",
                                                           ".",
                                                           "[",
                                                           "]",
                                                           "0",
                                                           "1",
                                                           "7",
                                                           "18446744073709551616",
                                                           "=",
                                                           "=",
                                                           "\"",
                                                           "[\"a.b\"]",
                                                           "{",
                                                           "}",
                                                           ",",
                                                           "true",
                                                           "null",
                                                           "3e-4",
                                                           "1e999",
                                                           "gelu",
                                                           " ",
                                                           "x",
                                                           "-1",
                                                           "\\",
                                                           "\n"};

std::string random_override(Rng& rng) {
  std::string out;
  const std::size_t n = rng.below(12);
  for (std::size_t i = 0; i < n; ++i) {
    if (rng.below(10) == 0) {
      out += rng.byte();
    } else {
      out += override_tokens[rng.below(override_tokens.size())];
    }
  }
  return out;
}

// A well-formed assignment to a real or nearly real path with a random value,
// so that successful overrides also reach validation.
std::string structured_override(Rng& rng) {
  constexpr std::array<std::string_view, 10> paths{
      "model.hidden_size", "model.layers[0].width", "model.layers.1.kind", "model.activation",
      "train.lr",          "train.steps",           "train.tags.x",        "extra.deep.key",
      "model.dropout",     "train.tags[\"a.b\"]"};
  constexpr std::array<std::string_view, 12> values{"8",      "-1",   "0.5",    "2.0",        "gelu", "relu",
                                                    "\"12\"", "null", "[1, 2]", "{\"a\": 1}", "true", ""};
  return std::string(paths[rng.below(paths.size())]) + "=" + std::string(values[rng.below(values.size())]);
}

// Invariants every ConfigError must keep, whatever produced it.
void check_error(const cfg::ConfigError& e) {
  const std::string what = e.what();
  const std::string prefix = e.path().empty() ? "config error: " : "config error at " + e.path() + ": ";
  BOOST_TEST_REQUIRE(!e.problems().empty());
  BOOST_TEST_REQUIRE(what == prefix + e.detail());
  BOOST_TEST_REQUIRE(e.problems().front().path == e.path());
}

struct Counts {
  std::size_t accepted = 0;
  std::size_t rejected = 0;
};

}  // namespace

BOOST_AUTO_TEST_CASE(mutated_config_text) {
  const cfg::Schema schema = cfg::Schema::parse(schema_text, "fuzz-schema");
  Rng rng(0x5EED0001);
  Counts parse;
  Counts valid;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4000; ++i) {
    const std::string text = mutate(std::string(config_text), rng);
    json::value v;
    try {
      v = cfg::parse_text(text, "<fuzz>");
      ++parse.accepted;
    } catch (const cfg::ConfigError& e) {
      check_error(e);
      ++parse.rejected;
      continue;
    } catch (const std::exception& e) {
      BOOST_FAIL("parse_text threw a non-ConfigError: " << e.what() << " for input: " << text);
    } catch (...) {
      BOOST_FAIL("parse_text threw a non-exception for input: " << text);
    }
    try {
      cfg::validate(v, schema);
      ++valid.accepted;
    } catch (const cfg::ConfigError& e) {
      check_error(e);
      ++valid.rejected;
    } catch (const std::exception& e) {
      BOOST_FAIL("validate threw a non-ConfigError: " << e.what() << " for input: " << text);
    } catch (...) {
      BOOST_FAIL("validate threw a non-exception for input: " << text);
    }
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  BOOST_TEST_MESSAGE("config text: parsed " << parse.accepted << ", parse errors " << parse.rejected
                                            << "; valid " << valid.accepted << ", validation errors "
                                            << valid.rejected << " (" << ms.count() << " ms)");
  BOOST_TEST(parse.accepted > 0U);
  BOOST_TEST(parse.rejected > 0U);
  BOOST_TEST(valid.accepted > 0U);
  BOOST_TEST(valid.rejected > 0U);
}

BOOST_AUTO_TEST_CASE(random_overrides) {
  const cfg::Schema schema = cfg::Schema::parse(schema_text, "fuzz-schema");
  const json::value base = cfg::parse_text(config_text, "<fuzz>");
  Rng rng(0x5EED0002);
  Counts applied;
  std::size_t validated = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4000; ++i) {
    std::string assignment;
    switch (rng.below(3)) {
      case 0:
        assignment = random_override(rng);
        break;
      case 1:  // a plausible prefix, so deep paths are reached
        assignment = "model.layers" + random_override(rng);
        break;
      default:
        assignment = structured_override(rng);
        break;
    }
    json::value v = base;
    try {
      cfg::apply_override(v, assignment);
      ++applied.accepted;
    } catch (const cfg::ConfigError& e) {
      check_error(e);
      BOOST_TEST_REQUIRE(v == base);  // failed overrides change nothing
      ++applied.rejected;
      continue;
    } catch (const std::exception& e) {
      BOOST_FAIL("apply_override threw a non-ConfigError: " << e.what() << " for: " << assignment);
    } catch (...) {
      BOOST_FAIL("apply_override threw a non-exception for: " << assignment);
    }
    try {
      cfg::validate(v, schema);
      ++validated;
    } catch (const cfg::ConfigError& e) {
      check_error(e);
    } catch (...) {
      BOOST_FAIL("validate after override threw a non-ConfigError for: " << assignment);
    }
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  BOOST_TEST_MESSAGE("overrides: applied " << applied.accepted << ", rejected " << applied.rejected
                                           << ", still valid " << validated << " (" << ms.count() << " ms)");
  BOOST_TEST(applied.accepted > 0U);
  BOOST_TEST(applied.rejected > 0U);
  BOOST_TEST(validated > 0U);
}

BOOST_AUTO_TEST_CASE(mutated_schemas) {
  Rng rng(0x5EED0003);
  Counts schemas;
  for (int i = 0; i < 3000; ++i) {
    const std::string text = mutate(std::string(schema_text), rng);
    try {
      const cfg::Schema s = cfg::Schema::parse(text, "<fuzz-schema>");
      ++schemas.accepted;
      // A schema that parses must also validate without surprises.
      json::value v = cfg::parse_text(config_text, "<fuzz>");
      try {
        cfg::validate(v, s);
      } catch (const cfg::ConfigError& e) {
        check_error(e);
      }
    } catch (const std::invalid_argument&) {
      ++schemas.rejected;
    } catch (const std::exception& e) {
      BOOST_FAIL("schema fuzz threw an unexpected exception: " << e.what() << " for schema: " << text);
    } catch (...) {
      BOOST_FAIL("schema fuzz threw a non-exception for schema: " << text);
    }
  }
  BOOST_TEST_MESSAGE("schemas: accepted " << schemas.accepted << ", rejected " << schemas.rejected);
  BOOST_TEST(schemas.accepted > 0U);
  BOOST_TEST(schemas.rejected > 0U);
}

BOOST_AUTO_TEST_CASE(random_find_paths) {
  const json::value base = cfg::parse_text(config_text, "<fuzz>");
  Rng rng(0x5EED0004);
  Counts found;
  std::size_t malformed = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string path = random_override(rng);
    if (rng.below(2) == 0) path.insert(0, "model");
    try {
      (cfg::find(base, path) != nullptr ? found.accepted : found.rejected) += 1;
    } catch (const std::invalid_argument&) {
      ++malformed;
    } catch (...) {
      BOOST_FAIL("find threw something other than std::invalid_argument for: " << path);
    }
  }
  BOOST_TEST_MESSAGE("find: found " << found.accepted << ", absent " << found.rejected << ", malformed "
                                    << malformed);
  BOOST_TEST(found.accepted > 0U);
  BOOST_TEST(found.rejected > 0U);
  BOOST_TEST(malformed > 0U);
}
