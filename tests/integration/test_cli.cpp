// The command-line tools, run as a user runs them: real processes, real files, real plugins.
#define BOOST_TEST_MODULE cli
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "plexus/core/checkpoint/safetensors.hpp"
#include "run_process.hpp"
#include "temp_dir.hpp"

using plexus::test::quote;
using plexus::test::run_process;

namespace {

const std::string kPlexus = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus";
const std::string kTrain = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus-train";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(plugins_list_json_describes_in_tree_plugins) {
  const auto result = run_process(kPlexus + " plugins list --json");
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  // stderr may carry log lines; the JSON document is the last line.
  const std::string json_line = result.output.substr(result.output.rfind('{', result.output.find("\"host_abi\"")));
  const auto doc = boost::json::parse(json_line).as_object();
  BOOST_TEST(doc.at("errors").as_array().empty());
  bool found = false;
  for (const auto& plugin : doc.at("plugins").as_array()) {
    if (plugin.at("name") != "sequential_scheduler") continue;
    found = true;
    const auto& component = plugin.at("components").as_array().at(0);
    BOOST_TEST(component.at("kind") == "scheduler");
    BOOST_TEST(component.at("name") == "sequential");
    BOOST_TEST(component.at("config_schema").is_object());
  }
  BOOST_TEST(found, "sequential_scheduler missing from: " << result.output);
}

BOOST_AUTO_TEST_CASE(plugins_list_reports_a_broken_library_and_still_lists_the_rest) {
  plexus::test::TempDir dir;
  dir.write("libbroken.so", "this is not an ELF file");
  const auto result = run_process(kPlexus + " plugins list --plugin-path " + quote(dir.path().string()));
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, (dir.path() / "libbroken.so").string()), result.output);
  BOOST_TEST(contains(result.output, "not a shared object"), result.output);
  BOOST_TEST(contains(result.output, "sequential_scheduler 1.0.0"), result.output);
}

BOOST_AUTO_TEST_CASE(default_config_is_valid) {
  const auto result = run_process(kPlexus + " config check --default");
  BOOST_TEST(result.status == 0, result.output);
  BOOST_TEST(contains(result.output, "<embedded default config>: valid"), result.output);
  BOOST_TEST(contains(result.output, "scheduler: sequential"), result.output);
}

BOOST_AUTO_TEST_CASE(config_show_fills_defaults_and_applies_overrides) {
  plexus::test::TempDir dir;
  const auto file = dir.write("run.json", R"({"train": {"steps": 3}})");
  const auto result = run_process(kPlexus + " config show " + quote(file.string()) + " --set train.microbatches=4");
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const auto doc = boost::json::parse(result.output.substr(result.output.find('{'))).as_object();
  BOOST_TEST(doc.at("train").at("steps") == 3);
  BOOST_TEST(doc.at("train").at("microbatches") == 4);
  BOOST_TEST(doc.at("run").at("seed") == 1234);  // a default filled in
  BOOST_TEST(doc.at("scheduler").at("component") == "sequential");
}

// Numbers are shown as a person writes them (0.002, 0.9), not in Boost.JSON's own form (2E-3).
BOOST_AUTO_TEST_CASE(config_show_prints_numbers_as_written) {
  const auto result = run_process(kPlexus + " config show --default");
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  BOOST_TEST(!contains(result.output, "E-"), result.output);
  BOOST_TEST(!contains(result.output, "E+"), result.output);
  BOOST_TEST(contains(result.output, "\"lr\": 0.002"), result.output);
  BOOST_TEST(contains(result.output, "\"adam_beta1\": 0.9"), result.output);
}

BOOST_AUTO_TEST_CASE(unknown_key_is_named_with_a_suggestion) {
  plexus::test::TempDir dir;
  const auto file = dir.write("run.json", R"({"plugins": {"load": ["sequential_scheduler"]}, "train": {"stpes": 3}})");
  const auto result = run_process(kPlexus + " config check " + quote(file.string()));
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, "config error at train: unknown key 'stpes' (did you mean 'steps'?)"), result.output);
}

BOOST_AUTO_TEST_CASE(wrong_value_names_path_and_expectation) {
  const auto result = run_process(kPlexus + " config check --default --set train.steps=0");
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, "train.steps"), result.output);
  BOOST_TEST(contains(result.output, ">= 1"), result.output);
}

BOOST_AUTO_TEST_CASE(component_options_are_validated_against_the_plugin_schema) {
  const auto result = run_process(kPlexus + " config check --default --set scheduler.options.depth=2");
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, "scheduler.options"), result.output);
  BOOST_TEST(contains(result.output, "unknown key 'depth'"), result.output);
}

BOOST_AUTO_TEST_CASE(unknown_component_suggests_the_nearest) {
  const auto result = run_process(kPlexus + " config check --default --set scheduler.component=sequentail");
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, "scheduler.component"), result.output);
  BOOST_TEST(contains(result.output, "did you mean 'sequential'"), result.output);
}

BOOST_AUTO_TEST_CASE(unknown_plugin_lists_the_search_path) {
  const auto result = run_process(kPlexus + " config check --default --set 'plugins.load=[\"nosuch\"]'");
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, "plugin 'nosuch' not found: no libplexus_nosuch.so"), result.output);
  BOOST_TEST(contains(result.output, "lib/plexus/plugins"), result.output);
}

BOOST_AUTO_TEST_CASE(missing_and_malformed_files_are_named) {
  plexus::test::TempDir dir;
  const auto missing = run_process(kPlexus + " config check " + quote((dir.path() / "nope.json").string()));
  BOOST_TEST(missing.status == 1);
  BOOST_TEST(contains(missing.output, "nope.json"), missing.output);
  const auto bad = dir.write("bad.json", "{\n  \"train\": {\"steps\": }\n}\n");
  const auto malformed = run_process(kPlexus + " config check " + quote(bad.string()));
  BOOST_TEST(malformed.status == 1);
  BOOST_TEST(contains(malformed.output, "bad.json:2:"), malformed.output);
}

BOOST_AUTO_TEST_CASE(bad_override_syntax_is_an_error) {
  const auto result = run_process(kPlexus + " config check --default --set train.steps");
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, "train.steps"), result.output);
}

BOOST_AUTO_TEST_CASE(unknown_command_and_option) {
  BOOST_TEST(run_process(kPlexus + " frobnicate").status == 1);
  const auto result = run_process(kPlexus + " plugins list --jsn");
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, "jsn"), result.output);
}

BOOST_AUTO_TEST_CASE(trainer_refuses_a_run_without_data_or_with_bad_values) {
  const auto no_data = run_process(kTrain + " --set data.path=\"\"");
  BOOST_TEST(no_data.status == 1, no_data.output);
  BOOST_TEST(contains(no_data.output, "data.path"), no_data.output);
  BOOST_TEST(contains(no_data.output, "plexus data prepare"), no_data.output);
  const auto missing = run_process(kTrain + " --set data.path=/nonexistent/corpus");
  BOOST_TEST(missing.status == 1, missing.output);
  BOOST_TEST(contains(missing.output, "/nonexistent/corpus"), missing.output);
  const auto bad = run_process(kTrain + " --set train.steps=-1");
  BOOST_TEST(bad.status == 1, bad.output);
  BOOST_TEST(contains(bad.output, "train.steps"), bad.output);
}

BOOST_AUTO_TEST_CASE(op_runs_a_primitive_and_names_what_is_wrong) {
  plexus::test::TempDir dir;
  // proj_rms on x [2, 2, 3] with phi [6, 8] of ones: p = sum of x per token, in every column.
  std::vector<float> x(12), phi(48, 1.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const auto bytes = [](const std::vector<float>& v) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(float));
  };
  plexus::checkpoint::SafetensorsWriter writer;
  writer.add("x", plexus::checkpoint::DType::f32, {2, 2, 3}, bytes(x));
  writer.add("phi", plexus::checkpoint::DType::f32, {6, 8}, bytes(phi));
  writer.write(dir.path() / "in.safetensors");
  const std::string io = " --input " + quote((dir.path() / "in.safetensors").string()) + " --output " +
                         quote((dir.path() / "out.safetensors").string());
  const auto ok = run_process(kPlexus + " op --backend mhc_native --primitive proj_rms" + io);
  BOOST_TEST_REQUIRE(ok.status == 0, ok.output);
  BOOST_TEST(contains(ok.output, "forward only"), ok.output);
  const auto out = plexus::checkpoint::SafetensorsFile::open(dir.path() / "out.safetensors");
  BOOST_TEST(out.names() == (std::vector<std::string>{"p", "r"}), boost::test_tools::per_element());
  const auto* p = reinterpret_cast<const float*>(out.tensor("p").bytes.data());
  BOOST_TEST(p[0] == 15.0f);  // 0 + 1 + ... + 5
  BOOST_TEST(p[8] == 51.0f);  // 6 + 7 + ... + 11

  const auto missing = run_process(kPlexus + " op --backend mhc_native --primitive aggregate" + io);
  BOOST_TEST(missing.status == 1);
  BOOST_TEST(contains(missing.output, "no tensor \"h_pre\""), missing.output);
  BOOST_TEST(contains(missing.output, "in.safetensors"), missing.output);
  const auto bad_shape = run_process(kPlexus + " op --backend mhc_native --primitive proj_rms --prefix nothing/" + io);
  BOOST_TEST(bad_shape.status == 1);
  BOOST_TEST(contains(bad_shape.output, "nothing/x"), bad_shape.output);
  const auto primitive = run_process(kPlexus + " op --backend mhc_native --primitive sinkhorn" + io);
  BOOST_TEST(primitive.status == 1);
  BOOST_TEST(contains(primitive.output, "proj_rms, mappings, aggregate or post_res"), primitive.output);
  const auto backend = run_process(kPlexus + " op --backend mhc_nativ --primitive proj_rms" + io);
  BOOST_TEST(backend.status == 1);
  BOOST_TEST(contains(backend.output, "mhc_nativ"), backend.output);
}
