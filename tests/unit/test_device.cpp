// The device layer as every machine sees it: names, parsing, the refusal of devices this build or
// machine lacks (with the reason), and host tensors moving between places.
#define BOOST_TEST_MODULE device
#include <boost/test/unit_test.hpp>

#include <cfenv>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "plexus/core/device.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "plexus/tensor.h"

#if defined(__GLIBC__)
#include <malloc.h>  // mallinfo2
#endif

namespace device = plexus::device;

namespace {

std::string refusal(DLDevice d) {
  try {
    device::require(d);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(names_and_parsing) {
  BOOST_TEST(device::name(DLDevice{kDLCPU, 0}) == "cpu:0");
  BOOST_TEST(device::name(DLDevice{kDLCUDA, 3}) == "cuda:3");
  BOOST_TEST(device::parse("cpu").device_type == kDLCPU);
  const DLDevice gpu = device::parse("cuda:2");
  BOOST_TEST(gpu.device_type == kDLCUDA);
  BOOST_TEST(gpu.device_id == 2);
  BOOST_TEST(device::parse("cuda").device_id == 0);
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cpu:1", "cuda:-1", "", "cuda:12345"}) {
    try {
      device::parse(bad);
      BOOST_ERROR("parse accepted \"" << bad << "\"");
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find("\"" + std::string(bad) + "\"") != std::string::npos, e.what());
    }
  }
}

BOOST_AUTO_TEST_CASE(the_cpu_is_always_there_and_other_devices_say_why_not) {
  BOOST_CHECK_NO_THROW(device::require(DLDevice{kDLCPU, 0}));
  BOOST_TEST(refusal(DLDevice{kDLOpenCL, 0}).find("not supported") != std::string::npos);
  const int gpus = device::cuda_device_count();
  const std::string beyond = refusal(DLDevice{kDLCUDA, gpus});  // one past the last GPU
  BOOST_TEST(!beyond.empty());
  BOOST_TEST(beyond.find("cuda:" + std::to_string(gpus)) != std::string::npos, beyond);
  if (!device::cuda_built())
    BOOST_TEST(beyond.find("no CUDA support") != std::string::npos, beyond);
  else if (gpus == 0)
    BOOST_TEST(beyond.find("no CUDA GPU") != std::string::npos, beyond);
}

BOOST_AUTO_TEST_CASE(tensors_copy_and_refuse_mismatches) {
  plexus::Tensor a({2, 3}, plx_dtype_f32());
  for (int i = 0; i < 6; ++i) a.data<float>()[i] = static_cast<float>(i) + 0.5f;
  const plexus::Tensor b = a.to(DLDevice{kDLCPU, 0});
  BOOST_TEST(b.raw() != a.raw());
  BOOST_TEST(std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
  plexus::Tensor wrong({3, 2}, plx_dtype_f32());
  BOOST_CHECK_THROW(wrong.copy_from(a), std::invalid_argument);
  if (device::cuda_device_count() == 0)
    BOOST_CHECK_THROW(plexus::Tensor({4}, plx_dtype_f32(), DLDevice{kDLCUDA, 0}), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(tensors_are_zeroed_unless_asked_not_to_be) {
  // The heap hands a freed block straight back for the same size (8 KiB: heap, not mmap, memory):
  // fill one, free it, and the zero-filling constructor must still give zeros in what it gets.
  const std::vector<int64_t> shape{32, 64};
  {
    plexus::Tensor dirty = plexus::Tensor::uninitialized(shape, plx_dtype_f32());
    BOOST_TEST(dirty.numel() == 32 * 64);
    BOOST_TEST(dirty.bytes() == 32u * 64u * 4u);
    std::memset(dirty.raw(), 0xff, dirty.bytes());
  }
  const plexus::Tensor clean(shape, plx_dtype_f32());
  bool all_zero = true;
  for (int64_t i = 0; i < clean.numel(); ++i) all_zero = all_zero && clean.data<float>()[i] == 0.0f;
  BOOST_TEST(all_zero);
  BOOST_CHECK_THROW(plexus::Tensor::uninitialized({2, -1}, plx_dtype_f32()), std::invalid_argument);
}

// Blocks of any size come from the heap once the policy is on, not from mmap (which hands them
// back to the kernel at free, so the next step faults every page in again).
BOOST_AUTO_TEST_CASE(the_heap_policy_serves_large_blocks_from_the_heap) {
#if defined(__GLIBC__)
  const char* before = std::getenv("GLIBC_TUNABLES");
  const std::string saved = before != nullptr ? before : "";
  ::unsetenv("GLIBC_TUNABLES");
  BOOST_TEST_REQUIRE(device::retain_freed_host_memory());
  if (before != nullptr) ::setenv("GLIBC_TUNABLES", saved.c_str(), 1);
  const std::size_t mapped_before = mallinfo2().hblkhd;
  constexpr std::size_t kLarge = std::size_t{96} << 20;  // above glibc's largest mmap threshold
  void* block = std::malloc(kLarge);
  BOOST_TEST_REQUIRE(block != nullptr);
  std::memset(block, 1, kLarge);
  BOOST_TEST(mallinfo2().hblkhd == mapped_before, "a 96 MiB block was served by mmap");
  std::free(block);
#else
  BOOST_TEST(!device::retain_freed_host_memory());
#endif
}

BOOST_AUTO_TEST_CASE(the_heap_policy_defers_to_the_users_glibc_tunables) {
#if defined(__GLIBC__)
  const char* before = std::getenv("GLIBC_TUNABLES");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1000000", 1);
  BOOST_TEST(!device::retain_freed_host_memory());
  ::unsetenv("GLIBC_TUNABLES");
  BOOST_TEST(device::retain_freed_host_memory());
  if (before != nullptr) ::setenv("GLIBC_TUNABLES", saved.c_str(), 1);
#else
  BOOST_TEST(!device::retain_freed_host_memory());
#endif
}

#if defined(__x86_64__) || defined(__aarch64__)  // where flush_denormals has a mode to set
BOOST_AUTO_TEST_CASE(flushing_denormals_makes_subnormal_arithmetic_zero_in_new_threads_too) {
  std::fenv_t saved;  // the mode is per thread and part of the floating-point environment
  BOOST_TEST_REQUIRE(std::fegetenv(&saved) == 0);
  // volatile: the compiler must not fold the products at compile time, in IEEE arithmetic.
  volatile float tiny = 1e-39f;  // subnormal (FLT_MIN is 1.18e-38)
  volatile float one = 1.0f;
  BOOST_TEST_REQUIRE(tiny * one != 0.0f);  // gradual underflow before
  BOOST_TEST(device::flush_denormals());
  BOOST_TEST(tiny * one == 0.0f);  // a subnormal input is read as zero
  volatile float small = 1e-20f;
  BOOST_TEST(small * small == 0.0f);  // and a subnormal result is written as zero
  float in_thread = -1.0f;
  std::thread([&] { in_thread = tiny * one; }).join();
  BOOST_TEST(in_thread == 0.0f);  // a thread created afterwards inherits the mode
  BOOST_TEST_REQUIRE(std::fesetenv(&saved) == 0);  // restored for the cases after this one
  BOOST_TEST(tiny * one != 0.0f);
}
#endif
