#include "plexus/core/engine/parameters.hpp"

#include <cmath>
#include <stdexcept>

#include "plexus/core/engine/random.hpp"

namespace plexus {

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
    return i;  // shared (tied) parameter
  }
  if (spec.desc.dtype.code != kDLFloat || spec.desc.dtype.bits != 32)
    throw std::runtime_error(unit + ": parameter " + name + " has master dtype " +
                             dtype_name(spec.desc.dtype) + "; the engine keeps fp32 master parameters");
  const bool buffer = (spec.flags & PLX_PARAM_BUFFER) != 0;
  if (buffer && spec.grad_group != nullptr && *spec.grad_group != '\0')
    throw std::runtime_error(unit + ": parameter " + name + " is a buffer (PLX_PARAM_BUFFER) with grad_group \"" +
                             spec.grad_group + "\"; a buffer has no gradient and is whole on every rank");
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
  if (!deferred_ || buffer) param->value = Tensor(shape, spec.desc.dtype, device_);
  if (!buffer && !deferred_) param->grad = Tensor(shape, spec.desc.dtype, device_);
  params_.push_back(std::move(param));
  return params_.size() - 1;
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

void initialize_parameter(Parameter& param, uint64_t seed) {
  // Values are drawn on the host (the same numbers on every device) and copied to the device.
  if (param.value.device().device_type != kDLCPU) {
    Parameter host;
    host.name = param.name;
    host.init = param.init;
    host.init_a = param.init_a;
    host.init_b = param.init_b;
    host.value = Tensor(param.value.shape(), param.value.dtype());
    initialize_parameter(host, seed);
    param.value.copy_from(host.value);
    return;
  }
  float* v = param.value.data<float>();
  const auto n = static_cast<uint64_t>(param.value.numel());
  const CounterRng rng(seed, stable_hash(param.name));
  switch (param.init) {
    case PLX_INIT_ZEROS:
      param.value.zero();
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
      const auto& shape = param.value.shape();
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

}  // namespace plexus
