#include "plexus/core/components.hpp"

namespace plexus {

SchedulerInstance::SchedulerInstance(const Component& component, plx_config config)
    : component_(&component), table_(&component.as<plx_scheduler_v1>()) {
  if (component.kind != PLX_KIND_SCHEDULER)
    throw ComponentCallError(PLX_ERR_INVALID_ARGUMENT, "component '" + component.name + "' is a " +
                                                           kind_name(component.kind) + ", not a scheduler");
  HostServices::clear_last_error();
  check_call(component, "create", table_->create(config, &scheduler_));
}

SchedulerInstance::~SchedulerInstance() {
  if (scheduler_ != nullptr) table_->destroy(scheduler_);
}

void SchedulerInstance::run_step(const plx_schedule_env& env) const {
  check_call(*component_, "run_step", table_->run_step(scheduler_, &env));
}

}  // namespace plexus
