// Plexus SDK C++ helpers: schedulers, topology providers, fusion backends, stacks and
// data-parallel strategies as classes.
#ifndef PLEXUS_CPP_COMPONENTS_HPP
#define PLEXUS_CPP_COMPONENTS_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plexus/cpp/error.hpp"
#include "plexus/data_parallel.h"
#include "plexus/fusion.h"
#include "plexus/plugin.h"
#include "plexus/scheduler.h"
#include "plexus/stack.h"
#include "plexus/topology.h"

namespace plexus::sdk {

// ---- scheduler: T(plx_config) with void run_step(const plx_schedule_env&) ----
namespace detail {
template <class T>
struct SchedulerTrampolines {
  static plx_status create(plx_config config, void** out) noexcept {
    return guard("create", [&] { *out = std::make_unique<T>(config).release(); });
  }
  static void destroy(void* s) noexcept { std::unique_ptr<T> owned(static_cast<T*>(s)); }
  static plx_status run_step(void* s, const plx_schedule_env* env) noexcept {
    return guard("run_step", [&] { static_cast<T*>(s)->run_step(*env); });
  }
  static inline const plx_scheduler_v1 table = {sizeof(plx_scheduler_v1), 0, &create, &destroy, &run_step};
};
}  // namespace detail

template <class T>
plx_component_desc scheduler_component(const char* name, const char* description,
                                       const char* config_schema = nullptr) {
  return plx_component_desc{sizeof(plx_component_desc), PLX_KIND_SCHEDULER, name, description,
                            config_schema, &detail::SchedulerTrampolines<T>::table};
}

// ---- topology: a function void build(const plx_topology_args&, GroupSink&) ----
class GroupSink {
 public:
  explicit GroupSink(const plx_group_sink& sink) : sink_(sink) {}
  void add(const char* kind, const std::vector<int32_t>& ranks) const {
    check_host(sink_.add_group(sink_.ctx, kind, ranks.data(), static_cast<uint32_t>(ranks.size())));
  }

 private:
  const plx_group_sink& sink_;
};

namespace detail {
template <void (*Build)(const plx_topology_args&, GroupSink&)>
struct TopologyTrampolines {
  static plx_status build(const plx_topology_args* args, const plx_group_sink* sink) noexcept {
    return guard("build", [&] {
      GroupSink s(*sink);
      Build(*args, s);
    });
  }
  static inline const plx_topology_v1 table = {sizeof(plx_topology_v1), 0, &build};
};
}  // namespace detail

template <void (*Build)(const plx_topology_args&, GroupSink&)>
plx_component_desc topology_component(const char* name, const char* description,
                                      const char* config_schema = nullptr) {
  return plx_component_desc{sizeof(plx_component_desc), PLX_KIND_TOPOLOGY, name, description,
                            config_schema, &detail::TopologyTrampolines<Build>::table};
}

// ---- fusion backend: the family table is C; T(const plx_fusion_create_args&) is the instance ----
namespace detail {
template <class T>
struct FusionTrampolines {
  static plx_status create(const plx_fusion_create_args* args, void** out) noexcept {
    return guard("create", [&] { *out = std::make_unique<T>(*args).release(); });
  }
  static void destroy(void* instance) noexcept { std::unique_ptr<T> owned(static_cast<T*>(instance)); }
};
}  // namespace detail

template <class T>
plx_fusion_backend_v1 fusion_backend(const char* family, uint32_t family_version,
                                     uint64_t device_mask, const void* family_table) {
  return plx_fusion_backend_v1{sizeof(plx_fusion_backend_v1), family_version, family, device_mask,
                               family_table, &detail::FusionTrampolines<T>::create,
                               &detail::FusionTrampolines<T>::destroy};
}

inline plx_component_desc fusion_component(const char* name, const char* description,
                                           const plx_fusion_backend_v1* backend,
                                           const char* config_schema = nullptr) {
  return plx_component_desc{sizeof(plx_component_desc), PLX_KIND_FUSION_BACKEND, name, description,
                            config_schema, backend};
}

// ---- stack: T(const plx_stack_create_args&) with const plx_stack_description& describe() const ----
namespace detail {
template <class T>
struct StackTrampolines {
  static plx_status create(const plx_stack_create_args* args, void** out) noexcept {
    return guard("create", [&] { *out = std::make_unique<T>(*args).release(); });
  }
  static void destroy(void* s) noexcept { std::unique_ptr<T> owned(static_cast<T*>(s)); }
  static plx_status describe(void* s, const plx_stack_description** out) noexcept {
    return guard("describe", [&] { *out = &static_cast<const T*>(s)->describe(); });
  }
  static inline const plx_stack_v1 table = {sizeof(plx_stack_v1), 0, &create, &destroy, &describe};
};
}  // namespace detail

// model_schema: the keys the stack adds to the run config's "model" section (plx_component_desc's
// model_schema, ABI 1.6), e.g. the sections its layers are configured in.
template <class T>
plx_component_desc stack_component(const char* name, const char* description,
                                   const char* config_schema = nullptr, const char* model_schema = nullptr) {
  return plx_component_desc{
      sizeof(plx_component_desc),          PLX_KIND_STACK, name, description, config_schema,
      &detail::StackTrampolines<T>::table, model_schema};
}

// ---- data-parallel strategy: T(plx_config, const plx_dp_setup&) with one method per table entry ----
// T provides: layout(uint32_t unit) -> plx_dp_layout; acquire(unit, purpose, DLTensor&);
// release(unit, purpose); prefetch(unit, purpose); begin_step(); grads(unit, DLTensor&);
// grads_ready(unit, bool last); finish_grads(); shard(unit, DLTensor& values, DLTensor& grads);
// after_update(); gather(unit, const DLTensor& shard, DLTensor& full); memory() -> plx_dp_memory.
namespace detail {
template <class T>
struct DataParallelTrampolines {
  static T& self(void* s) { return *static_cast<T*>(s); }
  template <class Out>
  static Out& out(Out* p) {
    if (p == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null output");
    return *p;
  }
  static plx_status create(plx_config config, const plx_dp_setup* setup, void** out_strategy) noexcept {
    return guard("create", [&] {
      if (setup == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null setup");
      out(out_strategy) = std::make_unique<T>(config, *setup).release();
    });
  }
  static void destroy(void* s) noexcept { std::unique_ptr<T> owned(static_cast<T*>(s)); }
  static plx_status layout(void* s, uint32_t unit, plx_dp_layout* o) noexcept {
    return guard("layout", [&] { write_out(o, self(s).layout(unit)); });
  }
  static plx_status acquire(void* s, uint32_t unit, uint32_t purpose, DLTensor* values) noexcept {
    return guard("acquire", [&] { self(s).acquire(unit, purpose, out(values)); });
  }
  static plx_status release(void* s, uint32_t unit, uint32_t purpose) noexcept {
    return guard("release", [&] { self(s).release(unit, purpose); });
  }
  static plx_status prefetch(void* s, uint32_t unit, uint32_t purpose) noexcept {
    return guard("prefetch", [&] { self(s).prefetch(unit, purpose); });
  }
  static plx_status begin_step(void* s) noexcept {
    return guard("begin_step", [&] { self(s).begin_step(); });
  }
  static plx_status grads(void* s, uint32_t unit, DLTensor* g) noexcept {
    return guard("grads", [&] { self(s).grads(unit, out(g)); });
  }
  static plx_status grads_ready(void* s, uint32_t unit, int32_t last) noexcept {
    return guard("grads_ready", [&] { self(s).grads_ready(unit, last != 0); });
  }
  static plx_status finish_grads(void* s) noexcept {
    return guard("finish_grads", [&] { self(s).finish_grads(); });
  }
  static plx_status shard(void* s, uint32_t unit, DLTensor* values, DLTensor* g) noexcept {
    return guard("shard", [&] { self(s).shard(unit, out(values), out(g)); });
  }
  static plx_status after_update(void* s) noexcept {
    return guard("after_update", [&] { self(s).after_update(); });
  }
  static plx_status gather(void* s, uint32_t unit, const DLTensor* shard_part, DLTensor* full) noexcept {
    return guard("gather", [&] {
      if (shard_part == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null shard tensor");
      self(s).gather(unit, *shard_part, out(full));
    });
  }
  static plx_status memory(void* s, plx_dp_memory* o) noexcept {
    return guard("memory", [&] { write_out(o, self(s).memory()); });
  }
  static inline const plx_data_parallel_v1 table = {
      sizeof(plx_data_parallel_v1), 0, &create, &destroy, &layout, &acquire, &release, &prefetch, &begin_step,
      &grads, &grads_ready, &finish_grads, &shard, &after_update, &gather, &memory};
};
}  // namespace detail

template <class T>
plx_component_desc data_parallel_component(const char* name, const char* description,
                                           const char* config_schema = nullptr) {
  return plx_component_desc{sizeof(plx_component_desc), PLX_KIND_DATA_PARALLEL, name, description, config_schema,
                            &detail::DataParallelTrampolines<T>::table};
}

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_COMPONENTS_HPP
