// Loads the out-of-tree example plugins that tests/integration/out_of_tree.sh built against an
// installed Plexus (the ctest fixture integration.external_plugins_build) and drives them through
// the host exactly as the engine would: descriptor, config validated against the component's
// schema, layer creation, forward and backward on real buffers.
//
//   libplexus_example_cpp.so  example.scaled_tanh    C++17, clang++ + libc++
//   libplexus_example_c.so    example.c_leaky_relu   C99, gcc
//
// This executable is g++ + libstdc++, so the C++ plugin's run here is the proof that a plugin
// built with another compiler and C++ standard library works behind the C ABI. The test also
// reads the plugins' ELF dynamic sections itself to confirm which runtimes they depend on.
#define BOOST_TEST_MODULE external_plugins
#include <boost/test/unit_test.hpp>

#include <elf.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/errors.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/plexus.h"

namespace fs = std::filesystem;

namespace {

const fs::path kExternalDir = PLEXUS_EXTERNAL_PLUGIN_DIR;

fs::path plugin_file(const char* project, const char* library) {
  const fs::path file = kExternalDir / project / library;
  BOOST_TEST_REQUIRE(fs::exists(file), file.string()
                                           << " is missing: it is built by the ctest fixture "
                                              "integration.external_plugins_build "
                                              "(tests/integration/out_of_tree.sh); run "
                                              "`ctest -R external_plugins` to build and test");
  return file;
}
fs::path cpp_plugin() { return plugin_file("cpp_layer", "libplexus_example_cpp.so"); }
fs::path c_plugin() { return plugin_file("c_layer", "libplexus_example_c.so"); }

// ---- ELF: the DT_NEEDED entries of a 64-bit shared object ---------------------------------
// Read directly (section headers -> SHT_DYNAMIC -> its string table) so the check depends on no
// external tool.
std::vector<std::string> elf_needed(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  BOOST_TEST_REQUIRE(in.good(), "cannot open " << file);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto read = [&](std::size_t offset, auto& out) {
    BOOST_TEST_REQUIRE(offset + sizeof(out) <= bytes.size(), file << ": truncated ELF file");
    std::memcpy(&out, bytes.data() + offset, sizeof(out));
  };
  Elf64_Ehdr header{};
  read(0, header);
  BOOST_TEST_REQUIRE(std::memcmp(header.e_ident, ELFMAG, SELFMAG) == 0, file << " is not an ELF file");
  BOOST_TEST_REQUIRE(header.e_ident[EI_CLASS] == ELFCLASS64, file << " is not a 64-bit ELF file");

  auto section = [&](std::size_t index) {
    Elf64_Shdr s{};
    read(header.e_shoff + index * header.e_shentsize, s);
    return s;
  };
  std::vector<std::string> needed;
  for (std::size_t i = 0; i < header.e_shnum; ++i) {
    const Elf64_Shdr dynamic = section(i);
    if (dynamic.sh_type != SHT_DYNAMIC) continue;
    const Elf64_Shdr strings = section(dynamic.sh_link);
    for (std::size_t at = 0; at + sizeof(Elf64_Dyn) <= dynamic.sh_size; at += sizeof(Elf64_Dyn)) {
      Elf64_Dyn entry{};
      read(dynamic.sh_offset + at, entry);
      if (entry.d_tag == DT_NULL) break;
      if (entry.d_tag != DT_NEEDED) continue;
      const std::size_t name_at = strings.sh_offset + entry.d_un.d_val;
      BOOST_TEST_REQUIRE(name_at < bytes.size(), file << ": DT_NEEDED name outside the file");
      needed.emplace_back(bytes.data() + name_at, ::strnlen(bytes.data() + name_at, bytes.size() - name_at));
    }
  }
  return needed;
}

bool needs(const std::vector<std::string>& needed, const std::string& prefix) {
  for (const auto& n : needed)
    if (n.rfind(prefix, 0) == 0) return true;
  return false;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
  return s;
}

// ---- tensors -------------------------------------------------------------------------------
// A host-side fp32 CPU buffer with a DLPack view of it.
struct Buffer {
  std::vector<float> values;
  std::vector<int64_t> shape;

  Buffer(std::vector<float> v, std::vector<int64_t> s) : values(std::move(v)), shape(std::move(s)) {}
  DLTensor view() {
    DLTensor t{};
    t.data = values.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = plx_dtype_f32();
    t.shape = shape.data();
    return t;
  }
};

// A tensor that needs no gradient: backward's convention is data == NULL.
DLTensor no_grad() {
  DLTensor t{};
  t.device = DLDevice{kDLCPU, 0};
  t.dtype = plx_dtype_f32();
  return t;
}

void check_close(const std::vector<float>& got, const std::vector<double>& expected, const char* what) {
  BOOST_TEST_REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    BOOST_TEST(std::abs(static_cast<double>(got[i]) - expected[i]) <= 1e-5 * (1.0 + std::abs(expected[i])),
               what << "[" << i << "] = " << got[i] << ", expected " << expected[i]);
}

// ---- host side -------------------------------------------------------------------------------
// The component's config section, validated against its own schema with defaults filled in,
// as the engine does before it creates a component.
std::unique_ptr<plexus::ConfigHandle> validated_config(const plexus::Component& component, const char* json) {
  BOOST_TEST_REQUIRE(!component.config_schema.empty(), component.name << " declares no config schema");
  const auto schema = plexus::config::Schema::parse(component.config_schema, component.name);
  boost::json::value value = boost::json::parse(json);
  plexus::config::validate(value, schema, "model.layers[0]");
  return std::make_unique<plexus::ConfigHandle>(std::move(value), "model.layers[0]");
}

// A layer with its config nodes, which must outlive it.
struct LayerUnderTest {
  std::unique_ptr<plexus::ConfigHandle> config;
  plexus::ConfigHandle model_config{boost::json::object{}, "model"};
  std::unique_ptr<plexus::LayerInstance> layer;

  LayerUnderTest(const plexus::Component& component, const char* config_json)
      : config(validated_config(component, config_json)) {
    plx_layer_create_args args{};
    args.struct_size = sizeof(args);
    args.layer_index = 0;
    args.num_layers = 1;
    args.device = DLDevice{kDLCPU, 0};
    args.config = config->get();
    args.model_config = model_config.get();
    layer = std::make_unique<plexus::LayerInstance>(component, args);
  }
};

plx_forward_args forward_args(const DLTensor* inputs, DLTensor* outputs, const DLTensor* params,
                              uint32_t num_params, uint32_t flags) {
  plx_forward_args a{};
  a.struct_size = sizeof(a);
  a.flags = flags;
  a.num_inputs = 1;
  a.inputs = inputs;
  a.num_outputs = 1;
  a.outputs = outputs;
  a.num_params = num_params;
  a.params = params;
  return a;
}

plx_backward_args backward_args(const DLTensor* grad_outputs, DLTensor* grad_inputs, const DLTensor* params,
                                DLTensor* param_grads, uint32_t num_params) {
  plx_backward_args a{};
  a.struct_size = sizeof(a);
  a.num_outputs = 1;
  a.grad_outputs = grad_outputs;
  a.num_inputs = 1;
  a.grad_inputs = grad_inputs;
  a.num_params = num_params;
  a.params = params;
  a.param_grads = param_grads;
  return a;
}

// Runs `call`, expecting the plugin to fail with `status` and a message (set through the host's
// set_error) containing `text`.
template <class Call>
void expect_plugin_error(Call&& call, plx_status status, const std::string& text) {
  try {
    call();
    BOOST_ERROR("expected the plugin to fail with: " << text);
  } catch (const plexus::ComponentCallError& e) {
    BOOST_TEST(e.status() == status, "status " << e.status() << ", expected " << status << ": " << e.what());
    BOOST_TEST(std::string(e.what()).find(text) != std::string::npos,
               "message '" << e.what() << "' should contain '" << text << "'");
  }
}

bool process_maps_contain(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(library) != std::string::npos) return true;
  return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(runtimes)

// The plugins' dependencies, read from their ELF files: the C++ plugin runs on libc++ (not the
// libstdc++ this test and the core use), the C plugin needs no C++ runtime, and neither links
// the core library.
BOOST_AUTO_TEST_CASE(elf_dependencies) {
  const auto cpp = elf_needed(cpp_plugin());
  BOOST_TEST_MESSAGE("libplexus_example_cpp.so needs: " << joined(cpp));
  BOOST_TEST(needs(cpp, "libc++.so"), "the C++ example must need libc++, needs: " << joined(cpp));
  BOOST_TEST(!needs(cpp, "libstdc++"), "the C++ example must not need libstdc++, needs: " << joined(cpp));
  BOOST_TEST(!needs(cpp, "libplexus_core"), "plugins must not link the core: " << joined(cpp));

  const auto c = elf_needed(c_plugin());
  BOOST_TEST_MESSAGE("libplexus_example_c.so needs: " << joined(c));
  BOOST_TEST(!needs(c, "libc++"), "the C example needs no C++ runtime: " << joined(c));
  BOOST_TEST(!needs(c, "libstdc++"), "the C example needs no C++ runtime: " << joined(c));
  BOOST_TEST(!needs(c, "libplexus_core"), "plugins must not link the core: " << joined(c));
}

// Both plugins in one host, next to each other: two C++ standard libraries in one process.
BOOST_AUTO_TEST_CASE(both_plugins_in_one_process) {
  plexus::PluginHost host;
  host.load(cpp_plugin());
  host.load(c_plugin());
  BOOST_TEST(host.plugins().size() == 2U);
  BOOST_TEST(host.find(PLX_KIND_LAYER, "example.scaled_tanh") != nullptr);
  BOOST_TEST(host.find(PLX_KIND_LAYER, "example.c_leaky_relu") != nullptr);
  BOOST_TEST(process_maps_contain("libc++.so"), "loading the C++ example should map libc++ into the process");
  BOOST_TEST(process_maps_contain("libstdc++.so"), "the host itself runs on libstdc++");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cpp_layer)

BOOST_AUTO_TEST_CASE(descriptor) {
  plexus::PluginHost host;
  const plexus::PluginRecord& record = host.load(cpp_plugin());
  BOOST_TEST(record.name == "example_cpp");
  BOOST_TEST(record.version == "1.0.0");
  BOOST_TEST(!record.description.empty());
  BOOST_TEST(record.abi_version == static_cast<uint32_t>(PLX_ABI_VERSION));
  BOOST_TEST(record.min_host_minor == 0U);

  const auto components = host.components_of(record);
  BOOST_TEST_REQUIRE(components.size() == 1U);
  const plexus::Component& c = *components[0];
  BOOST_TEST(c.name == "example.scaled_tanh");
  BOOST_TEST(c.kind == static_cast<uint32_t>(PLX_KIND_LAYER));
  BOOST_TEST(std::string(plexus::kind_name(c.kind)) == "layer");
  BOOST_TEST(!c.description.empty());
  BOOST_TEST(c.table_size == sizeof(plx_layer_v1));
  BOOST_TEST(&host.get(PLX_KIND_LAYER, "example.scaled_tanh") == &c);
  // The schema is valid in Plexus's schema dialect and declares both options with defaults.
  const auto schema = plexus::config::Schema::parse(c.config_schema, c.name);
  BOOST_TEST_REQUIRE(schema.property("beta") != nullptr);
  BOOST_TEST_REQUIRE(schema.property("init_alpha") != nullptr);
  BOOST_TEST(schema.property("beta")->default_value() != nullptr);
  BOOST_TEST(schema.property("init_alpha")->minimum().has_value());
}

// y = alpha * tanh(beta * x); dx = dy * alpha * beta * (1 - t^2); dalpha += sum(dy * t).
BOOST_AUTO_TEST_CASE(forward_and_backward) {
  plexus::PluginHost host;
  host.load(cpp_plugin());
  const double beta = 0.5;
  LayerUnderTest t(host.get(PLX_KIND_LAYER, "example.scaled_tanh"), R"({"beta": 0.5, "init_alpha": 2.0})");
  const plexus::LayerInstance& layer = *t.layer;

  const plx_layer_info info = layer.info();
  BOOST_TEST(info.num_params == 1U);
  BOOST_TEST(info.num_stages == 1U);
  BOOST_TEST(info.num_inputs == 1U);
  BOOST_TEST(info.num_outputs == 1U);
  BOOST_TEST(info.flags == 0U);
  BOOST_TEST(layer.stage(0).kind == static_cast<uint32_t>(PLX_STAGE_COMPUTE));

  // The parameter the host must create: one fp32 scalar initialized to init_alpha from the config.
  const plx_param_spec alpha_spec = layer.param(0);
  BOOST_TEST(std::string(alpha_spec.name) == "alpha");
  BOOST_TEST(alpha_spec.desc.ndim == 1U);
  BOOST_TEST(alpha_spec.desc.dims[0] == 1);
  BOOST_TEST(plx_dtype_equal(alpha_spec.desc.dtype, plx_dtype_f32()) != 0);
  BOOST_TEST(alpha_spec.init == static_cast<uint32_t>(PLX_INIT_CONSTANT));
  BOOST_TEST(alpha_spec.init_a == 2.0);
  BOOST_TEST((alpha_spec.flags & PLX_PARAM_NO_WEIGHT_DECAY) != 0U);

  plx_tensor_desc in_desc{};
  in_desc.ndim = 2;
  in_desc.dtype = plx_dtype_f32();
  in_desc.dims[0] = 2;
  in_desc.dims[1] = 3;
  const auto out_desc = layer.output_desc({in_desc});
  BOOST_TEST_REQUIRE(out_desc.size() == 1U);
  BOOST_TEST(out_desc[0].ndim == 2U);
  BOOST_TEST(out_desc[0].dims[0] == 2);
  BOOST_TEST(out_desc[0].dims[1] == 3);

  // The host owns the parameter; use a value other than init_alpha to see it is the one read.
  const double alpha = 1.5;
  Buffer x({-2.0f, -1.0f, -0.5f, 0.0f, 0.5f, 1.5f}, {2, 3});
  Buffer y(std::vector<float>(6, -99.0f), {2, 3});
  Buffer a({static_cast<float>(alpha)}, {1});
  const DLTensor xv = x.view();
  DLTensor yv = y.view();
  const DLTensor av = a.view();
  auto state = layer.create_state(0);
  layer.forward(*state, 0, forward_args(&xv, &yv, &av, 1, PLX_FORWARD_TRAINING));

  std::vector<double> tanh_bx, expected_y;
  for (float v : x.values) {
    tanh_bx.push_back(std::tanh(beta * v));
    expected_y.push_back(alpha * tanh_bx.back());
  }
  check_close(y.values, expected_y, "y");

  Buffer dy({1.0f, -2.0f, 0.5f, 3.0f, -1.0f, 0.25f}, {2, 3});
  Buffer dx(std::vector<float>(6, -99.0f), {2, 3});
  Buffer dalpha({0.25f}, {1});  // param grads accumulate: start from a non-zero value
  const DLTensor dyv = dy.view();
  DLTensor dxv = dx.view();
  DLTensor dav = dalpha.view();
  layer.backward(*state, 0, backward_args(&dyv, &dxv, &av, &dav, 1));

  std::vector<double> expected_dx;
  double sum = 0.0;
  for (std::size_t i = 0; i < dy.values.size(); ++i) {
    const double g = dy.values[i];
    expected_dx.push_back(g * alpha * beta * (1.0 - tanh_bx[i] * tanh_bx[i]));
    sum += g * tanh_bx[i];
  }
  check_close(dx.values, expected_dx, "dx");
  check_close(dalpha.values, {0.25 + sum}, "dalpha");

  // A second backward of the same state adds to the parameter gradient again (microbatches add
  // up); an input gradient nobody needs (data NULL) is skipped.
  DLTensor skip = no_grad();
  layer.backward(*state, 0, backward_args(&dyv, &skip, &av, &dav, 1));
  check_close(dalpha.values, {0.25 + 2.0 * sum}, "dalpha after two backwards");
}

// ABI 1.1: the C++ helpers route estimate_flops to the layer's override.
BOOST_AUTO_TEST_CASE(flop_estimate) {
  plexus::PluginHost host;
  host.load(cpp_plugin());
  LayerUnderTest t(host.get(PLX_KIND_LAYER, "example.scaled_tanh"), "{}");
  plx_tensor_desc input{};
  input.ndim = 2;
  input.dtype = plx_dtype_f32();
  input.dims[0] = 4;
  input.dims[1] = 5;
  const auto flops = t.layer->estimate_flops({input});
  BOOST_TEST_REQUIRE(flops.has_value());
  BOOST_TEST(flops->forward == 3.0 * 20);
  BOOST_TEST(flops->backward == 6.0 * 20);
}

BOOST_AUTO_TEST_CASE(config_defaults_and_schema) {
  plexus::PluginHost host;
  host.load(cpp_plugin());
  const plexus::Component& c = host.get(PLX_KIND_LAYER, "example.scaled_tanh");

  // Defaults: beta = 1, init_alpha = 1.
  LayerUnderTest t(c, "{}");
  BOOST_TEST(t.layer->param(0).init_a == 1.0);
  Buffer x({-1.0f, 0.25f, 2.0f}, {3});
  Buffer y(std::vector<float>(3, 0.0f), {3});
  Buffer a({1.0f}, {1});
  const DLTensor xv = x.view();
  DLTensor yv = y.view();
  const DLTensor av = a.view();
  auto state = t.layer->create_state(0);
  t.layer->forward(*state, 0, forward_args(&xv, &yv, &av, 1, 0));
  check_close(y.values, {std::tanh(-1.0), std::tanh(0.25), std::tanh(2.0)}, "y with defaults");

  // The schema's bounds and key list are enforced before the plugin ever sees the config.
  BOOST_CHECK_THROW(validated_config(c, R"({"beta": 0})"), plexus::config::ConfigError);
  BOOST_CHECK_THROW(validated_config(c, R"({"init_alpha": -0.5})"), plexus::config::ConfigError);
  BOOST_CHECK_THROW(validated_config(c, R"({"betta": 2})"), plexus::config::ConfigError);
  BOOST_CHECK_THROW(validated_config(c, R"({"beta": "large"})"), plexus::config::ConfigError);
}

// Exceptions thrown inside the libc++ plugin come back as a status plus the plugin's message.
BOOST_AUTO_TEST_CASE(errors_reach_the_host) {
  plexus::PluginHost host;
  host.load(cpp_plugin());
  LayerUnderTest t(host.get(PLX_KIND_LAYER, "example.scaled_tanh"), "{}");
  const plexus::LayerInstance& layer = *t.layer;

  Buffer x({1.0f, 2.0f}, {2});
  Buffer y(std::vector<float>(2, 0.0f), {2});
  Buffer a({1.0f}, {1});
  DLTensor xv = x.view();
  DLTensor yv = y.view();
  const DLTensor av = a.view();
  auto state = layer.create_state(0);

  // Backward before any training forward.
  Buffer dy({1.0f, 1.0f}, {2});
  const DLTensor dyv = dy.view();
  DLTensor dxv = y.view();
  DLTensor dav = a.view();
  expect_plugin_error([&] { layer.backward(*state, 0, backward_args(&dyv, &dxv, &av, &dav, 1)); },
                      PLX_ERR_INVALID_ARGUMENT, "PLX_FORWARD_TRAINING");

  // A float64 input.
  xv.dtype = plx_dtype_f64();
  expect_plugin_error([&] { layer.forward(*state, 0, forward_args(&xv, &yv, &av, 1, 0)); },
                      PLX_ERR_INVALID_ARGUMENT, "expected dtype float32, got float64");
  // A parameter index that does not exist, and a stage that does not exist.
  expect_plugin_error([&] { (void)layer.param(1); }, PLX_ERR_INVALID_ARGUMENT, "no parameter 1");
  xv.dtype = plx_dtype_f32();
  expect_plugin_error([&] { layer.forward(*state, 1, forward_args(&xv, &yv, &av, 1, 0)); },
                      PLX_ERR_INVALID_ARGUMENT, "no stage 1");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(c_layer)

BOOST_AUTO_TEST_CASE(descriptor) {
  plexus::PluginHost host;
  const plexus::PluginRecord& record = host.load(c_plugin());
  BOOST_TEST(record.name == "example_c");
  BOOST_TEST(record.version == "1.0.0");
  BOOST_TEST(record.abi_version == static_cast<uint32_t>(PLX_ABI_VERSION));
  const auto components = host.components_of(record);
  BOOST_TEST_REQUIRE(components.size() == 1U);
  const plexus::Component& c = *components[0];
  BOOST_TEST(c.name == "example.c_leaky_relu");
  BOOST_TEST(c.kind == static_cast<uint32_t>(PLX_KIND_LAYER));
  BOOST_TEST(std::string(plexus::kind_name(c.kind)) == "layer");
  BOOST_TEST(c.table_size == sizeof(plx_layer_v1));
  const auto schema = plexus::config::Schema::parse(c.config_schema, c.name);
  BOOST_TEST(schema.property("negative_slope") != nullptr);
}

// y = x for x > 0, slope * x otherwise; dx = dy for x > 0, slope * dy otherwise.
BOOST_AUTO_TEST_CASE(forward_and_backward) {
  plexus::PluginHost host;
  host.load(c_plugin());
  LayerUnderTest t(host.get(PLX_KIND_LAYER, "example.c_leaky_relu"), R"({"negative_slope": 0.1})");
  const plexus::LayerInstance& layer = *t.layer;

  const plx_layer_info info = layer.info();
  BOOST_TEST(info.num_params == 0U);
  BOOST_TEST(info.num_stages == 1U);
  BOOST_TEST(info.num_inputs == 1U);
  BOOST_TEST(info.num_outputs == 1U);
  BOOST_TEST(std::string(layer.stage(0).name) == "compute");

  plx_tensor_desc in_desc{};
  in_desc.ndim = 1;
  in_desc.dtype = plx_dtype_f32();
  in_desc.dims[0] = 5;
  const auto out_desc = layer.output_desc({in_desc});
  BOOST_TEST_REQUIRE(out_desc.size() == 1U);
  BOOST_TEST(out_desc[0].dims[0] == 5);

  Buffer x({-3.0f, -0.5f, 0.0f, 0.5f, 2.0f}, {5});
  Buffer y(std::vector<float>(5, -99.0f), {5});
  const DLTensor xv = x.view();
  DLTensor yv = y.view();
  auto state = layer.create_state(0);
  layer.forward(*state, 0, forward_args(&xv, &yv, nullptr, 0, PLX_FORWARD_TRAINING));
  check_close(y.values, {-0.3, -0.05, 0.0, 0.5, 2.0}, "y");

  Buffer dy({1.0f, 2.0f, 3.0f, 4.0f, 5.0f}, {5});
  Buffer dx(std::vector<float>(5, -99.0f), {5});
  const DLTensor dyv = dy.view();
  DLTensor dxv = dx.view();
  layer.backward(*state, 0, backward_args(&dyv, &dxv, nullptr, nullptr, 0));
  check_close(dx.values, {0.1, 0.2, 0.3, 4.0, 5.0}, "dx");

  // A second microbatch in flight keeps its own mask.
  Buffer x2({1.0f, -1.0f, 1.0f, -1.0f, 1.0f}, {5});
  const DLTensor x2v = x2.view();
  auto state2 = layer.create_state(1);
  layer.forward(*state2, 0, forward_args(&x2v, &yv, nullptr, 0, PLX_FORWARD_TRAINING));
  layer.backward(*state2, 0, backward_args(&dyv, &dxv, nullptr, nullptr, 0));
  check_close(dx.values, {1.0, 0.2, 3.0, 0.4, 5.0}, "dx of microbatch 1");
  layer.backward(*state, 0, backward_args(&dyv, &dxv, nullptr, nullptr, 0));
  check_close(dx.values, {0.1, 0.2, 0.3, 4.0, 5.0}, "dx of microbatch 0 again");
}

BOOST_AUTO_TEST_CASE(config_default) {
  plexus::PluginHost host;
  host.load(c_plugin());
  const plexus::Component& c = host.get(PLX_KIND_LAYER, "example.c_leaky_relu");
  LayerUnderTest t(c, "{}");  // negative_slope defaults to 0.01
  Buffer x({-2.0f, 3.0f}, {2});
  Buffer y(std::vector<float>(2, 0.0f), {2});
  const DLTensor xv = x.view();
  DLTensor yv = y.view();
  auto state = t.layer->create_state(0);
  t.layer->forward(*state, 0, forward_args(&xv, &yv, nullptr, 0, 0));
  check_close(y.values, {-0.02, 3.0}, "y with the default slope");
  BOOST_CHECK_THROW(validated_config(c, R"({"negative_slope": -1})"), plexus::config::ConfigError);
}

// The C plugin reports through host->set_error; the host attaches the message to the error.
BOOST_AUTO_TEST_CASE(errors_reach_the_host) {
  plexus::PluginHost host;
  host.load(c_plugin());
  LayerUnderTest t(host.get(PLX_KIND_LAYER, "example.c_leaky_relu"), "{}");
  const plexus::LayerInstance& layer = *t.layer;

  Buffer x({1.0f, 2.0f}, {2});
  Buffer y(std::vector<float>(2, 0.0f), {2});
  DLTensor xv = x.view();
  DLTensor yv = y.view();
  auto state = layer.create_state(0);

  const DLTensor dyv = x.view();
  DLTensor dxv = y.view();
  expect_plugin_error([&] { layer.backward(*state, 0, backward_args(&dyv, &dxv, nullptr, nullptr, 0)); },
                      PLX_ERR_INVALID_ARGUMENT, "no training forward");
  xv.dtype = plx_dtype_f64();
  expect_plugin_error([&] { layer.forward(*state, 0, forward_args(&xv, &yv, nullptr, 0, 0)); },
                      PLX_ERR_INVALID_ARGUMENT, "expected dtype float32");
  expect_plugin_error([&] { (void)layer.param(0); }, PLX_ERR_INVALID_ARGUMENT, "has no parameters");
  expect_plugin_error([&] { (void)layer.stage(2); }, PLX_ERR_INVALID_ARGUMENT, "no stage 2");
}

BOOST_AUTO_TEST_SUITE_END()
