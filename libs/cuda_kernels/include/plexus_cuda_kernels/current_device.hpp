// plexus_cuda_kernels: makes one CUDA device current for a scope. Every entry into a plugin's
// CUDA path (a call, a state's release, creation and destruction) may come from a thread whose
// current device is another one, and kernels, cuBLAS and events all work on the current device;
// the host and the other plugins keep theirs, so the previous device comes back on every path.
#pragma once

namespace plexus::cuda_kernels {

class CurrentDevice {
 public:
  // Throws CudaError when the device cannot be made current.
  explicit CurrentDevice(int device);
  ~CurrentDevice();  // restores the previous device (errors ignored: nothing to report them to)
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace plexus::cuda_kernels
