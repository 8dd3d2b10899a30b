// moe.layer on a CUDA device (device_impl.hpp), float32, every expert on this rank: the
// CPU path's stages (moe_layer.cpp) with the products through cuBLAS (plexus_cuda_kernels' gemm),
// the pre-norm and the activations through plexus_cuda_kernels, and the routing and the
// permutation through this folder's kernels (kernels.hpp). The experts run as on the CPU: per
// weight, one product per expert over its contiguous block of rows, so the route stage copies the
// experts' row offsets (E + 1 integers) to the host, the one synchronization of a forward.
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "cuda/kernels.hpp"
#include "device_impl.hpp"
#include "plexus/cpp/error.hpp"
#include "plexus_cuda_kernels/activation.hpp"
#include "plexus_cuda_kernels/current_device.hpp"
#include "plexus_cuda_kernels/error.hpp"
#include "plexus_cuda_kernels/gemm.hpp"
#include "plexus_cuda_kernels/norm.hpp"
#include "plexus_cuda_layer/arena.hpp"
#include "plexus_cuda_layer/context.hpp"

namespace plexus::moe {

bool cuda_built() noexcept {
  return true;
}

namespace cuda {
namespace {

namespace cl = plexus::cuda_layer;
namespace ck = plexus::cuda_kernels;
using ck::Trans;

std::size_t sz(int64_t v) {
  return static_cast<std::size_t>(v);
}

// One MLP's (or the routed experts') activations kept for backward: fc1's output and the
// activation's.
struct MlpKept {
  float* a = nullptr;    // [rows, fc1_rows]
  float* act = nullptr;  // [rows, F]
};

// The sizes of one expert MLP (experts.hpp's MlpShape).
struct MlpDims {
  int64_t hidden = 0, ffn = 0;
  bool swiglu = false;
  int64_t fc1_rows() const { return swiglu ? 2 * ffn : ffn; }
};

// A microbatch on the GPU: everything the later stages and the backward need, in `memory` (taken
// by the route stage's forward and the backward stages, released by the next route forward).
struct CudaState final : DeviceState {
  explicit CudaState(DLDevice device) : memory(device) {}
  cl::Arena memory;
  int64_t tokens = 0;
  std::vector<int64_t> offsets;  // [E + 1] on the host: expert e owns rows [offsets[e], offsets[e + 1])
  float* xhat = nullptr;         // the pre-norm [T, C], [T], [T, C]
  float* rstd = nullptr;
  float* u = nullptr;
  float* logits = nullptr;        // [T, E]
  float* scores = nullptr;        // [T, E]
  float* probs = nullptr;         // [T, k]
  float* lse = nullptr;           // [T]
  int32_t* chosen = nullptr;      // [T, k]
  int32_t* plain = nullptr;       // [T, k]: the top-k without the bias (the aux loss's counts)
  int64_t* aux_counts = nullptr;  // [E], with an aux loss
  int64_t* row_token = nullptr;   // [T k]
  int64_t* slot_row = nullptr;    // [T k]
  float* x_perm = nullptr;        // [T k, C]
  float* y_perm = nullptr;
  MlpKept experts, shared;
  float* shared_y = nullptr;  // [T, C]
  float* dy_perm = nullptr;   // between the backward stages
  float* dprobs = nullptr;
  float* dx_perm = nullptr;
  float* du_shared = nullptr;
};

// Calls each(e, first, n) for every expert e with rows, [first, first + n) of the permuted rows
// (offsets: [E + 1]); an expert without rows has no product to run.
template <class Each>
void for_each_expert(const std::vector<int64_t>& offsets, Each&& each) {
  for (std::size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t first = offsets[e], n = offsets[e + 1] - first;
    if (n > 0) each(e, first, n);
  }
}

// y [rows, C] from x [rows, C]: expert e (fc1[e], fc2[e]) on rows [offsets[e], offsets[e + 1]),
// the activation over all rows at once (experts.cpp's experts_forward).
void mlp_forward(ck::Handle& handle, const MlpDims& d, const std::vector<int64_t>& offsets,
                 const std::vector<const float*>& fc1, const std::vector<const float*>& fc2, const float* x,
                 const MlpKept& keep, float* y) {
  const int64_t rows = offsets.back(), hidden = d.hidden, f = d.ffn, f1 = d.fc1_rows();
  if (rows == 0) return;
  for_each_expert(offsets, [&](std::size_t e, int64_t first, int64_t n) {
    ck::gemm<float, float>(handle, Trans::N, Trans::T, n, f1, hidden, 1.0f, x + first * hidden, hidden,
                           fc1[e], hidden, 0.0f, keep.a + first * f1, f1);
  });
  if (d.swiglu)
    ck::swiglu_forward<float>(rows, f, keep.a, keep.act, handle.stream());
  else
    ck::gelu_forward<float>(rows * f, keep.a, keep.act, handle.stream());
  for_each_expert(offsets, [&](std::size_t e, int64_t first, int64_t n) {
    ck::gemm<float, float>(handle, Trans::N, Trans::T, n, hidden, f, 1.0f, keep.act + first * f, f, fc2[e], f,
                           0.0f, y + first * hidden, hidden);
  });
}

// dx [rows, C] (written) from dy; the weight gradients accumulated (experts.cpp's
// experts_backward). dact and da: [rows, F] and [rows, fc1_rows] temporaries.
void mlp_backward(ck::Handle& handle, const MlpDims& d, const std::vector<int64_t>& offsets,
                  const std::vector<const float*>& fc1, const std::vector<const float*>& fc2,
                  const std::vector<float*>& dfc1, const std::vector<float*>& dfc2, const MlpKept& kept,
                  const float* x, const float* dy, float* dx, float* dact, float* da) {
  const int64_t rows = offsets.back(), hidden = d.hidden, f = d.ffn, f1 = d.fc1_rows();
  if (rows == 0) return;
  // y = act W2^T:  dact = dy W2,  dW2 += dy^T act.
  for_each_expert(offsets, [&](std::size_t e, int64_t first, int64_t n) {
    ck::gemm<float, float>(handle, Trans::N, Trans::N, n, f, hidden, 1.0f, dy + first * hidden, hidden,
                           fc2[e], f, 0.0f, dact + first * f, f);
    if (dfc2[e] != nullptr)
      ck::gemm<float, float>(handle, Trans::T, Trans::N, hidden, f, n, 1.0f, dy + first * hidden, hidden,
                             kept.act + first * f, f, 1.0f, dfc2[e], f);
  });
  if (d.swiglu)
    ck::swiglu_backward<float>(rows, f, kept.a, dact, da, handle.stream());
  else
    ck::gelu_backward<float>(rows * f, kept.a, dact, da, handle.stream());
  // a = x W1^T:  dW1 += da^T x,  dx = da W1.
  for_each_expert(offsets, [&](std::size_t e, int64_t first, int64_t n) {
    if (dfc1[e] != nullptr)
      ck::gemm<float, float>(handle, Trans::T, Trans::N, f1, hidden, n, 1.0f, da + first * f1, f1,
                             x + first * hidden, hidden, 1.0f, dfc1[e], hidden);
    ck::gemm<float, float>(handle, Trans::N, Trans::N, n, hidden, f1, 1.0f, da + first * f1, f1, fc1[e],
                           hidden, 0.0f, dx + first * hidden, hidden);
  });
}

class MoeCuda final : public MoeDevice {
 public:
  MoeCuda(const MoeConfig& config, DLDevice device)
      : config_(config), device_(device), context_(kComponent, device) {}

  std::unique_ptr<DeviceState> create_state() override { return std::make_unique<CudaState>(device_); }

  RouteResult route(DeviceState& state, const DeviceWeights& w, int64_t tokens, const float* h, bool training,
                    plx_stream stream) override {
    const MoeConfig& c = config_;
    cl::Context::Scope scope(context_, stream);
    const cudaStream_t s = scope.stream();
    auto& st = static_cast<CudaState&>(state);
    st.memory.release();  // what an earlier forward of this state kept
    reset(st);
    st.tokens = tokens;
    st.offsets.assign(sz(c.experts + 1), 0);
    RouteResult result;
    if (tokens == 0) {
      result.offsets = st.offsets;
      return result;
    }
    cl::Arena temp(device_);
    const int64_t n = tokens, hidden = c.hidden, e_count = c.experts, kk = c.topk, pairs = n * kk;
    st.xhat = take<float>(st, n * hidden, s);
    st.rstd = take<float>(st, n, s);
    st.u = take<float>(st, n * hidden, s);
    if (c.rms_prenorm)
      ck::rmsnorm_forward<float>(n, hidden, h, w.norm_w, static_cast<float>(c.prenorm_eps), st.u, st.xhat,
                                 st.rstd, s);
    else
      ck::layernorm_forward<float>(n, hidden, h, w.norm_w, w.norm_b, static_cast<float>(c.prenorm_eps), st.u,
                                   st.xhat, st.rstd, s);
    st.logits = take<float>(st, n * e_count, s);
    ck::gemm<float, float>(scope.handle(), Trans::N, Trans::T, n, e_count, hidden, 1.0f, st.u, hidden,
                           w.router, hidden, 0.0f, st.logits, e_count);
    st.scores = take<float>(st, n * e_count, s);
    st.probs = take<float>(st, pairs, s);
    st.lse = take<float>(st, n, s);
    st.chosen = take<int32_t>(st, pairs, s);
    st.plain = take<int32_t>(st, pairs, s);
    double* selection = c.groups > 0 ? temp.take<double>(sz(n * e_count), s) : nullptr;
    double* group_scores = c.groups > 0 ? temp.take<double>(sz(n * (c.groups + e_count)), s) : nullptr;
    route_tokens(shape(n), st.logits, w.bias, st.chosen, st.plain, st.scores, st.probs, st.lse, selection,
                 group_scores, s);

    st.row_token = take<int64_t>(st, pairs, s);
    st.slot_row = take<int64_t>(st, pairs, s);
    int64_t* offsets = temp.take<int64_t>(sz(e_count + 1), s);
    int64_t* cursor = temp.take<int64_t>(sz(sort_scratch(e_count)), s);
    if (c.capacity_factor > 0) {
      // The dropless permutation decides what each expert keeps (capacity.cpp's rule); the
      // permutation of the kept pairs is then sorted again.
      int64_t* all_offsets = temp.take<int64_t>(sz(e_count + 1), s);
      int64_t* all_token = temp.take<int64_t>(sz(pairs), s);
      int64_t* all_pair = temp.take<int64_t>(sz(pairs), s);
      int64_t* all_slot = temp.take<int64_t>(sz(pairs), s);
      sort_by_expert(pairs, kk, e_count, st.chosen, nullptr, cursor, all_offsets, all_token, all_pair,
                     all_slot, s);
      auto* kept = temp.take<uint8_t>(sz(pairs), s);
      keep_within_capacity(pairs, c.capacity(n), c.drop_by_position, st.chosen, st.probs, all_offsets,
                           all_pair, all_slot, kept, s);
      sort_by_expert(pairs, kk, e_count, st.chosen, kept, cursor, offsets, st.row_token, nullptr, st.slot_row,
                     s);
    } else {
      sort_by_expert(pairs, kk, e_count, st.chosen, nullptr, cursor, offsets, st.row_token, nullptr,
                     st.slot_row, s);
    }
    if (c.aux_loss_coeff > 0) {
      st.aux_counts = take<int64_t>(st, e_count, s);
      count_by_expert(pairs, e_count, st.plain, st.aux_counts, s);
    }

    // To the host: the offsets always (the experts' product sizes); in training the losses'
    // sums (reported values, in double as on the CPU).
    std::vector<double> column(sz(e_count), 0.0);
    std::vector<int64_t> counts(sz(e_count), 0);
    double lse_squares = 0;
    const char* where = "moe.layer route: reading the routing back";
    PLEXUS_CUDA_CHECK(cudaMemcpyAsync(st.offsets.data(), offsets, sz(e_count + 1) * sizeof(int64_t),
                                      cudaMemcpyDeviceToHost, s),
                      where);
    if (training && c.aux_loss_coeff > 0) {
      double* sums = temp.take<double>(sz(e_count), s);
      column_sums(n, e_count, st.scores, false, sums, s);
      PLEXUS_CUDA_CHECK(
          cudaMemcpyAsync(column.data(), sums, sz(e_count) * sizeof(double), cudaMemcpyDeviceToHost, s),
          where);
      PLEXUS_CUDA_CHECK(cudaMemcpyAsync(counts.data(), st.aux_counts, sz(e_count) * sizeof(int64_t),
                                        cudaMemcpyDeviceToHost, s),
                        where);
    }
    if (training && c.z_loss_coeff > 0) {
      double* sum = temp.take<double>(1, s);
      column_sums(n, 1, st.lse, true, sum, s);
      PLEXUS_CUDA_CHECK(cudaMemcpyAsync(&lse_squares, sum, sizeof(double), cudaMemcpyDeviceToHost, s), where);
    }
    PLEXUS_CUDA_CHECK(cudaStreamSynchronize(s), where);
    // The rows (fewer than T k when a capacity dropped some), gathered once their count is known.
    const int64_t rows = st.offsets.back();
    st.x_perm = take<float>(st, rows * hidden, s);
    gather_rows(rows, hidden, st.row_token, st.u, st.x_perm, s);
    result.offsets = st.offsets;
    result.dropped = pairs - rows;
    const double t = static_cast<double>(n);
    if (training && c.aux_loss_coeff > 0) {
      for (std::size_t e = 0; e < column.size(); ++e)
        result.aux_loss += column[e] * static_cast<double>(counts[e]);
      result.aux_loss *= static_cast<double>(e_count) * c.aux_loss_coeff / (static_cast<double>(kk) * t * t);
    }
    if (training && c.z_loss_coeff > 0) result.z_loss = lse_squares * c.z_loss_coeff / t;
    return result;
  }

  void experts(DeviceState& state, const DeviceWeights& w, plx_stream stream) override {
    const MoeConfig& c = config_;
    cl::Context::Scope scope(context_, stream);
    const cudaStream_t s = scope.stream();
    auto& st = static_cast<CudaState&>(state);
    st.memory.used_on(s);
    if (st.tokens == 0) return;
    const int64_t rows = st.offsets.back(), n = st.tokens;
    st.y_perm = take<float>(st, rows * c.hidden, s);
    st.experts = keep(st, rows, expert_dims(), s);
    mlp_forward(scope.handle(), expert_dims(), st.offsets, w.fc1, w.fc2, st.x_perm, st.experts, st.y_perm);
    if (c.shared_ffn > 0) {
      st.shared_y = take<float>(st, n * c.hidden, s);
      st.shared = keep(st, n, shared_dims(), s);
      mlp_forward(scope.handle(), shared_dims(), {0, n}, {w.shared_fc1}, {w.shared_fc2}, st.u, st.shared,
                  st.shared_y);
    }
  }

  void unpermute(DeviceState& state, float* out, plx_stream stream) override {
    cl::Context::Scope scope(context_, stream);
    auto& st = static_cast<CudaState&>(state);
    st.memory.used_on(scope.stream());
    if (st.tokens == 0) return;
    combine_rows(st.tokens, config_.topk, config_.hidden, st.slot_row, st.y_perm, st.probs, st.shared_y, out,
                 scope.stream());
  }

  void unpermute_backward(DeviceState& state, const float* dout, plx_stream stream) override {
    const MoeConfig& c = config_;
    cl::Context::Scope scope(context_, stream);
    const cudaStream_t s = scope.stream();
    auto& st = static_cast<CudaState&>(state);
    st.memory.used_on(s);
    if (st.tokens == 0) return;
    st.dy_perm = take<float>(st, st.offsets.back() * c.hidden, s);
    st.dprobs = take<float>(st, st.tokens * c.topk, s);
    cuda::unpermute_backward(st.tokens, c.topk, c.hidden, st.slot_row, dout, st.y_perm, st.probs, st.dy_perm,
                             st.dprobs, s);
  }

  void experts_backward(DeviceState& state, const DeviceWeights& w, const DeviceGrads& g, const float* dout,
                        plx_stream stream) override {
    const MoeConfig& c = config_;
    cl::Context::Scope scope(context_, stream);
    const cudaStream_t s = scope.stream();
    auto& st = static_cast<CudaState&>(state);
    st.memory.used_on(s);
    if (st.tokens == 0) return;
    cl::Arena temp(device_);
    const int64_t rows = st.offsets.back(), n = st.tokens;
    const MlpDims d = expert_dims();
    st.dx_perm = take<float>(st, rows * c.hidden, s);
    mlp_backward(scope.handle(), d, st.offsets, w.fc1, w.fc2, g.fc1, g.fc2, st.experts, st.x_perm, st.dy_perm,
                 st.dx_perm, temp.take<float>(sz(rows * d.ffn), s),
                 temp.take<float>(sz(rows * d.fc1_rows()), s));
    if (c.shared_ffn > 0) {
      const MlpDims sd = shared_dims();
      st.du_shared = take<float>(st, n * c.hidden, s);
      mlp_backward(scope.handle(), sd, {0, n}, {w.shared_fc1}, {w.shared_fc2}, {g.shared_fc1}, {g.shared_fc2},
                   st.shared, st.u, dout, st.du_shared, temp.take<float>(sz(n * sd.ffn), s),
                   temp.take<float>(sz(n * sd.fc1_rows()), s));
    }
  }

  // du = (the experts' input gradient, un-permuted) (+ the shared experts') + dlogits Wr;
  // dWr += dlogits^T u; then the pre-norm (moe_layer.cpp's route backward).
  void route_backward(DeviceState& state, const DeviceWeights& w, const DeviceGrads& g, double loss_scale,
                      float* dh, plx_stream stream) override {
    const MoeConfig& c = config_;
    cl::Context::Scope scope(context_, stream);
    const cudaStream_t s = scope.stream();
    auto& st = static_cast<CudaState&>(state);
    st.memory.used_on(s);
    if (st.tokens == 0) return;
    cl::Arena temp(device_);
    const int64_t n = st.tokens, hidden = c.hidden, e_count = c.experts;
    float* du = temp.take<float>(sz(n * hidden), s);
    combine_rows(n, c.topk, hidden, st.slot_row, st.dx_perm, nullptr, st.du_shared, du, s);
    float* dlogits = temp.take<float>(sz(n * e_count), s);
    const double t = static_cast<double>(n);
    const double aux_factor = c.aux_loss_coeff > 0
                                  ? loss_scale * static_cast<double>(e_count) * c.aux_loss_coeff /
                                        (static_cast<double>(c.topk) * t * t)
                                  : 0.0;
    const auto z_grad = static_cast<float>(loss_scale * 2 * c.z_loss_coeff / t);
    router_backward(shape(n), st.logits, st.scores, st.probs, st.lse, st.chosen, st.dprobs,
                    c.aux_loss_coeff > 0 ? st.aux_counts : nullptr, aux_factor,
                    c.z_loss_coeff > 0 ? z_grad : 0.0f, dlogits, s);
    if (g.router != nullptr)
      ck::gemm<float, float>(scope.handle(), Trans::T, Trans::N, e_count, hidden, n, 1.0f, dlogits, e_count,
                             st.u, hidden, 1.0f, g.router, hidden);
    ck::gemm<float, float>(scope.handle(), Trans::N, Trans::N, n, hidden, e_count, 1.0f, dlogits, e_count,
                           w.router, hidden, 1.0f, du, hidden);
    if (c.rms_prenorm)
      ck::rmsnorm_backward<float>(scope.handle(), n, hidden, du, st.xhat, st.rstd, w.norm_w, dh, g.norm_w);
    else
      ck::layernorm_backward<float>(scope.handle(), n, hidden, du, st.xhat, st.rstd, w.norm_w, dh, g.norm_w,
                                    g.norm_b);
  }

  void all_reduce_sum(const plx_host_api& host, plx_group group, std::vector<double>& values) override {
    if (values.empty()) return;
    const ck::CurrentDevice guard(device_.device_id);
    cl::Arena memory(device_);
    double* buffer = memory.take<double>(values.size(), nullptr);
    const std::size_t bytes = values.size() * sizeof(double);
    const char* where = "moe.layer after_step: the tokens per expert over dp";
    PLEXUS_CUDA_CHECK(cudaMemcpy(buffer, values.data(), bytes, cudaMemcpyHostToDevice), where);
    auto extent = static_cast<int64_t>(values.size());
    DLTensor t{};
    t.data = buffer;
    t.device = device_;
    t.ndim = 1;
    t.dtype = DLDataType{kDLFloat, 64, 1};
    t.shape = &extent;
    const plx_status status = host.all_reduce(host.ctx, group, &t, &t, PLX_REDUCE_SUM, nullptr, nullptr);
    if (status != PLX_OK) throw plexus::sdk::Error::from_host(status);
    PLEXUS_CUDA_CHECK(cudaMemcpy(values.data(), buffer, bytes, cudaMemcpyDeviceToHost), where);
  }

  void download(const void* device, std::size_t bytes, void* host) override {
    const ck::CurrentDevice guard(device_.device_id);
    PLEXUS_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "moe.layer after_step");
  }
  void upload(const void* host, std::size_t bytes, void* device) override {
    const ck::CurrentDevice guard(device_.device_id);
    PLEXUS_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "moe.layer after_step");
  }

 private:
  template <class T>
  static T* take(CudaState& st, int64_t n, cudaStream_t s) {
    return st.memory.take<T>(sz(n), s);
  }
  // A state's pointers cleared (its memory was just released), the arena kept.
  static void reset(CudaState& st) {
    st.offsets.clear();
    st.xhat = st.rstd = st.u = st.logits = st.scores = st.probs = st.lse = nullptr;
    st.chosen = st.plain = nullptr;
    st.aux_counts = st.row_token = st.slot_row = nullptr;
    st.x_perm = st.y_perm = st.shared_y = st.dy_perm = st.dprobs = st.dx_perm = st.du_shared = nullptr;
    st.experts = st.shared = MlpKept{};
  }
  static MlpKept keep(CudaState& st, int64_t rows, const MlpDims& d, cudaStream_t s) {
    return MlpKept{take<float>(st, rows * d.fc1_rows(), s), take<float>(st, rows * d.ffn, s)};
  }
  RouteShape shape(int64_t tokens) const {
    return RouteShape{tokens,
                      config_.experts,
                      config_.topk,
                      config_.score == ScoreFunction::sigmoid,
                      config_.pre_softmax,
                      config_.groups,
                      config_.group_topk,
                      static_cast<float>(config_.topk_scaling_factor)};
  }
  MlpDims expert_dims() const { return MlpDims{config_.hidden, config_.ffn, config_.swiglu}; }
  MlpDims shared_dims() const { return MlpDims{config_.hidden, config_.shared_ffn, config_.swiglu}; }

  MoeConfig config_;
  DLDevice device_;
  cl::Context context_;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<MoeDevice> make_cuda_moe(const MoeConfig& config, DLDevice device) {
  return std::make_unique<cuda::MoeCuda>(config, device);
}

}  // namespace plexus::moe
