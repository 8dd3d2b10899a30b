// Who this process is in a multi-process job, read from the launcher's environment:
//   mpirun (OpenMPI: OMPI_COMM_WORLD_*; MPICH/Hydra: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID),
//   srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID inside a job step), or
//   the RANK / WORLD_SIZE / LOCAL_RANK convention (torchrun and most schedulers),
// and a single process when none of them is set. Reading it is a pure function of the
// variables, so it is unit-tested without launching anything.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace plexus::distributed {

struct LaunchEnv {
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t local_rank = 0;         // among the ranks of this machine: picks the GPU
  int32_t local_world_size = 1;   // ranks on this machine (0 when the launcher does not say)
  std::string launcher = "none";  // "mpirun", "srun", "env" or "none"
  std::string master_addr;        // MASTER_ADDR / MASTER_PORT, when set (TCP rendezvous)
  std::string master_port;

  // Throws std::runtime_error naming the variables when they are malformed or contradict each
  // other (a rank outside the world, RANK without WORLD_SIZE, two launchers that disagree).
  static LaunchEnv detect(const std::function<const char*(const char*)>& lookup);
  static LaunchEnv from_process();  // detect() over this process's environment

  // "rank 1 of 4 (local 1, from mpirun)" for logs and messages.
  std::string describe() const;
};

}  // namespace plexus::distributed
