#include "plexus/bench_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "plexus/core/device.hpp"

namespace plexus::cli::bench {
namespace {

std::vector<double> to_doubles(const Tensor& t) {
  const bool on_cpu = t.device().device_type == kDLCPU;
  const Tensor copy = on_cpu ? Tensor() : t.to(DLDevice{kDLCPU, 0});
  const Tensor& h = on_cpu ? t : copy;
  std::vector<double> out(static_cast<std::size_t>(h.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (h.dtype().code == kDLBfloat) {
      const uint32_t bits = uint32_t{h.data<uint16_t>()[i]} << 16;
      float f = 0.0f;
      std::memcpy(&f, &bits, sizeof(f));
      out[i] = f;
    } else if (h.dtype().bits == 64) {
      out[i] = h.data<double>()[i];
    } else {
      out[i] = h.data<float>()[i];
    }
  }
  return out;
}

}  // namespace

Snapshot run_once(Workload& w, const MhcBackend& backend, const std::vector<Direction>& directions) {
  w.zero_outputs();
  w.run(Direction::forward, backend);
  if (std::find(directions.begin(), directions.end(), Direction::backward) != directions.end())
    w.run(Direction::backward, backend);
  device::synchronize(w.problem().device);
  Snapshot snap;
  for (Direction d : directions)
    for (const std::string& name : w.outputs(d)) snap[name] = to_doubles(w.tensor(name));
  return snap;
}

double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0.0 ? diff / scale : diff;
}

CheckResult compare(const Workload& w, Direction d, const Snapshot& ours, const Snapshot& reference) {
  CheckResult c;
  for (const std::string& name : w.outputs(d)) {
    const double value = relative_difference(ours.at(name), reference.at(name));
    c.tensors.emplace_back(name, value);
    if (c.worst.empty() || !(value <= c.worst_value)) {
      c.worst = name;
      c.worst_value = value;
    }
  }
  return c;
}

}  // namespace plexus::cli::bench
