// Plexus SDK C++ helpers: schedulers, topology providers and fusion backends as classes.
#ifndef PLEXUS_CPP_COMPONENTS_HPP
#define PLEXUS_CPP_COMPONENTS_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plexus/cpp/error.hpp"
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

template <class T>
plx_component_desc stack_component(const char* name, const char* description, const char* config_schema = nullptr) {
  return plx_component_desc{sizeof(plx_component_desc), PLX_KIND_STACK, name, description, config_schema,
                            &detail::StackTrampolines<T>::table};
}

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_COMPONENTS_HPP
