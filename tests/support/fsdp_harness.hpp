// What the fsdp plugin's tests share: the plugin loaded through the real plugin host, its
// component created from options and unit descriptions as the engine creates it, and each table
// call either required to succeed (failing the test with the plugin's message) or returned with
// its status and message, for the refusals.
#pragma once

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/data_parallel.h"

namespace plexus::test::fsdp {

inline std::filesystem::path plugin_path(const std::string& name) {
  return std::filesystem::path(PLEXUS_BUILD_DIR) / "lib/plexus/plugins" / ("libplexus_" + name + ".so");
}

// Loads the built fsdp plugin into `host`, naming the file to build when it is missing.
inline const plexus::Component& load_fsdp(plexus::PluginHost& host) {
  const auto file = plugin_path("fsdp");
  if (!std::filesystem::exists(file))
    throw std::runtime_error("the fsdp plugin is not built: " + file.string() + " is missing (build the 'fsdp' target)");
  host.load(file);
  return host.get(PLX_KIND_DATA_PARALLEL, "fsdp");
}

struct UnitSpec {
  std::string name;
  int64_t numel = 0;
  std::string group = "dp";
  uint32_t flags = 0;
  double grad_scale = 1.0;
  DLDataType dtype = plx_dtype_f32();
  DLDevice device{kDLCPU, 0};
};

// A call's status and the message the plugin reported with it ("" on success).
struct Outcome {
  plx_status status = PLX_OK;
  std::string message;
  bool ok() const { return status == PLX_OK; }
  bool says(const std::string& part) const { return message.find(part) != std::string::npos; }
};
inline Outcome outcome(plx_status status) {
  Outcome o;
  o.status = status;
  o.message = status == PLX_OK ? std::string() : plexus::HostServices::take_last_error();
  return o;
}

// A view's float32 elements.
struct Span {
  float* data = nullptr;
  int64_t size = 0;
  float& operator[](int64_t i) const { return data[i]; }
};
inline Span span_of(const DLTensor& t) {
  BOOST_TEST_REQUIRE(t.ndim == 1);
  BOOST_TEST_REQUIRE(plx_dtype_equal(t.dtype, plx_dtype_f32()));
  return Span{static_cast<float*>(plx_data(&t)), t.shape[0]};
}

// One fsdp strategy instance, created from JSON options ({"strategy": ...}) at the config path
// the engine gives it.
class Strategy {
 public:
  Strategy(const plexus::Component& component, const std::string& options, const std::vector<UnitSpec>& units)
      : table_(&component.as<plx_data_parallel_v1>()) {
    const Outcome o = create(component, options, units, &instance_);
    if (!o.ok()) throw std::runtime_error("fsdp create failed: " + o.message);
  }
  ~Strategy() { table_->destroy(instance_); }
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  // Creates an instance (destroyed at once when `out` is null) and returns the status.
  static Outcome create(const plexus::Component& component, const std::string& options,
                        const std::vector<UnitSpec>& units, void** out = nullptr) {
    plexus::ConfigHandle config(boost::json::parse(options), "distributed.data_parallel.options");
    std::vector<plx_dp_unit_desc> descs(units.size());
    std::vector<const plx_dp_unit_desc*> pointers;
    for (std::size_t i = 0; i < units.size(); ++i) {
      plx_dp_unit_desc& d = descs[i];
      d.struct_size = sizeof(d);
      d.flags = units[i].flags;
      d.name = units[i].name.c_str();
      d.group = units[i].group.c_str();
      d.numel = units[i].numel;
      d.dtype = units[i].dtype;
      d.device = units[i].device;
      d.grad_scale = units[i].grad_scale;
      pointers.push_back(&d);
    }
    plx_dp_setup setup{};
    setup.struct_size = sizeof(setup);
    setup.num_units = static_cast<uint32_t>(units.size());
    setup.units = pointers.data();
    setup.device = DLDevice{kDLCPU, 0};
    const auto& table = component.as<plx_data_parallel_v1>();
    void* instance = nullptr;
    const Outcome o = outcome(table.create(config.get(), &setup, &instance));
    if (o.ok() && out != nullptr)
      *out = instance;
    else if (o.ok())
      table.destroy(instance);
    return o;
  }

  static void require(const Outcome& o, const char* call) { BOOST_TEST_REQUIRE(o.ok(), call << ": " << o.message); }

  plx_dp_layout layout(uint32_t unit) const {
    plx_dp_layout l{};
    l.struct_size = sizeof(l);
    require(outcome(table_->layout(instance_, unit, &l)), "layout");
    return l;
  }
  Span acquire(uint32_t unit, uint32_t purpose) {
    DLTensor t{};
    require(outcome(table_->acquire(instance_, unit, purpose, &t)), "acquire");
    return span_of(t);
  }
  Outcome try_release(uint32_t unit, uint32_t purpose) { return outcome(table_->release(instance_, unit, purpose)); }
  void release(uint32_t unit, uint32_t purpose) { require(try_release(unit, purpose), "release"); }
  void prefetch(uint32_t unit, uint32_t purpose) {
    require(outcome(table_->prefetch(instance_, unit, purpose)), "prefetch");
  }
  void begin_step() { require(outcome(table_->begin_step(instance_)), "begin_step"); }
  Span grads(uint32_t unit) {
    DLTensor t{};
    require(outcome(table_->grads(instance_, unit, &t)), "grads");
    return span_of(t);
  }
  Outcome try_grads_ready(uint32_t unit, bool last) {
    return outcome(table_->grads_ready(instance_, unit, last ? 1 : 0));
  }
  void grads_ready(uint32_t unit, bool last) { require(try_grads_ready(unit, last), "grads_ready"); }
  Outcome try_finish_grads() { return outcome(table_->finish_grads(instance_)); }
  void finish_grads() { require(try_finish_grads(), "finish_grads"); }
  std::pair<Span, Span> shard(uint32_t unit) {
    DLTensor v{}, g{};
    require(outcome(table_->shard(instance_, unit, &v, &g)), "shard");
    return {span_of(v), span_of(g)};
  }
  void after_update() { require(outcome(table_->after_update(instance_)), "after_update"); }
  void gather(uint32_t unit, std::vector<float>& shard_part, std::vector<float>& full) {
    int64_t s_shape = static_cast<int64_t>(shard_part.size()), f_shape = static_cast<int64_t>(full.size());
    DLTensor s{shard_part.data(), {kDLCPU, 0}, 1, plx_dtype_f32(), &s_shape, nullptr, 0};
    DLTensor f{full.data(), {kDLCPU, 0}, 1, plx_dtype_f32(), &f_shape, nullptr, 0};
    require(outcome(table_->gather(instance_, unit, &s, &f)), "gather");
  }
  plx_dp_memory memory() const {
    plx_dp_memory m{};
    m.struct_size = sizeof(m);
    require(outcome(table_->memory(instance_, &m)), "memory");
    return m;
  }
  const plx_data_parallel_v1& table() const { return *table_; }
  void* instance() const { return instance_; }

 private:
  const plx_data_parallel_v1* table_;
  void* instance_ = nullptr;
};

inline const std::vector<std::string>& all_strategies() {
  static const std::vector<std::string> names = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
  return names;
}
inline std::string options_for(const std::string& strategy, bool prefetch = true) {
  return std::string("{\"strategy\": \"") + strategy + "\", \"prefetch\": " + (prefetch ? "true" : "false") + "}";
}

}  // namespace plexus::test::fsdp
