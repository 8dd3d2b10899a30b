// Forming the NCCL world: who this process is (from the host, or from the launcher's environment
// when the host passes -1), which GPU it drives, and how rank 0's unique id reaches every rank
// (MPI_Bcast under mpirun in a build with MPI, otherwise plexus_rendezvous over TCP from
// MASTER_ADDR:MASTER_PORT) before ncclCommInitRank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "communicator.hpp"
#include "plexus/comm.h"

namespace plexus::comm_nccl {

// The component's options (the schema is in plugin.cpp).
struct WorldOptions {
  std::string bootstrap = "auto";  // "auto", "tcp" or "mpi"
  uint32_t init_timeout_ms = 0;    // 0: the communicator's timeout_ms, or 10 minutes without one
};

// Throws Error naming what is missing or wrong (the environment variable, the device, the peer).
std::unique_ptr<Communicator> create_world(const plx_comm_init_args& args, const WorldOptions& options);

}  // namespace plexus::comm_nccl
