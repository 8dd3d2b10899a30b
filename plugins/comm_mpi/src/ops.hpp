// The operations of plx_comm_v1 as Operations: each function checks its arguments (throwing
// Error before anything is sent, so a bad call never leaves the ranks out of step), describes
// the MPI calls that carry it out and submits it to the communicator's worker.
#pragma once

#include <cstdint>
#include <memory>

#include "communicator.hpp"
#include "plexus/tensor.h"

namespace plexus::comm_mpi::ops {

std::shared_ptr<Operation> all_reduce(Communicator& comm, const DLTensor* send, DLTensor* recv, int32_t op);
std::shared_ptr<Operation> all_gather(Communicator& comm, const DLTensor* send, DLTensor* recv);
std::shared_ptr<Operation> reduce_scatter(Communicator& comm, const DLTensor* send, DLTensor* recv,
                                          int32_t op);
std::shared_ptr<Operation> all_to_all_v(Communicator& comm, const DLTensor* send, const int64_t* send_counts,
                                        const int64_t* send_offsets, DLTensor* recv,
                                        const int64_t* recv_counts, const int64_t* recv_offsets);
std::shared_ptr<Operation> broadcast(Communicator& comm, DLTensor* buffer, int32_t root);
std::shared_ptr<Operation> send(Communicator& comm, const DLTensor* buffer, int32_t peer, int32_t tag);
std::shared_ptr<Operation> recv(Communicator& comm, DLTensor* buffer, int32_t peer, int32_t tag);
std::shared_ptr<Operation> barrier(Communicator& comm);

// What a split produces on this rank: MPI_COMM_NULL for a negative color.
struct SplitResult {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm probe_comm = MPI_COMM_NULL;
};
// A collective like the others (so it is ordered, timed and diagnosed): the ranks exchange
// (color, key) with a non-blocking all-gather, then, every rank being known to have arrived, the
// worker calls MPI_Comm_split and duplicates the result for its side channel.
std::shared_ptr<Operation> split(Communicator& comm, int32_t color, int32_t key,
                                 std::shared_ptr<SplitResult> result);

}  // namespace plexus::comm_mpi::ops
