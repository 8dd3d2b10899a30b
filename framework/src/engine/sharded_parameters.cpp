#include "engine/sharded_parameters.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

#include "plexus/core/device.hpp"

namespace plexus {
namespace {

// Every parameter starts on a 64-byte boundary of its unit's buffer (16 float32 elements), the
// alignment the host's allocator gives a parameter of its own, which vectorized kernels expect.
constexpr int64_t kAlignElements = 16;

int64_t aligned(int64_t n) {
  return (n + kAlignElements - 1) / kAlignElements * kAlignElements;
}

std::byte* element(const DLTensor& t, int64_t index, std::size_t element_bytes) {
  return static_cast<std::byte*>(t.data) + t.byte_offset + static_cast<std::size_t>(index) * element_bytes;
}

}  // namespace

ShardedParameters::ShardedParameters(ParameterStore& params, const std::vector<UnitSpec>& units,
                                     const Component& strategy, plx_config options,
                                     const distributed::Runtime& runtime, DLDevice device)
    : params_(params),
      owner_fsdp_(params.size(), units.size()),
      buffer_of_(params.size(), 0),
      offset_of_(params.size(), 0),
      device_(device) {
  const distributed::Communicator& dp = runtime.data_parallel();
  for (std::size_t f = 0; f < units.size(); ++f)
    for (std::size_t p : units[f].params)
      if (owner_fsdp_.at(p) == units.size()) owner_fsdp_[p] = f;
  for (std::size_t p = 0; p < params.size(); ++p)
    if (owner_fsdp_[p] == units.size() && !params[p].is_buffer())
      throw std::runtime_error("parameter " + params[p].name + " (declared by " + params[p].declared_by +
                               ") is used by no unit of the data-parallel layout");

  // Each FSDP unit's own parameters, one buffer per (gradient group, replicated, tp shard, partial
  // over tp): the gradient norm adds a buffer of tensor-parallel shards over tp, and the others
  // once; a buffer of sequence-parallel gradients is summed over tp whole.
  for (std::size_t f = 0; f < units.size(); ++f) {
    std::map<std::tuple<std::string, bool, bool, bool, std::string>, uint32_t> buffer_of_key;
    for (std::size_t p : units[f].params) {
      if (owner_fsdp_[p] != f) continue;
      const Parameter& param = params[p];
      const bool replicated = (param.flags & PLX_PARAM_REPLICATED) != 0;
      const auto key =
          std::make_tuple(param.grad_group, replicated, param.tp.split(), param.partial_over_tp(),
                          param.tp.split() ? param.tp.group : std::string());
      auto found = buffer_of_key.find(key);
      if (found == buffer_of_key.end()) {
        Buffer b;
        b.name = units[f].name;
        if (param.grad_group != "dp") b.name += " (" + param.grad_group + ")";
        if (replicated) b.name += " (replicated)";
        if (param.tp.split()) b.name += " (" + param.tp.group + " shards)";
        b.tensor_split = param.tp.split();
        b.split_group = param.tp.group;
        b.partial_over_tp = param.partial_over_tp();
        if (b.partial_over_tp) b.name += " (tp partial)";
        b.group = param.grad_group;
        b.fsdp = f;
        b.replicated = replicated;
        const distributed::Communicator* group =
            param.grad_group == "dp" ? &dp : runtime.group(param.grad_group);
        if (group == nullptr)
          throw std::runtime_error("parameter " + param.name + " (declared by " + param.declared_by +
                                   ") asks for its gradient to be averaged over the group \"" +
                                   param.grad_group + "\", which the topology did not build");
        b.grad_scale = static_cast<double>(group->size()) / static_cast<double>(dp.size());
        buffers_.push_back(std::move(b));
        found = buffer_of_key.emplace(key, static_cast<uint32_t>(buffers_.size() - 1)).first;
      }
      Buffer& b = buffers_[found->second];
      b.numel = aligned(b.numel);
      b.params.push_back(p);
      b.offsets.push_back(b.numel);
      offset_of_[p] = b.numel;
      b.numel += param.numel();
      buffer_of_[p] = found->second;
    }
  }
  for (std::size_t f = 0; f < units.size(); ++f) {
    Fsdp unit;
    unit.name = units[f].name;
    for (std::size_t p : units[f].params) {
      const auto b = static_cast<uint32_t>(buffer_of_[p]);
      if (std::find(unit.buffers.begin(), unit.buffers.end(), b) == unit.buffers.end())
        unit.buffers.push_back(b);
    }
    fsdp_.push_back(std::move(unit));
  }

  const std::string replica_kind = runtime.data_parallel_kind();
  std::vector<plx_dp_unit_desc> descs(buffers_.size());
  std::vector<const plx_dp_unit_desc*> pointers;
  for (std::size_t k = 0; k < buffers_.size(); ++k) {
    plx_dp_unit_desc& d = descs[k];
    d.struct_size = sizeof(d);
    d.flags = buffers_[k].replicated ? PLX_DP_UNIT_REPLICATED : 0u;
    d.name = buffers_[k].name.c_str();
    // The parameters' own gradient group, "dp", is the runtime's replica group (dp_cp under
    // context parallelism); the strategy finds it by that name.
    d.group = buffers_[k].group == "dp" ? replica_kind.c_str() : buffers_[k].group.c_str();
    d.numel = buffers_[k].numel;
    d.dtype = plx_dtype_f32();
    d.device = device;
    d.grad_scale = buffers_[k].grad_scale;
    pointers.push_back(&d);
  }
  plx_dp_setup setup{};
  setup.struct_size = sizeof(setup);
  setup.num_units = static_cast<uint32_t>(buffers_.size());
  setup.units = pointers.data();
  setup.device = device;
  strategy_ = std::make_unique<DataParallelInstance>(strategy, options, setup);
  strategy_name_ = strategy.name;

  for (std::size_t k = 0; k < buffers_.size(); ++k) {
    Buffer& b = buffers_[k];
    b.layout = strategy_->layout(static_cast<uint32_t>(k));
    const plx_dp_layout& l = b.layout;
    if (l.padded_numel < b.numel || l.shard_offset < 0 || l.shard_numel < 0 ||
        l.shard_offset + l.shard_numel > l.padded_numel)
      throw std::runtime_error(strategy.name + ": the layout of unit " + b.name + " (" +
                               std::to_string(b.numel) + " elements) is inconsistent: shard [" +
                               std::to_string(l.shard_offset) + ", +" + std::to_string(l.shard_numel) +
                               ") of " + std::to_string(l.padded_numel));
    values_sharded_ = values_sharded_ || (l.flags & PLX_DP_PARAMS_SHARDED) != 0;
    for (std::size_t i = 0; i < b.params.size(); ++i) {
      const int64_t begin = std::max(b.offsets[i], l.shard_offset);
      const int64_t end =
          std::min(b.offsets[i] + params[b.params[i]].numel(), l.shard_offset + l.shard_numel);
      if (begin < end)
        b.segments.push_back({b.params[i], begin - l.shard_offset, begin - b.offsets[i], end - begin});
    }
  }

  // Values the store holds (a model initialized before it was sharded) move into the strategy's
  // buffers, unit by unit; a model built for sharding has none yet (Model::initialize writes them).
  for (std::size_t k = 0; k < buffers_.size(); ++k) {
    Buffer& b = buffers_[k];
    if (params[b.params.front()].value.empty()) continue;
    const DLTensor whole = strategy_->acquire(static_cast<uint32_t>(k), PLX_DP_WRITE);
    for (std::size_t i = 0; i < b.params.size(); ++i) {
      const Tensor& value = params[b.params[i]].value;
      device::copy(element(whole, b.offsets[i], sizeof(float)), whole.device, value.raw(), value.device(),
                   value.bytes());
    }
    strategy_->release(static_cast<uint32_t>(k), PLX_DP_WRITE);
  }
  // Buffers (PLX_PARAM_BUFFER) are no unit's: they stay whole in the store on every rank.
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (params[p].is_buffer()) continue;
    params[p].value = Tensor();
    params[p].grad = Tensor();
  }
}

ShardedParameters::~ShardedParameters() = default;

void ShardedParameters::point_values(Buffer& b, const DLTensor& whole) {
  for (std::size_t i = 0; i < b.params.size(); ++i) {
    Parameter& p = params_[b.params[i]];
    p.value =
        Tensor::borrowed(element(whole, b.offsets[i], sizeof(float)), p.shape, plx_dtype_f32(), whole.device);
  }
}

void ShardedParameters::point_grads(Buffer& b, const DLTensor& whole) {
  for (std::size_t i = 0; i < b.params.size(); ++i) {
    Parameter& p = params_[b.params[i]];
    p.grad =
        Tensor::borrowed(element(whole, b.offsets[i], sizeof(float)), p.shape, plx_dtype_f32(), whole.device);
  }
}

void ShardedParameters::acquire(uint32_t buffer, uint32_t purpose) {
  Buffer& b = buffers_[buffer];
  const DLTensor whole = strategy_->acquire(buffer, purpose);
  if (whole.data == nullptr || whole.ndim != 1 || whole.shape[0] < b.numel)
    throw std::runtime_error(strategy_name_ + ": acquire of unit " + b.name + " handed out no buffer of " +
                             std::to_string(b.numel) + " elements");
  ++b.acquired;
  point_values(b, whole);
}

void ShardedParameters::release(uint32_t buffer, uint32_t purpose) {
  Buffer& b = buffers_[buffer];
  strategy_->release(buffer, purpose);
  if (--b.acquired > 0) return;
  for (std::size_t p : b.params) params_[p].value = Tensor();
}

void ShardedParameters::begin_forward(std::size_t unit) {
  for (uint32_t k : fsdp_.at(unit).buffers) acquire(k, PLX_DP_FORWARD);
}

void ShardedParameters::end_forward(std::size_t unit) {
  for (uint32_t k : fsdp_.at(unit).buffers) release(k, PLX_DP_FORWARD);
}

void ShardedParameters::begin_backward(std::size_t unit) {
  for (uint32_t k : fsdp_.at(unit).buffers) {
    acquire(k, PLX_DP_BACKWARD);
    const DLTensor whole = strategy_->grads(k);
    if (whole.data == nullptr || whole.ndim != 1 || whole.shape[0] < buffers_[k].numel)
      throw std::runtime_error(strategy_name_ + ": grads of unit " + buffers_[k].name +
                               " handed out no buffer of " + std::to_string(buffers_[k].numel) + " elements");
    point_grads(buffers_[k], whole);
  }
}

void ShardedParameters::end_backward(std::size_t unit) {
  for (uint32_t k : fsdp_.at(unit).buffers) {
    Buffer& b = buffers_[k];
    release(k, PLX_DP_BACKWARD);
    for (std::size_t p : b.params) params_[p].grad = Tensor();
    ++b.done;
    strategy_->grads_ready(k, b.done == b.expected);
  }
}

void ShardedParameters::prefetch_forward(std::size_t unit) {
  for (uint32_t k : fsdp_.at(unit).buffers) strategy_->prefetch(k, PLX_DP_FORWARD);
}

void ShardedParameters::prefetch_backward(std::size_t unit) {
  for (uint32_t k : fsdp_.at(unit).buffers) strategy_->prefetch(k, PLX_DP_BACKWARD);
}

void ShardedParameters::begin_read(std::size_t unit) {
  for (uint32_t k : fsdp_.at(unit).buffers)
    if (buffers_[k].fsdp == unit) acquire(k, PLX_DP_READ);
}

void ShardedParameters::end_read(std::size_t unit) {
  for (uint32_t k : fsdp_.at(unit).buffers)
    if (buffers_[k].fsdp == unit) release(k, PLX_DP_READ);
}

void ShardedParameters::begin_write(std::size_t unit) {
  for (uint32_t k : fsdp_.at(unit).buffers)
    if (buffers_[k].fsdp == unit) acquire(k, PLX_DP_WRITE);
}

void ShardedParameters::end_write(std::size_t unit) {
  for (uint32_t k : fsdp_.at(unit).buffers)
    if (buffers_[k].fsdp == unit) release(k, PLX_DP_WRITE);
}

void ShardedParameters::begin_step(int64_t microbatches) {
  for (Buffer& b : buffers_) {
    b.done = 0;
    b.expected = 0;
  }
  for (const Fsdp& unit : fsdp_)
    for (uint32_t k : unit.buffers) buffers_[k].expected += microbatches;
  strategy_->begin_step();
}

void ShardedParameters::finish_grads() {
  for (const Buffer& b : buffers_)
    if (b.done != b.expected)
      throw std::runtime_error("data parallelism: unit " + b.name + " received " + std::to_string(b.done) +
                               " of " + std::to_string(b.expected) + " gradient contributions this step");
  strategy_->finish_grads();
}

void ShardedParameters::after_update() {
  strategy_->after_update();
}

}  // namespace plexus
