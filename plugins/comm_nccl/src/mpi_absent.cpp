// mpi_bootstrap.hpp in a build without MPI: ranks bootstrap over TCP only.
#include "mpi_bootstrap.hpp"

#include "support.hpp"

namespace plexus::comm_nccl {

bool mpi_built() noexcept {
  return false;
}

void mpi_broadcast_from_rank0(void*, std::size_t, int32_t, int32_t) {
  throw Error(PLX_ERR_UNSUPPORTED,
              "this comm_nccl was built without MPI (PLEXUS_WITH_MPI): it cannot bootstrap "
              "over MPI; use bootstrap \"tcp\" with MASTER_ADDR and MASTER_PORT");
}

void mpi_abort_job(int) noexcept {}

void mpi_finalize_if_ours() noexcept {}

}  // namespace plexus::comm_nccl
