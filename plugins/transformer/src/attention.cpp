// transformer.attention: pre-norm self-attention with grouped query heads and rotary embeddings,
// causal or (option attn_mask_type "no_mask") bidirectional, F only (the stack adds the residual).
// See ../README.md for the math and layout.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "common.hpp"
#include "context_parallel.hpp"
#include "cuda_layers.hpp"
#include "plexus_kernels/attention.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/rope.hpp"
#include "prenorm_layer.hpp"

namespace plexus::transformer {
namespace {

namespace k = plexus::kernels;

// model.attention_backend (absent: auto, for hosts that predate it). flash is a GPU kernel: on the
// CPU it is refused rather than quietly run as the unfused path.
AttentionBackend attention_backend(const plexus::sdk::Host& host, plx_config model, bool on_cuda) {
  const std::string name = host.config_string_if(model, "attention_backend").value_or("auto");
  if (name == "auto") return AttentionBackend::automatic;
  if (name == "unfused") return AttentionBackend::unfused;
  if (name != "flash")
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "model.attention_backend: expected \"auto\", \"flash\" or \"unfused\", got \"" + name + "\"");
  if (!on_cuda)
    throw Error(
        PLX_ERR_INVALID_ARGUMENT,
        "model.attention_backend \"flash\" is a GPU kernel; transformer.attention on the CPU runs the "
        "unfused path (use \"auto\" or \"unfused\")");
  return AttentionBackend::flash;
}

// The component's option attn_mask_type (Megatron-LM's AttnMaskType names): "causal" (the
// default; also for a direct caller that passes no options, or null ones, which the host reads as
// {}) or "no_mask" (bidirectional, as Megatron's CLIP ViT). Returns whether the mask is causal.
// The host validates the value against the schema; a caller that does not is refused here, naming
// the option.
bool read_causal(const plexus::sdk::Host& host, plx_config options) {
  if (options == nullptr || host.config_json(options) == "null") return true;
  const std::string name = host.config_string_if(options, "attn_mask_type").value_or("causal");
  if (name == "causal") return true;
  if (name == "no_mask") return false;
  throw Error(PLX_ERR_INVALID_ARGUMENT,
              "transformer.attention option attn_mask_type: expected \"causal\" or \"no_mask\", got \"" +
                  name + "\"");
}

// The component's options: the config section under its component name (model.attention.options
// for the GPT's attention).
constexpr const char* kSchema =
    R"json({"type": "object", "doc": "Pre-norm self-attention (GQA, rotary, Megatron's qkv layout). The model's sizes come from the model section.", "properties": {)json"
    R"json("attn_mask_type": {"type": "string", "enum": ["causal", "no_mask"], "default": "causal", "doc": "Megatron-LM's AttnMaskType: causal (a token sees itself and the tokens before it: the GPT decoder) or no_mask (bidirectional: every token sees the whole sequence, as the vision encoder of Megatron-LM's CLIP ViT; CPU only, not with context parallelism)"})json"
    R"json(}})json";

// PreNormState's in is qkv = u Wqkv^T with RoPE applied to q and k, [N, (nh + 2 ng) hd]; its mid
// the attention output before the projection, [N, nh hd]; its d_in the qkv projection's output
// gradient (after RoPE's transpose). The core also keeps:
class AttentionState : public PreNormState {
 public:
  k::Buffer probs;  // softmax probabilities [B, nh, S, S]
  // Under context parallelism instead: each query row's log-sum-exp [B, nh, S] (the backward
  // recomputes the probabilities from it).
  k::Buffer lse;
};

class Attention final : public PreNormLayer<Attention, AttentionState> {
 public:
  explicit Attention(const plx_layer_create_args& args) : PreNormLayer("transformer.attention", args) {
    const auto host = plexus::sdk::Host::current();
    const plx_config m = args.model_config;
    heads_ = positive_int(host, m, "num_attention_heads");
    groups_ = positive_int(host, m, "num_query_groups");
    max_seq_ = positive_int(host, m, "seq_length");
    const double rope_base = positive_number(host, m, "rotary_base");
    const AttentionBackend backend = attention_backend(host, m, on_cuda());
    causal_ = read_causal(host, args.config);
    if (hidden_ % heads_ != 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "hidden_size (" + std::to_string(hidden_) +
                                                ") is not divisible by num_attention_heads (" +
                                                std::to_string(heads_) + ")");
    if (heads_ % groups_ != 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "num_attention_heads (" + std::to_string(heads_) +
                                                ") is not divisible by num_query_groups (" +
                                                std::to_string(groups_) + ")");
    head_dim_ = hidden_ / heads_;
    const bool rope = position_embedding(host, m) == PositionEmbedding::rope;
    if (rope && head_dim_ % 2 != 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "the head dimension hidden_size / num_attention_heads = " + std::to_string(hidden_) +
                      " / " + std::to_string(heads_) + " = " + std::to_string(head_dim_) +
                      " must be even for rotary embeddings");
    // Tensor parallelism: each rank holds whole query groups, heads / tp query heads and
    // groups / tp key-value heads; linear_qkv is laid out group by group, so its row split is
    // one part (Megatron: num_query_groups % tp == 0).
    refuse_split_on_device();
    // Bidirectional attention runs on the CPU's kernels only: the CUDA kernels (unfused and
    // flash) and the context-parallel core (its blocks and their skipping follow the causal mask)
    // are causal only.
    if (!causal_ && on_cuda())
      throw Error(PLX_ERR_UNSUPPORTED,
                  "transformer.attention option attn_mask_type \"no_mask\" runs on the CPU only: the CUDA "
                  "attention kernels are causal (" +
                      device_text(device_) + " requested; use attn_mask_type \"causal\" or run on the CPU)");
    if (!causal_ && cp_.size() > 1)
      throw Error(PLX_ERR_UNSUPPORTED,
                  "transformer.attention option attn_mask_type \"no_mask\" is not context-parallel: the cp "
                  "group has " +
                      std::to_string(cp_.size()) +
                      " ranks, and the context-parallel attention is causal only (set cp to 1, or use "
                      "attn_mask_type \"causal\")");
    if (cp_.size() > 1 && on_cuda())
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "transformer.attention on CUDA is not context-parallel yet: the cp group has " +
                      std::to_string(cp_.size()) + " ranks (set cp to 1, or run on the CPU)");
    cp_all_gather_ = host.config_string_if(m, "cp_comm_type").value_or("p2p") == "all_gather";
    heads_ = split_over(tp_, heads_, "num_attention_heads");
    groups_ = split_over(tp_, groups_, "num_query_groups");
    qkv_rows_ = (heads_ + 2 * groups_) * head_dim_;

    add_parameters({"input_layernorm.weight", "input_layernorm.bias", "self_attention.linear_qkv.weight",
                    "self_attention.linear_proj.weight", "self_attention.linear_qkv.layer_norm_weight",
                    "self_attention.linear_qkv.layer_norm_bias"},
                   qkv_rows_, heads_ * head_dim_, output_init_std(args, init_std_));

    // RoPE is applied in place to the query heads and the key head of every group (none without
    // rotary position embeddings: an empty list rotates nothing).
    const int64_t per = heads_ / groups_;
    for (int64_t g = 0; rope && g < groups_; ++g)
      for (int64_t j = 0; j <= per; ++j) rope_columns_.push_back(g * (per + 2) * head_dim_ + j * head_dim_);
    if (on_cuda()) {  // the GPU builds its own rotary tables
      AttentionSpec spec;
      fill_spec(spec);
      spec.heads = heads_;
      spec.groups = groups_;
      spec.head_dim = head_dim_;
      spec.max_seq = max_seq_;
      spec.rope_base = rope_base;
      spec.backend = backend;
      spec.rope_columns = rope_columns_;
      device_impl_ = make_cuda_attention(spec);
      return;
    }
    const auto table = static_cast<std::size_t>(max_seq_ * head_dim_ / 2);
    cos_f_.resize(table);
    sin_f_.resize(table);
    cos_d_.resize(table);
    sin_d_.resize(table);
    k::rope_tables<float>(max_seq_, head_dim_, rope_base, cos_f_.data(), sin_f_.data());
    k::rope_tables<double>(max_seq_, head_dim_, rope_base, cos_d_.data(), sin_d_.data());
  }

  // Matrix products only, 2 FLOPs per multiply-add: the qkv and output projections, and QK^T and
  // PV over the S (S + 1) / 2 query-key pairs the causal mask keeps, the work that is computed
  // (Megatron's own count takes the full S x S, which would credit the kernels with the masked
  // half they skip); without the mask (attn_mask_type "no_mask") over all S x S pairs. Backward:
  // twice the forward.
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_descs("estimate_flops", num_inputs, 1);
    expect_hidden_desc(inputs[0]);
    // Under sequence parallelism the hidden states are this rank's block of the tokens; the
    // products run on all of them.
    const auto b = static_cast<double>(inputs[0].dims[0]);
    const auto s = static_cast<double>(inputs[0].dims[1] * (sp_ ? tp_.size() : 1));
    const double n = b * s, c = static_cast<double>(hidden_), dq = static_cast<double>(heads_ * head_dim_);
    // Under context parallelism this rank's s queries see, on average, half the whole sequence
    // (causal only: no_mask is refused with cp > 1).
    const double pairs = !causal_ ? s * s : cp_.size() > 1 ? s * (s * cp_.size() + 1) / 2 : s * (s + 1) / 2;
    forward = 2 * n * c * static_cast<double>(qkv_rows_) + 2 * n * dq * c +
              2 * 2 * b * static_cast<double>(heads_) * pairs * static_cast<double>(head_dim_);
    backward = 2 * forward;
  }

 private:
  template <class T>
  const T* cos_table() const {
    if constexpr (std::is_same_v<T, float>)
      return cos_f_.data();
    else
      return cos_d_.data();
  }
  template <class T>
  const T* sin_table() const {
    if constexpr (std::is_same_v<T, float>)
      return sin_f_.data();
    else
      return sin_d_.data();
  }

  k::AttentionLayout layout(int64_t batch, int64_t seq) const {
    k::AttentionLayout l = k::AttentionLayout::megatron(batch, seq, heads_, groups_, head_dim_);
    l.causal = causal_;
    return l;
  }

  // What PreNormLayer calls (its in is qkv, and its mid o, the attention output [N, nh hd]).
  friend class PreNormLayer<Attention, AttentionState>;

  void expect_sequence(int64_t seq) const {
    if (seq * cp_.size() > max_seq_)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "sequence length " + std::to_string(seq * cp_.size()) +
                                                " exceeds model seq_length " + std::to_string(max_seq_));
    if (cp_.size() > 1 && seq % 2 != 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "under context parallelism each rank holds two equal chunks of the "
                  "sequence; this rank's " +
                      std::to_string(seq) + " tokens are odd");
  }

  // What the core keeps for the backward: the softmax probabilities [B, heads, S, S], or under
  // context parallelism one log-sum-exp per query row (in double) from which they are rebuilt.
  double core_saved_bytes(const Tokens& t, uint32_t cp, double element) const {
    const double rows =
        static_cast<double>(t.batch) * static_cast<double>(heads_) * static_cast<double>(t.seq);
    return cp > 1 ? 8.0 * rows : element * rows * static_cast<double>(t.seq);
  }

  ContextParallelLayout cp_layout(const Tokens& t) const {
    return {t.batch, t.seq, heads_, groups_, head_dim_, cp_.rank(), cp_.size()};
  }

  // Context parallelism: RoPE at the tokens' global positions, then this rank's queries against
  // every rank's kv block, passed around the ring or gathered (context_parallel.hpp).
  template <class T>
  void cp_core_forward(AttentionState& st, const Tokens& t, bool train, T* qkv, T* o) {
    const ContextParallelLayout l = cp_layout(t);
    rope_at_global_positions<T>(l, qkv, qkv_rows_, rope_columns_.data(),
                                static_cast<int64_t>(rope_columns_.size()), cos_table<T>(), sin_table<T>(),
                                false);
    k::Buffer kv_buf, other_buf, call_lse;
    T* kv = kv_buf.get<T>(sz(l.tokens() * l.kv_cols()));
    pack_kv<T>(l, qkv, kv);
    SoftmaxRows rows(l);
    ExchangeClock clock;
    if (cp_all_gather_) {
      T* all = other_buf.get<T>(sz(l.tokens() * l.kv_cols() * cp_.size()));
      clock.wait(
          [&] { cp_.gather_rows(kv, all, l.tokens(), l.kv_cols(), dtype_of(precision_v<T>), device_); });
      for (int32_t source = 0; source < cp_.size(); ++source)
        clock.compute(
            [&] { attend_block<T>(l, qkv, all + source * l.tokens() * l.kv_cols(), source, rows); });
    } else {
      T* next = other_buf.get<T>(sz(l.tokens() * l.kv_cols()));
      for (int32_t step = 0; step < cp_.size(); ++step) {
        const int32_t source = (cp_.rank() - step + cp_.size()) % cp_.size();
        // The next block is on its way while this one is computed.
        const Transfer transfer = step + 1 < cp_.size() ? pass_on(l, kv, next, kTagBlock) : Transfer{};
        clock.compute([&] { attend_block<T>(l, qkv, kv, source, rows); });
        clock.wait([&] { finish(transfer); });
        std::swap(kv, next);
      }
    }
    clock.report("cp_forward");
    double* lse = (train ? st.lse : call_lse).get<double>(sz(t.batch * heads_ * t.seq));
    finish_rows<T>(l, rows, o, lse);
  }

  template <class T>
  const T* cp_core_backward(AttentionState& st, const Tokens& t, bool split, T* d_o, k::Buffer& call_dqkv) {
    const ContextParallelLayout l = cp_layout(t);
    const T* qkv = st.in.data<T>();
    const T* o = st.mid.data<T>();
    const double* lse = st.lse.data<double>();
    T* dqkv = (split ? st.d_in : call_dqkv).get<T>(sz(t.n * qkv_rows_));
    std::fill(dqkv, dqkv + t.n * qkv_rows_, T(0));
    const std::size_t block = sz(l.tokens() * l.kv_cols());
    k::Buffer kv_buf, dkv_buf, next_buf, next_dkv_buf;
    ExchangeClock clock;
    T* kv = kv_buf.get<T>(block * (cp_all_gather_ ? sz(cp_.size()) : 1));
    T* dkv = dkv_buf.zeros<T>(block * (cp_all_gather_ ? sz(cp_.size()) : 1));
    if (cp_all_gather_) {
      // The blocks gathered again (not kept since the forward), each block's gradients from this
      // rank's queries summed over the ranks on their owner.
      T* mine = next_buf.get<T>(block);
      pack_kv<T>(l, qkv, mine);
      clock.wait(
          [&] { cp_.gather_rows(mine, kv, l.tokens(), l.kv_cols(), dtype_of(precision_v<T>), device_); });
      for (int32_t source = 0; source < cp_.size(); ++source)
        clock.compute([&] {
          attend_block_backward<T>(l, qkv, kv + sz(source) * block, source, o, lse, d_o, dqkv,
                                   dkv + sz(source) * block);
        });
      T* owned = next_dkv_buf.get<T>(block);
      clock.wait([&] {
        cp_.finish(cp_.start_scatter_sum_rows(dkv, owned, l.tokens(), l.kv_cols(), dtype_of(precision_v<T>),
                                              device_));
      });
      add_kv_gradient<T>(l, owned, dqkv);
    } else {
      // The ring again, each block travelling with its gradients: after a full turn they are home.
      pack_kv<T>(l, qkv, kv);
      T* next = next_buf.get<T>(block);
      T* next_dkv = next_dkv_buf.get<T>(block);
      for (int32_t step = 0; step < cp_.size(); ++step) {
        const int32_t source = (cp_.rank() - step + cp_.size()) % cp_.size();
        const Transfer transfer = step + 1 < cp_.size() ? pass_on(l, kv, next, kTagBlock) : Transfer{};
        clock.compute([&] { attend_block_backward<T>(l, qkv, kv, source, o, lse, d_o, dqkv, dkv); });
        clock.wait([&] {
          finish(transfer);
          finish(pass_on(l, dkv, next_dkv, kTagGradient));
        });
        std::swap(kv, next);
        std::swap(dkv, next_dkv);
      }
      add_kv_gradient<T>(l, dkv, dqkv);
    }
    clock.report("cp_backward");
    rope_at_global_positions<T>(l, dqkv, qkv_rows_, rope_columns_.data(),
                                static_cast<int64_t>(rope_columns_.size()), cos_table<T>(), sin_table<T>(),
                                true);
    if (split) {
      st.in.release();
      st.lse.release();
    }
    return dqkv;
  }

  // The milliseconds a call spent computing blocks and waiting for the exchange (transfers not
  // hidden under the computation), reported as the metrics transformer/<what>_compute_ms and
  // transformer/<what>_wait_ms (each step's mean over the calls).
  struct ExchangeClock {
    double compute_ms = 0, wait_ms = 0;
    template <class F>
    static double timed(F&& f) {
      const auto begin = std::chrono::steady_clock::now();
      f();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    }
    template <class F>
    void compute(F&& f) {
      compute_ms += timed(f);
    }
    template <class F>
    void wait(F&& f) {
      wait_ms += timed(f);
    }
    void report(const std::string& what) const {
      const plx_host_api* api = plexus::sdk::Host::current().api();
      if (!PLX_HAS_FIELD(api, plx_host_api, report_metric) || api->report_metric == nullptr) return;
      api->report_metric(api->ctx, (what + "_compute_ms").c_str(), compute_ms);
      api->report_metric(api->ctx, (what + "_wait_ms").c_str(), wait_ms);
    }
  };

  // A block sent to the next cp rank and the previous rank's received into `into`, started.
  struct Transfer {
    plx_request send = nullptr, recv = nullptr;
  };
  static constexpr int32_t kTagBlock = 601, kTagGradient = 602;
  template <class T>
  Transfer pass_on(const ContextParallelLayout& l, T* block, T* into, int32_t tag) const {
    int64_t shape[2] = {l.tokens(), l.kv_cols()};
    const DLTensor send{block, device_, 2, dtype_of(precision_v<T>), shape, nullptr, 0};
    DLTensor recv{into, device_, 2, dtype_of(precision_v<T>), shape, nullptr, 0};
    const int32_t next = (cp_.rank() + 1) % cp_.size(), previous = (cp_.rank() - 1 + cp_.size()) % cp_.size();
    Transfer t;
    t.recv = cp_.start_recv(recv, previous, tag);
    t.send = cp_.start_send(send, next, tag);
    return t;
  }
  void finish(const Transfer& t) const {
    cp_.finish(t.send);
    cp_.finish(t.recv);
  }

  // RoPE on q and k, then o = attention(qkv).
  template <class T>
  void core_forward(AttentionState& st, const Tokens& t, bool train, T* qkv, T* o) {
    if (cp_.size() > 1) return cp_core_forward<T>(st, t, train, qkv, o);
    k::rope_apply<T>(qkv, t.n, t.seq, qkv_rows_, rope_columns_.data(),
                     static_cast<int64_t>(rope_columns_.size()), head_dim_, cos_table<T>(), sin_table<T>(),
                     false);
    T* probs = train ? st.probs.get<T>(sz(t.batch * heads_ * t.seq * t.seq)) : nullptr;
    k::attention_forward<T>(layout(t.batch, t.seq), qkv, o, probs);
  }

  // The attention core's backward, then RoPE's transpose on the q and k gradients: dqkv from do.
  template <class T>
  const T* core_backward(AttentionState& st, const Tokens& t, bool split, T* d_o, k::Buffer& call_dqkv) {
    if (cp_.size() > 1) return cp_core_backward<T>(st, t, split, d_o, call_dqkv);
    T* dqkv = (split ? st.d_in : call_dqkv).get<T>(sz(t.n * qkv_rows_));
    k::attention_backward<T>(layout(t.batch, t.seq), st.in.data<T>(), st.probs.data<T>(), st.mid.data<T>(),
                             d_o, dqkv);
    k::rope_apply<T>(dqkv, t.n, t.seq, qkv_rows_, rope_columns_.data(),
                     static_cast<int64_t>(rope_columns_.size()), head_dim_, cos_table<T>(), sin_table<T>(),
                     true);
    if (split) {  // backward_weights needs dqkv and o, not the core's qkv and probabilities
      st.in.release();
      st.probs.release();
    }
    return dqkv;
  }

  // The host's "cp" group (one rank without context parallelism).
  plexus::sdk::Group cp_ = plexus::sdk::Group::find(plexus::sdk::Host::current(), "cp");
  bool cp_all_gather_ = false;  // model.cp_comm_type "all_gather", else the p2p ring
  bool causal_ = true;          // options.attn_mask_type "causal", else "no_mask" (bidirectional)
  int64_t heads_ = 0, groups_ = 0, head_dim_ = 0, qkv_rows_ = 0, max_seq_ = 0;
  std::vector<int64_t> rope_columns_;
  std::vector<float> cos_f_, sin_f_;
  std::vector<double> cos_d_, sin_d_;
};

}  // namespace

const plx_component_desc* attention_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<Attention>(
      "transformer.attention",
      "pre-norm self-attention, causal or bidirectional (GQA, rotary, Megatron qkv layout), F only: f = "
      "proj(attn(norm(x)))",
      kSchema);
  return &desc;
}

}  // namespace plexus::transformer
