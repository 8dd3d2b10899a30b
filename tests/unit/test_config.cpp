#define BOOST_TEST_MODULE config
#include <boost/test/unit_test.hpp>

#include "plexus/core/config.hpp"

#include <boost/json.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

namespace cfg = plexus::config;
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// Runs f, which must throw ConfigError, and returns the error for inspection.
cfg::ConfigError config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const cfg::ConfigError& e) {
    return e;
  }
  BOOST_FAIL("expected a ConfigError");
  throw std::logic_error("unreachable");
}

std::string schema_error(std::string_view text) {
  try {
    cfg::Schema::parse(text, "test-schema");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  BOOST_FAIL("expected std::invalid_argument for schema: " << text);
  return {};
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

#define CHECK_CONTAINS(haystack, needle) \
  BOOST_TEST(contains((haystack), (needle)), "'" << (haystack) << "' does not contain '" << (needle) << "'")

// A uniquely named path in the temp directory, removed (with anything created
// there) when the test ends.
class TempPath {
 public:
  explicit TempPath(std::string_view suffix) {
    static std::atomic<unsigned> counter{0};
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    const auto thread = std::hash<std::thread::id>{}(std::this_thread::get_id());
    path_ = fs::temp_directory_path() /
            ("plexus_test_config_" + std::to_string(stamp) + "_" + std::to_string(thread) + "_" +
             std::to_string(counter++) + std::string(suffix));
  }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  ~TempPath() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  [[nodiscard]] const fs::path& path() const { return path_; }
  void write(std::string_view text) const {
    std::ofstream out(path_, std::ios::binary);
    out << text;
  }

 private:
  fs::path path_;
};

constexpr std::string_view test_schema = R"({
  "type": "object",
  "doc": "a training run",
  "properties": {
    "model": {
      "type": "object",
      "properties": {
        "hidden_size": {"type": "integer", "minimum": 1, "doc": "width of the hidden layers"},
        "activation": {"type": "string", "enum": ["gelu", "swiglu"], "default": "gelu"},
        "dropout": {"type": "number", "minimum": 0, "exclusive_maximum": 1, "default": 0.1},
        "layers": {
          "type": "array",
          "default": [],
          "items": {
            "type": "object",
            "properties": {
              "kind": {"type": "string", "enum": ["mlp", "attention"]},
              "width": {"type": "integer", "minimum": 1, "maximum": 65536, "default": 64}
            },
            "required": ["kind"]
          }
        }
      },
      "required": ["hidden_size"]
    },
    "train": {
      "type": "object",
      "properties": {
        "steps": {"type": "integer", "minimum": 1, "default": 1000},
        "lr": {"type": "number", "exclusive_minimum": 0, "default": 0.0003},
        "seed": {"type": ["integer", "null"], "default": null},
        "name": {"type": "string"},
        "log": {
          "type": "object",
          "properties": {
            "every": {"type": "integer", "minimum": 1, "default": 10},
            "dir": {"type": "string", "default": "runs"}
          }
        }
      }
    },
    "extra": {"type": "any"},
    "env": {"type": "object", "additional_properties": {"type": "string"}},
    "tags": {"type": "object", "additional_properties": true}
  },
  "required": ["model"]
})";

const cfg::Schema& schema() {
  static const cfg::Schema s = cfg::Schema::parse(test_schema, "test_schema");
  return s;
}

json::value config(std::string_view text) {
  return cfg::parse_text(text, "<test>");
}

std::string validation_message(std::string_view text) {
  json::value v = config(text);
  return config_error([&] { cfg::validate(v, schema()); }).what();
}

}  // namespace

// ------------------------------------------------------------ ConfigError ---

BOOST_AUTO_TEST_SUITE(error_type)

BOOST_AUTO_TEST_CASE(message_with_and_without_path) {
  const cfg::ConfigError with("train.steps", "expected an integer");
  BOOST_TEST(std::string(with.what()) == "config error at train.steps: expected an integer");
  BOOST_TEST(with.path() == "train.steps");
  BOOST_TEST(with.detail() == "expected an integer");
  const cfg::ConfigError without("", "bad");
  BOOST_TEST(std::string(without.what()) == "config error: bad");
  BOOST_TEST(without.path().empty());
}

BOOST_AUTO_TEST_CASE(several_problems_one_per_line) {
  const cfg::ConfigError e(std::vector<cfg::Problem>{{"a", "one"}, {"", "two"}, {"b.c", "three"}});
  BOOST_TEST(std::string(e.what()) ==
             "config error at a: one\nconfig error: two\nconfig error at b.c: three");
  BOOST_TEST(e.path() == "a");
  BOOST_TEST(std::string(e.what()) == "config error at a: " + e.detail());
  BOOST_TEST(e.problems().size() == 3U);
  const cfg::ConfigError copy = e;  // NOLINT(performance-unnecessary-copy-initialization): the copy is tested
  BOOST_TEST(copy.problems().size() == 3U);
  const cfg::ConfigError empty{std::vector<cfg::Problem>{}};
  BOOST_TEST(empty.problems().size() == 1U);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------- helpers ---

BOOST_AUTO_TEST_SUITE(helpers)

BOOST_AUTO_TEST_CASE(paths) {
  BOOST_TEST(cfg::join_path("", "a") == "a");
  BOOST_TEST(cfg::join_path("a", "b") == "a.b");
  BOOST_TEST(cfg::join_path("a", "x.y") == R"(a["x.y"])");
  BOOST_TEST(cfg::join_path("", "") == R"([""])");
  BOOST_TEST(cfg::index_path("a", 3) == "a[3]");
  BOOST_TEST(cfg::index_path("", 0) == "[0]");
  BOOST_TEST(cfg::index_path(cfg::join_path("model", "layers"), 2) == "model.layers[2]");
}

BOOST_AUTO_TEST_CASE(describe_values) {
  BOOST_TEST(cfg::describe(json::value(3.5)) == "number 3.5");
  BOOST_TEST(cfg::describe(json::value(4.0)) == "number 4.0");
  BOOST_TEST(cfg::describe(json::value(-3)) == "number -3");
  BOOST_TEST(cfg::describe(json::value("x")) == "string \"x\"");
  BOOST_TEST(cfg::describe(json::value(json::object())) == "object");
  BOOST_TEST(cfg::describe(json::value(json::array{1, 2})) == "array of 2");
  BOOST_TEST(cfg::describe(json::value(true)) == "true");
  BOOST_TEST(cfg::describe(json::value(nullptr)) == "null");
  const std::string long_string(500, 'z');
  const std::string d = cfg::describe(json::value(long_string));
  BOOST_TEST(d.size() < 100U);
  CHECK_CONTAINS(d, "500 bytes");
}

BOOST_AUTO_TEST_CASE(nearest_suggestions) {
  const std::vector<std::string> keys{"hidden_size", "activation", "dropout", "lr"};
  BOOST_TEST(cfg::nearest("hiden_size", keys).value_or("") == "hidden_size");
  BOOST_TEST(cfg::nearest("Hidden_Size", keys).value_or("") == "hidden_size");
  BOOST_TEST(cfg::nearest("droupot", keys).value_or("") == "dropout");  // transposition
  BOOST_TEST(cfg::nearest("rl", keys).value_or("") == "lr");
  BOOST_TEST(!cfg::nearest("xy", keys).has_value());
  BOOST_TEST(!cfg::nearest("batch_size", keys).has_value());
  BOOST_TEST(!cfg::nearest("anything", {}).has_value());
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------- loading ---

BOOST_AUTO_TEST_SUITE(loading)

BOOST_AUTO_TEST_CASE(missing_file_names_it) {
  const TempPath missing(".json");
  const auto e = config_error([&] { cfg::load_file(missing.path()); });
  CHECK_CONTAINS(e.what(), missing.path().string());
  CHECK_CONTAINS(e.what(), "no such file");
  BOOST_TEST(e.path().empty());
}

BOOST_AUTO_TEST_CASE(directory_is_refused) {
  const TempPath dir("_dir");
  fs::create_directory(dir.path());
  const auto e = config_error([&] { cfg::load_file(dir.path()); });
  CHECK_CONTAINS(e.what(), dir.path().string());
  CHECK_CONTAINS(e.what(), "directory");
}

BOOST_AUTO_TEST_CASE(invalid_json_has_file_line_column) {
  const TempPath file(".json");
  file.write("{\n  \"a\": 1,,\n  \"b\": 2\n}\n");
  const auto e = config_error([&] { cfg::load_file(file.path()); });
  CHECK_CONTAINS(e.what(), file.path().string() + ":2:10: syntax error");
  CHECK_CONTAINS(e.what(), "unexpected ','");
  // The offending line is quoted with a caret under the error.
  CHECK_CONTAINS(e.what(), "\n      \"a\": 1,,\n             ^");
}

BOOST_AUTO_TEST_CASE(truncated_json) {
  const auto e = config_error([] { config("{\"a\": [1, 2"); });
  CHECK_CONTAINS(e.what(), "<test>:1:12: incomplete JSON");
}

BOOST_AUTO_TEST_CASE(column_counts_characters_not_bytes) {
  const auto e = config_error([] { config("{\"\xC3\xA9t\xC3\xA9\": x}"); });  // {"été": x}
  CHECK_CONTAINS(e.what(), "<test>:1:9:");
}

BOOST_AUTO_TEST_CASE(comments_and_trailing_commas_accepted) {
  const TempPath file(".json");
  file.write("// run config\n{\n  /* block */ \"a\": 1, // one\n  \"b\": [1, 2,],\n}\n");
  const json::value v = cfg::load_file(file.path());
  BOOST_TEST(v.at("a").as_int64() == 1);
  BOOST_TEST(v.at("b").as_array().size() == 2U);
}

BOOST_AUTO_TEST_CASE(byte_order_mark_skipped) {
  const json::value v = config("\xEF\xBB\xBF{\"a\": true}");
  BOOST_TEST(v.at("a").as_bool());
}

BOOST_AUTO_TEST_CASE(empty_document) {
  const auto e = config_error([] { config("  \n "); });
  CHECK_CONTAINS(e.what(), "<test>: the document is empty");
}

BOOST_AUTO_TEST_CASE(extra_data_after_document) {
  const auto e = config_error([] { config("{} x"); });
  CHECK_CONTAINS(e.what(), "<test>:1:4: extra data");
}

BOOST_AUTO_TEST_CASE(duplicate_key_is_an_error) {
  const auto e = config_error([] { config("{\"train\": {\"lr\": 1,\n \"lr\": 2}}"); });
  BOOST_TEST(e.path() == "train.lr");
  CHECK_CONTAINS(e.what(), "<test>:2:");
  CHECK_CONTAINS(e.what(), "duplicate key 'lr'");
  // Same key in different objects is fine.
  BOOST_CHECK_NO_THROW(config(R"({"a": {"x": 1}, "b": {"x": 1}, "c": [{"x": 1}, {"x": 2}]})"));
}

BOOST_AUTO_TEST_CASE(duplicate_key_path_inside_array) {
  const auto e = config_error([] { config(R"({"l": [{}, {"k": 1, "k": 2}]})"); });
  BOOST_TEST(e.path() == "l[1].k");
}

BOOST_AUTO_TEST_CASE(overflowing_number) {
  const auto e = config_error([] { config(R"({"a": {"b": [1, 1e999]}})"); });
  BOOST_TEST(e.path() == "a.b[1]");
  CHECK_CONTAINS(e.what(), "too large");
}

BOOST_AUTO_TEST_CASE(origin_named_for_text) {
  const auto e = config_error([] { cfg::parse_text("{", "<embedded default>"); });
  CHECK_CONTAINS(e.what(), "<embedded default>:1:2:");
}

BOOST_AUTO_TEST_CASE(data_dir_macro_is_defined) {
  // The build passes a data directory to every test; only its presence matters here.
  BOOST_TEST(std::string(PLEXUS_TEST_DATA_DIR).size() > 0U);
}

BOOST_AUTO_TEST_SUITE_END()

// -------------------------------------------------------------- overrides ---

BOOST_AUTO_TEST_SUITE(override_suite)

BOOST_AUTO_TEST_CASE(set_nested_new_key) {
  json::value v = config(R"({"model": {"hidden_size": 8}})");
  cfg::apply_override(v, "train.log.dir=/tmp/x");
  BOOST_TEST(v.at("train").at("log").at("dir").as_string() == "/tmp/x");
  BOOST_TEST(v.at("model").at("hidden_size").as_int64() == 8);
}

BOOST_AUTO_TEST_CASE(set_existing_key) {
  json::value v = config(R"({"model": {"hidden_size": 8}})");
  cfg::apply_override(v, "model.hidden_size=16");
  BOOST_TEST(v.at("model").at("hidden_size").as_int64() == 16);
  BOOST_TEST(v.at("model").as_object().size() == 1U);
}

BOOST_AUTO_TEST_CASE(value_kinds) {
  json::value v;  // null root: an empty config
  cfg::apply_override(v, "a=3");
  cfg::apply_override(v, "b=3e-4");
  cfg::apply_override(v, "c=true");
  cfg::apply_override(v, "d=null");
  cfg::apply_override(v, "e=run-1");
  cfg::apply_override(v, "f=[1, 2, 3]");
  cfg::apply_override(v, R"(g={"x": "y"})");
  cfg::apply_override(v, R"(h="12")");
  cfg::apply_override(v, "i=");
  cfg::apply_override(v, "j=a=b");
  cfg::apply_override(v, "k=True");
  BOOST_TEST(v.at("a").as_int64() == 3);
  BOOST_TEST(v.at("b").as_double() == 3e-4);
  BOOST_TEST(v.at("c").as_bool());
  BOOST_TEST(v.at("d").is_null());
  BOOST_TEST(v.at("e").as_string() == "run-1");
  BOOST_TEST(v.at("f").as_array().size() == 3U);
  BOOST_TEST(v.at("g").at("x").as_string() == "y");
  BOOST_TEST(v.at("h").is_string());  // a quoted number stays a string
  BOOST_TEST(v.at("h").as_string() == "12");
  BOOST_TEST(v.at("i").as_string() == "");
  BOOST_TEST(v.at("j").as_string() == "a=b");  // split at the first '='
  BOOST_TEST(v.at("k").as_string() == "True");
}

BOOST_AUTO_TEST_CASE(whitespace_around_path_is_ignored) {
  json::value v = json::object();
  cfg::apply_override(v, "  a.b =7");
  BOOST_TEST(v.at("a").at("b").as_int64() == 7);
}

BOOST_AUTO_TEST_CASE(array_index_both_syntaxes) {
  json::value v = config(R"({"model": {"layers": [{"kind": "mlp"}, {"kind": "mlp"}]}})");
  cfg::apply_override(v, "model.layers[1].kind=attention");
  BOOST_TEST(v.at("model").at("layers").at(1).at("kind").as_string() == "attention");
  cfg::apply_override(v, "model.layers.0.width=32");
  BOOST_TEST(v.at("model").at("layers").at(0).at("width").as_int64() == 32);
  cfg::apply_override(v, R"(model.layers[0]={"kind": "x"})");
  BOOST_TEST(v.at("model").at("layers").at(0).at("kind").as_string() == "x");
  json::value grid = config(R"({"m": [[1, 2], [3, 4]]})");
  cfg::apply_override(grid, "m[1][0]=9");
  BOOST_TEST(grid.at("m").at(1).at(0).as_int64() == 9);
}

BOOST_AUTO_TEST_CASE(digit_key_on_object_is_a_key) {
  json::value v = json::object();
  cfg::apply_override(v, "a.0=1");
  BOOST_TEST(v.at("a").at("0").as_int64() == 1);
}

BOOST_AUTO_TEST_CASE(quoted_key_segment) {
  json::value v = json::object();
  cfg::apply_override(v, R"(env["a.b=c"]=1)");
  BOOST_TEST(v.at("env").at("a.b=c").as_int64() == 1);
  BOOST_TEST(cfg::find(v, cfg::join_path("env", "a.b=c")) != nullptr);
}

BOOST_AUTO_TEST_CASE(null_intermediate_becomes_object) {
  json::value v = config(R"({"optimizer": null})");
  cfg::apply_override(v, "optimizer.lr=0.1");
  BOOST_TEST(v.at("optimizer").at("lr").as_double() == 0.1);
}

BOOST_AUTO_TEST_CASE(error_missing_equals) {
  json::value v = json::object();
  const auto e = config_error([&] { cfg::apply_override(v, "train.lr"); });
  CHECK_CONTAINS(e.what(), "invalid override 'train.lr'");
  CHECK_CONTAINS(e.what(), "expected <path>=<value>");
}

BOOST_AUTO_TEST_CASE(error_empty_key) {
  json::value v = json::object();
  const auto e = config_error([&] { cfg::apply_override(v, " =3"); });
  CHECK_CONTAINS(e.what(), "the path before '=' is empty");
}

BOOST_AUTO_TEST_CASE(error_empty_segment) {
  json::value v = json::object();
  for (const char* bad : {"a..b=1", ".a=1", "a.=1", "a.[0]=1"}) {
    const auto e = config_error([&] { cfg::apply_override(v, bad); });
    CHECK_CONTAINS(e.what(), "empty path segment");
    CHECK_CONTAINS(e.what(), bad);
  }
  BOOST_TEST(v.as_object().empty());
}

BOOST_AUTO_TEST_CASE(error_malformed_index) {
  json::value v = config(R"({"a": [1]})");
  for (const char* bad : {"a[x]=1", "a[=1", "a[-1]=1", "a[]=1"}) {
    const auto e = config_error([&] { cfg::apply_override(v, bad); });
    CHECK_CONTAINS(e.what(), "malformed index");
  }
  const auto stray = config_error([&] { cfg::apply_override(v, "a]=1"); });
  CHECK_CONTAINS(stray.what(), "unexpected ']'");
}

BOOST_AUTO_TEST_CASE(error_indexing_non_array) {
  json::value v = config(R"({"model": {"layers": {"kind": "mlp"}}})");
  const auto e = config_error([&] { cfg::apply_override(v, "model.layers[0].kind=x"); });
  BOOST_TEST(e.path() == "model.layers");
  CHECK_CONTAINS(e.what(), "cannot apply [0]: object is not an array");
  CHECK_CONTAINS(e.what(), "(in override 'model.layers[0].kind=x')");
  const auto missing = config_error([&] { cfg::apply_override(v, "model.blocks[0]=1"); });
  BOOST_TEST(missing.path() == "model.blocks");
  CHECK_CONTAINS(missing.what(), "does not exist");
  // Failing overrides leave the config untouched (no half-created objects).
  BOOST_TEST(!v.at("model").as_object().contains("blocks"));
}

BOOST_AUTO_TEST_CASE(error_index_out_of_range) {
  json::value v = config(R"({"model": {"layers": [{}, {}]}})");
  const json::value before = v;
  const auto e = config_error([&] { cfg::apply_override(v, "model.layers[2].kind=mlp"); });
  BOOST_TEST(e.path() == "model.layers");
  CHECK_CONTAINS(e.what(), "index 2 is out of range for array of 2");
  const auto dotted = config_error([&] { cfg::apply_override(v, "model.layers.5=1"); });
  CHECK_CONTAINS(dotted.what(), "index 5 is out of range");
  BOOST_TEST(v == before);
}

BOOST_AUTO_TEST_CASE(error_descending_into_scalar) {
  json::value v = config(R"({"train": {"steps": 3}, "l": [1]})");
  const auto e = config_error([&] { cfg::apply_override(v, "train.steps.max=4"); });
  BOOST_TEST(e.path() == "train.steps");
  CHECK_CONTAINS(e.what(), "cannot set key 'max' inside number 3, which is not an object");
  const auto arr = config_error([&] { cfg::apply_override(v, "l.x=4"); });
  CHECK_CONTAINS(arr.what(), "use an index such as [0]");
}

BOOST_AUTO_TEST_CASE(error_broken_json_value) {
  json::value v = json::object();
  const auto e = config_error([&] { cfg::apply_override(v, "a=[1, 2"); });
  CHECK_CONTAINS(e.what(), "looks like JSON but does not parse");
  BOOST_TEST(e.path() == "a");
}

BOOST_AUTO_TEST_CASE(error_root_not_object) {
  json::value v = json::array{1};
  const auto e = config_error([&] { cfg::apply_override(v, "a=1"); });
  CHECK_CONTAINS(e.what(), "not an object");
}

BOOST_AUTO_TEST_CASE(apply_many_reports_all_failures) {
  json::value v = json::object();
  const std::vector<std::string> sets{"a=1", "b", "c.d=2", "=3"};
  const auto e = config_error([&] { cfg::apply_overrides(v, sets); });
  BOOST_TEST(e.problems().size() == 2U);
  CHECK_CONTAINS(e.what(), "'b'");
  CHECK_CONTAINS(e.what(), "'=3'");
  BOOST_TEST(v.at("a").as_int64() == 1);  // the good ones were applied
  BOOST_TEST(v.at("c").at("d").as_int64() == 2);
}

BOOST_AUTO_TEST_SUITE_END()

// ------------------------------------------------------------- validation ---

BOOST_AUTO_TEST_SUITE(validation_suite)

BOOST_AUTO_TEST_CASE(defaults_filled_recursively) {
  json::value v = config(R"({"model": {"hidden_size": 8, "layers": [{"kind": "mlp"}]}})");
  cfg::validate(v, schema());
  BOOST_TEST(v.at("model").at("activation").as_string() == "gelu");
  BOOST_TEST(v.at("model").at("dropout").as_double() == 0.1);
  BOOST_TEST(v.at("model").at("layers").at(0).at("width").as_int64() == 64);  // inside array items
  // "train" and "train.log" were absent: created because they hold defaults.
  BOOST_TEST(v.at("train").at("steps").as_int64() == 1000);
  BOOST_TEST(v.at("train").at("seed").is_null());
  BOOST_TEST(v.at("train").at("log").at("every").as_int64() == 10);
  BOOST_TEST(v.at("train").at("log").at("dir").as_string() == "runs");
  // No defaults inside: not created.
  BOOST_TEST(!v.as_object().contains("env"));
  BOOST_TEST(!v.as_object().contains("extra"));
  // Validating again changes nothing.
  const json::value once = v;
  cfg::validate(v, schema());
  BOOST_TEST(v == once);
}

BOOST_AUTO_TEST_CASE(defaults_do_not_override_given_values) {
  json::value v =
      config(R"({"model": {"hidden_size": 8, "activation": "swiglu"}, "train": {"log": {"dir": "x"}}})");
  cfg::validate(v, schema());
  BOOST_TEST(v.at("model").at("activation").as_string() == "swiglu");
  BOOST_TEST(v.at("train").at("log").at("dir").as_string() == "x");
  BOOST_TEST(v.at("train").at("log").at("every").as_int64() == 10);
}

BOOST_AUTO_TEST_CASE(default_object_gets_nested_defaults) {
  const auto s = cfg::Schema::parse(R"({"type": "object", "properties": {
      "opt": {"type": "object", "default": {}, "properties": {"lr": {"type": "number", "default": 0.5}}}}})",
                                    "t");
  json::value v = json::object();
  cfg::validate(v, s);
  BOOST_TEST(v.at("opt").at("lr").as_double() == 0.5);
}

BOOST_AUTO_TEST_CASE(unknown_key_with_suggestion) {
  const std::string m = validation_message(R"({"model": {"hidden_size": 8, "hiden_size": 4}})");
  BOOST_TEST(m == "config error at model: unknown key 'hiden_size' (did you mean 'hidden_size'?)");
}

BOOST_AUTO_TEST_CASE(unknown_key_lists_valid_keys) {
  json::value v = config(R"({"model": {"hidden_size": 8, "batch": 4}})");
  const auto e = config_error([&] { cfg::validate(v, schema()); });
  BOOST_TEST(e.path() == "model");
  BOOST_TEST(e.detail() == "unknown key 'batch' (valid keys: hidden_size, activation, dropout, layers)");
}

BOOST_AUTO_TEST_CASE(unknown_key_at_root) {
  const std::string m = validation_message(R"({"model": {"hidden_size": 8}, "trian": {}})");
  BOOST_TEST(m == "config error: unknown key 'trian' (did you mean 'train'?)");
}

BOOST_AUTO_TEST_CASE(wrong_type) {
  BOOST_TEST(validation_message(R"({"model": {"hidden_size": 8}, "train": {"name": 3.5}})") ==
             "config error at train.name: expected a string, got number 3.5");
  BOOST_TEST(validation_message(R"({"model": {"hidden_size": "big"}})") ==
             "config error at model.hidden_size: expected an integer >= 1, got string \"big\"");
  BOOST_TEST(validation_message(R"({"model": 3})") ==
             "config error at model: expected an object, got number 3");
  BOOST_TEST(validation_message(R"({"model": {"hidden_size": 8}, "train": {"seed": "x"}})") ==
             "config error at train.seed: expected an integer or null, got string \"x\"");
}

BOOST_AUTO_TEST_CASE(integral_double_is_not_an_integer) {
  const std::string m = validation_message(R"({"model": {"hidden_size": 4.0}})");
  CHECK_CONTAINS(m, "expected an integer >= 1, got number 4.0");
  CHECK_CONTAINS(m, "without a decimal point or exponent");
  const std::string e = validation_message(R"({"model": {"hidden_size": 1e6}})");
  CHECK_CONTAINS(e, "got number 1e+06");
}

BOOST_AUTO_TEST_CASE(uint64_counts_as_integer) {
  json::value v = config(R"({"model": {"hidden_size": 18446744073709551615}})");
  BOOST_TEST(v.at("model").at("hidden_size").is_uint64());
  BOOST_CHECK_NO_THROW(cfg::validate(v, schema()));
}

BOOST_AUTO_TEST_CASE(below_minimum) {
  BOOST_TEST(validation_message(R"({"model": {"hidden_size": 8}, "train": {"steps": -3}})") ==
             "config error at train.steps: expected an integer >= 1, got -3");
  BOOST_TEST(validation_message(R"({"model": {"hidden_size": 8}, "train": {"lr": 0}})") ==
             "config error at train.lr: expected a number > 0, got 0");
}

BOOST_AUTO_TEST_CASE(above_maximum) {
  BOOST_TEST(validation_message(R"({"model": {"hidden_size": 8, "dropout": 1}})") ==
             "config error at model.dropout: expected a number in [0, 1), got 1");
  BOOST_TEST(
      validation_message(R"({"model": {"hidden_size": 8, "layers": [{"kind": "mlp", "width": 100000}]}})") ==
      "config error at model.layers[0].width: expected an integer in [1, 65536], got 100000");
}

BOOST_AUTO_TEST_CASE(enum_violation) {
  BOOST_TEST(validation_message(R"({"model": {"hidden_size": 8, "activation": "relu"}})") ==
             "config error at model.activation: expected one of \"gelu\", \"swiglu\", got \"relu\"");
  BOOST_TEST(validation_message(R"({"model": {"hidden_size": 8, "activation": 1}})") ==
             "config error at model.activation: expected one of \"gelu\", \"swiglu\", got number 1");
}

BOOST_AUTO_TEST_CASE(numeric_enum_compares_by_value) {
  const auto s = cfg::Schema::parse(R"({"type": "number", "enum": [1, 2.5]})", "t");
  json::value one(1.0);
  BOOST_CHECK_NO_THROW(cfg::validate(one, s));
  json::value two(2);
  const auto e = config_error([&] { cfg::validate(two, s, "x"); });
  BOOST_TEST(std::string(e.what()) == "config error at x: expected one of 1, 2.5, got 2");
}

BOOST_AUTO_TEST_CASE(required_missing) {
  const std::string m = validation_message(R"({"model": {}})");
  BOOST_TEST(m ==
             "config error at model: missing required key 'hidden_size': expected an integer >= 1 "
             "(width of the hidden layers)");
  BOOST_TEST(validation_message("{}") == "config error: missing required key 'model': expected an object");
}

BOOST_AUTO_TEST_CASE(array_items_use_index_paths) {
  json::value v =
      config(R"({"model": {"hidden_size": 8, "layers": [{"kind": "mlp"}, {"kind": "conv"}, {}]}})");
  const auto e = config_error([&] { cfg::validate(v, schema()); });
  BOOST_TEST(e.path() == "model.layers[1].kind");
  BOOST_TEST(e.problems().size() == 2U);
  BOOST_TEST(e.problems()[1].path == "model.layers[2]");
  CHECK_CONTAINS(e.what(), "config error at model.layers[2]: missing required key 'kind'");
}

BOOST_AUTO_TEST_CASE(multiple_errors_reported_together) {
  json::value v = config(R"({
    "model": {"hidden_size": 0, "activaton": "gelu", "dropout": "high"},
    "train": {"steps": 2.5, "lr": -1, "log": {"every": 0}},
    "bogus": 1
  })");
  const auto e = config_error([&] { cfg::validate(v, schema()); });
  const std::string m = e.what();
  BOOST_TEST(e.problems().size() == 7U);
  BOOST_TEST(e.path() == "model.hidden_size");
  BOOST_TEST(m ==
             "config error at model.hidden_size: expected an integer >= 1, got 0\n"
             "config error at model: unknown key 'activaton' (did you mean 'activation'?)\n"
             "config error at model.dropout: expected a number in [0, 1), got string \"high\"\n"
             "config error at train.steps: expected an integer >= 1, got number 2.5\n"
             "config error at train.lr: expected a number > 0, got -1\n"
             "config error at train.log.every: expected an integer >= 1, got 0\n"
             "config error: unknown key 'bogus' (valid keys: model, train, extra, env, tags)");
}

BOOST_AUTO_TEST_CASE(problem_list_is_capped) {
  const auto s = cfg::Schema::parse(R"({"type": "array", "items": {"type": "string"}})", "t");
  json::array many;
  for (int i = 0; i < 80; ++i) many.emplace_back(i);
  json::value v = many;
  const auto e = config_error([&] { cfg::validate(v, s, "names"); });
  BOOST_TEST(e.problems().size() == 51U);
  BOOST_TEST(e.problems().back().message == "... and 30 more problems");
}

BOOST_AUTO_TEST_CASE(any_type_accepts_everything) {
  for (const char* extra : {"1", "\"s\"", "null", "[1, {}]", R"({"deep": {"x": [1]}})"}) {
    json::value v = config(std::string(R"({"model": {"hidden_size": 8}, "extra": )") + extra + "}");
    BOOST_CHECK_NO_THROW(cfg::validate(v, schema()));
  }
  json::value anything = config(R"({"whatever": 1})");
  BOOST_CHECK_NO_THROW(cfg::validate(anything, cfg::Schema()));  // default schema is "any"
}

BOOST_AUTO_TEST_CASE(additional_properties) {
  json::value v =
      config(R"({"model": {"hidden_size": 8}, "tags": {"a": 1, "b": [2]}, "env": {"HOME": "/x"}})");
  BOOST_CHECK_NO_THROW(cfg::validate(v, schema()));
  json::value bad = config(R"({"model": {"hidden_size": 8}, "env": {"HOME": "/x", "N": 3}})");
  BOOST_TEST(validation_message(serialize(bad)) == "config error at env.N: expected a string, got number 3");
}

BOOST_AUTO_TEST_CASE(base_path_prefixes_messages) {
  const auto s = cfg::Schema::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}})", "t");
  json::value v = config(R"({"n": "x"})");
  const auto e = config_error([&] { cfg::validate(v, s, "plugins.foo"); });
  BOOST_TEST(e.path() == "plugins.foo.n");
}

BOOST_AUTO_TEST_CASE(odd_keys_are_quoted_in_paths_and_messages) {
  const auto s = cfg::Schema::parse(
      R"({"type": "object", "properties": {"a.b": {"type": "object", "properties": {"n": {"type": "integer"}}}}})",
      "t");
  json::value v = config(R"({"a.b": {"n": "x", "bad\nkey": 1}})");
  const auto e = config_error([&] { cfg::validate(v, s); });
  BOOST_TEST(e.path() == R"(["a.b"].n)");
  CHECK_CONTAINS(e.what(), R"(unknown key 'bad\x0akey')");
  BOOST_TEST(cfg::find(v, e.path()) != nullptr);
}

BOOST_AUTO_TEST_SUITE_END()

// ----------------------------------------------------------------- schema ---

BOOST_AUTO_TEST_SUITE(schema_parsing)

BOOST_AUTO_TEST_CASE(unknown_type_name) {
  const std::string m = schema_error(R"({"type": "object", "properties": {"n": {"type": "intger"}}})");
  BOOST_TEST(
      m ==
      "invalid schema in test-schema at properties.n.type: unknown type 'intger' (did you mean 'integer'?)");
  const std::string far = schema_error(R"({"type": "float"})");
  CHECK_CONTAINS(far, "unknown type 'float' (expected one of: any, null, boolean, integer");
}

BOOST_AUTO_TEST_CASE(non_object_schema) {
  BOOST_TEST(schema_error("[1, 2]") ==
             "invalid schema in test-schema: expected a schema object, got array of 2");
  const std::string nested = schema_error(R"({"type": "array", "items": "string"})");
  BOOST_TEST(nested ==
             "invalid schema in test-schema at items: expected a schema object, got string \"string\"");
}

BOOST_AUTO_TEST_CASE(malformed_schema_text) {
  CHECK_CONTAINS(schema_error("{\"type\": }"),
                 "invalid schema in test-schema: test-schema:1:10: syntax error");
}

BOOST_AUTO_TEST_CASE(unknown_keyword) {
  BOOST_TEST(
      schema_error(R"({"type": "integer", "defualt": 3})") ==
      "invalid schema in test-schema at defualt: unknown schema keyword 'defualt' (did you mean 'default'?)");
}

BOOST_AUTO_TEST_CASE(missing_type) {
  CHECK_CONTAINS(schema_error(R"({"doc": "x"})"), "missing \"type\"");
}

BOOST_AUTO_TEST_CASE(type_arrays) {
  CHECK_CONTAINS(schema_error(R"({"type": []})"), "non-empty array of type names");
  CHECK_CONTAINS(schema_error(R"({"type": ["string", "string"]})"), "at type[1]: type listed twice");
  CHECK_CONTAINS(schema_error(R"({"type": ["string", "any"]})"), "\"any\" cannot be combined");
  CHECK_CONTAINS(schema_error(R"({"type": [1]})"), "at type[0]: expected a type name");
}

BOOST_AUTO_TEST_CASE(keywords_must_fit_type) {
  CHECK_CONTAINS(schema_error(R"({"type": "string", "minimum": 1})"), "needs type \"integer\" or \"number\"");
  CHECK_CONTAINS(schema_error(R"({"type": "string", "items": {"type": "string"}})"), "includes \"array\"");
  CHECK_CONTAINS(schema_error(R"({"type": "array", "properties": {}})"), "includes \"object\"");
  CHECK_CONTAINS(schema_error(R"({"type": "any", "enum": [1]})"), "cannot be used with type \"any\"");
  CHECK_CONTAINS(schema_error(R"({"type": "integer", "minimum": 5, "maximum": 1})"),
                 "minimum is above the maximum");
  CHECK_CONTAINS(schema_error(R"({"type": "integer", "minimum": 1, "exclusive_minimum": 0})"),
                 "cannot be combined");
}

BOOST_AUTO_TEST_CASE(defaults_and_enums_are_checked) {
  BOOST_TEST(schema_error(R"({"type": "integer", "minimum": 1, "default": 0})") ==
             "invalid schema in test-schema at default: default 0 does not match the schema: expected an "
             "integer >= 1, "
             "got 0");
  CHECK_CONTAINS(schema_error(R"({"type": "string", "enum": ["a", 1]})"),
                 "at enum[1]: enum value 1 does not match");
  CHECK_CONTAINS(schema_error(R"({"type": "string", "enum": ["a"], "default": "b"})"),
                 "at default: default \"b\"");
  CHECK_CONTAINS(schema_error(R"({"type": "string", "enum": []})"), "non-empty array");
}

// "component_kind" marks a component section: {"component": NAME, "options": {...}}.
BOOST_AUTO_TEST_CASE(component_kind_marks_a_component_section) {
  const auto schema = cfg::Schema::parse(
      R"({"type": "object", "properties": {"block": {"type": "object", "component_kind": "layer", "properties": {
            "component": {"type": "string", "default": "a.b"}, "options": {"type": "object", "default": {}}}}}})",
      "t");
  BOOST_TEST(schema.component_kind().empty());
  BOOST_TEST(schema.property("block")->component_kind() == "layer");
  CHECK_CONTAINS(schema_error(R"({"type": "object", "component_kind": 3})"),
                 "at component_kind: expected a component kind name (string), got number 3");
  CHECK_CONTAINS(schema_error(R"({"type": ["object", "null"], "component_kind": "layer"})"),
                 "keyword 'component_kind' needs type \"object\" alone");
  CHECK_CONTAINS(schema_error(R"({"type": "object", "component_kind": "layer",
                                  "properties": {"component": {"type": "string"}}})"),
                 "a component section declares the properties \"component\" (a string) and \"options\"");
  // Validation treats it as any object.
  boost::json::value v = boost::json::parse(R"({"block": {}})");
  cfg::validate(v, schema);
  BOOST_TEST(v.at("block").at("component") == "a.b");
}

BOOST_AUTO_TEST_CASE(required_must_be_declared) {
  BOOST_TEST(
      schema_error(
          R"({"type": "object", "properties": {"steps": {"type": "integer"}}, "required": ["step"]})") ==
      "invalid schema in test-schema at required[0]: required key 'step' is not in \"properties\" (did you "
      "mean "
      "'steps'?)");
  // With additional properties allowed an undeclared required key is meaningful.
  BOOST_CHECK_NO_THROW(
      cfg::Schema::parse(R"({"type": "object", "additional_properties": true, "required": ["x"]})", "t"));
}

BOOST_AUTO_TEST_CASE(accessors) {
  const cfg::Schema& s = schema();
  BOOST_TEST(s.doc() == "a training run");
  BOOST_TEST(s.origin() == "test_schema");
  BOOST_TEST(s.allows(cfg::JsonType::object));
  BOOST_TEST(!s.allows(cfg::JsonType::array));
  BOOST_TEST(s.properties().size() == 5U);
  BOOST_TEST(s.properties().front().name == "model");
  const cfg::Schema* model = s.property("model");
  BOOST_REQUIRE(model != nullptr);
  BOOST_TEST(!model->fillable());  // it has a required key without default
  BOOST_TEST(s.property("train")->fillable());
  BOOST_TEST(model->property("hidden_size")->expected() == "an integer >= 1");
  BOOST_TEST(model->property("layers")->items() != nullptr);
  BOOST_TEST(s.property("extra")->allows_any_type());
  BOOST_TEST(s.property("env")->additional_properties_schema() != nullptr);
  BOOST_TEST(s.property("tags")->allows_additional_properties());
  BOOST_TEST(s.property("nope") == nullptr);
  BOOST_TEST(s.required() == std::vector<std::string>{"model"});
}

BOOST_AUTO_TEST_SUITE_END()

// ----------------------------------------------------------- typed access ---

BOOST_AUTO_TEST_SUITE(typed_access)

BOOST_AUTO_TEST_CASE(find_values) {
  const json::value v = config(R"({"model": {"layers": [{"kind": "mlp"}], "0": 5}})");
  BOOST_TEST(cfg::find(v, "model.layers[0].kind")->as_string() == "mlp");
  BOOST_TEST(cfg::find(v, "model.layers.0.kind")->as_string() == "mlp");
  BOOST_TEST(cfg::find(v, "model.0")->as_int64() == 5);
  BOOST_TEST(cfg::find(v, "") == &v);
  BOOST_TEST(cfg::find(v, "model.nope") == nullptr);
  BOOST_TEST(cfg::find(v, "model.layers[1]") == nullptr);
  BOOST_TEST(cfg::find(v, "model.layers[0].kind.x") == nullptr);
  BOOST_CHECK_THROW((void)cfg::find(v, "model..x"), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(getters) {
  const json::value v = config(R"({"n": 3, "big": 18446744073709551615, "x": 2.5, "b": true, "s": "hi"})");
  const json::object& o = v.as_object();
  BOOST_TEST(cfg::get_int(o, "n", "train") == 3);
  BOOST_TEST(cfg::get_number(o, "n", "train") == 3.0);
  BOOST_TEST(cfg::get_number(o, "x", "train") == 2.5);
  BOOST_TEST(cfg::get_bool(o, "b", "train"));
  BOOST_TEST(cfg::get_string(o, "s", "train") == "hi");

  const auto missing = config_error([&] { cfg::get_int(o, "steps", "train"); });
  BOOST_TEST(missing.path() == "train.steps");
  CHECK_CONTAINS(missing.what(), "missing (expected an integer)");
  const auto wrong = config_error([&] { cfg::get_int(o, "x", "train"); });
  BOOST_TEST(std::string(wrong.what()) == "config error at train.x: expected an integer, got number 2.5");
  const auto too_big = config_error([&] { cfg::get_int(o, "big", ""); });
  BOOST_TEST(too_big.path() == "big");
  CHECK_CONTAINS(too_big.what(), "expected an integer <= 9223372036854775807");
  const auto not_string = config_error([&] { cfg::get_string(o, "n", ""); });
  BOOST_TEST(std::string(not_string.what()) == "config error at n: expected a string, got number 3");
  BOOST_CHECK_THROW(cfg::get_bool(o, "s", ""), cfg::ConfigError);
  BOOST_CHECK_THROW(cfg::get_number(o, "s", ""), cfg::ConfigError);
}

BOOST_AUTO_TEST_SUITE_END()

// ------------------------------------------------------------ end to end ---

BOOST_AUTO_TEST_CASE(load_override_validate) {
  const TempPath file(".json");
  file.write(R"({
    // a small run
    "model": {"hidden_size": 128, "layers": [{"kind": "mlp"}, {"kind": "attention"}]},
    "train": {"steps": 10,},
  })");
  json::value v = cfg::load_file(file.path());
  cfg::apply_overrides(
      v, std::vector<std::string>{"train.steps=20", "model.layers[1].width=256", "train.name=smoke"});
  cfg::validate(v, schema());
  BOOST_TEST(v.at("train").at("steps").as_int64() == 20);
  BOOST_TEST(v.at("model").at("layers").at(1).at("width").as_int64() == 256);
  BOOST_TEST(v.at("model").at("layers").at(0).at("width").as_int64() == 64);
  BOOST_TEST(v.at("train").at("name").as_string() == "smoke");
  BOOST_TEST(v.at("train").at("lr").as_double() == 0.0003);
}

// A key whose schema takes only strings gets the text as written: a layer pattern starting with
// '[' is not a broken JSON array there, while elsewhere such a value is still refused.
BOOST_AUTO_TEST_CASE(string_keys_take_bracketed_text_as_is) {
  const cfg::Schema schema = cfg::Schema::parse(
      R"({"type": "object", "properties": {"model": {"type": "object", "properties": {
           "pattern": {"type": "string", "default": ""},
           "sizes": {"type": "array", "default": []}}}}})",
      "test");
  json::value root = json::parse(R"({"model": {}})");
  const std::vector<std::string> sets = {"model.pattern=[*-][*-]"};
  cfg::apply_overrides(root, sets, &schema);
  BOOST_TEST(root.at("model").at("pattern").as_string() == "[*-][*-]");
  const std::vector<std::string> quoted = {"model.pattern=\"M[M*]-\""};
  cfg::apply_overrides(root, quoted, &schema);
  BOOST_TEST(root.at("model").at("pattern").as_string() == "M[M*]-");
  const std::vector<std::string> broken = {"model.sizes=[1, 2"};
  BOOST_CHECK_THROW(cfg::apply_overrides(root, broken, &schema), cfg::ConfigError);
  const std::vector<std::string> without_schema = {"model.pattern=[*-][*-]"};
  BOOST_CHECK_THROW(cfg::apply_overrides(root, without_schema), cfg::ConfigError);
}
