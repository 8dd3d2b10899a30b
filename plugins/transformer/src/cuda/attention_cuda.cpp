// transformer.attention on a CUDA device, float32 or bfloat16 activations with float32
// parameters: the CPU path's math (see ../attention.cpp and ../../README.md) over
// plexus_cuda_kernels: cuBLAS products, the norms, rotary embeddings and the causal grouped-query
// attention, all on the call's stream. The attention core is the fused (flash) kernel where it
// serves the layout (bf16, head dim 64 or 128) and model.attention_backend allows it, keeping one
// number per query row; otherwise the unfused kernels, keeping the probabilities. With bf16 activations the
// two weight matrices are used as bf16 copies (kept from a training forward for its backward), products
// accumulate in fp32, and the weight gradients are accumulated in fp32.
#include <cuda_runtime_api.h>

#include <optional>
#include <string>
#include <type_traits>

#include "cuda/prenorm_cuda_layer.hpp"
#include "cuda_layers.hpp"
#include "plexus_cuda_kernels/attention.hpp"
#include "plexus_cuda_kernels/device_buffer.hpp"
#include "plexus_cuda_kernels/error.hpp"
#include "plexus_cuda_kernels/flash_attention.hpp"
#include "plexus_cuda_kernels/rope.hpp"

namespace plexus::transformer {
namespace cuda {
namespace {

// PreNormCudaState's in is qkv = u Wqkv^T with RoPE applied to q and k, [N, (nh + 2 ng) hd]; its
// mid the attention output before the projection, [N, nh hd]. The core also keeps:
struct AttentionState : PreNormCudaState {
  using PreNormCudaState::PreNormCudaState;
  Kept probs;                   // T: softmax probabilities [B, nh, S, S] (the unfused kernels)
  const float* lse2 = nullptr;  // the flash kernel's row log-sums [B, nh, S] instead
};

class AttentionCuda final : public PreNormCudaLayer<AttentionCuda, AttentionSpec, AttentionState> {
 public:
  explicit AttentionCuda(const AttentionSpec& spec) : PreNormCudaLayer(spec) {
    // The rotary tables live as long as the layer, so plain device arrays; computed once in
    // double on the device (as the CPU's), and waited for: later calls may run on a stream that
    // does not synchronize with the default one. fp32 for either activation type (the kernel
    // rotates in fp32).
    const cuda_kernels::CurrentDevice guard(spec.device.device_id);
    const auto table = static_cast<std::size_t>(spec.max_seq * spec.head_dim / 2);
    cos_.emplace(table);
    sin_.emplace(table);
    ck::rope_tables(spec.max_seq, spec.head_dim, spec.rope_base, cos_->data(), sin_->data(), nullptr);
    PLEXUS_CUDA_CHECK(cudaStreamSynchronize(nullptr), "transformer.attention rotary tables");
  }

  ~AttentionCuda() override {
    try {
      const cuda_kernels::CurrentDevice guard(spec_.device.device_id);
      cos_.reset();
      sin_.reset();
    } catch (...) {  // the device is gone: free without it
      cos_.reset();
      sin_.reset();
    }
  }
  AttentionCuda(const AttentionCuda&) = delete;
  AttentionCuda& operator=(const AttentionCuda&) = delete;

 private:
  friend PreNormCudaLayer;

  ck::AttentionLayout layout(int64_t batch, int64_t seq) const {
    return ck::AttentionLayout::megatron(batch, seq, spec_.heads, spec_.groups, spec_.head_dim);
  }
  template <class T>
  void rope(T* x, int64_t rows, int64_t seq, bool inverse, cudaStream_t stream) const {
    ck::rope_apply<T>(x, rows, seq, spec_.projections.in_rows, spec_.rope_columns.data(),
                      static_cast<int64_t>(spec_.rope_columns.size()), spec_.head_dim, cos_->data(),
                      sin_->data(), inverse, stream);
  }
  void expect_sequence(int64_t seq) const {
    if (seq > spec_.max_seq)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "sequence length " + std::to_string(seq) +
                                                " exceeds model seq_length " + std::to_string(spec_.max_seq));
  }

  // Whether the flash kernel computes this call's attention: model.attention_backend, and whether
  // the kernel serves the activation type, the layout and the device (flash asked for where it
  // does not is refused by name).
  template <class T>
  bool use_flash(const ck::Handle& handle, const ck::AttentionLayout& l) const {
    if (spec_.backend == AttentionBackend::unfused) return false;
    const bool served = std::is_same_v<T, ck::bfloat16> && ck::flash_attention_supported(handle, l);
    if (!served && spec_.backend == AttentionBackend::flash)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "model.attention_backend \"flash\": the fused kernel serves bf16 activations "
                  "(run.precision=bf16), head dimension 64 or 128 and compute capability 8.0 or newer; this "
                  "run has " +
                      std::string(std::is_same_v<T, ck::bfloat16> ? "bf16" : "fp32") +
                      " activations and head "
                      "dimension " +
                      std::to_string(spec_.head_dim) + " (use \"auto\" or \"unfused\")");
    return served;
  }

  // RoPE on q and k, then o = attention(qkv), kept in a training forward.
  template <class T>
  T* core_forward(AttentionState& st, Context::Scope& scope, Arena& keep, const Tokens& t, bool train,
                  T* qkv) {
    cudaStream_t stream = scope.stream();
    rope<T>(qkv, t.n, t.seq, false, stream);
    T* o = keep.take<T>(sz(t.n * spec_.heads * spec_.head_dim), stream);
    const ck::AttentionLayout l = layout(t.batch, t.seq);
    st.probs = nullptr;
    st.lse2 = nullptr;
    if constexpr (std::is_same_v<T, ck::bfloat16>) {
      if (use_flash<T>(scope.handle(), l)) {
        float* lse2 = train ? keep.take<float>(sz(t.batch * spec_.heads * t.seq), stream) : nullptr;
        ck::flash_attention_forward(scope.handle(), l, qkv, o, lse2);
        st.lse2 = lse2;
        return o;
      }
    } else {
      static_cast<void>(use_flash<T>(scope.handle(), l));  // refuses flash asked for in fp32
    }
    T* probs = train ? keep.take<T>(sz(t.batch * spec_.heads * t.seq * t.seq), stream) : nullptr;
    ck::attention_forward<T>(scope.handle(), l, qkv, o, probs);
    st.probs = probs;
    return o;
  }

  // The attention core's backward (the forward's kernel), then RoPE's inverse on the q and k
  // gradients: dqkv from do.
  template <class T>
  const T* core_backward(const AttentionState& st, Context::Scope& scope, Arena& temp, const Tokens& t,
                         T* d_o) {
    T* dqkv = temp.take<T>(sz(t.n * spec_.projections.in_rows), scope.stream());
    bool done = false;
    if constexpr (std::is_same_v<T, ck::bfloat16>) {
      if (st.lse2 != nullptr) {
        ck::flash_attention_backward(scope.handle(), layout(t.batch, t.seq), st.in.get<T>(), st.mid.get<T>(),
                                     d_o, st.lse2, dqkv);
        done = true;
      }
    }
    if (!done)
      ck::attention_backward<T>(scope.handle(), layout(t.batch, t.seq), st.in.get<T>(), st.probs.get<T>(),
                                st.mid.get<T>(), d_o, dqkv);
    rope<T>(dqkv, t.n, t.seq, true, scope.stream());
    return dqkv;
  }

  std::optional<ck::DeviceArray<float>> cos_, sin_;  // [seq_length, head_dim / 2]
};

}  // namespace
}  // namespace cuda

std::unique_ptr<DeviceImpl> make_cuda_attention(const AttentionSpec& spec) {
  return std::make_unique<cuda::AttentionCuda>(spec);
}

}  // namespace plexus::transformer
