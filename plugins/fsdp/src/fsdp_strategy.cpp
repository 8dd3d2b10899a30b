#include "fsdp_strategy.hpp"

#include <string>

#include "device_ops.hpp"
#include "layout.hpp"
#include "plexus/cpp/host.hpp"
#include "plexus/cpp/tensor.hpp"

namespace fsdp {

namespace {

using plexus::sdk::check_host;
using plexus::sdk::Error;
using plexus::sdk::Host;

const char* purpose_name(uint32_t purpose) noexcept {
  switch (purpose) {
    case PLX_DP_FORWARD: return "FORWARD";
    case PLX_DP_BACKWARD: return "BACKWARD";
    case PLX_DP_READ: return "READ";
    case PLX_DP_WRITE: return "WRITE";
  }
  return "?";
}

void expect_purpose(uint32_t purpose) {
  if (purpose > PLX_DP_WRITE)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "purpose " + std::to_string(purpose) +
                                              " is not one of PLX_DP_FORWARD, BACKWARD, READ or WRITE");
}

std::string quoted(const Unit& u) { return "unit '" + u.name + "'"; }

const plx_host_api& api() { return *Host::current().api(); }

// Reads a unit's description, taking only the fields inside the caller's struct_size.
Unit describe(const plx_dp_unit_desc* desc, uint32_t index, Strategy strategy) {
  if (desc == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "unit " + std::to_string(index) + ": null description");
  if (!PLX_HAS_FIELD(desc, plx_dp_unit_desc, device))
    throw Error(PLX_ERR_INVALID_ARGUMENT, "unit " + std::to_string(index) + ": description too small (struct_size " +
                                              std::to_string(desc->struct_size) + ")");
  Unit u;
  u.name = desc->name != nullptr ? std::string(desc->name) : std::string("unit ").append(std::to_string(index));
  if (desc->group == nullptr || desc->group[0] == '\0')
    throw Error(PLX_ERR_INVALID_ARGUMENT, quoted(u) + ": no group named for its gradients");
  u.group_name = desc->group;
  if (desc->numel <= 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT, quoted(u) + ": numel " + std::to_string(desc->numel) +
                                              " (a unit holds at least one element)");
  if (!plx_dtype_equal(desc->dtype, plx_dtype_f32()))
    throw Error(PLX_ERR_UNSUPPORTED, quoted(u) + ": dtype " + plexus::sdk::dtype_name(desc->dtype) +
                                         "; the fsdp strategies hold float32 values and gradients");
  u.device = desc->device;
  expect_supported_device(u.device, quoted(u));
  u.grad_scale = PLX_HAS_FIELD(desc, plx_dp_unit_desc, grad_scale) ? desc->grad_scale : 1.0;
  if (!(u.grad_scale > 0))
    throw Error(PLX_ERR_INVALID_ARGUMENT, quoted(u) + ": grad_scale " + std::to_string(u.grad_scale) +
                                              " (expected a positive factor)");
  u.mode = (desc->flags & PLX_DP_UNIT_REPLICATED) != 0 ? Strategy::no_shard : strategy;
  const plx_host_api& host = api();
  if (host.group_get(host.ctx, u.group_name.c_str(), &u.group) != PLX_OK || u.group == nullptr)
    throw Error(PLX_ERR_NOT_FOUND, quoted(u) + ": the topology has no group '" + u.group_name +
                                       "' to average its gradients over");
  check_host(host.group_rank(host.ctx, u.group, &u.rank, &u.size));
  u.layout = plan_layout(u.mode, desc->numel, u.rank, u.size);
  return u;
}

// The persistent buffers of each strategy (README.md, "What each strategy keeps").
void allocate_persistent(Unit& u, Ledger& ledger) {
  const int64_t padded = u.layout.padded_numel, shard = u.layout.shard_numel;
  if (u.mode != Strategy::optim_grads_params) u.values = Buffer(u.device, padded, Holds::values, ledger);
  if (u.mode == Strategy::optim_grads_params) u.value_shard = Buffer(u.device, shard, Holds::values, ledger);
  if (u.mode == Strategy::no_shard || u.mode == Strategy::optim) u.grads = Buffer(u.device, padded, Holds::grads, ledger);
  if (u.mode != Strategy::no_shard) u.grad_shard = Buffer(u.device, shard, Holds::grads, ledger);
}

void expect_flat(const DLTensor& t, const Unit& u, int64_t numel, const std::string& what) {
  plexus::sdk::expect_tensor(t, u.device, plx_dtype_f32(), {numel}, what + " of " + quoted(u));
}

}  // namespace

FsdpStrategy::FsdpStrategy(plx_config config, const plx_dp_setup& setup) : options_(read_options(config)) {
  if (setup.num_units > 0 && setup.units == nullptr)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "setup lists " + std::to_string(setup.num_units) + " units but no array");
  units_.reserve(setup.num_units);
  for (uint32_t i = 0; i < setup.num_units; ++i) {
    units_.push_back(std::make_unique<Unit>(describe(setup.units[i], i, options_.strategy)));
    allocate_persistent(*units_.back(), ledger_);
  }
}

Unit& FsdpStrategy::at(uint32_t unit) const {
  if (unit >= units_.size())
    throw Error(PLX_ERR_INVALID_ARGUMENT, "unit " + std::to_string(unit) + " is out of range (the strategy has " +
                                              std::to_string(units_.size()) + " units)");
  return *units_[unit];
}

plx_dp_layout FsdpStrategy::layout(uint32_t unit) const { return at(unit).layout; }

void FsdpStrategy::start_gather(Unit& u) {
  u.values = Buffer(u.device, u.layout.padded_numel, Holds::values, ledger_);
  int64_t send_shape = 0, recv_shape = 0;
  const DLTensor send = flat_view(u.value_shard.data(), 0, u.layout.shard_numel, u.device, &send_shape);
  DLTensor recv = flat_view(u.values.data(), 0, u.layout.padded_numel, u.device, &recv_shape);
  plx_request request = nullptr;
  const plx_host_api& host = api();
  const plx_status s = host.all_gather(host.ctx, u.group, &send, &recv, nullptr, &request);
  if (s != PLX_OK) {
    u.values.reset();
    check_host(s);
  }
  u.gathering = InFlight(request);
}

void FsdpStrategy::acquire(uint32_t unit, uint32_t purpose, DLTensor& out_values) {
  Unit& u = at(unit);
  expect_purpose(purpose);
  if (u.mode == Strategy::optim_grads_params) {
    if (purpose == PLX_DP_WRITE || u.held[PLX_DP_WRITE] > 0) {
      // A write replaces the values whole: overlapping it with any other use would lose one.
      if (u.held_total() > 0)
        throw Error(PLX_ERR_INVALID_ARGUMENT, "acquire(" + std::string(purpose_name(purpose)) + ") of " +
                                                  quoted(u) + " while it is acquired" +
                                                  (u.held[PLX_DP_WRITE] > 0 ? " for WRITE" : "") +
                                                  " (a WRITE is never overlapped with another acquire)");
      u.gathering.wait();  // a prefetch's copy would be stale once written: freed first
      u.values.reset();
      u.values = Buffer(u.device, u.layout.padded_numel, Holds::values, ledger_);
    } else {
      if (!u.values) start_gather(u);
      u.gathering.wait();
    }
  }
  ++u.held[purpose];
  out_values = flat_view(u.values.data(), 0, u.layout.padded_numel, u.device, &u.values_shape);
}

void FsdpStrategy::release(uint32_t unit, uint32_t purpose) {
  Unit& u = at(unit);
  expect_purpose(purpose);
  if (u.held[purpose] == 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "release(" + std::string(purpose_name(purpose)) + ") of " + quoted(u) +
                                              " without an acquire for " + purpose_name(purpose));
  --u.held[purpose];
  if (u.mode != Strategy::optim_grads_params) return;
  if (purpose == PLX_DP_WRITE) {
    copy_elements(u.device, u.value_shard.data(), u.values.data() + u.layout.shard_offset, u.layout.shard_numel);
    u.values.reset();
  } else if (u.held_total() == 0) {
    u.values.reset();
  }
}

void FsdpStrategy::prefetch(uint32_t unit, uint32_t purpose) {
  Unit& u = at(unit);
  expect_purpose(purpose);
  if (!options_.prefetch || u.mode != Strategy::optim_grads_params || purpose == PLX_DP_WRITE) return;
  if (u.held[PLX_DP_WRITE] > 0 || u.values) return;  // being written, gathered, or being gathered
  start_gather(u);
}

// ZeRO-2/3: the reduce-scatter done, its part is added into the shard gradient and the whole
// buffer it read is freed.
void FsdpStrategy::fold_reduction(Unit& u) {
  if (!u.folding) return;
  u.reducing.wait();
  if (u.reduced) {
    add_elements(u.device, u.grad_shard.data(), u.reduced.data(), u.layout.shard_numel);
    u.reduced.reset();
  }
  u.grads.reset();
  u.folding = false;
}

void FsdpStrategy::complete_reduction(Unit& u) {
  if (u.sharded_grads())
    fold_reduction(u);
  else
    u.reducing.wait();
}

void FsdpStrategy::begin_step() {
  reducing_.clear();
  for (auto& p : units_) {
    Unit& u = *p;
    complete_reduction(u);
    if (u.sharded_grads()) u.grads.reset();
    if (u.grads) zero_elements(u.device, u.grads.data(), u.grads.numel());
    if (u.grad_shard) zero_elements(u.device, u.grad_shard.data(), u.grad_shard.numel());
    u.contributed = false;
    u.last_seen = false;
    u.touched = false;
    u.folding = false;
    u.shard_zero = true;
  }
}

void FsdpStrategy::grads(uint32_t unit, DLTensor& out_grads) {
  Unit& u = at(unit);
  if (u.last_seen)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "grads of " + quoted(u) +
                                              " after its last grads_ready of the step (begin_step starts the next)");
  if (u.sharded_grads()) {
    if (u.reducing.pending()) fold_reduction(u);  // its buffer is being read: a new one is needed
    if (!u.grads) u.grads = Buffer(u.device, u.layout.padded_numel, Holds::grads, ledger_);
  }
  u.contributed = true;
  u.touched = true;
  out_grads = flat_view(u.grads.data(), 0, u.layout.padded_numel, u.device, &u.grads_shape);
}

void FsdpStrategy::grads_ready(uint32_t unit, bool last) {
  Unit& u = at(unit);
  if (u.last_seen)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "grads_ready of " + quoted(u) + " after its last grads_ready of the step (begin_step starts the next)");
  const bool start = u.sharded_grads() ? (u.grads && !u.reducing.pending()) : last;
  if (start) {
    const plx_host_api& host = api();
    int64_t send_shape = 0, recv_shape = 0;
    DLTensor send = flat_view(u.grads.data(), 0, u.layout.padded_numel, u.device, &send_shape);
    plx_request request = nullptr;
    if (u.mode == Strategy::no_shard) {
      check_host(host.all_reduce(host.ctx, u.group, &send, &send, PLX_REDUCE_AVG, nullptr, &request));
    } else {
      Buffer* target = &u.grad_shard;
      // ZeRO-2/3 add each reduction into the shard; the step's first goes straight into it.
      if (u.sharded_grads() && !u.shard_zero) {
        u.reduced = Buffer(u.device, u.layout.shard_numel, Holds::grads, ledger_);
        target = &u.reduced;
      }
      if (u.sharded_grads()) {
        u.shard_zero = false;
        u.folding = true;
      }
      DLTensor recv = flat_view(target->data(), 0, u.layout.shard_numel, u.device, &recv_shape);
      check_host(host.reduce_scatter(host.ctx, u.group, &send, &recv, PLX_REDUCE_AVG, nullptr, &request));
    }
    u.reducing = InFlight(request);
    if (u.sharded_grads()) {
      // Bounded: older reductions are completed (usually done by now) before backward goes on.
      std::erase(reducing_, &u);
      reducing_.push_back(&u);
      while (reducing_.size() > 1) {
        fold_reduction(*reducing_.front());
        reducing_.pop_front();
      }
    }
  }
  u.contributed = false;
  u.last_seen = last;
}

void FsdpStrategy::finish_grads() {
  for (auto& p : units_) complete_reduction(*p);
  reducing_.clear();
  for (auto& p : units_) {
    Unit& u = *p;
    if (u.contributed || (u.sharded_grads() && u.grads))
      throw Error(PLX_ERR_INVALID_ARGUMENT, "the gradients of " + quoted(u) +
                                                " were handed out by grads but never marked ready (grads_ready)");
    // no_shard and optim reduce only at the last grads_ready: without it nothing was averaged.
    if (!u.sharded_grads() && u.touched && !u.last_seen)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "the gradients of " + quoted(u) +
                                                " were never marked the step's last (grads_ready with last != 0), "
                                                "so they were never averaged");
    if (u.grad_scale == 1.0) continue;
    if (u.mode == Strategy::no_shard)
      scale_elements(u.device, u.grads.data(), u.grad_scale, u.layout.padded_numel);
    else
      scale_elements(u.device, u.grad_shard.data(), u.grad_scale, u.layout.shard_numel);
  }
}

void FsdpStrategy::shard(uint32_t unit, DLTensor& out_values, DLTensor& out_grads) {
  Unit& u = at(unit);
  if (u.reducing.pending())
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "shard of " + quoted(u) + " while its gradient reduction is in flight (call finish_grads first)");
  const int64_t n = u.layout.shard_numel;
  if (u.mode == Strategy::no_shard) {
    out_values = flat_view(u.values.data(), 0, n, u.device, &u.shard_values_shape);
    out_grads = flat_view(u.grads.data(), 0, n, u.device, &u.shard_grads_shape);
    return;
  }
  out_values = u.mode == Strategy::optim_grads_params
                   ? flat_view(u.value_shard.data(), 0, n, u.device, &u.shard_values_shape)
                   : flat_view(u.values.data(), u.layout.shard_offset, n, u.device, &u.shard_values_shape);
  out_grads = flat_view(u.grad_shard.data(), 0, n, u.device, &u.shard_grads_shape);
}

void FsdpStrategy::after_update() {
  // ZeRO-1/2 keep whole values: each unit's shard is all-gathered back into them. all_gather is
  // not in place, so each rank's shard goes from a copy; two gathers are in flight at a time (the
  // next starts before the previous is waited on), so the copies alive are two units' shards, not
  // every unit's.
  struct Started {
    Buffer send;
    InFlight request;
  };
  std::deque<Started> started;
  const plx_host_api& host = api();
  for (auto& p : units_) {
    Unit& u = *p;
    if (u.mode != Strategy::optim && u.mode != Strategy::optim_grads) continue;
    const int64_t n = u.layout.shard_numel;
    Started s{Buffer(u.device, n, Holds::values, ledger_), InFlight()};
    copy_elements(u.device, s.send.data(), u.values.data() + u.layout.shard_offset, n);
    int64_t send_shape = 0, recv_shape = 0;
    const DLTensor send = flat_view(s.send.data(), 0, n, u.device, &send_shape);
    DLTensor recv = flat_view(u.values.data(), 0, u.layout.padded_numel, u.device, &recv_shape);
    plx_request request = nullptr;
    check_host(host.all_gather(host.ctx, u.group, &send, &recv, nullptr, &request));
    s.request = InFlight(request);
    started.push_back(std::move(s));
    if (started.size() > 2) {
      started.front().request.wait();
      started.pop_front();
    }
  }
  for (Started& s : started) s.request.wait();
}

void FsdpStrategy::gather(uint32_t unit, const DLTensor& shard_part, DLTensor& full) {
  Unit& u = at(unit);
  expect_flat(shard_part, u, u.layout.shard_numel, "the shard to gather");
  expect_flat(full, u, u.layout.padded_numel, "the gathered tensor");
  if (u.mode == Strategy::no_shard) {
    copy_elements(u.device, plexus::sdk::data_as<float>(full), plexus::sdk::data_as<float>(shard_part),
                  u.layout.padded_numel);
    return;
  }
  const plx_host_api& host = api();
  check_host(host.all_gather(host.ctx, u.group, &shard_part, &full, nullptr, nullptr));
}

}  // namespace fsdp
