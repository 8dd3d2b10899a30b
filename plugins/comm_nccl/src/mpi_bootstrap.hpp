// The MPI side of comm_nccl, present when the plugin was built with MPI (PLEXUS_HAVE_MPI;
// mpi_bootstrap.cpp) and absent otherwise (mpi_absent.cpp): under mpirun, rank 0's NCCL unique id
// reaches the other ranks through MPI_Bcast instead of TCP, and a job-wide abort is MPI_Abort.
#pragma once

#include <cstddef>
#include <cstdint>

namespace plexus::comm_nccl {

// Whether this build of the plugin has MPI.
bool mpi_built() noexcept;

// Broadcasts `size` bytes at `data` from MPI_COMM_WORLD's rank 0. Initializes MPI first when no one
// has (MPI_THREAD_MULTIPLE requested), after making libmpi's symbols global: the host loads
// plugins RTLD_LOCAL, and Open MPI's own components, which it dlopens, need libmpi's symbols.
// Throws Error unless MPI's rank and size are `rank` and `world_size` (the launcher's view).
void mpi_broadcast_from_rank0(void* data, std::size_t size, int32_t rank, int32_t world_size);

// MPI_Abort(MPI_COMM_WORLD, code) when MPI is initialized and not finalized (it ends every rank of
// the job); returns otherwise.
void mpi_abort_job(int code) noexcept;

// At plugin unload: MPI_Finalize when this plugin initialized MPI and no one finalized it yet.
void mpi_finalize_if_ours() noexcept;

}  // namespace plexus::comm_nccl
