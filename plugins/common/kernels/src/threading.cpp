#include "plexus_kernels/threading.hpp"

#include <dlfcn.h>
#include <omp.h>

#include <mutex>
#include <string>

#if PLEXUS_KERNELS_HAVE_OPENBLAS
// Declared here rather than taken from cblas.h: Debian's cblas.h may be another vendor's.
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
}
#endif

namespace plexus::kernels {

void use_single_threaded_blas() noexcept {
#if PLEXUS_KERNELS_HAVE_OPENBLAS
  openblas_set_num_threads(1);
#endif
}

bool set_blas_threads(int n) noexcept {
#if PLEXUS_KERNELS_HAVE_OPENBLAS
  openblas_set_num_threads(n);
  return true;
#else
  (void)n;
  return false;
#endif
}

bool pin_openmp_runtime() noexcept {
  // Find the file that defines an OpenMP entry point (libgomp, libomp, ...) and take a reference
  // to it that is never released: RTLD_NOLOAD gets the already loaded library, RTLD_NODELETE
  // keeps it mapped even after every handle is closed.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&omp_get_max_threads), &info) == 0 || info.dli_fname == nullptr)
    return false;
  return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) != nullptr;
}

bool init_for_plugin() noexcept {
  use_single_threaded_blas();
  return pin_openmp_runtime();
}

const char* threading_description() noexcept {
  static std::string text;
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
#if PLEXUS_KERNELS_HAVE_OPENBLAS
  text = std::string(openblas_get_config()) + " (" + std::to_string(openblas_get_num_threads()) +
         " BLAS threads)";
#else
  text = "CBLAS (not OpenBLAS)";
#endif
  text += ", OpenMP " + std::to_string(omp_get_max_threads()) + " threads";
  return text.c_str();
}

}  // namespace plexus::kernels
