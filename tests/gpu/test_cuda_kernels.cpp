// The CUDA kernel library (libs/cuda_kernels) against the CPU library
// (plugins/common/kernels) and the engine's AdamW: every kernel on random inputs of awkward sizes
// (not multiples of 32), fp32 and bf16, forward and backward.
//
// Tolerances, |gpu - cpu| <= rel * |cpu| + abs, with abs often a multiple of the largest |cpu|
// (written "scale") because cancellation makes the relative error of small entries meaningless:
// - fp32 with the same operations in another order (TF32 off): elementwise kernels and norms agree
//   to a few ulp, checked at 1e-5 relative (the CPU's exp/erf approximations are accurate to
//   ~1e-7, CUDA's expf/erff to 2 ulp); products and attention sum 40-70 terms each, checked at
//   1e-4 relative + 1e-5 (products) or 1e-4 (attention gradients) x scale. TF32 would give ~1e-3
//   and fail them.
// - bf16: inputs are rounded to bf16 and the CPU computes in fp32 on the same rounded values, so
//   the difference is the GPU's rounding of its outputs (at most 2^-9 relative) and of the bf16
//   intermediates it keeps (norms' xhat, attention's P and dS): 1e-2 relative, more (3e-2 x scale)
//   for attention gradients built from two rounded intermediates.
// - exact where the GPU performs the very same IEEE operations in the same order: embedding
//   (copies, and additions in token order), elementwise helpers, conversions, and AdamW (explicitly
//   rounded, no fused multiply-add): compared bit for bit.
// - the sum of squares is exact per term in double; only the order differs: 1e-12 relative.
//
// Without a CUDA device (or without the library) the whole module reports itself skipped (77).
#define BOOST_TEST_MODULE cuda_kernels
#include <boost/test/unit_test.hpp>

#include "skip_module.hpp"

#ifndef PLEXUS_TEST_HAVE_CUDA

PLEXUS_SKIP_MODULE_UNLESS(false,
                          "built without the CUDA kernel library (PLEXUS_WITH_CUDA=OFF, no CUDA toolkit, or "
                          "libs/cuda_kernels not part of the build)")
BOOST_AUTO_TEST_CASE(cuda_kernels_not_built) {}

#else

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "plexus/core/engine/optimizer.hpp"
#include "plexus_cuda_kernels/activation.hpp"
#include "plexus_cuda_kernels/adamw.hpp"
#include "plexus_cuda_kernels/attention.hpp"
#include "plexus_cuda_kernels/cross_entropy.hpp"
#include "plexus_cuda_kernels/device_buffer.hpp"
#include "plexus_cuda_kernels/elementwise.hpp"
#include "plexus_cuda_kernels/embedding.hpp"
#include "plexus_cuda_kernels/error.hpp"
#include "plexus_cuda_kernels/flash_attention.hpp"
#include "plexus_cuda_kernels/gemm.hpp"
#include "plexus_cuda_kernels/handle.hpp"
#include "plexus_cuda_kernels/norm.hpp"
#include "plexus_cuda_kernels/reduce.hpp"
#include "plexus_cuda_kernels/rope.hpp"
#include "plexus_cuda_kernels/types.hpp"
#include "plexus_kernels/activation.hpp"
#include "plexus_kernels/attention.hpp"
#include "plexus_kernels/cross_entropy.hpp"
#include "plexus_kernels/embedding.hpp"
#include "plexus_kernels/gemm.hpp"
#include "plexus_kernels/norm.hpp"
#include "plexus_kernels/rope.hpp"

namespace ck = plexus::cuda_kernels;
namespace k = plexus::kernels;
using Floats = std::vector<float>;

namespace {

// ---- skipping without a device ---------------------------------------------------------------

std::string& skip_reason() {
  static std::string reason;
  return reason;
}

bool cuda_device_present() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    skip_reason() = std::string("no usable CUDA device: cudaGetDeviceCount failed with ") +
                    cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
    return false;
  }
  if (count == 0) {
    skip_reason() = "no CUDA device: cudaGetDeviceCount found none";
    return false;
  }
  return true;
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(cuda_device_present(), skip_reason().c_str())

namespace {

// ---- data --------------------------------------------------------------------------------------

using Precisions = std::tuple<float, ck::bfloat16>;
template <class T>
constexpr bool kBf16 = std::is_same_v<T, ck::bfloat16>;

// The tolerance for T: the fp32 or the bf16 one.
template <class T>
constexpr double pick(double fp32, double bf16) {
  return kBf16<T> ? bf16 : fp32;
}

std::size_t sz(int64_t v) {
  return static_cast<std::size_t>(v);
}

Floats random_floats(std::size_t n, std::mt19937& rng, float scale = 1.0f, float offset = 0.0f) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Floats v(n);
  for (float& x : v) x = normal(rng) * scale + offset;
  return v;
}

std::vector<int32_t> random_ids(std::size_t n, int32_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> pick_id(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = pick_id(rng);
  return ids;
}

// Host values as the device stores them in T, and back.
template <class T>
std::vector<T> to_storage(const Floats& x) {
  if constexpr (kBf16<T>) {
    std::vector<ck::bfloat16> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = ck::to_bfloat16(x[i]);
    return out;
  } else {
    return x;
  }
}
template <class T>
Floats from_storage(const std::vector<T>& x) {
  if constexpr (kBf16<T>) {
    Floats out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = ck::to_float(x[i]);
    return out;
  } else {
    return x;
  }
}
// x as representable in T: what the CPU reference computes on.
template <class T>
Floats quantize(const Floats& x) {
  return from_storage<T>(to_storage<T>(x));
}
template <class T>
ck::DeviceArray<T> to_device(const Floats& x) {
  return ck::DeviceArray<T>(to_storage<T>(x));
}
template <class T>
Floats fetch(const ck::DeviceArray<T>& a) {
  return from_storage<T>(a.download());
}
template <class T>
T fetch_one(const T* device_pointer) {
  T value{};
  PLEXUS_CUDA_CHECK(cudaMemcpy(&value, device_pointer, sizeof(T), cudaMemcpyDeviceToHost), "test");
  return value;
}
template <class T>
void fill_nan(ck::DeviceArray<T>& a) {  // all bits set: NaN in fp32 and bf16
  PLEXUS_CUDA_CHECK(cudaMemset(a.data(), 0xff, a.size() * sizeof(T)), "test");
}

double max_abs(const Floats& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

// ---- comparisons -------------------------------------------------------------------------------

void expect_close(const Floats& got, const Floats& want, double rel, double abs, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(got.size() == want.size());
    std::size_t bad = 0;
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double err = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
      const double bound = rel * std::abs(static_cast<double>(want[i])) + abs;
      if (!(err <= bound)) {  // also catches NaN
        if (++bad <= 5) BOOST_ERROR("element " << i << ": gpu " << got[i] << " vs cpu " << want[i]);
      }
      if (err > worst) worst = err;
    }
    BOOST_TEST_MESSAGE(what << ": max |gpu - cpu| " << worst << " (rel " << rel << ", abs " << abs << ")");
    BOOST_TEST(bad == 0u);
  }
}

// Relative tolerance plus an absolute one scaled by the largest reference value.
void expect_close_scaled(const Floats& got, const Floats& want, double rel, double abs_of_scale,
                         const std::string& what) {
  expect_close(got, want, rel, abs_of_scale * max_abs(want), what);
}

void expect_bitwise(const Floats& got, const Floats& want, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(got.size() == want.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]) && ++bad <= 5)
        BOOST_ERROR("element " << i << ": gpu " << got[i] << " vs expected " << want[i]);
    BOOST_TEST(bad == 0u);
  }
}

// A CUDA stream for the duration of a test.
class Stream {
 public:
  Stream() { PLEXUS_CUDA_CHECK(cudaStreamCreate(&stream_), "test"); }
  ~Stream() { static_cast<void>(cudaStreamDestroy(stream_)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

void synchronize() {
  PLEXUS_CUDA_CHECK(cudaDeviceSynchronize(), "test");
}

}  // namespace

// ---- handle, errors ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(device_handle_and_errors) {
  int device = 0;
  PLEXUS_CUDA_CHECK(cudaGetDevice(&device), "test");
  cudaDeviceProp prop{};
  PLEXUS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "test");
  BOOST_TEST_MESSAGE("device " << device << ": " << prop.name << ", compute capability " << prop.major << "."
                               << prop.minor << ", " << prop.multiProcessorCount << " SMs");

  ck::Handle handle;
  BOOST_TEST((handle.stream() == nullptr));
  BOOST_TEST(handle.device() == device);
  BOOST_TEST(!handle.allow_tf32());
  BOOST_TEST((handle.blas() != nullptr));

  // A product on another stream, through a moved handle.
  Stream stream;
  ck::Handle moved = std::move(handle);
  moved.set_stream(stream.get());
  BOOST_TEST((moved.stream() == stream.get()));
  std::mt19937 rng(1);
  const Floats a = random_floats(5 * 7, rng), b = random_floats(7 * 3, rng);
  auto da = to_device<float>(a), db = to_device<float>(b);
  ck::DeviceArray<float> dc(5 * 3);
  ck::gemm(moved, ck::Trans::N, ck::Trans::N, 5, 3, 7, 1.0f, da.data(), 7, db.data(), 3, 0.0f, dc.data(), 3);
  PLEXUS_CUDA_CHECK(cudaStreamSynchronize(stream.get()), "test");
  Floats want(5 * 3);
  k::gemm<float>(k::Trans::N, k::Trans::N, 5, 3, 7, 1.0f, a.data(), 7, b.data(), 3, 0.0f, want.data(), 3);
  expect_close(fetch(dc), want, 1e-5, 1e-6, "gemm on a second stream");

  // Scratch grows and keeps its size.
  void* small = moved.scratch(100);
  BOOST_TEST((small != nullptr));
  BOOST_TEST((moved.scratch(50) == small));

  // Failed calls name the call and the kernel.
  BOOST_CHECK_EXCEPTION(ck::check_cuda(cudaErrorInvalidValue, "cudaSomething(x)", "some_kernel"),
                        std::runtime_error, [](const std::runtime_error& e) {
                          const std::string m = e.what();
                          return m.find("some_kernel") != std::string::npos &&
                                 m.find("cudaSomething(x)") != std::string::npos &&
                                 m.find("cudaErrorInvalidValue") != std::string::npos;
                        });
  BOOST_CHECK_NO_THROW(ck::check_cuda(cudaSuccess, "cudaSomething(x)", "some_kernel"));
  // Sizes beyond cuBLAS's int are refused before any call.
  const auto too_large = [&moved] {
    ck::gemm<float, float>(moved, ck::Trans::N, ck::Trans::N, int64_t{1} << 32, 1, 1, 1.0f, nullptr, 1,
                           nullptr, 1, 0.0f, nullptr, 1);
  };
  BOOST_CHECK_THROW(too_large(), std::invalid_argument);
}

// ---- gemm --------------------------------------------------------------------------------------

namespace {

struct GemmCase {
  ck::Trans ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  int64_t a_rows() const { return ta == ck::Trans::N ? m : k; }
  int64_t b_rows() const { return tb == ck::Trans::N ? k : n; }
  static GemmCase make(ck::Trans ta, ck::Trans tb) {
    GemmCase g{ta, tb, 37, 53, 71, 0, 0, 0};
    g.lda = (ta == ck::Trans::N ? g.k : g.m) + 3;  // padded rows
    g.ldb = (tb == ck::Trans::N ? g.n : g.k) + 5;
    g.ldc = g.n + 2;
    return g;
  }
};

k::Trans cpu(ck::Trans t) {
  return t == ck::Trans::T ? k::Trans::T : k::Trans::N;
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(gemm_matches_cpu, T, Precisions) {
  ck::Handle handle;
  std::mt19937 rng(2);
  const float alpha = 0.75f, beta = -0.5f;
  for (const ck::Trans ta : {ck::Trans::N, ck::Trans::T}) {
    for (const ck::Trans tb : {ck::Trans::N, ck::Trans::T}) {
      const GemmCase g = GemmCase::make(ta, tb);
      const std::string name =
          std::string("gemm ") + (ta == ck::Trans::T ? "T" : "N") + (tb == ck::Trans::T ? "T" : "N");
      const Floats a = quantize<T>(random_floats(sz(g.a_rows() * g.lda), rng));
      const Floats b = quantize<T>(random_floats(sz(g.b_rows() * g.ldb), rng));
      const Floats c0 = quantize<T>(random_floats(sz(g.m * g.ldc), rng));
      Floats want = c0;
      k::gemm<float>(cpu(ta), cpu(tb), g.m, g.n, g.k, alpha, a.data(), g.lda, b.data(), g.ldb, beta,
                     want.data(), g.ldc);
      auto da = to_device<T>(a), db = to_device<T>(b);
      auto dc = to_device<T>(c0);
      ck::gemm(handle, ta, tb, g.m, g.n, g.k, alpha, da.data(), g.lda, db.data(), g.ldb, beta, dc.data(),
               g.ldc);
      expect_close_scaled(fetch(dc), want, pick<T>(1e-4, 1e-2), pick<T>(1e-5, 1e-3), name);
      if constexpr (kBf16<T>) {
        // bf16 inputs, fp32 output: the products are exact in fp32 and accumulate in fp32, so the
        // result has fp32 accuracy.
        auto dc32 = to_device<float>(c0);
        ck::gemm(handle, ta, tb, g.m, g.n, g.k, alpha, da.data(), g.lda, db.data(), g.ldb, beta, dc32.data(),
                 g.ldc);
        expect_close_scaled(fetch(dc32), want, 1e-4, 1e-5, name + " (bf16 in, fp32 out)");
      } else {
        // TF32 when asked for: a sanity bound only (10-bit mantissa inputs).
        handle.set_allow_tf32(true);
        auto dtf = to_device<float>(c0);
        ck::gemm(handle, ta, tb, g.m, g.n, g.k, alpha, da.data(), g.lda, db.data(), g.ldb, beta, dtf.data(),
                 g.ldc);
        handle.set_allow_tf32(false);
        expect_close_scaled(fetch(dtf), want, 0.0, 2e-2, name + " (TF32 allowed)");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(gemm_strided_batched_matches_cpu, T, Precisions) {
  ck::Handle handle;
  std::mt19937 rng(3);
  const GemmCase g = GemmCase::make(ck::Trans::N, ck::Trans::T);
  const int64_t batch = 3;
  const int64_t sa = g.a_rows() * g.lda + 7, sb = g.b_rows() * g.ldb + 11, sc = g.m * g.ldc + 13;
  const Floats a = quantize<T>(random_floats(sz(batch * sa), rng));
  const Floats b = quantize<T>(random_floats(sz(batch * sb), rng));
  const Floats c0 = quantize<T>(random_floats(sz(batch * sc), rng));
  Floats want = c0;
  for (int64_t i = 0; i < batch; ++i)
    k::gemm<float>(k::Trans::N, k::Trans::T, g.m, g.n, g.k, 1.25f, a.data() + i * sa, g.lda,
                   b.data() + i * sb, g.ldb, 0.5f, want.data() + i * sc, g.ldc);
  auto da = to_device<T>(a), db = to_device<T>(b), dc = to_device<T>(c0);
  ck::gemm_strided_batched(handle, ck::Trans::N, ck::Trans::T, g.m, g.n, g.k, 1.25f, da.data(), g.lda, sa,
                           db.data(), g.ldb, sb, 0.5f, dc.data(), g.ldc, sc, batch);
  // The padding between the matrices holds c0 on both sides: it must be untouched.
  expect_close_scaled(fetch(dc), want, pick<T>(1e-4, 1e-2), pick<T>(1e-5, 1e-3), "strided batched gemm");
}

// ---- embedding ---------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(embedding_matches_cpu_exactly, T, Precisions) {
  ck::Handle handle;
  std::mt19937 rng(4);
  const int64_t vocab = 53, dim = 45, n = 77;  // 77 tokens over 53 ids: many repeats
  const std::vector<int32_t> ids = random_ids(sz(n), static_cast<int32_t>(vocab), rng);
  const Floats weight = random_floats(sz(vocab * dim), rng);
  ck::DeviceArray<int32_t> dids(ids);
  auto dweight = to_device<float>(weight);

  Floats want(sz(n * dim));
  k::embedding_forward<float>(n, dim, ids.data(), weight.data(), want.data());
  ck::DeviceArray<T> out(sz(n * dim));
  ck::embedding_forward(n, dim, vocab, dids.data(), dweight.data(), out.data(), handle.stream());
  expect_bitwise(fetch(out), quantize<T>(want), "embedding forward");

  // Backward: the same fp32 additions in the same (token) order as the CPU: bitwise equal, and so
  // deterministic.
  const Floats dout = quantize<T>(random_floats(sz(n * dim), rng));
  const Floats grad0 = random_floats(sz(vocab * dim), rng);
  Floats grad_want = grad0;
  k::embedding_backward<float>(n, dim, ids.data(), dout.data(), grad_want.data());
  auto ddout = to_device<T>(dout);
  for (int run = 0; run < 2; ++run) {
    auto dgrad = to_device<float>(grad0);
    ck::embedding_backward(handle, n, dim, vocab, dids.data(), ddout.data(), dgrad.data());
    expect_bitwise(fetch(dgrad), grad_want, "embedding backward, run " + std::to_string(run));
  }

  // An invalid id reads nothing out of bounds: its row is NaN, and the backward skips it.
  std::vector<int32_t> bad_ids = ids;
  bad_ids[5] = static_cast<int32_t>(vocab) + 3;
  bad_ids[60] = -7;
  ck::DeviceArray<int32_t> dbad(bad_ids);
  ck::embedding_forward(n, dim, vocab, dbad.data(), dweight.data(), out.data(), handle.stream());
  const Floats got = fetch(out);
  BOOST_TEST(std::isnan(got[sz(5 * dim)]));
  BOOST_TEST(std::isnan(got[sz(60 * dim + dim - 1)]));
  BOOST_TEST(got[sz(6 * dim)] == quantize<T>(want)[sz(6 * dim)]);
  auto dgrad = to_device<float>(grad0);
  BOOST_CHECK_NO_THROW(
      ck::embedding_backward(handle, n, dim, vocab, dbad.data(), ddout.data(), dgrad.data()));
  synchronize();

  // first_invalid_id agrees with the CPU's, with and without an allowed ignore index.
  ck::DeviceArray<int64_t> first(1);
  ck::first_invalid_id(n, dbad.data(), vocab, false, -1, first.data(), handle.stream());
  BOOST_TEST(fetch_one(first.data()) == k::first_invalid_id(n, bad_ids.data(), vocab));
  BOOST_TEST(fetch_one(first.data()) == 5);
  std::vector<int32_t> ignored = ids;
  ignored[3] = -1;
  ignored[70] = static_cast<int32_t>(vocab);
  ck::DeviceArray<int32_t> dignored(ignored);
  ck::first_invalid_id(n, dignored.data(), vocab, true, -1, first.data(), handle.stream());
  BOOST_TEST(fetch_one(first.data()) == k::first_invalid_id(n, ignored.data(), vocab, true, -1));
  BOOST_TEST(fetch_one(first.data()) == 70);
  ck::first_invalid_id(n, dids.data(), vocab, false, -1, first.data(), handle.stream());
  BOOST_TEST(fetch_one(first.data()) == -1);
}

// ---- norms -------------------------------------------------------------------------------------

namespace {

template <class T>
void check_norm(bool layer, int64_t rows, int64_t cols, uint32_t seed) {
  ck::Handle handle;
  std::mt19937 rng(seed);
  const std::string name =
      std::string(layer ? "layernorm " : "rmsnorm ") + std::to_string(rows) + "x" + std::to_string(cols);
  const float eps = 1e-5f;
  const Floats x = quantize<T>(random_floats(sz(rows * cols), rng, 2.0f, 0.5f));  // offset: the mean matters
  const Floats w = random_floats(sz(cols), rng, 0.2f, 1.0f);
  const Floats b = random_floats(sz(cols), rng, 0.1f);
  Floats y(x.size()), xhat(x.size()), rstd(sz(rows));
  if (layer)
    k::layernorm_forward<float>(rows, cols, x.data(), w.data(), b.data(), eps, y.data(), xhat.data(),
                                rstd.data());
  else
    k::rmsnorm_forward<float>(rows, cols, x.data(), w.data(), eps, y.data(), xhat.data(), rstd.data());

  auto dx_in = to_device<T>(x);
  auto dw = to_device<float>(w), db = to_device<float>(b);
  ck::DeviceArray<T> dy_out(x.size()), dxhat(x.size());
  ck::DeviceArray<float> drstd(sz(rows));
  if (layer)
    ck::layernorm_forward(rows, cols, dx_in.data(), dw.data(), db.data(), eps, dy_out.data(), dxhat.data(),
                          drstd.data(), handle.stream());
  else
    ck::rmsnorm_forward(rows, cols, dx_in.data(), dw.data(), eps, dy_out.data(), dxhat.data(), drstd.data(),
                        handle.stream());
  // Forward: one rounding of the outputs in bf16; rstd is fp32 from the same inputs either way.
  expect_close_scaled(fetch(dy_out), y, pick<T>(1e-5, 1e-2), pick<T>(1e-6, 1e-3), name + " y");
  expect_close_scaled(fetch(dxhat), xhat, pick<T>(1e-5, 1e-2), pick<T>(1e-6, 1e-3), name + " xhat");
  expect_close(fetch(drstd), rstd, 1e-5, 0.0, name + " rstd");

  // Backward from each side's own forward results; dw and db accumulate onto earlier values.
  const Floats dy = quantize<T>(random_floats(x.size(), rng));
  const Floats dw0 = random_floats(sz(cols), rng), db0 = random_floats(sz(cols), rng);
  Floats dx(x.size()), dw_want = dw0, db_want = db0;
  if (layer)
    k::layernorm_backward<float>(rows, cols, dy.data(), xhat.data(), rstd.data(), w.data(), dx.data(),
                                 dw_want.data(), db_want.data());
  else
    k::rmsnorm_backward<float>(rows, cols, dy.data(), xhat.data(), rstd.data(), w.data(), dx.data(),
                               dw_want.data());
  auto ddy = to_device<T>(dy);
  Floats first_dw;
  for (int run = 0; run < 2; ++run) {
    ck::DeviceArray<T> ddx(x.size());
    auto ddw = to_device<float>(dw0), ddb = to_device<float>(db0);
    if (layer)
      ck::layernorm_backward(handle, rows, cols, ddy.data(), dxhat.data(), drstd.data(), dw.data(),
                             ddx.data(), ddw.data(), ddb.data());
    else
      ck::rmsnorm_backward(handle, rows, cols, ddy.data(), dxhat.data(), drstd.data(), dw.data(), ddx.data(),
                           ddw.data());
    const Floats got_dw = fetch(ddw);
    if (run == 0) {
      // dx cancels (g w - mean - xhat dot); bf16 also carries xhat's rounding into dx and dw.
      expect_close_scaled(fetch(ddx), dx, pick<T>(1e-4, 1e-2), pick<T>(1e-5, 1e-2), name + " dx");
      expect_close_scaled(got_dw, dw_want, pick<T>(1e-5, 1e-2), pick<T>(1e-5, 5e-3), name + " dw");
      if (layer)
        expect_close_scaled(fetch(ddb), db_want, pick<T>(1e-5, 1e-2), pick<T>(1e-5, 5e-3), name + " db");
      first_dw = got_dw;
    } else {
      expect_bitwise(got_dw, first_dw, name + " dw is deterministic");
    }
  }

  // dx only, and dw only: the optional outputs are optional.
  ck::DeviceArray<T> ddx(x.size());
  if (layer)
    ck::layernorm_backward(handle, rows, cols, ddy.data(), dxhat.data(), drstd.data(), dw.data(), ddx.data(),
                           nullptr, nullptr);
  else
    ck::rmsnorm_backward(handle, rows, cols, ddy.data(), dxhat.data(), drstd.data(), dw.data(), ddx.data(),
                         nullptr);
  expect_close_scaled(fetch(ddx), dx, pick<T>(1e-4, 1e-2), pick<T>(1e-5, 1e-2), name + " dx alone");

  // norm_apply re-derives y from xhat.
  Floats y_apply(x.size());
  k::norm_apply<float>(rows, cols, xhat.data(), w.data(), layer ? b.data() : nullptr, y_apply.data());
  ck::DeviceArray<T> dapply(x.size());
  ck::norm_apply(rows, cols, dxhat.data(), dw.data(), layer ? db.data() : nullptr, dapply.data(),
                 handle.stream());
  expect_close_scaled(fetch(dapply), y_apply, pick<T>(1e-5, 1.5e-2), pick<T>(1e-6, 2e-3),
                      name + " norm_apply");
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(norms_match_cpu, T, Precisions) {
  for (const bool layer : {false, true}) {
    check_norm<T>(layer, 37, 203, 5);
    check_norm<T>(layer, 1031, 67, 6);  // many row blocks in the column reduction
    check_norm<T>(layer, 5, 1100, 7);   // rows longer than a block
  }
}

// ---- rope --------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(rope_tables_match_cpu) {
  const int64_t positions = 45, hd = 38, half = hd / 2;
  Floats cos_want(sz(positions * half)), sin_want(cos_want.size());
  k::rope_tables<float>(positions, hd, 10000.0, cos_want.data(), sin_want.data());
  ck::DeviceArray<float> dcos(cos_want.size()), dsin(cos_want.size());
  ck::rope_tables(positions, hd, 10000.0, dcos.data(), dsin.data(), nullptr);
  // Both round the same double expression to fp32; CUDA's pow/sin/cos are within 2 double ulp of
  // glibc's, so the floats agree to one fp32 ulp (1.2e-7 near 1).
  expect_close(fetch(dcos), cos_want, 0.0, 1.2e-7, "rope cos table");
  expect_close(fetch(dsin), sin_want, 0.0, 1.2e-7, "rope sin table");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rope_apply_matches_cpu, T, Precisions) {
  std::mt19937 rng(8);
  // The attention layer's use: the q heads and the key head of every group of Megatron's qkv.
  const int64_t batch = 2, seq = 45, heads = 6, groups = 2, hd = 38, per = heads / groups;
  const int64_t ld = (heads + 2 * groups) * hd, rows = batch * seq, half = hd / 2;
  std::vector<int64_t> cols;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j <= per; ++j) cols.push_back(g * (per + 2) * hd + j * hd);
  Floats cos_t(sz(seq * half)), sin_t(cos_t.size());
  k::rope_tables<float>(seq, hd, 10000.0, cos_t.data(), sin_t.data());
  auto dcos = to_device<float>(cos_t), dsin = to_device<float>(sin_t);
  const Floats x = quantize<T>(random_floats(sz(rows * ld), rng));
  for (const bool inverse : {false, true}) {
    Floats want = x;
    k::rope_apply<float>(want.data(), rows, seq, ld, cols.data(), static_cast<int64_t>(cols.size()), hd,
                         cos_t.data(), sin_t.data(), inverse);
    auto dx = to_device<T>(x);
    ck::rope_apply(dx.data(), rows, seq, ld, cols.data(), static_cast<int64_t>(cols.size()), hd, dcos.data(),
                   dsin.data(), inverse, nullptr);
    const Floats got = fetch(dx);
    expect_close_scaled(got, want, pick<T>(1e-5, 1e-2), pick<T>(1e-6, 1e-3),
                        std::string("rope ") + (inverse ? "inverse" : "forward"));
    // The value heads are not touched.
    Floats v_got, v_x;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < hd; ++c) {
          const auto i = sz(r * ld + g * (per + 2) * hd + (per + 1) * hd + c);
          v_got.push_back(got[i]);
          v_x.push_back(x[i]);
        }
    expect_bitwise(v_got, v_x, "rope leaves the value heads alone");
  }

  // More heads than one launch carries (64), and the round trip forward + inverse.
  const int64_t many = 70, hd4 = 4, ld4 = many * hd4, rows4 = 6, seq4 = 3;
  std::vector<int64_t> cols4;
  for (int64_t h = 0; h < many; ++h) cols4.push_back(h * hd4);
  Floats cos4(sz(seq4 * 2)), sin4(cos4.size());
  k::rope_tables<float>(seq4, hd4, 10000.0, cos4.data(), sin4.data());
  auto dcos4 = to_device<float>(cos4), dsin4 = to_device<float>(sin4);
  const Floats x4 = quantize<T>(random_floats(sz(rows4 * ld4), rng));
  Floats want4 = x4;
  k::rope_apply<float>(want4.data(), rows4, seq4, ld4, cols4.data(), many, hd4, cos4.data(), sin4.data(),
                       false);
  auto dx4 = to_device<T>(x4);
  ck::rope_apply(dx4.data(), rows4, seq4, ld4, cols4.data(), many, hd4, dcos4.data(), dsin4.data(), false,
                 nullptr);
  expect_close_scaled(fetch(dx4), want4, pick<T>(1e-5, 1e-2), pick<T>(1e-6, 1e-3), "rope over 70 heads");
  ck::rope_apply(dx4.data(), rows4, seq4, ld4, cols4.data(), many, hd4, dcos4.data(), dsin4.data(), true,
                 nullptr);
  expect_close_scaled(fetch(dx4), x4, pick<T>(1e-5, 2e-2), pick<T>(1e-6, 4e-3), "rope round trip");
}

// ---- attention ---------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(attention_layout_matches_cpu) {
  const auto g = ck::AttentionLayout::megatron(3, 45, 12, 4, 22);
  const auto c = k::AttentionLayout::megatron(3, 45, 12, 4, 22);
  BOOST_TEST(g.ld == c.ld);
  BOOST_TEST(g.k_offset == c.k_offset);
  BOOST_TEST(g.v_offset == c.v_offset);
  BOOST_TEST(g.q_group_stride == c.q_group_stride);
  BOOST_TEST(g.kv_group_stride == c.kv_group_stride);
  for (int64_t h = 0; h < 12; ++h) BOOST_TEST(g.q_column(h) == c.q_column(h));
  for (int64_t i = 0; i < 4; ++i) {
    BOOST_TEST(g.k_column(i) == c.k_column(i));
    BOOST_TEST(g.v_column(i) == c.v_column(i));
  }
  auto bad = g;
  bad.groups = 5;
  BOOST_CHECK_THROW(bad.validate(), std::invalid_argument);
}

namespace {

template <class T>
void check_attention(int64_t batch, int64_t seq, int64_t heads, int64_t groups, int64_t hd, uint32_t seed) {
  ck::Handle handle;
  std::mt19937 rng(seed);
  const std::string name = "attention B" + std::to_string(batch) + " S" + std::to_string(seq) + " H" +
                           std::to_string(heads) + " G" + std::to_string(groups) + " hd" + std::to_string(hd);
  const auto cl = k::AttentionLayout::megatron(batch, seq, heads, groups, hd);
  const auto gl = ck::AttentionLayout::megatron(batch, seq, heads, groups, hd);
  const int64_t tokens = batch * seq, out_cols = heads * hd;
  const Floats qkv = quantize<T>(random_floats(sz(tokens * cl.ld), rng));
  const Floats dout = quantize<T>(random_floats(sz(tokens * out_cols), rng));

  Floats out(sz(tokens * out_cols)), probs(sz(batch * heads * seq * seq)), dqkv(qkv.size());
  k::attention_forward<float>(cl, qkv.data(), out.data(), probs.data());
  k::attention_backward<float>(cl, qkv.data(), probs.data(), out.data(), dout.data(), dqkv.data());

  auto dqkv_in = to_device<T>(qkv);
  ck::DeviceArray<T> dout_gpu(out.size()), dprobs(probs.size());
  ck::attention_forward(handle, gl, dqkv_in.data(), dout_gpu.data(), dprobs.data());
  const Floats got_out = fetch(dout_gpu), got_probs = fetch(dprobs);
  expect_close_scaled(got_out, out, pick<T>(1e-4, 2e-2), pick<T>(1e-5, 1e-2), name + " out");
  // Probabilities are at most 1: an absolute bound (bf16: one rounding, 2^-9 near 1).
  expect_close(got_probs, probs, 0.0, pick<T>(2e-6, 4e-3), name + " probs");
  std::size_t unmasked = 0;
  for (int64_t bh = 0; bh < batch * heads; ++bh)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t t = s + 1; t < seq; ++t)
        unmasked += got_probs[sz((bh * seq + s) * seq + t)] != 0.0f ? 1 : 0;
  BOOST_TEST(unmasked == 0u, name << ": probabilities above the diagonal are zero");

  // Without kept probabilities (inference): the same output.
  ck::DeviceArray<T> dout_nop(out.size());
  ck::attention_forward<T>(handle, gl, dqkv_in.data(), dout_nop.data(), nullptr);
  expect_close_scaled(fetch(dout_nop), got_out, pick<T>(1e-5, 1e-2), pick<T>(1e-6, 1e-3),
                      name + " out without probs");

  // Backward from the GPU's own forward. dqkv starts as NaN: every q, k and v column (all of
  // Megatron's layout) must be written.
  auto ddout = to_device<T>(dout);
  ck::DeviceArray<T> ddqkv(qkv.size());
  fill_nan(ddqkv);
  ck::attention_backward(handle, gl, dqkv_in.data(), dprobs.data(), dout_gpu.data(), ddout.data(),
                         ddqkv.data());
  expect_close_scaled(fetch(ddqkv), dqkv, pick<T>(1e-4, 3e-2), pick<T>(1e-4, 3e-2), name + " dqkv");

  const auto without_probs = [&] {
    ck::attention_backward<T>(handle, gl, dqkv_in.data(), nullptr, dout_gpu.data(), ddout.data(),
                              ddqkv.data());
  };
  BOOST_CHECK_THROW(without_probs(), std::invalid_argument);
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(attention_matches_cpu, T, Precisions) {
  check_attention<T>(2, 45, 6, 2, 22, 9);   // grouped query heads
  check_attention<T>(1, 70, 4, 4, 16, 10);  // one head per group (multi-head)
  check_attention<T>(3, 33, 4, 1, 24, 11);  // one group (multi-query)
}

// ---- fused (flash) attention -------------------------------------------------------------------

namespace {

// Base-2 log-sum-exp of a query row's scaled scores, in double: what the flash forward keeps.
Floats reference_lse2(const k::AttentionLayout& l, const Floats& qkv) {
  Floats lse(sz(l.batch * l.heads * l.seq));
  const double scale = 1.0 / std::sqrt(static_cast<double>(l.head_dim));
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t s = 0; s < l.seq; ++s) {
        std::vector<double> scores;
        const int64_t g = h / (l.heads / l.groups);
        for (int64_t t = 0; t <= s; ++t) {
          double dot = 0;
          for (int64_t d = 0; d < l.head_dim; ++d)
            dot += static_cast<double>(qkv[sz((b * l.seq + s) * l.ld + l.q_column(h) + d)]) *
                   qkv[sz((b * l.seq + t) * l.ld + l.k_column(g) + d)];
          scores.push_back(dot * scale);
        }
        const double mx = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double v : scores) sum += std::exp(v - mx);
        lse[sz((b * l.heads + h) * l.seq + s)] = static_cast<float>((mx + std::log(sum)) / std::log(2.0));
      }
  return lse;
}

// The flash kernels against the CPU in float32 on the same bf16 inputs, and against the unfused
// bf16 kernels: the same tolerances as the unfused bf16 path (check_attention).
void check_flash_attention(int64_t batch, int64_t seq, int64_t heads, int64_t groups, int64_t hd,
                           uint32_t seed) {
  ck::Handle handle;
  std::mt19937 rng(seed);
  const std::string name = "flash attention B" + std::to_string(batch) + " S" + std::to_string(seq) + " H" +
                           std::to_string(heads) + " G" + std::to_string(groups) + " hd" + std::to_string(hd);
  const auto cl = k::AttentionLayout::megatron(batch, seq, heads, groups, hd);
  const auto gl = ck::AttentionLayout::megatron(batch, seq, heads, groups, hd);
  BOOST_TEST_REQUIRE(ck::flash_attention_supported(handle, gl), name << " is served");
  const int64_t tokens = batch * seq, out_cols = heads * hd;
  // Scores q.k / sqrt(hd) of std 1.5 (inputs of std 1.5^0.5): a spread where softmax is neither
  // flat nor one-hot.
  const Floats qkv = quantize<ck::bfloat16>(random_floats(sz(tokens * cl.ld), rng, 1.2247f));
  const Floats dout = quantize<ck::bfloat16>(random_floats(sz(tokens * out_cols), rng));

  Floats out(sz(tokens * out_cols)), probs(sz(batch * heads * seq * seq)), dqkv(qkv.size());
  k::attention_forward<float>(cl, qkv.data(), out.data(), probs.data());
  k::attention_backward<float>(cl, qkv.data(), probs.data(), out.data(), dout.data(), dqkv.data());

  auto dqkv_in = to_device<ck::bfloat16>(qkv);
  ck::DeviceArray<ck::bfloat16> dout_gpu(out.size());
  ck::DeviceArray<float> dlse(sz(batch * heads * seq));
  fill_nan(dout_gpu);
  fill_nan(dlse);
  ck::flash_attention_forward(handle, gl, dqkv_in.data(), dout_gpu.data(), dlse.data());
  const Floats got_out = fetch(dout_gpu);
  expect_close_scaled(got_out, out, 2e-2, 1e-2, name + " out");
  // fp32 sums of exact bf16 products: the log-sum to ~1e-6 relative of the largest score.
  expect_close(fetch(dlse), reference_lse2(cl, qkv), 1e-5, 1e-4, name + " lse2");

  // The unfused bf16 kernels on the same inputs: the two bf16 paths agree as each agrees with the
  // CPU (both bounds add).
  ck::DeviceArray<ck::bfloat16> unfused_out(out.size()), unfused_probs(probs.size()),
      unfused_dqkv(qkv.size());
  ck::attention_forward(handle, gl, dqkv_in.data(), unfused_out.data(), unfused_probs.data());
  expect_close_scaled(got_out, fetch(unfused_out), 4e-2, 2e-2, name + " out against the unfused kernels");

  // Without lse2 (inference): the same output.
  ck::DeviceArray<ck::bfloat16> dout_nolse(out.size());
  ck::flash_attention_forward(handle, gl, dqkv_in.data(), dout_nolse.data(), nullptr);
  expect_close(fetch(dout_nolse), got_out, 0.0, 0.0, name + " out without lse2");

  // Backward from the flash forward; dqkv starts as NaN: every q, k and v column must be written.
  auto ddout = to_device<ck::bfloat16>(dout);
  ck::DeviceArray<ck::bfloat16> ddqkv(qkv.size());
  fill_nan(ddqkv);
  ck::flash_attention_backward(handle, gl, dqkv_in.data(), dout_gpu.data(), ddout.data(), dlse.data(),
                               ddqkv.data());
  const Floats got_dqkv = fetch(ddqkv);
  expect_close_scaled(got_dqkv, dqkv, 3e-2, 3e-2, name + " dqkv");
  ck::attention_backward(handle, gl, dqkv_in.data(), unfused_probs.data(), unfused_out.data(), ddout.data(),
                         unfused_dqkv.data());
  expect_close_scaled(got_dqkv, fetch(unfused_dqkv), 6e-2, 6e-2, name + " dqkv against the unfused kernels");

  // Run twice, the same bits but for the order of the query gradients' atomic additions.
  ck::DeviceArray<ck::bfloat16> again(qkv.size());
  ck::flash_attention_backward(handle, gl, dqkv_in.data(), dout_gpu.data(), ddout.data(), dlse.data(),
                               again.data());
  expect_close_scaled(fetch(again), got_dqkv, 1e-2, 1e-3, name + " dqkv run twice");
}

}  // namespace

BOOST_AUTO_TEST_CASE(flash_attention_matches_cpu) {
  check_flash_attention(2, 100, 4, 2, 64, 21);   // grouped query heads, partial tiles
  check_flash_attention(1, 130, 2, 2, 128, 22);  // multi-head, 3 tiles of 64 (the last of 2 rows)
  check_flash_attention(2, 64, 4, 1, 128, 23);   // multi-query, whole tiles
  check_flash_attention(1, 7, 2, 1, 64, 24);     // shorter than one tile
}

BOOST_AUTO_TEST_CASE(flash_attention_refuses_what_it_does_not_serve) {
  ck::Handle handle;
  const auto odd = ck::AttentionLayout::megatron(1, 8, 2, 1, 48);
  BOOST_TEST(!ck::flash_attention_supported(handle, odd));
  ck::DeviceArray<ck::bfloat16> qkv(sz(8 * odd.ld)), out(sz(8 * 2 * 48));
  ck::DeviceArray<float> lse(16);
  BOOST_CHECK_THROW(ck::flash_attention_forward(handle, odd, qkv.data(), out.data(), lse.data()),
                    std::invalid_argument);
  const auto served = ck::AttentionLayout::megatron(1, 8, 2, 1, 64);
  BOOST_TEST(ck::flash_attention_supported(handle, served));
  ck::DeviceArray<ck::bfloat16> dqkv(sz(8 * served.ld)), out64(sz(8 * 2 * 64)), sqkv(sz(8 * served.ld));
  BOOST_CHECK_THROW(ck::flash_attention_backward(handle, served, sqkv.data(), out64.data(), out64.data(),
                                                 nullptr, dqkv.data()),
                    std::invalid_argument);
}

// ---- activations -------------------------------------------------------------------------------

namespace {

// Random values plus extremes: the clamped exp must keep very negative gates finite.
Floats activation_inputs(std::size_t n, std::mt19937& rng) {
  Floats x = random_floats(n, rng, 3.0f);
  const float extremes[] = {-100.0f, -30.0f, -10.0f, -0.0f, 0.0f, 10.0f, 30.0f, 100.0f};
  for (std::size_t i = 0; i < std::size(extremes); ++i) x[i * 7] = extremes[i];
  return x;
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(activations_match_cpu, T, Precisions) {
  std::mt19937 rng(12);
  const int64_t n = 1037;
  const Floats x = quantize<T>(activation_inputs(sz(n), rng));
  const Floats dy = quantize<T>(random_floats(sz(n), rng));
  Floats y(sz(n)), dx(sz(n));
  k::gelu_forward<float>(n, x.data(), y.data());
  k::gelu_backward<float>(n, x.data(), dy.data(), dx.data());
  auto dxin = to_device<T>(x), ddy = to_device<T>(dy);
  ck::DeviceArray<T> dyout(sz(n)), ddx(sz(n));
  ck::gelu_forward(n, dxin.data(), dyout.data(), nullptr);
  ck::gelu_backward(n, dxin.data(), ddy.data(), ddx.data(), nullptr);
  expect_close(fetch(dyout), y, pick<T>(1e-5, 1e-2), 1e-6, "gelu forward");
  expect_close(fetch(ddx), dx, pick<T>(1e-5, 1e-2), 1e-6, "gelu backward");
  ck::gelu_backward(n, dxin.data(), ddy.data(), ddy.data(), nullptr);  // dx aliasing dy
  expect_close(fetch(ddy), dx, pick<T>(1e-5, 1e-2), 1e-6, "gelu backward in place");

  const int64_t rows = 13, f = 77;
  const Floats a = quantize<T>(activation_inputs(sz(rows * 2 * f), rng));
  const Floats g = quantize<T>(random_floats(sz(rows * f), rng));
  Floats sy(sz(rows * f)), da(a.size());
  k::swiglu_forward<float>(rows, f, a.data(), sy.data());
  k::swiglu_backward<float>(rows, f, a.data(), g.data(), da.data());
  auto dain = to_device<T>(a), dg = to_device<T>(g);
  ck::DeviceArray<T> dsy(sy.size()), dda(a.size());
  ck::swiglu_forward(rows, f, dain.data(), dsy.data(), nullptr);
  ck::swiglu_backward(rows, f, dain.data(), dg.data(), dda.data(), nullptr);
  expect_close(fetch(dsy), sy, pick<T>(1e-5, 1e-2), 1e-6, "swiglu forward");
  expect_close(fetch(dda), da, pick<T>(1e-5, 1e-2), 1e-6, "swiglu backward");
}

// ---- cross-entropy -----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_matches_cpu, T, Precisions) {
  ck::Handle handle;
  std::mt19937 rng(13);
  const int64_t rows = 37, vocab = 1003;
  const int32_t ignore = -1;
  const Floats logits = quantize<T>(random_floats(sz(rows * vocab), rng, 2.0f));
  std::vector<int32_t> targets = random_ids(sz(rows), static_cast<int32_t>(vocab), rng);
  targets[3] = targets[10] = targets[20] = ignore;
  Floats grad(logits.size());
  const k::CrossEntropyResult want =
      k::cross_entropy_forward<float>(rows, vocab, logits.data(), targets.data(), grad.data(), ignore);

  auto dlogits = to_device<T>(logits);
  ck::DeviceArray<int32_t> dtargets(targets);
  ck::DeviceArray<double> loss_sum(1);
  ck::DeviceArray<int64_t> count(1);
  ck::DeviceArray<float> loss_mean(1);
  ck::DeviceArray<T> dgrad(logits.size());
  const ck::CrossEntropyOutputs outputs{loss_sum.data(), count.data(), loss_mean.data()};
  ck::cross_entropy_forward(handle, rows, vocab, dlogits.data(), dtargets.data(), ignore, outputs,
                            dgrad.data());
  // The per-row losses are fp32 on both sides (same inputs): a few ulp each.
  BOOST_TEST(fetch_one(count.data()) == want.count);
  BOOST_TEST(fetch_one(loss_sum.data()) == want.loss_sum, boost::test_tools::tolerance(1e-5));
  const auto mean_want = static_cast<float>(want.loss_sum / static_cast<double>(want.count));
  BOOST_TEST(fetch_one(loss_mean.data()) == mean_want, boost::test_tools::tolerance(1e-5f));
  expect_close(fetch(dgrad), grad, pick<T>(1e-5, 1e-2), pick<T>(1e-7, 1e-5),
               "cross-entropy softmax - onehot");

  // Deterministic: the loss sum is bitwise the same on a second run.
  const double first_sum = fetch_one(loss_sum.data());
  ck::cross_entropy_forward<T>(handle, rows, vocab, dlogits.data(), dtargets.data(), ignore, outputs,
                               nullptr);
  BOOST_TEST(std::bit_cast<uint64_t>(fetch_one(loss_sum.data())) == std::bit_cast<uint64_t>(first_sum));

  // Fused backward of the mean: (dloss / count) (softmax - onehot), as the CPU head scales it.
  const float dloss = 0.7f;
  ck::DeviceArray<float> ddloss(Floats{dloss});
  const auto scale = static_cast<float>(static_cast<double>(dloss) / static_cast<double>(want.count));
  Floats dlogits_want(grad.size());
  for (std::size_t i = 0; i < grad.size(); ++i) dlogits_want[i] = scale * grad[i];
  ck::DeviceArray<T> dd(logits.size());
  ck::cross_entropy_backward(rows, vocab, dlogits.data(), dtargets.data(), ignore, ddloss.data(),
                             count.data(), dd.data(), nullptr);
  const Floats got_d = fetch(dd);
  expect_close(got_d, dlogits_want, pick<T>(1e-5, 1e-2), pick<T>(1e-8, 1e-6), "cross-entropy backward");
  // In place (dlogits aliasing logits): the same values.
  auto inplace = to_device<T>(logits);
  ck::cross_entropy_backward(rows, vocab, inplace.data(), dtargets.data(), ignore, ddloss.data(),
                             count.data(), inplace.data(), nullptr);
  expect_bitwise(fetch(inplace), got_d, "cross-entropy backward in place");

  // Every target ignored: no count, a zero loss, zero gradients.
  const std::vector<int32_t> none(sz(rows), ignore);
  ck::DeviceArray<int32_t> dnone(none);
  ck::cross_entropy_forward(handle, rows, vocab, dlogits.data(), dnone.data(), ignore, outputs, dgrad.data());
  BOOST_TEST(fetch_one(count.data()) == 0);
  BOOST_TEST(fetch_one(loss_mean.data()) == 0.0f);
  BOOST_TEST(max_abs(fetch(dgrad)) == 0.0);
  ck::cross_entropy_backward(rows, vocab, dlogits.data(), dnone.data(), ignore, ddloss.data(), count.data(),
                             dd.data(), nullptr);
  BOOST_TEST(max_abs(fetch(dd)) == 0.0);
}

// ---- elementwise -------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(conversions_round_to_nearest_even_like_the_host) {
  std::mt19937 rng(14);
  Floats x = random_floats(100003, rng, 10.0f);
  // Ties (exactly half an ulp of bf16 above a value with an even and an odd last bit), extremes.
  const float special[] = {1.0f + 0x1p-8f,
                           1.0f + 0x3p-8f,
                           -1.0f - 0x1p-8f,
                           3.3895e38f,
                           3.4e38f,
                           -3.4e38f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::denorm_min(),
                           -0.0f};
  for (std::size_t i = 0; i < std::size(special); ++i) x[i] = special[i];
  x[50] = std::numeric_limits<float>::quiet_NaN();
  auto dx = to_device<float>(x);
  ck::DeviceArray<ck::bfloat16> dbf(x.size());
  ck::convert(static_cast<int64_t>(x.size()), dx.data(), dbf.data(), nullptr);
  const std::vector<ck::bfloat16> got = dbf.download();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      BOOST_TEST(std::isnan(ck::to_float(got[i])));
      continue;
    }
    if (got[i].bits != ck::to_bfloat16(x[i]).bits && ++bad <= 5)
      BOOST_ERROR("convert " << x[i] << ": device bits " << got[i].bits << ", host "
                             << ck::to_bfloat16(x[i]).bits);
  }
  BOOST_TEST(bad == 0u);
  // bf16 -> float is exact.
  ck::DeviceArray<float> back(x.size());
  ck::convert(static_cast<int64_t>(x.size()), dbf.data(), back.data(), nullptr);
  const Floats got_back = back.download();
  Floats want_back(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) want_back[i] = ck::to_float(got[i]);
  Floats got_copy = got_back;
  got_copy[50] = want_back[50] = 0.0f;  // NaN: only NaN-ness is compared (above)
  BOOST_TEST(std::isnan(got_back[50]));
  expect_bitwise(got_copy, want_back, "bf16 -> float");
}

BOOST_AUTO_TEST_CASE(elementwise_helpers_are_exact) {
  std::mt19937 rng(15);
  const int64_t n = 100003;
  const Floats x = random_floats(sz(n), rng), y = random_floats(sz(n), rng);
  const Floats xq = quantize<ck::bfloat16>(x), yq = quantize<ck::bfloat16>(y);

  ck::DeviceArray<float> f(sz(n));
  ck::fill(n, f.data(), 3.25f, nullptr);
  expect_bitwise(f.download(), Floats(sz(n), 3.25f), "fill fp32");
  ck::DeviceArray<ck::bfloat16> fb(sz(n));
  ck::fill(n, fb.data(), 0.1f, nullptr);
  expect_bitwise(fetch(fb), Floats(sz(n), ck::to_float(ck::to_bfloat16(0.1f))), "fill bf16");

  auto dx = to_device<float>(x);
  ck::DeviceArray<float> copied(sz(n));
  ck::copy(n, dx.data(), copied.data(), nullptr);
  expect_bitwise(copied.download(), x, "copy");

  // y += x: one IEEE addition (and for bf16 one rounding) per element.
  Floats want(sz(n));
  auto dy = to_device<float>(y);
  ck::add_into(n, dx.data(), dy.data(), nullptr);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = y[i] + x[i];
  expect_bitwise(dy.download(), want, "add_into fp32");
  auto dxb = to_device<ck::bfloat16>(x), dyb = to_device<ck::bfloat16>(y);
  ck::add_into(n, dxb.data(), dyb.data(), nullptr);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = ck::to_float(ck::to_bfloat16(yq[i] + xq[i]));
  expect_bitwise(fetch(dyb), want, "add_into bf16");
  auto dy32 = to_device<float>(y);
  ck::add_into(n, dxb.data(), dy32.data(), nullptr);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = y[i] + xq[i];
  expect_bitwise(dy32.download(), want, "add_into bf16 into fp32");

  auto ds = to_device<float>(x);
  ck::scale(n, ds.data(), -0.3f, nullptr);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = x[i] * -0.3f;
  expect_bitwise(ds.download(), want, "scale fp32");
  auto dsb = to_device<ck::bfloat16>(x);
  ck::scale(n, dsb.data(), -0.3f, nullptr);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = ck::to_float(ck::to_bfloat16(xq[i] * -0.3f));
  expect_bitwise(fetch(dsb), want, "scale bf16");
}

// ---- reductions --------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(reductions_match_cpu, T, Precisions) {
  ck::Handle handle;
  std::mt19937 rng(16);
  ck::DeviceArray<double> result(1);
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000003}}) {
    const Floats x = quantize<T>(random_floats(sz(n), rng));
    double want = 0;  // the CPU optimizer's sum: exact squares in double, in order
    for (const float v : x) want += static_cast<double>(v) * v;
    auto dx = to_device<T>(x);
    ck::sum_squares(handle, n, dx.data(), result.data(), false);
    const double got = fetch_one(result.data());
    BOOST_TEST(got == want, boost::test_tools::tolerance(1e-12));
    for (int run = 0; run < 2; ++run) {  // deterministic
      ck::sum_squares(handle, n, dx.data(), result.data(), false);
      BOOST_TEST(std::bit_cast<uint64_t>(fetch_one(result.data())) == std::bit_cast<uint64_t>(got));
    }
    ck::sum_squares(handle, n, dx.data(), result.data(), true);  // accumulate: twice the sum
    BOOST_TEST(fetch_one(result.data()) == 2 * want, boost::test_tools::tolerance(1e-12));
  }

  const int64_t n = 1000003;
  Floats x = quantize<T>(random_floats(sz(n), rng));
  auto clean = to_device<T>(x);
  ck::DeviceArray<int64_t> first(1);
  ck::first_non_finite(n, clean.data(), first.data(), handle.stream());
  BOOST_TEST(fetch_one(first.data()) == -1);
  BOOST_TEST(!ck::has_non_finite(handle, n, clean.data()));
  x[777777] = std::numeric_limits<float>::quiet_NaN();
  x[12345] = std::numeric_limits<float>::infinity();
  x[sz(n - 1)] = -std::numeric_limits<float>::infinity();
  auto dirty = to_device<T>(x);
  ck::first_non_finite(n, dirty.data(), first.data(), handle.stream());
  BOOST_TEST(fetch_one(first.data()) == 12345);
  BOOST_TEST(ck::has_non_finite(handle, n, dirty.data()));
  ck::first_non_finite(n - 800000, dirty.data() + 800000, first.data(), handle.stream());
  BOOST_TEST(fetch_one(first.data()) == n - 1 - 800000);
  ck::first_non_finite<T>(0, dirty.data(), first.data(), handle.stream());
  BOOST_TEST(fetch_one(first.data()) == -1);
}

// ---- AdamW -------------------------------------------------------------------------------------

namespace {

plx_param_spec param_spec(const char* name, int64_t size, uint32_t flags) {
  plx_param_spec s{};
  s.struct_size = sizeof(s);
  s.name = name;
  s.flags = flags;
  s.desc.ndim = 1;
  s.desc.dims[0] = size;
  s.desc.dtype = plx_dtype_f32();
  return s;
}

Floats tensor_values(const plexus::Tensor& t) {
  const float* p = t.data<float>();
  return Floats(p, p + t.numel());
}

// The engine's optimizer on the CPU and the GPU kernels side by side over a few steps.
struct AdamPair {
  plexus::ParameterStore store;
  std::vector<ck::DeviceArray<float> > w, g, m, v;
  std::mt19937 rng{17};

  AdamPair() {
    store.declare(param_spec("decoder.layers.0.mlp.linear_fc1.weight", 1037, 0), "", "test");
    store.declare(param_spec("decoder.final_layernorm.weight", 203, PLX_PARAM_NO_WEIGHT_DECAY), "", "test");
    for (std::size_t i = 0; i < store.size(); ++i) {
      const plexus::Tensor& value = store[i].value;
      const Floats init = random_floats(sz(value.numel()), rng, 0.5f);
      std::copy(init.begin(), init.end(), value.data<float>());
      w.emplace_back(init);
      g.emplace_back(sz(value.numel()));
      m.emplace_back(Floats(sz(value.numel()), 0.0f));
      v.emplace_back(Floats(sz(value.numel()), 0.0f));
    }
  }
  // New gradients on both sides; scale makes the norm large enough to clip.
  void new_gradients(float scale) {
    for (std::size_t i = 0; i < store.size(); ++i) {
      const plexus::Tensor& grad = store[i].grad;
      const Floats values = random_floats(sz(grad.numel()), rng, scale);
      std::copy(values.begin(), values.end(), grad.data<float>());
      g[i].upload(values);
    }
  }
};

plexus::OptimizerSettings adam_settings(double clip_grad) {
  plexus::OptimizerSettings s;
  s.lr = 3e-3;
  s.min_lr = 3e-4;
  s.warmup_steps = 2;
  s.total_steps = 10;
  s.weight_decay = 0.1;
  s.beta1 = 0.9;
  s.beta2 = 0.95;
  s.eps = 1e-8;
  s.clip_grad = clip_grad;
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(adamw_equals_the_cpu_optimizer_bit_for_bit) {
  AdamPair pair;
  const plexus::OptimizerSettings s = adam_settings(0.0);  // no clipping: the factor is exactly 1
  plexus::AdamW adam(pair.store, s);
  for (int64_t step = 0; step < 4; ++step) {
    pair.new_gradients(0.1f);
    adam.step(step);
    const double lr = plexus::learning_rate(s, step);
    for (std::size_t i = 0; i < pair.store.size(); ++i) {
      const auto scalars =
          ck::AdamWScalars::make(lr, s.weight_decay, pair.store[i].decays(), s.beta1, s.beta2, s.eps, step);
      ck::adamw_step(pair.store[i].value.numel(), pair.w[i].data(), pair.g[i].data(), pair.m[i].data(),
                     pair.v[i].data(), scalars, nullptr, nullptr);
    }
  }
  const auto state = adam.state_tensors();
  for (std::size_t i = 0; i < pair.store.size(); ++i) {
    const std::string& name = pair.store[i].name;
    expect_bitwise(pair.w[i].download(), tensor_values(pair.store[i].value), name);
    expect_bitwise(pair.m[i].download(), tensor_values(*state[2 * i].second), state[2 * i].first);
    expect_bitwise(pair.v[i].download(), tensor_values(*state[2 * i + 1].second), state[2 * i + 1].first);
  }
}

BOOST_AUTO_TEST_CASE(adamw_with_clipping_from_the_device_norm) {
  ck::Handle handle;
  AdamPair pair;
  const plexus::OptimizerSettings s = adam_settings(1.0);
  plexus::AdamW adam(pair.store, s);
  ck::DeviceArray<double> sum(1), norm(1);
  ck::DeviceArray<float> factor(1);
  for (int64_t step = 0; step < 3; ++step) {
    pair.new_gradients(1.0f);  // norm ~ 35 > 1: clipped
    const double cpu_norm = adam.step(step);
    // The engine's path without leaving the device: sum of squares over every gradient, the
    // clipping factor, then the update.
    for (std::size_t i = 0; i < pair.store.size(); ++i)
      ck::sum_squares(handle, pair.store[i].grad.numel(), pair.g[i].data(), sum.data(), i > 0);
    ck::clip_factor(sum.data(), s.clip_grad, factor.data(), norm.data(), handle.stream());
    const double lr = plexus::learning_rate(s, step);
    for (std::size_t i = 0; i < pair.store.size(); ++i) {
      const auto scalars =
          ck::AdamWScalars::make(lr, s.weight_decay, pair.store[i].decays(), s.beta1, s.beta2, s.eps, step);
      ck::adamw_step(pair.store[i].value.numel(), pair.w[i].data(), pair.g[i].data(), pair.m[i].data(),
                     pair.v[i].data(), scalars, factor.data(), handle.stream());
    }
    BOOST_TEST(fetch_one(norm.data()) == cpu_norm, boost::test_tools::tolerance(1e-12));
    // The norms differ only in the order of the sum, so the fp32 factors agree to an ulp.
    const auto cpu_factor = static_cast<float>(s.clip_grad / (cpu_norm + 1e-6));
    BOOST_TEST(fetch_one(factor.data()) == cpu_factor, boost::test_tools::tolerance(2.5e-7f));
  }
  const auto state = adam.state_tensors();
  for (std::size_t i = 0; i < pair.store.size(); ++i) {
    const std::string& name = pair.store[i].name;
    expect_close(pair.w[i].download(), tensor_values(pair.store[i].value), 1e-6, 1e-9, name);
    expect_close(pair.m[i].download(), tensor_values(*state[2 * i].second), 1e-5, 1e-9, state[2 * i].first);
    expect_close(pair.v[i].download(), tensor_values(*state[2 * i + 1].second), 1e-5, 1e-12,
                 state[2 * i + 1].first);
  }
}

BOOST_AUTO_TEST_CASE(clip_factor_follows_the_cpu_formula) {
  ck::DeviceArray<double> sum(1), norm(1);
  ck::DeviceArray<float> factor(1);
  const std::vector<std::pair<double, double> > cases = {{25.0, 1.0}, {0.25, 1.0}, {25.0, 0.0}, {1e6, 5.0}};
  for (const auto& [sum_sq, clip_grad] : cases) {
    sum.upload({sum_sq});
    ck::clip_factor(sum.data(), clip_grad, factor.data(), norm.data(), nullptr);
    const double n = std::sqrt(sum_sq);
    const double want = clip_grad > 0 && n > clip_grad ? clip_grad / (n + 1e-6) : 1.0;
    BOOST_TEST(fetch_one(norm.data()) == n);
    BOOST_TEST(fetch_one(factor.data()) == static_cast<float>(want));
  }
}

#endif  // PLEXUS_TEST_HAVE_CUDA
