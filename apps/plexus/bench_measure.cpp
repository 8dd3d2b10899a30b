#include "plexus/bench_measure.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <memory>

#include "plexus/core/device.hpp"

namespace plexus::cli::bench {

Stats summarize(std::vector<double> samples_ms) {
  Stats s;
  s.samples_ms = samples_ms;
  if (samples_ms.empty()) return s;
  std::sort(samples_ms.begin(), samples_ms.end());
  const auto rank = [&](double q) {
    const auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(samples_ms.size())));
    return samples_ms[std::clamp<std::size_t>(k, 1, samples_ms.size()) - 1];
  };
  const std::size_t n = samples_ms.size();
  s.median = n % 2 == 1 ? samples_ms[n / 2] : 0.5 * (samples_ms[n / 2 - 1] + samples_ms[n / 2]);
  s.min = samples_ms.front();
  s.max = samples_ms.back();
  s.p10 = rank(0.1);
  s.p90 = rank(0.9);
  return s;
}

Stats time_runs(int warmup, int repeats, DLDevice device, const std::function<void()>& fn) {
  const auto once = [&] {
    fn();
    device::synchronize(device);  // nothing on the CPU
  };
  for (int i = 0; i < warmup; ++i) once();
  std::vector<double> ms;
  ms.reserve(static_cast<std::size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    once();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
  }
  return summarize(std::move(ms));
}

int cpu_threads() {
  return omp_get_max_threads();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "";
}

namespace {

// One device allocation, freed on scope exit.
struct Buffer {
  DLDevice device;
  void* data;
  Buffer(DLDevice d, std::size_t bytes) : device(d), data(device::allocate(d, bytes)) {}
  ~Buffer() { device::free(device, data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// Each thread copies one contiguous part with the C library's memcpy (vectorized, the fastest
// copy the machine offers a program): the bandwidth a memory-bound kernel can hope for.
void cpu_copy(void* dst, const void* src, std::size_t bytes) {
#pragma omp parallel
  {
    const auto thread = static_cast<std::size_t>(omp_get_thread_num());
    const auto threads = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t lines = bytes / 64;  // parts start on cache lines
    const std::size_t begin = lines * thread / threads * 64;
    const std::size_t end = thread + 1 == threads ? bytes : lines * (thread + 1) / threads * 64;
    std::memcpy(static_cast<std::byte*>(dst) + begin, static_cast<const std::byte*>(src) + begin,
                end - begin);
  }
}

}  // namespace

CopyBandwidth measure_copy(DLDevice device, std::size_t bytes, int repeats) {
  CopyBandwidth result;
  const std::size_t elements = std::max<std::size_t>(bytes / sizeof(float), 1);
  result.bytes = elements * sizeof(float);
  result.threads = device.device_type == kDLCPU ? cpu_threads() : 0;
  Buffer src(device, result.bytes), dst(device, result.bytes);
  if (device.device_type == kDLCPU) {
    // First touch on the threads that copy later (where memory is placed per thread).
    const auto n = static_cast<std::ptrdiff_t>(elements);
    auto* s = static_cast<float*>(src.data);
    auto* d = static_cast<float*>(dst.data);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = 0; i < n; ++i) {
      s[i] = static_cast<float>(i & 1023);
      d[i] = 0.0f;
    }
  } else {
    device::zero(device, src.data, result.bytes);
  }
  // A sample copies at least 1 MiB (up to 16 times a small array), so the clock can time it;
  // samples go on to max(repeats, 50) but stop after half a second: on a busy machine every
  // OpenMP region of a small copy can wait a scheduler tick for its threads.
  const std::size_t per_sample = std::clamp<std::size_t>((std::size_t{1} << 20) / result.bytes, 1, 16);
  const auto copy = [&] {
    for (std::size_t k = 0; k < per_sample; ++k) {
      if (device.device_type == kDLCPU)
        cpu_copy(dst.data, src.data, result.bytes);
      else
        device::copy(dst.data, device, src.data, device, result.bytes);
    }
    device::synchronize(device);
  };
  copy();  // warm-up: pages mapped, caches and clocks settled
  copy();
  const auto begin = std::chrono::steady_clock::now();
  const auto elapsed_s = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  };
  std::vector<double> ms;
  const auto wanted = static_cast<std::size_t>(std::max(repeats, 50));
  while (ms.empty() || (ms.size() < wanted && elapsed_s() < 0.5)) {
    const auto t0 = std::chrono::steady_clock::now();
    copy();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                 static_cast<double>(per_sample));
  }
  result.stats = summarize(std::move(ms));
  result.gb_per_s = 2.0 * static_cast<double>(result.bytes) / (result.stats.min * 1e6);
  return result;
}

}  // namespace plexus::cli::bench
