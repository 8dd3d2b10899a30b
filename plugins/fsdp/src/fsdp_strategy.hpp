// The fsdp component: one data-parallel strategy object per run, holding every unit's buffers
// and the communications in flight over each unit's group (plexus/data_parallel.h is the
// contract; README.md says what each strategy keeps and when it communicates).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "buffers.hpp"
#include "options.hpp"
#include "plexus/data_parallel.h"

namespace fsdp {

// One unit and what its strategy holds for it.
struct Unit {
  std::string name;
  std::string group_name;
  plx_group group = nullptr;
  int32_t rank = 0;
  int32_t size = 1;
  Strategy mode = Strategy::no_shard;  // no_shard for a replicated unit, whatever the strategy
  DLDevice device{kDLCPU, 0};
  double grad_scale = 1.0;
  plx_dp_layout layout{};

  Buffer values;       // whole values [padded]: persistent, or ZeRO-3's gathered / written copy
  Buffer value_shard;  // ZeRO-3: this rank's values [shard], the only persistent ones
  Buffer grads;        // whole gradients [padded]: persistent (no_shard, optim) or until reduced
  Buffer grad_shard;   // the sharded strategies' shard gradient [shard]
  Buffer reduced;      // ZeRO-2/3: a reduce-scatter's result, added into grad_shard when done
  // Declared after the buffers they write into, so they are completed before those are freed.
  InFlight gathering;  // ZeRO-3: the all-gather into `values`
  InFlight reducing;   // the gradient reduction in flight

  std::array<uint32_t, 4> held{};  // acquires not yet released, by purpose
  bool contributed = false;        // grads() handed out since the last reduction started
  bool last_seen = false;          // grads_ready(last) came this step
  bool touched = false;            // grads() handed out this step
  bool folding = false;            // ZeRO-2/3: a reduce-scatter started and not yet folded in
  bool shard_zero = true;          // ZeRO-2/3: the shard gradient is still zero this step

  // Shapes of the views handed out (a view's shape must outlive it).
  int64_t values_shape = 0, grads_shape = 0, shard_values_shape = 0, shard_grads_shape = 0;

  uint32_t held_total() const noexcept { return held[0] + held[1] + held[2] + held[3]; }
  bool sharded_grads() const noexcept { return mode == Strategy::optim_grads || mode == Strategy::optim_grads_params; }
};

class FsdpStrategy {
 public:
  FsdpStrategy(plx_config config, const plx_dp_setup& setup);

  plx_dp_layout layout(uint32_t unit) const;
  void acquire(uint32_t unit, uint32_t purpose, DLTensor& out_values);
  void release(uint32_t unit, uint32_t purpose);
  void prefetch(uint32_t unit, uint32_t purpose);
  void begin_step();
  void grads(uint32_t unit, DLTensor& out_grads);
  void grads_ready(uint32_t unit, bool last);
  void finish_grads();
  void shard(uint32_t unit, DLTensor& out_values, DLTensor& out_grads);
  void after_update();
  void gather(uint32_t unit, const DLTensor& shard_part, DLTensor& full);
  plx_dp_memory memory() const { return ledger_.snapshot(); }

 private:
  Unit& at(uint32_t unit) const;
  void start_gather(Unit& u);
  void fold_reduction(Unit& u);
  void complete_reduction(Unit& u);

  Options options_;
  // The ledger outlives every buffer it counts (declared first, destroyed last).
  Ledger ledger_;
  std::vector<std::unique_ptr<Unit>> units_;
  // ZeRO-2/3: the units whose reduce-scatter is in flight, oldest first. At most two at once, so
  // the whole gradient buffers alive during backward are the unit computing and the one reducing.
  std::deque<Unit*> reducing_;
};

}  // namespace fsdp
