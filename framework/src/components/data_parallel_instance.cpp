#include "plexus/core/components.hpp"

namespace plexus {

DataParallelInstance::DataParallelInstance(const Component& component, plx_config config, const plx_dp_setup& setup)
    : component_(&component), table_(&component.as<plx_data_parallel_v1>()) {
  if (component.kind != PLX_KIND_DATA_PARALLEL)
    throw ComponentCallError(PLX_ERR_INVALID_ARGUMENT, "component '" + component.name + "' is a " +
                                                           kind_name(component.kind) +
                                                           ", not a data-parallel strategy");
  HostServices::clear_last_error();
  check_call(component, "create", table_->create(config, &setup, &strategy_));
}

DataParallelInstance::~DataParallelInstance() {
  if (strategy_ != nullptr) table_->destroy(strategy_);
}

plx_dp_layout DataParallelInstance::layout(uint32_t unit) const {
  plx_dp_layout out{};
  out.struct_size = sizeof(out);
  check_call(*component_, "layout", table_->layout(strategy_, unit, &out));
  return out;
}

DLTensor DataParallelInstance::acquire(uint32_t unit, uint32_t purpose) const {
  DLTensor out{};
  check_call(*component_, "acquire", table_->acquire(strategy_, unit, purpose, &out));
  return out;
}

void DataParallelInstance::release(uint32_t unit, uint32_t purpose) const {
  check_call(*component_, "release", table_->release(strategy_, unit, purpose));
}

void DataParallelInstance::prefetch(uint32_t unit, uint32_t purpose) const {
  check_call(*component_, "prefetch", table_->prefetch(strategy_, unit, purpose));
}

void DataParallelInstance::begin_step() const {
  check_call(*component_, "begin_step", table_->begin_step(strategy_));
}

DLTensor DataParallelInstance::grads(uint32_t unit) const {
  DLTensor out{};
  check_call(*component_, "grads", table_->grads(strategy_, unit, &out));
  return out;
}

void DataParallelInstance::grads_ready(uint32_t unit, bool last) const {
  check_call(*component_, "grads_ready", table_->grads_ready(strategy_, unit, last ? 1 : 0));
}

void DataParallelInstance::finish_grads() const {
  check_call(*component_, "finish_grads", table_->finish_grads(strategy_));
}

DataParallelInstance::Shard DataParallelInstance::shard(uint32_t unit) const {
  Shard out;
  check_call(*component_, "shard", table_->shard(strategy_, unit, &out.values, &out.grads));
  return out;
}

void DataParallelInstance::after_update() const {
  check_call(*component_, "after_update", table_->after_update(strategy_));
}

void DataParallelInstance::gather(uint32_t unit, const DLTensor& shard, DLTensor& full) const {
  check_call(*component_, "gather", table_->gather(strategy_, unit, &shard, &full));
}

plx_dp_memory DataParallelInstance::memory() const {
  plx_dp_memory out{};
  out.struct_size = sizeof(out);
  check_call(*component_, "memory", table_->memory(strategy_, &out));
  return out;
}

}  // namespace plexus
