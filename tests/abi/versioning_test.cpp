#define BOOST_TEST_MODULE abi_versioning
#include <boost/test/unit_test.hpp>

// Minor versions are compatible in both directions as long as the plugin needs nothing the host
// lacks: a plugin built with the frozen SDK 1.0 headers, and one simulating a future SDK
// 1.(MINOR+1) with larger structs, both load and compute exactly what the current one does.
// (The refusals, a different major or a too old host, are in host_errors_test.cpp.)

#include "abi_fixtures.hpp"

using abi_test::expect_scale_works;
using abi_test::fixture;

BOOST_AUTO_TEST_CASE(host_announces_its_version_and_table_size) {
  plexus::PluginHost host;
  const plx_host_api* api = host.services().table_for("probe");
  BOOST_TEST_REQUIRE(api != nullptr);
  BOOST_TEST(api->abi_version == PLX_ABI_VERSION);
  BOOST_TEST(api->struct_size == sizeof(plx_host_api));
}

BOOST_AUTO_TEST_CASE(plugin_built_with_sdk_1_0_loads_and_runs) {
  plexus::PluginHost host;
  const plexus::PluginRecord& record = host.load(fixture("fixture_older_minor"));
  BOOST_TEST(record.name == "fixture_older_minor");
  BOOST_TEST(record.abi_version == PLX_MAKE_VERSION(1, 0));
  BOOST_TEST(record.min_host_minor == 0u);

  const plexus::Component& layer = host.get(PLX_KIND_LAYER, "fixture.older_scale");
  BOOST_TEST(layer.plugin == &record);
  BOOST_TEST(layer.table_size == PLX_FIELD_END(plx_layer_v1, backward_weights));  // exactly 1.0's table
  expect_scale_works(layer);

  // estimate_flops arrived in 1.1: for this plugin the host's zero-extended table has none, so
  // the estimate is "unknown" rather than a call through garbage.
  abi_test::LayerConfigs configs;
  const plexus::LayerInstance instance(layer, configs.create_args());
  plx_tensor_desc input{};
  input.ndim = 1;
  input.dtype = plx_dtype_f32();
  input.dims[0] = 8;
  BOOST_TEST(!instance.estimate_flops({input}).has_value());
  // after_step arrived in 1.5: absent here too, so the engine's call after a step does nothing.
  BOOST_TEST(layer.as<plx_layer_v1>().after_step == nullptr);
  std::vector<DLTensor> no_params;
  instance.after_step(0, no_params);
}

BOOST_AUTO_TEST_CASE(plugin_from_a_newer_minor_needing_nothing_newer_loads_and_runs) {
  plexus::PluginHost host;
  const plexus::PluginRecord& record = host.load(fixture("fixture_newer_minor"));
  BOOST_TEST(record.name == "fixture_newer_minor");
  BOOST_TEST(record.abi_version == PLX_MAKE_VERSION(1, PLX_ABI_MINOR + 1));
  BOOST_TEST(record.min_host_minor == uint32_t{PLX_ABI_MINOR});

  // The plugin's table is larger than this host's: the host keeps exactly the part it knows.
  const plexus::Component& component = host.get(PLX_KIND_LAYER, "fixture.newer_scale");
  BOOST_TEST(component.table_size == sizeof(plx_layer_v1));
  expect_scale_works(component);

  // The plugin's get_info has a larger plx_layer_info; it must fill only the host's struct.
  abi_test::LayerConfigs configs;
  const plexus::LayerInstance layer(component, configs.create_args());
  const plx_layer_info info = layer.info();
  BOOST_TEST(info.struct_size == sizeof(plx_layer_info));
  BOOST_TEST(info.num_params == 1u);
  BOOST_TEST(info.num_stages == 1u);
  BOOST_TEST(info.num_inputs == 1u);
  BOOST_TEST(info.num_outputs == 1u);
}
