#include "plexus/core/distributed/launch_env.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string_view>

namespace plexus::distributed {
namespace {

using Lookup = std::function<const char*(const char*)>;

std::optional<int32_t> read_int(const Lookup& lookup, const char* name) {
  const char* text = name[0] != '\0' ? lookup(name) : nullptr;
  if (text == nullptr) return std::nullopt;
  const std::string_view view(text);
  int32_t value = 0;
  const auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
  if (view.empty() || error != std::errc() || end != view.data() + view.size() || value < 0)
    throw std::runtime_error("environment variable " + std::string(name) + "='" + std::string(view) +
                             "' is not a non-negative integer");
  return value;
}

// One launcher's view: its rank and size variables, both or neither set.
struct Source {
  const char* launcher;
  const char* rank_var;
  const char* size_var;
  const char* local_rank_var;
  const char* local_size_var;
};

std::optional<LaunchEnv> read_source(const Lookup& lookup, const Source& source) {
  const std::optional<int32_t> rank = read_int(lookup, source.rank_var);
  const std::optional<int32_t> size = read_int(lookup, source.size_var);
  if (!rank && !size) return std::nullopt;
  if (!rank || !size)
    throw std::runtime_error(std::string(rank ? source.rank_var : source.size_var) + " is set but " +
                             (rank ? source.size_var : source.rank_var) + " is not: a " + source.launcher +
                             " launch sets both");
  if (*size < 1 || *rank >= *size)
    throw std::runtime_error(std::string(source.rank_var) + "=" + std::to_string(*rank) +
                             " is not a rank of " + source.size_var + "=" + std::to_string(*size));
  LaunchEnv env;
  env.launcher = source.launcher;
  env.rank = *rank;
  env.world_size = *size;
  env.local_rank = read_int(lookup, source.local_rank_var).value_or(0);
  env.local_world_size = read_int(lookup, source.local_size_var).value_or(0);
  if (env.local_world_size > 0 && env.local_rank >= env.local_world_size)
    throw std::runtime_error(std::string(source.local_rank_var) + "=" + std::to_string(env.local_rank) +
                             " is not below " + source.local_size_var + "=" +
                             std::to_string(env.local_world_size));
  return env;
}

}  // namespace

LaunchEnv LaunchEnv::detect(const Lookup& lookup) {
  // A launcher's own variables first; RANK/WORLD_SIZE last since they are also a common
  // leftover in interactive shells. srun's only count inside a job step (an sbatch script
  // sees SLURM_PROCID too, as its single task).
  static constexpr Source kOpenMpi{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                   "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
  static constexpr Source kHydra{"mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
  // Slurm's per-node task counts may read "8(x2)"; the local world size is left unknown there.
  static constexpr Source kSlurm{"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", ""};
  static constexpr Source kEnv{"env", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};

  std::optional<LaunchEnv> found = read_source(lookup, kOpenMpi);
  if (!found) found = read_source(lookup, kHydra);
  if (!found && lookup("SLURM_STEP_ID") != nullptr) found = read_source(lookup, kSlurm);
  const std::optional<LaunchEnv> convention = read_source(lookup, kEnv);
  if (found && convention && (convention->rank != found->rank || convention->world_size != found->world_size))
    throw std::runtime_error("the environment names two different jobs: " + found->launcher + " says rank " +
                             std::to_string(found->rank) + " of " + std::to_string(found->world_size) +
                             ", RANK/WORLD_SIZE say " + std::to_string(convention->rank) + " of " +
                             std::to_string(convention->world_size) + " (unset RANK and WORLD_SIZE)");
  LaunchEnv env = found ? *found : convention ? *convention : LaunchEnv{};
  if (const char* addr = lookup("MASTER_ADDR")) env.master_addr = addr;
  if (const char* port = lookup("MASTER_PORT")) env.master_port = port;
  return env;
}

LaunchEnv LaunchEnv::from_process() {
  return detect([](const char* name) -> const char* { return std::getenv(name); });
}

std::string LaunchEnv::describe() const {
  if (launcher == "none") return "a single process";
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (local rank " +
         std::to_string(local_rank) + ", from " + launcher + ")";
}

}  // namespace plexus::distributed
