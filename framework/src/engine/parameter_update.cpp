// The two updates of engine/parameter_update.hpp.
#include "engine/parameter_update.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/device_ops.hpp"
#include "engine/sharded_adamw.hpp"
#include "engine/sharded_parameters.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/logging.hpp"

namespace plexus {
namespace {

// The parameter's part of a whole unit-laid-out tensor.
Tensor part_of(const Tensor& whole, int64_t offset, const std::vector<int64_t>& shape) {
  return Tensor::borrowed(static_cast<std::byte*>(whole.raw()) + offset * static_cast<int64_t>(sizeof(float)),
                          shape, plx_dtype_f32(), whole.device());
}

double over(const distributed::Communicator* group, double value, distributed::ReduceOp op) {
  return group == nullptr ? value : group->all_reduce(value, op);
}

class WholeUpdate final : public ParameterUpdate {
 public:
  WholeUpdate(Model& model, const OptimizerSettings& settings, const UpdateRanks& ranks)
      : model_(model),
        optimizer_(model.parameters(), settings),
        own_groups_(own_group_parameters(model, ranks)) {
    if (ranks.sum_over_ep) optimizer_.set_divided_sum(ranks.sum_over_ep);
    if (ranks.sum_over_tp) optimizer_.set_tensor_parallel_sum(ranks.sum_over_tp);
    if (ranks.sum_over_expert_tp) optimizer_.set_expert_tensor_parallel_sum(ranks.sum_over_expert_tp);
    if (ranks.sum_over_stages)
      optimizer_.set_stage_sum(ranks.ordered_stage_sum, ranks.sum_over_stages, ranks.counted);
  }

  void begin_step(int64_t) override { model_.parameters().zero_grads(); }
  // Without a data-parallel strategy (one dp rank) the gradients of a parameter reduced over a
  // group of its own are still the sums of its ranks' parts: experts divided over ep beside tp,
  // whose other copies (expert_dp) saw the other tp ranks' tokens. What a strategy would average
  // and scale by expert_dp / dp is, at dp 1, their sum.
  void finish_gradients(StepProfile*) override {
    for (const auto& [group, params] : own_groups_) sum_gradients(params, *group);
  }
  void check_gradients_finite() const override { model_.check_gradients_finite(); }
  double apply(int64_t step) override { return optimizer_.step(step); }
  double squared_gradient_norm() const override { return optimizer_.squared_norm(); }
  void apply_with_norm(int64_t step, double norm) override { optimizer_.update(step, norm); }
  double last_lr() const override { return optimizer_.last_lr(); }
  void all_reduce_gradient(std::size_t p, const distributed::Communicator& group) override {
    group.all_reduce(model_.parameters()[p].grad.view(), distributed::ReduceOp::sum);
  }
  void sum_partial_gradients(const distributed::Communicator& tp) override {
    const ParameterStore& params = model_.parameters();
    std::vector<std::size_t> partial;
    for (std::size_t p = 0; p < params.size(); ++p)
      if (params[p].partial_over_tp() && !params[p].is_buffer()) partial.push_back(p);
    sum_gradients(partial, tp);
  }

  // These parameters' gradients packed into one buffer, summed over `group`, and unpacked.
  void sum_gradients(const std::vector<std::size_t>& partial, const distributed::Communicator& group) {
    ParameterStore& params = model_.parameters();
    int64_t total = 0;
    for (std::size_t p : partial) total += params[p].numel();
    if (partial.empty()) return;
    Tensor packed({total}, plx_dtype_f32(), model_.device());
    const auto move = [&](bool in) {
      std::size_t at = 0;
      for (std::size_t p : partial) {
        Tensor& grad = params[p].grad;
        auto* slot = static_cast<std::byte*>(packed.raw()) + at;
        if (in)
          device::copy(slot, packed.device(), grad.raw(), grad.device(), grad.bytes());
        else
          device::copy(grad.raw(), grad.device(), slot, packed.device(), grad.bytes());
        at += grad.bytes();
      }
    };
    move(true);
    group.all_reduce(packed.view(), distributed::ReduceOp::sum);
    move(false);
  }

  Memory memory() const override {
    Memory m;
    const ParameterStore& params = model_.parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      m.parameters += static_cast<double>(params[i].value.bytes());
      m.gradients += static_cast<double>(params[i].grad.bytes());
    }
    m.optimizer = 2 * m.parameters;  // AdamW's two moments
    m.peak_parameters = m.parameters;
    m.peak_gradients = m.gradients;
    m.peak_parameters_and_gradients = m.parameters + m.gradients;
    return m;
  }
  boost::json::object describe() const override { return {{"component", nullptr}}; }
  std::string summary_line() const override { return ""; }

  const Tensor& saved_value(std::size_t p) override { return model_.parameters()[p].value; }
  Tensor saved_moment(std::size_t p, int which) override {
    const Tensor& m = optimizer_.moment(p, which);
    return Tensor::borrowed(m.raw(), m.shape(), m.dtype(), m.device());
  }
  void end_save() override {}
  void load_moments(const std::function<void(std::size_t, int, Tensor&)>& fill) override {
    const ParameterStore& params = model_.parameters();
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (params[p].is_buffer()) continue;  // no moments
      for (int which = 0; which < 2; ++which) fill(p, which, optimizer_.moment(p, which));
    }
  }

 private:
  using OwnGroups = std::vector<std::pair<const distributed::Communicator*, std::vector<std::size_t>>>;
  // The parameters reduced over a group other than dp, by group, where it has more than one rank.
  static OwnGroups own_group_parameters(const Model& model, const UpdateRanks& ranks) {
    OwnGroups out;
    if (ranks.runtime == nullptr) return out;
    const ParameterStore& params = model.parameters();
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (params[p].is_buffer() || params[p].grad_group == "dp") continue;
      const distributed::Communicator* group = ranks.runtime->group(params[p].grad_group);
      if (group == nullptr)
        throw std::runtime_error("parameter " + params[p].name + " (declared by " + params[p].declared_by +
                                 ") asks for its gradient to be reduced over the group \"" +
                                 params[p].grad_group + "\", which the topology did not build");
      if (group->size() <= 1) continue;
      auto found =
          std::find_if(out.begin(), out.end(), [&](const auto& entry) { return entry.first == group; });
      if (found == out.end()) found = out.insert(out.end(), {group, {}});
      found->second.push_back(p);
    }
    return out;
  }

  Model& model_;
  AdamW optimizer_;
  OwnGroups own_groups_;
};

class ShardedUpdate final : public ParameterUpdate {
 public:
  ShardedUpdate(const PluginHost& host, const boost::json::value& run_config, Model& model,
                const distributed::Runtime& runtime, const OptimizerSettings& settings,
                const UpdateRanks& ranks)
      : model_(model), ranks_(ranks) {
    const auto& section = run_config.at("distributed").at("data_parallel");
    component_ = std::string(section.at("component").as_string());
    options_ = section.at("options");
    config_ = std::make_unique<ConfigHandle>(options_, "distributed.data_parallel.options");
    model.shard_parameters(host.get(PLX_KIND_DATA_PARALLEL, component_), config_->get(),
                           section.at("layers_per_unit").to_number<int64_t>(), runtime, ranks.alone);
    sharded_ = model.sharded();
    const distributed::Communicator* dp = ranks.dp;
    std::function<double(double)> sum_over_ep = ranks.sum_over_ep;
    if (!sum_over_ep) sum_over_ep = [](double local) { return local; };
    optimizer_ = std::make_unique<ShardedAdamW>(
        *sharded_, model.parameters(), settings,
        [dp](double local) { return over(dp, local, distributed::ReduceOp::sum); }, sum_over_ep);
    if (ranks.sum_over_stages) optimizer_->set_stage_sum(ranks.sum_over_stages, ranks.counted);
    if (ranks.sum_over_tp) optimizer_->set_tensor_parallel_sum(ranks.sum_over_tp);
    if (ranks.sum_over_expert_tp) optimizer_->set_expert_tensor_parallel_sum(ranks.sum_over_expert_tp);
  }
  ~ShardedUpdate() override {
    try {
      end_save();
    } catch (const std::exception& e) {
      log_warn("trainer", std::string("releasing a unit after a checkpoint: ") + e.what());
    }
  }
  ShardedUpdate(const ShardedUpdate&) = delete;
  ShardedUpdate& operator=(const ShardedUpdate&) = delete;

  void begin_step(int64_t microbatches) override { sharded_->begin_step(microbatches); }
  void finish_gradients(StepProfile* profile) override {
    const StepProfile::Scope timed(profile, "gradient reduction (wait)", StepProfile::Phase::update);
    sharded_->finish_grads();
  }

  // Each rank sees only its shards: every rank learns whether any found one, so all stop together.
  void check_gradients_finite() const override {
    std::string found;
    const auto& buffers = sharded_->buffers();
    for (std::size_t k = 0; k < buffers.size() && found.empty(); ++k) {
      const DataParallelInstance::Shard shard = sharded_->strategy().shard(static_cast<uint32_t>(k));
      for (const ShardedParameters::Segment& s : buffers[k].segments) {
        auto* first = static_cast<std::byte*>(shard.grads.data) + shard.grads.byte_offset +
                      static_cast<std::size_t>(s.shard_begin) * sizeof(float);
        const Tensor part = Tensor::borrowed(first, {s.count}, plx_dtype_f32(), shard.grads.device);
        if (const int64_t bad = device_ops::first_non_finite(part); bad >= 0) {
          found = "non-finite gradient of " + model_.parameters()[s.param].name + " (element " +
                  std::to_string(s.param_begin + bad) + ") in unit " + buffers[k].name;
          break;
        }
      }
    }
    const double any = over(ranks_.dp, found.empty() ? 0.0 : 1.0, distributed::ReduceOp::max);
    if (!found.empty())
      throw NonFiniteError(found + ", on data-parallel rank " + std::to_string(ranks_.dp_rank));
    if (any > 0)
      throw NonFiniteError(
          "non-finite gradient in a shard of another data-parallel rank (its message names the parameter)");
  }
  double apply(int64_t step) override { return optimizer_->step(step); }
  double squared_gradient_norm() const override { return optimizer_->squared_norm(); }
  void apply_with_norm(int64_t step, double norm) override { optimizer_->update(step, norm); }
  double last_lr() const override { return optimizer_->last_lr(); }
  // The parameter is alone in its buffer (Model::shard_parameters keeps it so), whose layout is then
  // the same on every stage holding it: this rank's shard of it is summed elementwise.
  void all_reduce_gradient(std::size_t p, const distributed::Communicator& group) override {
    const std::size_t k = sharded_->buffer_of(p);
    const ShardedParameters::Buffer& b = sharded_->buffers()[k];
    if (b.params.size() != 1)
      throw std::runtime_error("the gradient of " + model_.parameters()[p].name +
                               " is summed over pipeline stages, "
                               "but it shares buffer " +
                               b.name + " with other parameters");
    if (b.layout.shard_numel == 0) return;
    const DataParallelInstance::Shard shard = sharded_->strategy().shard(static_cast<uint32_t>(k));
    auto* first = static_cast<std::byte*>(shard.grads.data) + shard.grads.byte_offset;
    const Tensor grads = Tensor::borrowed(first, {b.layout.shard_numel}, plx_dtype_f32(), shard.grads.device);
    group.all_reduce(grads.view(), distributed::ReduceOp::sum);
  }

  // A buffer holds partial gradients only or none (ShardedParameters keeps them apart): each such
  // buffer's shard is summed over tp whole.
  void sum_partial_gradients(const distributed::Communicator& tp) override {
    const auto& buffers = sharded_->buffers();
    for (std::size_t k = 0; k < buffers.size(); ++k) {
      if (!buffers[k].partial_over_tp || buffers[k].layout.shard_numel == 0) continue;
      const DataParallelInstance::Shard shard = sharded_->strategy().shard(static_cast<uint32_t>(k));
      auto* first = static_cast<std::byte*>(shard.grads.data) + shard.grads.byte_offset;
      const Tensor grads =
          Tensor::borrowed(first, {buffers[k].layout.shard_numel}, plx_dtype_f32(), shard.grads.device);
      tp.all_reduce(grads.view(), distributed::ReduceOp::sum);
    }
  }

  Memory memory() const override {
    const plx_dp_memory held = sharded_->memory();
    Memory m;
    m.parameters = static_cast<double>(held.param_bytes);
    m.gradients = static_cast<double>(held.grad_bytes);
    m.optimizer = static_cast<double>(optimizer_->state_bytes());
    m.peak_parameters = static_cast<double>(held.peak_param_bytes);
    m.peak_gradients = static_cast<double>(held.peak_grad_bytes);
    m.peak_parameters_and_gradients = static_cast<double>(held.peak_bytes);
    return m;
  }
  // The whole values of the largest unit (all its buffers): what one gathered unit costs.
  boost::json::object describe() const override {
    std::vector<int64_t> unit_bytes(sharded_->num_units(), 0);
    for (const ShardedParameters::Buffer& b : sharded_->buffers())
      unit_bytes[b.fsdp] += b.numel * static_cast<int64_t>(sizeof(float));
    const int64_t largest = *std::max_element(unit_bytes.begin(), unit_bytes.end());
    return {{"component", component_},
            {"options", options_},
            {"units", static_cast<int64_t>(sharded_->num_units())},
            {"buffers", static_cast<int64_t>(sharded_->buffers().size())},
            {"largest_unit_bytes", largest}};
  }
  std::string summary_line() const override {
    return "data parallel over " + std::to_string(ranks_.dp == nullptr ? 1 : ranks_.dp->size()) +
           " ranks: " + sharded_->strategy_name() + " over " + std::to_string(sharded_->num_units()) +
           " units";
  }

  const Tensor& saved_value(std::size_t p) override {
    open(sharded_->unit_of(p));
    return model_.parameters()[p].value;
  }
  // Gathered whole for p's buffer once, then each of its parameters' parts.
  Tensor saved_moment(std::size_t p, int which) override {
    const std::size_t k = sharded_->buffer_of(p);
    if (moment_buffer_ != k) {
      moments_[0] = Tensor();
      moments_[1] = Tensor();
      moment_buffer_ = k;
    }
    Tensor& whole = moments_[which];
    if (whole.empty()) {
      const ShardedParameters::Buffer& b = sharded_->buffers()[k];
      whole = Tensor({b.layout.padded_numel}, plx_dtype_f32(), sharded_->device());
      DLTensor full = whole.view();
      const Tensor& shard = which == 0 ? optimizer_->exp_avg(k) : optimizer_->exp_avg_sq(k);
      sharded_->strategy().gather(static_cast<uint32_t>(k), shard.view(), full);
    }
    return part_of(whole, sharded_->offset_of(p), model_.parameters()[p].shape);
  }
  void end_save() override {
    moments_[0] = Tensor();
    moments_[1] = Tensor();
    moment_buffer_ = kNone;
    if (open_) sharded_->end_read(*open_);
    open_.reset();
  }
  // Each moment assembled whole for one buffer, and this rank's slice kept.
  void load_moments(const std::function<void(std::size_t, int, Tensor&)>& fill) override {
    for (std::size_t k = 0; k < sharded_->buffers().size(); ++k) {
      const ShardedParameters::Buffer& b = sharded_->buffers()[k];
      for (int which = 0; which < 2; ++which) {
        Tensor whole({b.layout.padded_numel}, plx_dtype_f32(), sharded_->device());
        for (std::size_t p : b.params) {
          Tensor part = part_of(whole, sharded_->offset_of(p), model_.parameters()[p].shape);
          fill(p, which, part);
        }
        Tensor& shard = which == 0 ? optimizer_->exp_avg(k) : optimizer_->exp_avg_sq(k);
        device::copy(shard.raw(), shard.device(),
                     static_cast<std::byte*>(whole.raw()) +
                         b.layout.shard_offset * static_cast<int64_t>(sizeof(float)),
                     whole.device(), shard.bytes());
      }
    }
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  void open(std::size_t unit) {
    if (open_ == unit) return;
    if (open_) sharded_->end_read(*open_);
    open_.reset();
    sharded_->begin_read(unit);
    open_ = unit;
  }

  Model& model_;
  UpdateRanks ranks_;
  std::string component_;
  boost::json::value options_;
  std::unique_ptr<ConfigHandle> config_;
  ShardedParameters* sharded_ = nullptr;
  std::unique_ptr<ShardedAdamW> optimizer_;
  // What a checkpoint's walk holds: the unit open for reading, a buffer's gathered moments.
  std::optional<std::size_t> open_;
  std::size_t moment_buffer_ = kNone;
  Tensor moments_[2];
};

}  // namespace

std::unique_ptr<ParameterUpdate> make_whole_update(Model& model, const OptimizerSettings& settings,
                                                   const UpdateRanks& ranks) {
  return std::make_unique<WholeUpdate>(model, settings, ranks);
}

std::unique_ptr<ParameterUpdate> make_sharded_update(const PluginHost& host,
                                                     const boost::json::value& run_config, Model& model,
                                                     const distributed::Runtime& runtime,
                                                     const OptimizerSettings& settings,
                                                     const UpdateRanks& ranks) {
  return std::make_unique<ShardedUpdate>(host, run_config, model, runtime, settings, ranks);
}

std::function<double(double)> sum_over(const distributed::Communicator* group) {
  if (group == nullptr || group->size() <= 1) return {};
  return [group](double local) { return group->all_reduce(local, distributed::ReduceOp::sum); };
}

void add_pipeline_stages(UpdateRanks& ranks, const distributed::Communicator& pp,
                         const PipelineStages& stages) {
  ranks.sum_over_stages = [&pp](double local) { return pp.all_reduce(local, distributed::ReduceOp::sum); };
  ranks.ordered_stage_sum = [&pp, &stages](const std::vector<double>& squares) {
    return stages.ordered_sum(pp, squares);
  };
  ranks.counted = stages.owned;
  ranks.alone = stages.shared;
}

}  // namespace plexus
