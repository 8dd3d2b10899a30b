// mpi_bootstrap.hpp with MPI (the plugin links libmpi; see CMakeLists.txt).
#include "mpi_bootstrap.hpp"

#include <dlfcn.h>

#define OMPI_SKIP_MPICXX 1  // the C API only: no C++ bindings compiled into the plugin
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <string>

#include "plexus/cpp/host.hpp"
#include "support.hpp"

namespace plexus::comm_nccl {
namespace {

std::atomic<bool> g_initialized_here{false};

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

// The host dlopens this plugin RTLD_LOCAL, so libmpi (its dependency) is loaded local too, and the
// components Open MPI dlopens inside MPI_Init cannot resolve libmpi's symbols. Reopening the loaded
// library with RTLD_GLOBAL makes them visible (RTLD_NOLOAD: never load another copy); RTLD_NODELETE
// keeps it loaded after the plugin is unloaded, since MPI's threads may still run in it.
void promote_libmpi() {
  constexpr int kFlags = RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD | RTLD_NODELETE;
  void* handle = ::dlopen("libmpi.so.40", kFlags);  // Open MPI 3 and 4
  if (handle == nullptr) {                          // another MPI: the library that defines MPI_Init
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&MPI_Init), &info) != 0 && info.dli_fname != nullptr)
      handle = ::dlopen(info.dli_fname, kFlags);
  }
  if (handle != nullptr) return;
  const char* why = ::dlerror();
  try {
    plexus::sdk::Host::current().warn(
        std::string("nccl: could not make libmpi's symbols global (") +
        (why != nullptr ? why : "not loaded") +
        "); if MPI_Init cannot load its components, preload libmpi (LD_PRELOAD)");
  } catch (...) {
  }
}

}  // namespace

bool mpi_built() noexcept {
  return true;
}

void mpi_broadcast_from_rank0(void* data, std::size_t size, int32_t rank, int32_t world_size) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized != 0)
    throw Error(PLX_ERR_COMM,
                "MPI was already finalized in this process: the NCCL world cannot bootstrap over it");
  if (initialized == 0) {
    promote_libmpi();
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) throw Error(PLX_ERR_COMM, "MPI_Init_thread failed: " + mpi_error_text(rc));
    g_initialized_here = true;
  }
  int mpi_rank = -1, mpi_size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  if (mpi_rank != rank || mpi_size != world_size)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "MPI_COMM_WORLD says this process is rank " +
                                              std::to_string(mpi_rank) + " of " + std::to_string(mpi_size) +
                                              ", but the NCCL world was asked for rank " +
                                              std::to_string(rank) + " of " + std::to_string(world_size) +
                                              ": bootstrapping over MPI needs the same ranks");
  const int rc = MPI_Bcast(data, static_cast<int>(size), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS)
    throw Error(PLX_ERR_COMM, "MPI_Bcast of the NCCL unique id failed: " + mpi_error_text(rc));
}

void mpi_abort_job(int code) noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized != 0 && finalized == 0) MPI_Abort(MPI_COMM_WORLD, code);
}

void mpi_finalize_if_ours() noexcept {
  if (!g_initialized_here) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) MPI_Finalize();
}

}  // namespace plexus::comm_nccl
