#define BOOST_TEST_MODULE abi_model_keys
#include <boost/test/unit_test.hpp>

// The model keys a stack declares (plx_component_desc.model_schema, ABI 1.6) with third-party
// stacks written in C (fixture_c_stack): one declaring none, one built as before 1.6, one declaring
// keys and a component section, one clashing with the framework; a model schema the host refuses;
// and reading descriptors without loading (peek, load_provider) over the fixture plugins.

#include <boost/json.hpp>

#include <string>
#include <vector>

#include "abi_fixtures.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/run_config.hpp"
#include "run_process.hpp"
#include "train_corpus.hpp"

using abi_test::fixture;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The default run with its model's stack replaced by one of fixture_c_stack's, which plugins.load
// lists by path (the fixtures are not on the search path).
std::vector<std::string> with_stack(const std::string& stack, std::vector<std::string> more = {}) {
  std::vector<std::string> overrides = {"model.stack.component=" + stack, "model.num_layers=2",
                                        R"(plugins.load=["sequential_scheduler", "transformer", ")" +
                                            fixture("fixture_c_stack").string() + "\"]"};
  overrides.insert(overrides.end(), more.begin(), more.end());
  return overrides;
}

// load_run_config, load_configured_plugins and check_components, as plexus config check does.
boost::json::value checked_config(plexus::PluginHost& host, const std::vector<std::string>& overrides) {
  boost::json::value config = plexus::load_run_config(std::nullopt, overrides);
  plexus::load_configured_plugins(host, config, {});
  plexus::check_components(host, config);
  return config;
}

// The ConfigError's message of checked_config, or "" when it passes.
std::string check_error(const std::vector<std::string>& overrides) {
  plexus::PluginHost host;
  try {
    (void)checked_config(host, overrides);
  } catch (const plexus::config::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_stack_declaring_no_model_keys_works_and_gets_none) {
  plexus::PluginHost host;
  const boost::json::value config = checked_config(host, with_stack("fixture.c_stack"));
  const plexus::Component& stack = host.get(PLX_KIND_STACK, "fixture.c_stack");
  BOOST_TEST(stack.declares_model_keys);
  BOOST_TEST(stack.model_schema.empty());
  // None of hybrid_stack's sections: the framework declares none of them.
  for (const char* key : {"attention", "mlp", "mamba", "moe"})
    BOOST_TEST(!config.at("model").as_object().contains(key), key);
  const plexus::DecoderPlan plan = plexus::plan_decoder(host, config);
  BOOST_TEST_REQUIRE(plan.layers.size() == 4U);
  BOOST_TEST(plan.layers[1].component == "transformer.mlp");
  BOOST_TEST(plan.layers[1].checkpoint_prefix == "decoder.layers.0.");
  // It declares nothing, so another stack's keys are typos here.
  const std::string error =
      check_error(with_stack("fixture.c_stack", {"model.attention.component=transformer.attention"}));
  BOOST_TEST(contains(error, "config error at model: unknown key 'attention'"), error);
  const std::string typo = check_error(with_stack("fixture.c_stack", {"model.hiden_size=64"}));
  BOOST_TEST(contains(typo, "config error at model: unknown key 'hiden_size' (did you mean 'hidden_size'?)"),
             typo);
}

// The whole run, as a user runs it: plexus-train with the third-party stack, its config saved as is.
BOOST_AUTO_TEST_CASE(a_stack_declaring_no_model_keys_trains) {
  const plexus::test::TrainCorpus corpus;
  const auto out = corpus.dir.path() / "run";
  const auto result = plexus::test::run_process(corpus.train(
      out.string(),
      "--set model.stack.component=fixture.c_stack --set train.steps=3 --set checkpoint.interval=3"
      " --set 'plugins.load=[\"sequential_scheduler\", \"transformer\", \"" +
          fixture("fixture_c_stack").string() + "\"]'"));
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  BOOST_TEST(plexus::test::step_losses(out / "metrics.jsonl").size() == 3U);
  const boost::json::value state =
      plexus::config::load_file(out / "checkpoints" / "step_00000003" / "state.json");
  const auto& model = state.at("config").at("model").as_object();
  BOOST_TEST(model.at("stack").at("component") == "fixture.c_stack");
  BOOST_TEST(!model.contains("attention"));
}

// A stack from an SDK before 1.6 cannot declare its keys: the model keys the framework does not
// know pass to it unchecked (it may read them, as it could before), and the framework's own keys are
// still checked.
BOOST_AUTO_TEST_CASE(a_stack_built_before_model_keys_gets_them_unchecked) {
  plexus::PluginHost host;
  const boost::json::value config =
      checked_config(host, with_stack("fixture.c_stack_legacy", {R"(model.attention={"anything": 1})"}));
  const plexus::Component& stack = host.get(PLX_KIND_STACK, "fixture.c_stack_legacy");
  BOOST_TEST(!stack.declares_model_keys);
  BOOST_TEST(config.at("model").at("attention") == boost::json::parse(R"({"anything": 1})"));  // as written
  BOOST_TEST(!config.at("model").as_object().contains("moe"));
  const std::string error = check_error(with_stack("fixture.c_stack_legacy", {"model.hidden_size=-1"}));
  BOOST_TEST(contains(error, "config error at model.hidden_size: expected an integer >= 1, got -1"), error);
}

BOOST_AUTO_TEST_CASE(a_third_party_stack_declares_keys_and_component_sections) {
  plexus::PluginHost host;
  const boost::json::value config = checked_config(host, with_stack("fixture.c_stack_keys"));
  const auto& model = config.at("model").as_object();
  BOOST_TEST(model.at("depth_note") == "plain");  // the stack's default, filled in
  BOOST_TEST(model.at("block").at("component") == "transformer.mlp");
  BOOST_TEST(model.at("block").at("options") == boost::json::object());  // transformer.mlp has no options
  bool listed = false;
  for (const plexus::ComponentRef& ref : plexus::component_refs(host, config))
    listed = listed ||
             (ref.section == "model.block" && ref.name == "transformer.mlp" && ref.kind == PLX_KIND_LAYER);
  BOOST_TEST(listed);

  // A component section: its options validated against its component's schema, defaults filled
  // (the Mamba-2 mixer has some); the component must be loaded, as for the framework's sections.
  plexus::PluginHost mamba_host;
  const boost::json::value mamba = checked_config(
      mamba_host,
      with_stack("fixture.c_stack_keys",
                 {"model.block.component=mamba.mixer", R"(model.block.options={"mamba_head_dim": 16})",
                  R"(plugins.load=["sequential_scheduler", "transformer", "mamba", ")" +
                      fixture("fixture_c_stack").string() + "\"]"}));
  const boost::json::value& block_options = mamba.at("model").at("block").at("options");
  BOOST_TEST(block_options.at("mamba_head_dim") == 16);
  BOOST_TEST(block_options.as_object().contains("mamba_state_dim"));  // a default, filled in
  const std::string not_loaded =
      check_error(with_stack("fixture.c_stack_keys", {"model.block.component=mamba.mixer"}));
  BOOST_TEST(contains(not_loaded,
                      "config error at model.block.component: no layer component named 'mamba.mixer' is "
                      "loaded"),
             not_loaded);

  // Typos and wrong values are named with their full path, suggestions from both sets of keys.
  std::string error =
      check_error(with_stack("fixture.c_stack_keys", {"model.blok.component=transformer.mlp"}));
  BOOST_TEST(contains(error, "config error at model: unknown key 'blok' (did you mean 'block'?)"), error);
  error = check_error(with_stack("fixture.c_stack_keys", {"model.depth_not=x"}));
  BOOST_TEST(contains(error, "config error at model: unknown key 'depth_not' (did you mean 'depth_note'?)"),
             error);
  error = check_error(with_stack("fixture.c_stack_keys", {"model.depth_note=5"}));
  BOOST_TEST(contains(error, "config error at model.depth_note: expected a string, got number 5"), error);
  error = check_error(with_stack("fixture.c_stack_keys", {"model.block.options.no_such_option=1"}));
  BOOST_TEST(contains(error, "config error at model.block.options: unknown key 'no_such_option'"), error);
  error = check_error(with_stack("fixture.c_stack_keys", {"model.block.component=transformer.mpl"}));
  BOOST_TEST(contains(error, "config error at model.block.component"), error);
  BOOST_TEST(contains(error, "did you mean 'transformer.mlp'?"), error);
}

BOOST_AUTO_TEST_CASE(a_stack_may_not_redeclare_a_framework_key) {
  const std::string error = check_error(with_stack("fixture.c_stack_clash"));
  BOOST_TEST(contains(error,
                      "config error at model.stack.component: the stack 'fixture.c_stack_clash' (plugin "
                      "fixture_c_stack) declares the model key 'hidden_size', which the framework declares "
                      "itself"),
             error);
}

BOOST_AUTO_TEST_CASE(a_model_schema_naming_an_unknown_kind_refuses_the_plugin) {
  plexus::PluginHost host;
  try {
    host.load(fixture("fixture_bad_model_schema"));
    BOOST_FAIL("expected PluginError");
  } catch (const plexus::PluginError& e) {
    const std::string what = e.what();
    BOOST_TEST(contains(what, "component 'fixture.bad_model_schema' (stack) has an invalid model schema"),
               what);
    BOOST_TEST(contains(what, "at block: unknown component_kind 'lyer'"), what);
  }
  BOOST_TEST(host.plugins().empty());
}

// A plugin compiled against the frozen 1.0 headers has no model_schema: it reads as none.
BOOST_AUTO_TEST_CASE(a_plugin_from_sdk_1_0_has_no_model_schema) {
  plexus::PluginHost host;
  host.load(fixture("fixture_older_minor"));
  const plexus::Component& layer = host.get(PLX_KIND_LAYER, "fixture.older_scale");
  BOOST_TEST(layer.model_schema.empty());
  BOOST_TEST(!layer.declares_model_keys);
  abi_test::expect_scale_works(layer);
}

// Reading a descriptor registers nothing and runs no init: a plugin whose init refuses is read.
BOOST_AUTO_TEST_CASE(peek_reads_a_descriptor_without_loading_the_plugin) {
  plexus::PluginHost host;
  const plexus::PluginSummary& summary = host.peek(fixture("fixture_init_fails"));
  BOOST_TEST(summary.name == "fixture_init_fails");
  BOOST_TEST(summary.provides(PLX_KIND_LAYER, "fixture.licensed"));
  BOOST_TEST(!summary.provides(PLX_KIND_SCHEDULER, "fixture.licensed"));
  BOOST_TEST(host.plugins().empty());
  BOOST_TEST(host.find(PLX_KIND_LAYER, "fixture.licensed") == nullptr);
  BOOST_TEST(&host.peek(fixture("fixture_init_fails")) == &summary);                 // read once
  BOOST_CHECK_THROW(host.load(fixture("fixture_init_fails")), plexus::PluginError);  // init refuses
  // The checks before the descriptor are load's.
  try {
    (void)host.peek(fixture("fixture_abi_major2"));
    BOOST_FAIL("expected PluginError");
  } catch (const plexus::PluginError& e) {
    BOOST_TEST(contains(e.what(), "major versions differ"), e.what());
  }
  // A loaded plugin is described from its registration.
  host.load(fixture("fixture_c_layer"));
  BOOST_TEST(host.peek(fixture("fixture_c_layer")).provides(PLX_KIND_SCHEDULER, "fixture.c_sequential"));
}

BOOST_AUTO_TEST_CASE(load_provider_finds_a_component_by_its_descriptor) {
  plexus::PluginHost host;
  const std::vector<std::filesystem::path> path = {PLEXUS_FIXTURE_PLUGIN_DIR};
  // No plugin is named after "fixture": only reading the descriptors finds fixture_c_layer.
  const plexus::Component& scheduler = host.load_provider(PLX_KIND_SCHEDULER, "fixture.c_sequential", path);
  BOOST_TEST(scheduler.plugin->name == "fixture_c_layer");
  BOOST_TEST(host.plugins().size() == 1U);  // the others were read, not loaded
  BOOST_TEST(&host.load_provider(PLX_KIND_SCHEDULER, "fixture.c_sequential", path) == &scheduler);

  try {
    (void)host.load_provider(PLX_KIND_STACK, "fixture.c_stak", path);
    BOOST_FAIL("expected PluginError");
  } catch (const plexus::PluginError& e) {
    const std::string what = e.what();
    BOOST_TEST(
        contains(what,
                 "no plugin provides the stack component 'fixture.c_stak' (did you mean 'fixture.c_stack'?)"),
        what);
    BOOST_TEST(contains(what, "the loaded plugins (fixture_c_layer) do not"), what);
    BOOST_TEST(contains(what,
                        "libplexus_fixture_c_stack.so (plugin fixture_c_stack): stack fixture.c_stack, "
                        "fixture.c_stack_legacy, fixture.c_stack_keys, fixture.c_stack_clash"),
               what);
    BOOST_TEST(contains(what, "libplexus_fixture_older_minor.so (plugin fixture_older_minor): no stack"),
               what);
    BOOST_TEST(contains(what, "libplexus_fixture_abi_major2.so: could not be read:"), what);
    BOOST_TEST(contains(what, "libplexus_fixture_no_entry.so: could not be read:"), what);
    BOOST_TEST(contains(what, "does not export the entry symbol"), what);
  }
  BOOST_TEST(host.plugins().size() == 1U);
}
