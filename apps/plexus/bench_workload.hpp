// What `plexus bench` times: one primitive of the "mhc" family (or a whole sublayer's
// connection) on fixed random inputs, as a list of backend calls per direction. Each call lists
// the tensors it reads, writes and accumulates into, so the bytes a call must move at least
// (every tensor crossing memory once; an accumulated one read and written) follow from the
// calls themselves and cannot drift from what is run. The same workload runs through every
// backend compared, so they all see the same inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plexus/core/engine/tensor.hpp"
#include "plexus/core/mhc_backend.hpp"

namespace plexus::cli::bench {

enum class Direction { forward, backward };
const char* direction_name(Direction d) noexcept;  // "forward", "backward"

// The problem every call gets, and where its tensors live.
struct Problem {
  int64_t tokens = 0, streams = 0, hidden = 0;
  int32_t iterations = 0;
  double eps = 1e-6;
  bool transposed = false;
  DLDataType activation{};  // float32, float64 or bfloat16
  DLDevice device{kDLCPU, 0};

  int64_t width() const noexcept { return streams * streams + 2 * streams; }  // W
  DLDataType mapping() const noexcept;  // float64 with float64 activations, float32 otherwise
  plx_mhc_problem c_problem() const noexcept;
};

// The primitives `--primitive` accepts besides "all" (kMhcPrimitives, then "sublayer").
const std::vector<std::string>& workload_names();

class Workload {
 public:
  enum class Access { read, write, accumulate };
  struct Arg {
    std::string tensor;
    Access access;
  };
  struct Call {
    std::string function;  // "proj_rms_forward", ...
    std::vector<Arg> args;
    std::function<void(const MhcBackend&)> run;
  };

  // `name` is one of workload_names(); the inputs are drawn from `seed`, the outputs zeroed.
  static std::unique_ptr<Workload> make(const std::string& name, const Problem& problem, uint64_t seed);

  const std::string& name() const noexcept { return name_; }
  const Problem& problem() const noexcept { return problem_; }

  // Runs every call of one direction, in order (on the CPU they complete before returning; on
  // a GPU the caller synchronizes). A backward may need the forward's outputs (the sublayer's
  // does): run the forward once first.
  void run(Direction d, const MhcBackend& backend) const;

  // Bytes the direction's calls move at least: per call, every tensor argument once, an
  // accumulated one twice (read and written).
  double bytes(Direction d) const;
  // Floating-point operations of the direction, 0 where not counted (elementwise primitives);
  // `flops_estimated` says the count is a rough one (Sinkhorn).
  double flops(Direction d) const;
  bool flops_estimated() const noexcept { return flops_estimated_; }

  // The tensors the direction writes or accumulates into, in call order, each once.
  std::vector<std::string> outputs(Direction d) const;
  const Tensor& tensor(const std::string& name) const { return tensors_.at(name); }
  // Zeroes every output of both directions (accumulated ones start from zero again).
  void zero_outputs();

 private:
  Workload(std::string name, const Problem& problem, uint64_t seed);
  struct Builder;

  std::string name_;
  Problem problem_;
  uint64_t rng_state_;
  std::map<std::string, Tensor> tensors_;  // node-based: views and tensors stay put
  std::map<std::string, DLTensor> views_;
  std::vector<Call> calls_[2];
  double flops_[2] = {0.0, 0.0};
  bool flops_estimated_ = false;
};

}  // namespace plexus::cli::bench
