// Devices the host can place tensors and work on: the CPU always, CUDA GPUs when this build has
// the CUDA runtime (PLEXUS_WITH_CUDA) and the machine has a GPU. Device memory comes from one
// caching allocator per GPU (plexus/core/memory/caching_allocator.hpp).
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <string>

#include "plexus/core/memory/caching_allocator.hpp"

namespace plexus::device {

// "cpu:0", "cuda:1", ...
std::string name(DLDevice device);
// Parses "cpu" or "cuda" or "cuda:N"; throws std::invalid_argument naming the text otherwise.
DLDevice parse(const std::string& text);

// Whether this build has the CUDA runtime compiled in.
bool cuda_built();
// GPUs visible to this process (0 when none, or when the build has no CUDA).
int cuda_device_count();
// Throws std::runtime_error saying why `device` cannot be used here (no CUDA in this build, no
// GPU, device id out of range), or returns.
void require(DLDevice device);

// Makes the C heap keep memory freed by one training step for the next instead of returning it
// to the kernel (glibc only; a no-op elsewhere, or when GLIBC_TUNABLES already sets malloc
// options). Process-wide, so applications call it at start-up, not the library. Returns whether
// the policy was applied.
bool retain_freed_host_memory();

// Makes the calling thread treat subnormal floats as zero, as inputs and as results (x86: the
// MXCSR's FTZ and DAZ bits; AArch64: FPCR.FZ). Arithmetic on a subnormal costs some hundred
// cycles instead of a few, and training produces them where values decay: Sinkhorn's products of
// small probabilities, Adam's squared gradients. Values below 1.2e-38 carry nothing a float32
// step can use; PyTorch offers the same switch (torch.set_flush_denormal). The mode is per
// thread and threads inherit it from the thread that creates them, so call it before OpenMP's
// and BLAS's threads exist. Returns false where the CPU has no such mode here.
bool flush_denormals();

// Memory on the device: CPU memory is 64-byte aligned heap memory; CUDA memory comes from the
// device's caching allocator, tied to `stream` (a cudaStream_t, nullptr for the default stream).
void* allocate(DLDevice device, std::size_t bytes, const void* stream = nullptr);
void free(DLDevice device, void* ptr) noexcept;
void zero(DLDevice device, void* ptr, std::size_t bytes, const void* stream = nullptr);
// Copies between any two devices (host<->device, device<->device); synchronous.
void copy(void* dst, DLDevice dst_device, const void* src, DLDevice src_device, std::size_t bytes);
void synchronize(DLDevice device);
// Native streams and events of a CUDA device (cudaStream_t / cudaEvent_t as void*). A lower
// priority number is a higher priority, as in CUDA; it is clamped to the device's range.
void* stream_create(DLDevice device, int priority);
void stream_destroy(DLDevice device, void* stream) noexcept;
void stream_synchronize(DLDevice device, void* stream);
void* event_create(DLDevice device);
void event_destroy(DLDevice device, void* event) noexcept;
void event_record(DLDevice device, void* event, void* stream);
void stream_wait_event(DLDevice device, void* stream, void* event);
void event_synchronize(DLDevice device, void* event);

// The caching allocator's counters for a CUDA device (zeros for the CPU).
memory::AllocatorStats allocator_stats(DLDevice device);

}  // namespace plexus::device
