// The run config: the embedded default and the framework schema, overrides and plugin lookup.
#define BOOST_TEST_MODULE run_config
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "plexus/core/run_config.hpp"
#include "plexus/data_parallel.h"
#include "temp_dir.hpp"

BOOST_AUTO_TEST_CASE(embedded_default_validates_and_names_the_scheduler) {
  const auto config = plexus::load_run_config(std::nullopt, {});
  const auto refs = plexus::component_refs(config);
  // The scheduler, the data-parallel strategy and the framework's three model layer sections (the
  // decoder's belong to the model's stack: component_refs(host, config) adds them).
  BOOST_TEST_REQUIRE(refs.size() == 5U);
  BOOST_TEST(refs[0].section == "scheduler");
  BOOST_TEST(refs[0].kind == static_cast<uint32_t>(PLX_KIND_SCHEDULER));
  BOOST_TEST(refs[0].name == "sequential");
  BOOST_TEST(refs[1].section == "distributed.data_parallel");
  BOOST_TEST(refs[1].kind == static_cast<uint32_t>(PLX_KIND_DATA_PARALLEL));
  BOOST_TEST(refs[1].name == "fsdp");
  BOOST_TEST(refs[2].section == "model.embedding");
  BOOST_TEST(refs[2].kind == static_cast<uint32_t>(PLX_KIND_LAYER));
  BOOST_TEST(refs[4].name == "transformer.lm_head");
  BOOST_TEST(config.at("plugins").at("allow_world_writable") == false);  // default filled
}

BOOST_AUTO_TEST_CASE(overrides_apply_before_validation) {
  const auto config = plexus::load_run_config(std::nullopt, {"train.steps=7", "run.name=smoke"});
  BOOST_TEST(config.at("train").at("steps") == 7);
  BOOST_TEST(config.at("run").at("name") == "smoke");
  BOOST_CHECK_THROW(plexus::load_run_config(std::nullopt, {"train.steps=\"many\""}), plexus::config::ConfigError);
}

BOOST_AUTO_TEST_CASE(resolve_plugin_by_name_path_and_env) {
  plexus::test::TempDir dir;
  const auto lib = dir.write("libplexus_thing.so", "");
  BOOST_TEST(plexus::resolve_plugin("thing", {dir.path()}) == lib);
  BOOST_TEST(plexus::resolve_plugin("/abs/libx.so", {}) == "/abs/libx.so");
  try {
    (void)plexus::resolve_plugin("other", {dir.path()});
    BOOST_FAIL("expected PluginError");
  } catch (const plexus::PluginError& e) {
    BOOST_TEST(std::string(e.what()).find(dir.path().string()) != std::string::npos);
  }
  ::setenv("PLEXUS_PLUGIN_PATH", (dir.path().string() + ":/nonexistent").c_str(), 1);
  const auto search = plexus::plugin_search_path({});
  ::unsetenv("PLEXUS_PLUGIN_PATH");
  BOOST_TEST_REQUIRE(search.size() >= 2U);
  BOOST_TEST(search[0] == std::filesystem::weakly_canonical(dir.path()));
  BOOST_TEST(plexus::plugin_files_in(dir.path()).size() == 1U);
}

// The framework's schema (the source file, and the copy compiled in) declares no section a plugin
// owns: the decoder's layer sections are declared by the stack plugin that reads them.
BOOST_AUTO_TEST_CASE(framework_schema_names_no_plugin_owned_section) {
  const auto file =
      std::filesystem::path(PLEXUS_SOURCE_DIR) / "framework" / "src" / "run_config" / "schema.json";
  const boost::json::value source = plexus::config::load_file(file);
  const auto& model = source.at("properties").at("model").as_object();
  const auto& keys = model.at("properties").as_object();
  for (const char* key : {"attention", "mlp", "mamba", "moe"}) {
    BOOST_TEST(!keys.contains(key), key);
    BOOST_TEST(plexus::framework_schema().property("model")->property(key) == nullptr, key);
  }
  BOOST_TEST(keys.contains("stack"));  // the section that names the plugin that declares them
  // Keys the framework does not declare are left for the stack, not refused before it is loaded.
  BOOST_TEST(model.at("additional_properties") == true);
  BOOST_TEST(plexus::framework_schema().property("model")->allows_additional_properties());
  // No component name of any plugin appears as a default in the model section but the framework's
  // own layer sections (embedding, final norm, head) and the default stack.
  const auto config = plexus::load_run_config(std::nullopt, {});
  for (const char* key : {"attention", "mlp", "mamba", "moe"})
    BOOST_TEST(!config.at("model").as_object().contains(key), key);
}

BOOST_AUTO_TEST_CASE(unknown_model_keys_wait_for_the_stack) {
  const auto config = plexus::load_run_config(std::nullopt, {"model.atention.component=x"});
  BOOST_TEST(config.at("model").at("atention").at("component") == "x");
  // Elsewhere, and for the framework's own model keys, checking is as strict as ever.
  BOOST_CHECK_THROW(plexus::load_run_config(std::nullopt, {"trian.steps=1"}), plexus::config::ConfigError);
  BOOST_CHECK_THROW(plexus::load_run_config(std::nullopt, {"model.num_layers=0"}),
                    plexus::config::ConfigError);
}
