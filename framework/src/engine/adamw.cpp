#include <cmath>

#include <boost/json.hpp>

#include "engine/adamw_step.hpp"
#include "engine/device_ops.hpp"
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
  if (step < s.warmup_steps)
    return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.decay_style == "constant") return s.lr;
  const int64_t decay_steps = std::max<int64_t>(1, s.total_steps - s.warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - s.warmup_steps) / static_cast<double>(decay_steps));
  const double factor = s.decay_style == "linear" ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return s.min_lr + (s.lr - s.min_lr) * factor;
}

vector_ops::AdamWStep adamw_step_constants(const OptimizerSettings& s, int64_t step, double grad_norm) {
  const double clip = s.clip_grad > 0 && grad_norm > s.clip_grad ? s.clip_grad / (grad_norm + 1e-6) : 1.0;
  const double lr = learning_rate(s, step);
  const double correction1 = 1.0 - std::pow(s.beta1, static_cast<double>(step + 1));
  const double correction2 = 1.0 - std::pow(s.beta2, static_cast<double>(step + 1));
  vector_ops::AdamWStep update{};
  update.grad_scale = static_cast<float>(clip);
  update.beta1 = static_cast<float>(s.beta1);
  update.beta2 = static_cast<float>(s.beta2);
  update.step_size = static_cast<float>(lr / correction1);
  update.inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(correction2));
  update.eps = static_cast<float>(s.eps);
  return update;
}

AdamW::AdamW(ParameterStore& params, OptimizerSettings settings)
    : params_(&params), settings_(std::move(settings)) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].is_buffer()) {  // no moments (empty, keeping the index of every other parameter)
      exp_avg_.emplace_back();
      exp_avg_sq_.emplace_back();
      continue;
    }
    exp_avg_.emplace_back(params[i].value.shape(), params[i].value.dtype(), params[i].value.device());
    exp_avg_sq_.emplace_back(params[i].value.shape(), params[i].value.dtype(), params[i].value.device());
  }
}

double AdamW::step(int64_t step) {
  const double norm = std::sqrt(squared_norm());
  update(step, norm);
  return norm;
}

double AdamW::squared_norm() const {
  // Experts divided over ep (summed over ep), shards (summed over the group they are split over:
  // tp, or the experts' expert_tp), and both (over ep, then the group).
  enum Split { whole, over_tp, over_expert_tp };
  const auto split_of = [&](const Parameter& p) {
    if (!p.tp.split()) return whole;
    return p.tp.group == "expert_tp" && etp_sum_ ? over_expert_tp : tp_sum_ ? over_tp : whole;
  };
  std::vector<const Tensor*> grads, divided, split[3], divided_split[3];
  std::vector<std::size_t> grad_params;
  for (std::size_t i = 0; i < params_->size(); ++i)
    if (!(*params_)[i].is_buffer() && (counted_.empty() || counted_[i])) {
      const Parameter& p = (*params_)[i];
      const bool divide = divided_sum_ && p.divided_over_ep();
      const Split s = split_of(p);
      if (s != whole)
        (divide ? divided_split : split)[s].push_back(&p.grad);
      else if (divide)
        divided.push_back(&p.grad);
      else {
        grads.push_back(&p.grad);
        grad_params.push_back(i);
      }
    }
  const auto squares = [](const std::vector<const Tensor*>& tensors) {
    return tensors.empty() ? 0.0 : device_ops::sum_of_squares(tensors);
  };
  const auto over_stages = [&](double value) { return stage_sum_ ? stage_sum_(value) : value; };
  double sum_sq = 0;
  if (ordered_sum_) {  // pipelined: every stage's parameters, added in the whole model's order
    std::vector<double> by_param(params_->size(), 0.0);
    for (std::size_t k = 0; k < grads.size(); ++k)
      by_param[grad_params[k]] = device_ops::sum_of_squares({grads[k]});
    sum_sq = ordered_sum_(by_param);
  } else {
    sum_sq = squares(grads);
  }
  if (divided_sum_) sum_sq += over_stages(divided_sum_(squares(divided)));
  for (const Split s : {over_tp, over_expert_tp}) {
    const std::function<double(double)>& group_sum = s == over_tp ? tp_sum_ : etp_sum_;
    if (!group_sum) continue;
    double local = squares(split[s]);
    if (divided_sum_) local += divided_sum_(squares(divided_split[s]));
    sum_sq += over_stages(group_sum(local));
  }
  return sum_sq;
}

void AdamW::update(int64_t step, double norm) {
  const double lr = learning_rate(settings_, step);
  last_lr_ = lr;
  vector_ops::AdamWStep update = adamw_step_constants(settings_, step, norm);
  for (std::size_t i = 0; i < params_->size(); ++i) {
    Parameter& p = (*params_)[i];
    if (p.is_buffer()) continue;
    update.decay = static_cast<float>(p.decays() ? lr * settings_.weight_decay : 0.0);
    device_ops::adamw_update(update, p.value, p.grad, exp_avg_[i], exp_avg_sq_[i]);
  }
}

std::vector<std::pair<std::string, Tensor*>> AdamW::state_tensors() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (std::size_t i = 0; i < params_->size(); ++i) {
    if ((*params_)[i].is_buffer()) continue;
    out.emplace_back((*params_)[i].name + ".exp_avg", &exp_avg_[i]);
    out.emplace_back((*params_)[i].name + ".exp_avg_sq", &exp_avg_sq_[i]);
  }
  return out;
}

}  // namespace plexus
