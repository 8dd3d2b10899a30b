// The two residencies of engine/parameter_residency.hpp: whole values, and values held by a
// data-parallel strategy over FSDP units.
#include "engine/parameter_residency.hpp"

#include "engine/sharded_parameters.hpp"

namespace plexus {
namespace {

class WholeResidency final : public ParameterResidency {
 public:
  explicit WholeResidency(ParameterStore& store) : store_(store) {}
  Ledger start_microbatch() const override { return {}; }
  void acquire_for_forward(std::size_t, StepProfile*) override {}
  void release_after_forward(std::size_t) override {}
  void acquire_for_backward(std::size_t, StepProfile*) override {}
  void gradients_complete(Ledger&, std::size_t, StepProfile*) override {}
  void write_each(const std::function<void(std::size_t)>& write) override {
    for (std::size_t p = 0; p < store_.size(); ++p) write(p);
  }
  ShardedParameters* sharded() noexcept override { return nullptr; }

 private:
  ParameterStore& store_;
};

// An FSDP unit's whole values exist from its first model unit's first forward stage to its last
// unit's last one, and from its last unit's first backward stage until the unit's gradients are
// handed over; the next unit's gather is started (prefetched) as one begins. Its gradients go to
// the strategy once every one of its model units has completed its microbatch's contribution (its
// first unit's backward runs last, but a weight gradient split off may come later still).
class ShardedResidency final : public ParameterResidency {
 public:
  ShardedResidency(ParameterStore& store, const std::vector<FsdpUnit>& units, std::size_t num_units,
                   const Component& strategy, plx_config options, const distributed::Runtime& runtime,
                   DLDevice device)
      : fsdp_of_(num_units, 0), first_(num_units, false), last_(num_units, false) {
    std::vector<ShardedParameters::UnitSpec> specs;
    for (std::size_t f = 0; f < units.size(); ++f) {
      const FsdpUnit& unit = units[f];
      for (std::size_t u = unit.first_unit; u <= unit.last_unit; ++u) fsdp_of_[u] = f;
      first_[unit.first_unit] = true;
      last_[unit.last_unit] = true;
      size_.push_back(static_cast<uint32_t>(unit.last_unit - unit.first_unit + 1));
      specs.push_back({unit.name, unit.params});
    }
    sharded_ = std::make_unique<ShardedParameters>(store, specs, strategy, options, runtime, device);
  }

  Ledger start_microbatch() const override { return size_; }

  void acquire_for_forward(std::size_t unit, StepProfile* profile) override {
    if (!first_[unit]) return;
    const StepProfile::Scope gather(profile, "parameter gather (wait)", StepProfile::Phase::forward);
    const std::size_t f = fsdp_of_[unit];
    sharded_->begin_forward(f);
    if (f + 1 < sharded_->num_units()) sharded_->prefetch_forward(f + 1);
  }
  void release_after_forward(std::size_t unit) override {
    if (last_[unit]) sharded_->end_forward(fsdp_of_[unit]);
  }
  void acquire_for_backward(std::size_t unit, StepProfile* profile) override {
    if (!last_[unit]) return;
    const StepProfile::Scope gather(profile, "parameter gather (wait)", StepProfile::Phase::backward);
    const std::size_t f = fsdp_of_[unit];
    sharded_->begin_backward(f);
    if (f > 0) sharded_->prefetch_backward(f - 1);
  }
  void gradients_complete(Ledger& ledger, std::size_t unit, StepProfile* profile) override {
    const std::size_t f = fsdp_of_[unit];
    if (--ledger[f] > 0) return;
    const StepProfile::Scope reduce(profile, "gradient reduction (start)", StepProfile::Phase::backward);
    sharded_->end_backward(f);
  }

  // Every value is a function of (seed, name) or of what is loaded, so each rank writes each unit
  // whole and keeps its part: the same values as one process, with one unit whole at a time.
  // Buffers (PLX_PARAM_BUFFER) stay whole in the store.
  void write_each(const std::function<void(std::size_t)>& write) override {
    ParameterStore& store = sharded_->store();
    for (std::size_t p = 0; p < store.size(); ++p)
      if (store[p].is_buffer()) write(p);
    for (std::size_t f = 0; f < sharded_->num_units(); ++f) {
      sharded_->begin_write(f);
      for (const ShardedParameters::Buffer& b : sharded_->buffers())
        if (b.fsdp == f)
          for (std::size_t p : b.params) write(p);
      sharded_->end_write(f);
    }
  }
  ShardedParameters* sharded() noexcept override { return sharded_.get(); }

 private:
  std::unique_ptr<ShardedParameters> sharded_;
  std::vector<std::size_t> fsdp_of_;  // per model unit: its FSDP unit
  std::vector<bool> first_, last_;    // per model unit: the first or last of its FSDP unit
  Ledger size_;                       // per FSDP unit: its model units
};

}  // namespace

std::unique_ptr<ParameterResidency> make_whole_residency(ParameterStore& store) {
  return std::make_unique<WholeResidency>(store);
}

std::unique_ptr<ParameterResidency> make_sharded_residency(
    ParameterStore& store, const std::vector<FsdpUnit>& units, std::size_t num_units,
    const Component& strategy, plx_config options, const distributed::Runtime& runtime, DLDevice device) {
  return std::make_unique<ShardedResidency>(store, units, num_units, strategy, options, runtime, device);
}

}  // namespace plexus
