// The model sections of hybrid_stack's pattern symbols (model.attention, model.mlp, model.mamba,
// model.moe with layer_freq) are declared by the stack's plugin, not the framework: the framework
// schema leaves them to it, and once the stack is loaded they are checked (typos with the full path
// and a suggestion from both sets of keys, wrong values), their defaults filled in, and the
// component sections' options validated, so a run's config comes out as it always did.
#define BOOST_TEST_MODULE hybrid_model_keys
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "plexus/core/config.hpp"
#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"
#include "plexus/plugin.h"

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

boost::json::value checked_config(plexus::PluginHost& host, const std::vector<std::string>& overrides) {
  boost::json::value config = plexus::load_run_config(std::nullopt, overrides);
  plexus::load_configured_plugins(host, config, {});
  plexus::check_components(host, config);
  return config;
}

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

BOOST_AUTO_TEST_CASE(the_framework_leaves_the_sections_to_the_stack) {
  // Before any plugin: an unknown model key survives (the stack may declare it), a known one is checked.
  const boost::json::value config = plexus::load_run_config(std::nullopt, {"model.atention.component=x"});
  BOOST_TEST(config.at("model").at("atention").at("component") == "x");
  BOOST_CHECK_THROW(plexus::load_run_config(std::nullopt, {"model.hidden_size=\"wide\""}),
                    plexus::config::ConfigError);

  plexus::PluginHost host;
  const boost::json::value checked = checked_config(host, {});
  const plexus::Component& stack = host.get(PLX_KIND_STACK, "hybrid_stack");
  BOOST_TEST(stack.declares_model_keys);
  const boost::json::value declared = boost::json::parse(stack.model_schema);
  for (const char* key : {"attention", "mlp", "mamba", "moe"})
    BOOST_TEST(declared.at("properties").as_object().contains(key), key);
}

// The run config after the checks holds what it held when the framework declared these sections:
// a checkpoint's state.json keeps the same content.
BOOST_AUTO_TEST_CASE(defaults_are_filled_as_before) {
  plexus::PluginHost host;
  const boost::json::value config = checked_config(host, {});
  const auto& model = config.at("model").as_object();
  BOOST_TEST(model.at("mamba") == boost::json::parse(R"({"component": "mamba.mixer", "options": {}})"));
  BOOST_TEST(model.at("moe") ==
             boost::json::parse(R"({"component": "moe.layer", "options": {}, "layer_freq": 0})"));
  // attention and mlp are component sections: their options are the components' defaults.
  for (const char* section : {"attention", "mlp"}) {
    const std::string component = std::string("transformer.") + section;
    BOOST_TEST(model.at(section).at("component") == component.c_str());
    const boost::json::value defaults =
        plexus::validated_component_options(host.get(PLX_KIND_LAYER, component), {}, "x");
    BOOST_TEST(model.at(section).at("options") == defaults, section);
  }
  // A component with defaults shows the filling: the Mamba-2 mixer as the layer of '*'.
  plexus::PluginHost mamba_host;
  const boost::json::value mamba_attention =
      checked_config(mamba_host, {"model.attention.component=mamba.mixer"});
  const boost::json::value mamba_defaults =
      plexus::validated_component_options(mamba_host.get(PLX_KIND_LAYER, "mamba.mixer"), {}, "x");
  BOOST_TEST(mamba_defaults.as_object().contains("mamba_state_dim"));
  BOOST_TEST(mamba_attention.at("model").at("attention").at("options") == mamba_defaults);
  // Exactly the framework's model keys and the stack's five: nothing more.
  const plexus::config::Schema* framework_model = plexus::framework_schema().property("model");
  for (const auto& [key, value] : model) {
    const bool stack_key =
        key == "attention" || key == "mlp" || key == "mamba" || key == "moe" || key == "mtp_num_layers";
    BOOST_TEST((stack_key || framework_model->property(key) != nullptr), std::string(key));
  }
  BOOST_TEST(model.at("mtp_num_layers") == 0);
  BOOST_TEST(model.size() == framework_model->properties().size() + 5U);
  // `plexus config check` names the stack's component sections with the framework's.
  std::string sections;
  for (const plexus::ComponentRef& ref : plexus::component_refs(host, config)) sections += ref.section + " ";
  BOOST_TEST(sections ==
             "scheduler distributed.data_parallel model.embedding model.final_norm model.head "
             "model.attention model.mlp ");
  // Checking again changes nothing.
  boost::json::value again = config;
  plexus::check_components(host, again);
  BOOST_TEST(again == config);
}

BOOST_AUTO_TEST_CASE(typos_are_named_with_their_path_and_a_suggestion) {
  std::string error = check_error({"model.moe.layr_freq=2"});
  BOOST_TEST(
      contains(error, "config error at model.moe: unknown key 'layr_freq' (did you mean 'layer_freq'?)"),
      error);
  error = check_error({"model.atention.component=transformer.attention"});
  BOOST_TEST(contains(error, "config error at model: unknown key 'atention' (did you mean 'attention'?)"),
             error);
  // The framework's own model keys are candidates as well: the suggestion considers both.
  error = check_error({"model.hiden_size=64"});
  BOOST_TEST(contains(error, "config error at model: unknown key 'hiden_size' (did you mean 'hidden_size'?)"),
             error);
  error = check_error({"model.mamba.optons={}"});
  BOOST_TEST(contains(error, "config error at model.mamba: unknown key 'optons' (did you mean 'options'?)"),
             error);
}

BOOST_AUTO_TEST_CASE(wrong_values_name_the_expectation) {
  std::string error = check_error({"model.moe.layer_freq=\"two\""});
  BOOST_TEST(
      contains(error, "config error at model.moe.layer_freq: expected an integer >= 0, got string \"two\""),
      error);
  error = check_error({"model.moe.layer_freq=-1"});
  BOOST_TEST(contains(error, "config error at model.moe.layer_freq: expected an integer >= 0, got -1"),
             error);
  error = check_error({"model.moe.layer_freq=2.0"});
  BOOST_TEST(contains(error, "write integers without a decimal point or exponent"), error);
  error = check_error({"model.mlp.component=7"});
  BOOST_TEST(contains(error, "config error at model.mlp.component: expected a string, got number 7"), error);
  // Component options: attention's at its section, moe's when the decoder has an MoE layer.
  error = check_error({"model.attention.options.no_such_option=1"});
  BOOST_TEST(contains(error, "config error at model.attention.options: unknown key 'no_such_option'"), error);
  error = check_error({"model.moe.layer_freq=1", "model.moe.options.num_moe_experts=0"});
  BOOST_TEST(contains(error, "model.moe.options.num_moe_experts"), error);
}

// The stack's keys decide which layers' plugins load: they are checked before, so a misspelt section
// stops the run rather than quietly giving another decoder.
BOOST_AUTO_TEST_CASE(load_configured_plugins_checks_the_keys_it_reads) {
  plexus::PluginHost host;
  boost::json::value config = plexus::load_run_config(std::nullopt, {"model.moe.layer_freq=\"1\""});
  BOOST_CHECK_THROW(plexus::load_configured_plugins(host, config, {}), plexus::config::ConfigError);
  BOOST_TEST(host.find(PLX_KIND_LAYER, "moe.layer") == nullptr);
  // Valid: the MoE layers' plugin is loaded on demand, and their options validated (not filled:
  // a config keeps moe's and mamba's options as written, as it always did).
  plexus::PluginHost host2;
  config = checked_config(host2, {"model.moe.layer_freq=2", "model.moe.options.num_moe_experts=4"});
  BOOST_TEST(host2.find(PLX_KIND_LAYER, "moe.layer") != nullptr);
  BOOST_TEST(config.at("model").at("moe").at("options") == boost::json::parse(R"({"num_moe_experts": 4})"));
  const plexus::DecoderPlan plan = plexus::plan_decoder(host2, config);
  BOOST_TEST(plan.layers.at(1).component == "moe.layer");
  BOOST_TEST(plan.layers.at(1).options.as_object().size() > 1U);  // the plan's copy is filled
}

// A checkpoint's saved config, read back as a resume reads it: the stack's defaults are filled (a
// config saved before a key existed gets its default) and a key the stack does not know is refused.
BOOST_AUTO_TEST_CASE(saved_configs_are_read_with_the_stack_keys) {
  plexus::PluginHost host;
  const boost::json::value current = checked_config(host, {});
  boost::json::value saved = current;
  saved.at("model").as_object().erase("moe");
  saved.at("model").as_object().erase("mamba");
  plexus::validate_saved_run_config(host, saved);
  BOOST_TEST(saved == current);
  boost::json::value wrong = current;
  wrong.at("model").as_object()["moe"].as_object()["layr_freq"] = 1;
  try {
    plexus::validate_saved_run_config(host, wrong);
    BOOST_FAIL("expected ConfigError");
  } catch (const plexus::config::ConfigError& e) {
    BOOST_TEST(contains(e.what(), "config error at model.moe: unknown key 'layr_freq'"), e.what());
  }
  // The framework schema alone (what a caller that never loads the stack has) accepts the saved
  // config and fills the framework's defaults only.
  boost::json::value framework_only = current;
  framework_only.at("model").as_object().erase("moe");
  plexus::config::validate(framework_only, plexus::framework_schema());
  BOOST_TEST(!framework_only.at("model").as_object().contains("moe"));
}
