#include <cmath>

#include <boost/json.hpp>

#include "plexus/core/engine/optimizer.hpp"

namespace plexus {

OptimizerSettings OptimizerSettings::from_run_config(const boost::json::value& run_config) {
  const boost::json::object& o = run_config.at("optimizer").as_object();
  OptimizerSettings s;
  s.lr = o.at("lr").to_number<double>();
  s.min_lr = o.at("min_lr").to_number<double>();
  s.decay_style = std::string(o.at("lr_decay_style").as_string());
  s.warmup_steps = o.at("lr_warmup_steps").to_number<int64_t>();
  s.total_steps = run_config.at("train").at("steps").to_number<int64_t>();
  s.weight_decay = o.at("weight_decay").to_number<double>();
  s.beta1 = o.at("adam_beta1").to_number<double>();
  s.beta2 = o.at("adam_beta2").to_number<double>();
  s.eps = o.at("adam_eps").to_number<double>();
  s.clip_grad = o.at("clip_grad").to_number<double>();
  return s;
}

double learning_rate(const OptimizerSettings& s, int64_t step) {
  if (step < s.warmup_steps) return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.decay_style == "constant") return s.lr;
  const int64_t decay_steps = std::max<int64_t>(1, s.total_steps - s.warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - s.warmup_steps) / static_cast<double>(decay_steps));
  const double factor = s.decay_style == "linear" ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return s.min_lr + (s.lr - s.min_lr) * factor;
}

AdamW::AdamW(ParameterStore& params, OptimizerSettings settings) : params_(&params), settings_(std::move(settings)) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    exp_avg_.emplace_back(params[i].value.shape(), params[i].value.dtype());
    exp_avg_sq_.emplace_back(params[i].value.shape(), params[i].value.dtype());
  }
}

double AdamW::step(int64_t step) {
  // Global norm in double: the sum of squares of millions of floats loses digits in float.
  double sum_sq = 0;
  for (std::size_t i = 0; i < params_->size(); ++i) {
    const Tensor& g = (*params_)[i].grad;
    const float* gv = g.data<float>();
    for (int64_t k = 0; k < g.numel(); ++k) sum_sq += static_cast<double>(gv[k]) * gv[k];
  }
  const double norm = std::sqrt(sum_sq);
  const double clip = settings_.clip_grad > 0 && norm > settings_.clip_grad ? settings_.clip_grad / (norm + 1e-6) : 1.0;
  const double lr = learning_rate(settings_, step);
  last_lr_ = lr;
  const double b1 = settings_.beta1, b2 = settings_.beta2;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(step + 1));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(step + 1));
  for (std::size_t i = 0; i < params_->size(); ++i) {
    Parameter& p = (*params_)[i];
    float* w = p.value.data<float>();
    const float* g = p.grad.data<float>();
    float* m = exp_avg_[i].data<float>();
    float* v = exp_avg_sq_[i].data<float>();
    const auto decay = static_cast<float>(p.decays() ? lr * settings_.weight_decay : 0.0);
    const auto fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
    const auto step_size = static_cast<float>(lr / correction1);
    const auto inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(correction2));
    const auto eps = static_cast<float>(settings_.eps);
    const auto fclip = static_cast<float>(clip);
    const int64_t n = p.value.numel();
    // The same operation order as torch.optim.AdamW, so parity tests compare like with like.
    for (int64_t k = 0; k < n; ++k) {
      const float gk = g[k] * fclip;
      w[k] -= decay * w[k];
      m[k] = fb1 * m[k] + (1.0f - fb1) * gk;
      v[k] = fb2 * v[k] + (1.0f - fb2) * gk * gk;
      const float denom = std::sqrt(v[k]) * inv_sqrt_c2 + eps;
      w[k] -= step_size * m[k] / denom;
    }
  }
  return norm;
}

std::vector<std::pair<std::string, Tensor*>> AdamW::state_tensors() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (std::size_t i = 0; i < params_->size(); ++i) {
    out.emplace_back((*params_)[i].name + ".exp_avg", &exp_avg_[i]);
    out.emplace_back((*params_)[i].name + ".exp_avg_sq", &exp_avg_sq_[i]);
  }
  return out;
}

}  // namespace plexus
