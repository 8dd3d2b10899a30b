// plexus_kernels: the threading model.
//
// All parallelism of the kernels is OpenMP. BLAS is meant to run single-threaded: large matmuls
// are split across the OpenMP threads by gemm_parallel (each thread calls BLAS on its slice), and
// the many small per-(batch, head) attention matmuls run inside OpenMP parallel loops. A plugin
// calls init_for_plugin() once when it is loaded, so that OpenBLAS's own thread pool never competes
// with OpenMP's for the same cores (measured on 2 cores: attention 3-7x and MLP 1.4-2x slower with
// both pools; see README.md). Results do not depend on the BLAS thread count; only speed does.
#pragma once

namespace plexus::kernels {

// Sets OpenBLAS to one thread (process-wide). A no-op when the BLAS is not OpenBLAS.
void use_single_threaded_blas() noexcept;

// Sets OpenBLAS's own thread pool to n threads (process-wide), for a benchmark that measures what
// the BLAS reaches by itself. Returns false (and does nothing) when the BLAS is not OpenBLAS.
bool set_blas_threads(int n) noexcept;

// Keeps the OpenMP runtime loaded for the life of the process (RTLD_NODELETE). A plugin that
// uses OpenMP must call this when it is loaded: libgomp is not marked "nodelete", so unloading
// the plugin (the host does, when it is destroyed) would also unload libgomp while its worker
// threads are parked inside it, and they crash. The plugin itself stays unloadable. Returns false
// when the runtime could not be found or pinned.
bool pin_openmp_runtime() noexcept;

// What a plugin calls from its init hook: use_single_threaded_blas() and pin_openmp_runtime().
// Returns pin_openmp_runtime()'s result.
bool init_for_plugin() noexcept;

// "OpenBLAS <config> (<n> threads), OpenMP <m> threads": for logs and benchmarks.
const char* threading_description() noexcept;

}  // namespace plexus::kernels
