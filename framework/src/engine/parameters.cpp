#include "plexus/core/engine/parameters.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "plexus/core/engine/random.hpp"

namespace plexus {
namespace {

// Calls run(shard_offset, whole_offset, count) for every contiguous run of rank `rank`'s shard in
// the whole tensor (offsets and counts in elements).
template <class Run>
void for_each_run(const std::vector<int64_t>& shard_shape, const TensorSplit& split, int32_t rank, Run run) {
  const auto dim = static_cast<std::size_t>(split.dim);
  int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < dim; ++d) outer *= shard_shape[d];
  for (std::size_t d = dim + 1; d < shard_shape.size(); ++d) inner *= shard_shape[d];
  const int64_t shard_rows = shard_shape[dim], whole_rows = shard_rows * split.size;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t shard_row = 0, part_start = 0;
    for (const int64_t part : split.parts) {
      const int64_t rows = part / split.size;
      run((o * shard_rows + shard_row) * inner, (o * whole_rows + part_start + rank * rows) * inner,
          rows * inner);
      shard_row += rows;
      part_start += part;
    }
  }
}

}  // namespace

// The group a spec's split names: "tp" without one (or from a layer built before ABI 1.10).
static std::string split_group(const plx_param_spec& spec, const std::string& what) {
  if (!PLX_HAS_FIELD(&spec, plx_param_spec, tp_group) || spec.tp_group == nullptr || *spec.tp_group == '\0')
    return "tp";
  const std::string group = spec.tp_group;
  if (group != "tp" && group != "expert_tp")
    throw std::runtime_error(what + " is split over the group \"" + group +
                             "\"; a tensor-parallel parameter is split over \"tp\" or \"expert_tp\"");
  return group;
}

TensorSplit tensor_split_of(const plx_param_spec& spec, int32_t rank, int32_t size, const std::string& what) {
  TensorSplit split;
  split.rank = rank;
  split.size = size;
  if (!PLX_HAS_FIELD(&spec, plx_param_spec, tp_part_sizes) || (spec.flags & PLX_PARAM_TENSOR_PARALLEL) == 0)
    return split;
  split.group = split_group(spec, what);
  const std::vector<int64_t> shape(spec.desc.dims, spec.desc.dims + spec.desc.ndim);
  if (spec.tp_dim < 0 || static_cast<std::size_t>(spec.tp_dim) >= shape.size())
    throw std::runtime_error(what + " is split along dimension " + std::to_string(spec.tp_dim) +
                             ", which it does not have");
  split.dim = spec.tp_dim;
  const int64_t whole = shape[static_cast<std::size_t>(spec.tp_dim)] * size;
  if (spec.tp_num_parts == 0) {
    split.parts = {whole};
    return split;
  }
  if (spec.tp_part_sizes == nullptr)
    throw std::runtime_error(what + " has tp_num_parts but no tp_part_sizes");
  int64_t sum = 0;
  for (uint32_t i = 0; i < spec.tp_num_parts; ++i) {
    const int64_t part = spec.tp_part_sizes[i];
    if (part <= 0 || part % size != 0)
      throw std::runtime_error(what + ": part " + std::to_string(i) + " of " + std::to_string(part) +
                               " is not a positive multiple of the " + std::to_string(size) + " " +
                               split.group + " ranks");
    split.parts.push_back(part);
    sum += part;
  }
  if (sum != whole)
    throw std::runtime_error(what + ": its parts sum to " + std::to_string(sum) + ", but " +
                             std::to_string(size) + " shards make " + std::to_string(whole));
  return split;
}

std::vector<int64_t> whole_shape(const std::vector<int64_t>& shard_shape, const TensorSplit& split) {
  std::vector<int64_t> whole = shard_shape;
  if (split.split()) whole[static_cast<std::size_t>(split.dim)] *= split.size;
  return whole;
}

void copy_shard(const Tensor& whole, const TensorSplit& split, int32_t rank, Tensor& shard) {
  const float* from = whole.data<float>();
  float* to = shard.data<float>();
  for_each_run(shard.shape(), split, rank, [&](int64_t at, int64_t whole_at, int64_t count) {
    std::copy(from + whole_at, from + whole_at + count, to + at);
  });
}

void place_shard(const Tensor& shard, const TensorSplit& split, int32_t rank, Tensor& whole) {
  const float* from = shard.data<float>();
  float* to = whole.data<float>();
  for_each_run(shard.shape(), split, rank, [&](int64_t at, int64_t whole_at, int64_t count) {
    std::copy(from + at, from + at + count, to + whole_at);
  });
}

std::size_t ParameterStore::declare(const plx_param_spec& spec, const std::string& prefix,
                                    const std::string& unit) {
  if (spec.name == nullptr || *spec.name == '\0')
    throw std::runtime_error(unit + ": a parameter has no name");
  const std::string name = prefix + spec.name;
  std::vector<int64_t> shape(spec.desc.dims, spec.desc.dims + spec.desc.ndim);
  if (spec.desc.ndim > PLX_MAX_DIMS)
    throw std::runtime_error(unit + ": parameter " + name + " has too many dims");
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Parameter& existing = *params_[i];
    if (existing.name != name) continue;
    if (existing.shape != shape)
      throw std::runtime_error("parameter " + name + " is declared by " + existing.declared_by +
                               " with shape " + shape_string(existing.shape) + " and by " + unit +
                               " with shape " + shape_string(shape) +
                               "; parameters that share a name must agree");
    const TensorSplit split = split_of(spec, unit + ": parameter " + name);
    if (split.dim != existing.tp.dim || split.parts != existing.tp.parts)
      throw std::runtime_error("parameter " + name + " is declared by " + existing.declared_by + " and by " +
                               unit + " split over tp in different ways (dimension " +
                               std::to_string(existing.tp.dim) + " against " + std::to_string(split.dim) +
                               "); parameters that share a name must agree");
    return i;  // shared (tied) parameter
  }
  if (spec.desc.dtype.code != kDLFloat || spec.desc.dtype.bits != 32)
    throw std::runtime_error(unit + ": parameter " + name + " has master dtype " +
                             dtype_name(spec.desc.dtype) + "; the engine keeps fp32 master parameters");
  const bool buffer = (spec.flags & PLX_PARAM_BUFFER) != 0;
  if (buffer && spec.grad_group != nullptr && *spec.grad_group != '\0')
    throw std::runtime_error(unit + ": parameter " + name +
                             " is a buffer (PLX_PARAM_BUFFER) with grad_group \"" + spec.grad_group +
                             "\"; a buffer has no gradient and is whole on every rank");
  auto param = std::make_unique<Parameter>();
  param->name = name;
  if (PLX_HAS_FIELD(&spec, plx_param_spec, te_name) && spec.te_name != nullptr && *spec.te_name != '\0')
    param->te_name = prefix + spec.te_name;
  param->flags = spec.flags;
  param->init = spec.init;
  param->init_a = spec.init_a;
  param->init_b = spec.init_b;
  param->declared_by = unit;
  param->grad_group = spec.grad_group != nullptr && *spec.grad_group != '\0' ? spec.grad_group : "dp";
  param->shape = shape;
  param->tp =
      split_of(spec, unit + ": tensor-parallel parameter " + name + " (shard " + shape_string(shape) + ")");
  param->whole_shape = whole_shape(shape, param->tp);
  if (!deferred_ || buffer) param->value = Tensor(shape, spec.desc.dtype, device_);
  if (!buffer && !deferred_) param->grad = Tensor(shape, spec.desc.dtype, device_);
  params_.push_back(std::move(param));
  return params_.size() - 1;
}

TensorSplit ParameterStore::split_of(const plx_param_spec& spec, const std::string& what) const {
  const bool expert = (spec.flags & PLX_PARAM_TENSOR_PARALLEL) != 0 && split_group(spec, what) == "expert_tp";
  const auto [rank, size] = expert && expert_tp_ ? *expert_tp_ : std::pair{tp_rank_, tp_size_};
  return tensor_split_of(spec, rank, size, what);
}

const Parameter* ParameterStore::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

void ParameterStore::zero_grads() {
  for (auto& p : params_)
    if (!p->is_buffer()) p->grad.zero();
}

int64_t ParameterStore::count_elements() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p->numel();
  return n;
}

namespace {

// The init spec of `param` over `value`, a host float32 tensor of the whole shape.
void fill_initial(const Parameter& param, uint64_t seed, Tensor& value) {
  float* v = value.data<float>();
  const auto n = static_cast<uint64_t>(value.numel());
  const CounterRng rng(seed, stable_hash(param.name));
  switch (param.init) {
    case PLX_INIT_ZEROS:
      value.zero();
      return;
    case PLX_INIT_ONES:
      for (uint64_t i = 0; i < n; ++i) v[i] = 1.0f;
      return;
    case PLX_INIT_CONSTANT:
      for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<float>(param.init_a);
      return;
    case PLX_INIT_NORMAL:
      for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<float>(param.init_a * rng.normal(i));
      return;
    case PLX_INIT_UNIFORM:
      for (uint64_t i = 0; i < n; ++i)
        v[i] = static_cast<float>(param.init_a + (param.init_b - param.init_a) * rng.uniform(i));
      return;
    case PLX_INIT_XAVIER_UNIFORM: {
      const auto& shape = value.shape();
      if (shape.size() < 2)
        throw std::runtime_error("parameter " + param.name + ": Xavier init needs 2 or more dims");
      const double fan_out = static_cast<double>(shape[shape.size() - 2]);
      const double fan_in = static_cast<double>(shape.back());
      const double gain = param.init_a == 0 ? 1.0 : param.init_a;
      const double limit = gain * std::sqrt(6.0 / (fan_in + fan_out));
      for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<float>(limit * (2.0 * rng.uniform(i) - 1.0));
      return;
    }
    default:
      throw std::runtime_error("parameter " + param.name + ": unknown init kind " +
                               std::to_string(param.init));
  }
}

}  // namespace

void initialize_parameter(Parameter& param, uint64_t seed) {
  if (!param.tp.split() && param.value.device().device_type == kDLCPU) {
    fill_initial(param, seed, param.value);
    return;
  }
  // Values are drawn on the host for the whole tensor (the same numbers on every device and at
  // every tp size), then this rank's shard is copied to the parameter's device.
  Tensor whole(param.whole_shape, param.value.dtype());
  fill_initial(param, seed, whole);
  if (!param.tp.split()) {
    param.value.copy_from(whole);
    return;
  }
  Tensor shard(param.shape, param.value.dtype());
  copy_shard(whole, param.tp, param.tp.rank, shard);
  param.value.copy_from(shard);
}

}  // namespace plexus
