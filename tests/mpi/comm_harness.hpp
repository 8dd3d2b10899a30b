// What the comm-backend tests share: the backend loaded through the real plugin host, calls
// that return the status together with the message the plugin reported, CPU tensors to hand it,
// and the launcher side that re-runs a test executable under mpirun.
//
// A test executable here plays two parts. Started by ctest (no mpirun around it), it is the
// launcher: it runs itself again as `mpirun -np N <itself> --run_test=ranks/...` and checks that
// job's exit status and output. Started by mpirun, it is one rank and runs the per-rank checks
// (the suites guarded by under_mpirun()).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/json.hpp>

#include "mpi_launch.hpp"
#include "plexus/comm.h"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/tensor.h"
#include "run_process.hpp"

namespace plexus::test {

inline bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

inline std::filesystem::path plugin_file(const std::string& plugin) {
  return std::filesystem::path(PLEXUS_BUILD_DIR) / "lib/plexus/plugins" / ("libplexus_" + plugin + ".so");
}

// A comm component of a plugin, loaded by the plugin host as plexus-train loads it.
class Backend {
 public:
  Backend(const std::string& plugin, const std::string& component) {
    host_.load(plugin_file(plugin));
    table_ = &host_.get(PLX_KIND_COMM, component).as<plx_comm_v1>();
  }
  const plx_comm_v1& operator*() const { return *table_; }
  const plx_comm_v1* operator->() const { return table_; }

 private:
  PluginHost host_;
  const plx_comm_v1* table_ = nullptr;
};

// A call's status and the message the plugin reported with it ("" on success).
struct Outcome {
  plx_status status = PLX_OK;
  std::string message;
  bool ok() const { return status == PLX_OK; }
};
inline Outcome outcome(plx_status status) {
  Outcome o;
  o.status = status;
  o.message = status == PLX_OK ? std::string() : HostServices::take_last_error();
  return o;
}

inline plx_comm_init_args init_args(int32_t rank, int32_t world_size, uint32_t timeout_ms,
                                    plx_config config = nullptr) {
  plx_comm_init_args args{};
  args.struct_size = sizeof(args);
  args.rank = rank;
  args.world_size = world_size;
  args.timeout_ms = timeout_ms;
  args.device = DLDevice{kDLCPU, 0};
  args.config = config;
  return args;
}

// A config node with the given JSON options (the host validates them in a real run).
inline std::unique_ptr<ConfigHandle> options(const std::string& json) {
  return std::make_unique<ConfigHandle>(boost::json::parse(json), "comm.options");
}

template <class T>
DLDataType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return plx_dtype_f32();
  if constexpr (std::is_same_v<T, double>) return plx_dtype_f64();
  if constexpr (std::is_same_v<T, int32_t>) return plx_dtype_i32();
  if constexpr (std::is_same_v<T, int64_t>) return plx_dtype_i64();
  if constexpr (std::is_same_v<T, uint16_t>) return plx_dtype_bf16();  // the bits of bfloat16
  return plx_dtype(kDLUInt, 8);
}

// A 1-D CPU tensor owning its values; view() is the DLTensor to hand the backend.
template <class T>
class Tensor {
 public:
  explicit Tensor(std::size_t n, T fill = T{}) : values(n, fill) {}
  explicit Tensor(std::vector<T> v) : values(std::move(v)) {}
  DLTensor* view() { return slice(0, values.size()); }
  // A view of `count` elements from `first` (through byte_offset, as the host's views are).
  DLTensor* slice(std::size_t first, std::size_t count) {
    shape_ = static_cast<int64_t>(count);
    dl_ = DLTensor{};
    dl_.data = values.data();
    dl_.device = DLDevice{kDLCPU, 0};
    dl_.ndim = 1;
    dl_.dtype = dtype ? *dtype : dtype_of<T>();
    dl_.shape = &shape_;
    dl_.byte_offset = first * sizeof(T);
    return &dl_;
  }
  std::vector<T> values;
  std::optional<DLDataType> dtype;  // overrides T's (bfloat16 bits, float16 bits)

 private:
  int64_t shape_ = 0;
  DLTensor dl_{};
};

// ---- the launcher side -------------------------------------------------------------------

inline std::string self_executable() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

struct Job {
  int status = -1;
  std::string output;
  double seconds = 0;
};

// Runs this executable on `ranks` ranks under mpirun with Boost.Test arguments `args`, the
// environment assignments `env` ("A=1 B=2") and extra mpirun options. `timeout 60` bounds it
// whatever happens inside.
inline Job mpirun(int ranks, const std::string& args, const std::string& env = "",
                  const std::string& mpirun_options = "") {
  const std::string command = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + env +
                              " timeout 60 mpirun --oversubscribe " + mpirun_options + " -np " +
                              std::to_string(ranks) + " " + quote(self_executable()) + " " + args;
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult result = run_process(command);
  Job job;
  job.status = result.status;
  job.output = result.output;
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return job;
}

inline std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace plexus::test
