// Shared by the ABI suites: where the fixture plugins are, temporary directories, CPU tensors
// over std::vector, one exact run of the scale layer, and checks on refusal messages.
#pragma once

#include <boost/json/object.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/plexus.h"

namespace abi_test {

namespace fs = std::filesystem;

// A fixture plugin built by tests/abi/CMakeLists.txt, by target name.
inline fs::path fixture(std::string_view name) {
  return fs::path(PLEXUS_FIXTURE_PLUGIN_DIR) / ("libplexus_" + std::string(name) + ".so");
}

// A fresh private directory (mode 0700) under the system's temp directory, removed with
// everything in it when the object goes. Declare it before the PluginHost that loads from it,
// so the host unloads first.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "plexus-abi-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover temp dir is harmless
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const noexcept { return path_; }

 private:
  fs::path path_;
};

// Copies a fixture plugin to `dir` and gives the copy exactly `mode`.
inline fs::path copy_fixture(std::string_view name, const fs::path& dir, fs::perms mode) {
  const fs::path from = fixture(name);
  const fs::path to = dir / from.filename();
  fs::copy_file(from, to);
  fs::permissions(to, mode, fs::perm_options::replace);
  return to;
}

// A 1-D fp32 CPU tensor that owns its values; view() is valid while the object lives unmoved.
struct HostTensor {
  std::vector<float> values;
  int64_t shape[1];

  explicit HostTensor(std::vector<float> v) : values(std::move(v)), shape{static_cast<int64_t>(values.size())} {}
  DLTensor view() {
    DLTensor t{};
    t.data = values.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = plx_dtype_f32();
    t.shape = shape;
    return t;  // strides NULL: contiguous
  }
};

// Forward arguments for a one-input, one-output layer; params may be null (num_params 0).
inline plx_forward_args forward_args(const DLTensor* input, DLTensor* output, const DLTensor* params,
                                     uint32_t flags = PLX_FORWARD_TRAINING) {
  plx_forward_args args{};
  args.struct_size = sizeof(args);
  args.flags = flags;
  args.num_inputs = 1;
  args.inputs = input;
  args.num_outputs = 1;
  args.outputs = output;
  args.num_params = params != nullptr ? 1 : 0;
  args.params = params;
  return args;
}

// Config nodes for creating a layer: an empty component section and an empty model section.
struct LayerConfigs {
  plexus::ConfigHandle config{boost::json::object{}, "model.layers[0]"};
  plexus::ConfigHandle model{boost::json::object{}, "model"};

  plx_layer_create_args create_args() {
    plx_layer_create_args args{};
    args.struct_size = sizeof(args);
    args.layer_index = 0;
    args.num_layers = 1;
    args.device = DLDevice{kDLCPU, 0};
    args.config = config.get();
    args.model_config = model.get();
    return args;
  }
};

// Runs one training forward and one backward of a scale layer (y = w * x; dx = w * dy;
// dw += sum(x * dy)) with values exact in fp32, and checks every number.
inline void expect_scale_works(const plexus::Component& component) {
  BOOST_TEST_CONTEXT("layer " << component.name) {
    LayerConfigs configs;
    const plexus::LayerInstance layer(component, configs.create_args());
    const auto state = layer.create_state(0);

    HostTensor x({1.0f, -2.0f, 0.5f, 4.0f});
    HostTensor w({1.5f});
    HostTensor y({0.0f, 0.0f, 0.0f, 0.0f});
    DLTensor xv = x.view(), wv = w.view(), yv = y.view();
    const plx_forward_args fwd = forward_args(&xv, &yv, &wv);
    layer.forward(*state, 0, fwd);
    const std::vector<float> expected_y{1.5f, -3.0f, 0.75f, 6.0f};
    BOOST_TEST(y.values == expected_y, boost::test_tools::per_element());

    HostTensor dy({1.0f, 0.5f, -1.0f, 2.0f});
    HostTensor dx({0.0f, 0.0f, 0.0f, 0.0f});
    HostTensor dw({0.25f});  // the gradient is accumulated into, not overwritten
    DLTensor dyv = dy.view(), dxv = dx.view(), dwv = dw.view();
    plx_backward_args bwd{};
    bwd.struct_size = sizeof(bwd);
    bwd.microbatch = 0;
    bwd.num_outputs = 1;
    bwd.grad_outputs = &dyv;
    bwd.num_inputs = 1;
    bwd.grad_inputs = &dxv;
    bwd.num_params = 1;
    bwd.params = &wv;
    bwd.param_grads = &dwv;
    layer.backward(*state, 0, bwd);
    const std::vector<float> expected_dx{1.5f, 0.75f, -1.5f, 3.0f};
    BOOST_TEST(dx.values == expected_dx, boost::test_tools::per_element());
    BOOST_TEST(dw.values[0] == 7.75f);  // 0.25 + (1 - 1 - 0.5 + 8)
  }
}

// The host survived a refusal: it still loads the good C plugin (unless a copy of it is already
// loaded) and runs its layer.
inline void expect_host_still_works(plexus::PluginHost& host) {
  const plexus::Component* layer = host.find(PLX_KIND_LAYER, "fixture.c_scale");
  if (layer == nullptr) {
    host.load(fixture("fixture_c_layer"));
    layer = &host.get(PLX_KIND_LAYER, "fixture.c_scale");
  }
  expect_scale_works(*layer);
}

// Case-insensitive substring test, so checks do not depend on a message's capitalization.
inline bool mentions(std::string_view text, std::string_view needle) {
  const auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  return std::search(text.begin(), text.end(), needle.begin(), needle.end(),
                     [&](char a, char b) { return lower(a) == lower(b); }) != text.end();
}
inline bool mentions_any(std::string_view text, std::initializer_list<std::string_view> needles) {
  return std::any_of(needles.begin(), needles.end(), [&](std::string_view n) { return mentions(text, n); });
}

inline bool has_plugin(const plexus::PluginHost& host, std::string_view name) {
  const auto plugins = host.plugins();
  return std::any_of(plugins.begin(), plugins.end(), [&](const plexus::PluginRecord* p) { return p->name == name; });
}

// Loads `file`, which the host must refuse with a PluginError naming the file and keeping none of
// the plugin; returns the message for the case's own checks.
inline std::string refusal(plexus::PluginHost& host, const fs::path& file, const plexus::LoadOptions& options = {}) {
  const std::size_t plugins_before = host.plugins().size();
  const std::size_t components_before = host.components().size();
  try {
    host.load(file, options);
  } catch (const plexus::PluginError& e) {
    const std::string message = e.what();
    BOOST_TEST_MESSAGE("refused as expected: " << message);
    BOOST_TEST(mentions(message, file.filename().string()), "the message names the file: " << message);
    BOOST_TEST(fs::path(e.file()).filename() == file.filename());
    BOOST_TEST(host.plugins().size() == plugins_before);
    BOOST_TEST(host.components().size() == components_before);
    return message;
  }
  BOOST_FAIL(file << " was loaded, but must be refused");
  return {};
}

}  // namespace abi_test
