// vision.patch_embedding: the patch embedding of Megatron-LM's CLIPViTModel, on images already cut
// into patches:
//   out[b, n, :] = W x[b, n, :] + pos[n, :]
// x [B, P, patch_dim] holds patch n of image b, its pixels flattened in (channel, row, column)
// order; W = conv1.weight [hidden, channels, patch_size, patch_size] read as [hidden, patch_dim]
// (the same order), so the product is conv1 (kernel = stride = patch_size, no bias) at patch n;
// pos = position_embeddings.weight [P, hidden]. CPU only, float32 and float64.
#include <cstdint>
#include <memory>
#include <string>

#include "common.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/gemm.hpp"

namespace plexus::vision {
namespace {

namespace k = plexus::kernels;
using k::Trans;

constexpr const char* kComponent = "vision.patch_embedding";

// The options, their defaults and docs: the schema and the constructor both read this table.
struct IntOption {
  const char* key;
  int64_t fallback;
  const char* doc;
};
const IntOption kImageSize{"image_size", 8, "pixels per side of the square image"};
const IntOption kPatchSize{"patch_size", 2,
                           "pixels per side of a square patch (conv1's kernel and stride); must divide "
                           "image_size"};
const IntOption kChannels{"channels", 1, "colour channels of the image (conv1's in_channels)"};

const char* options_schema() {
  static const std::string schema = [] {
    std::string s =
        R"({"type": "object", "doc": "The patch embedding of Megatron-LM's CLIPViTModel on pre-cut patches: )"
        R"(conv1 (kernel = stride = patch_size, no bias) plus learned positions.", "properties": {)";
    bool first = true;
    for (const IntOption* o : {&kImageSize, &kPatchSize, &kChannels}) {
      s += std::string(first ? "" : ", ") + "\"" + o->key +
           "\": {\"type\": \"integer\", \"minimum\": 1, \"default\": " + std::to_string(o->fallback) +
           ", \"doc\": \"" + o->doc + "\"}";
      first = false;
    }
    return s + "}}";
  }();
  return schema.c_str();
}

class PatchState : public plexus::sdk::LayerState {
 public:
  bool saved = false;
  Precision precision = Precision::f32;        // the compute dtype (the output's)
  Precision pixel_precision = Precision::f32;  // the input's
  int64_t batch = 0;
  k::Buffer x;  // the pixels [B P, patch_dim] in the compute dtype: conv1's weight gradient needs them
};

class PatchEmbedding final : public VisionLayer {
 public:
  explicit PatchEmbedding(const plx_layer_create_args& args) : VisionLayer(kComponent, args, 1) {
    const auto host = plexus::sdk::Host::current();
    const plx_config o = args.config;
    image_size_ = option_int(host, o, kImageSize.key, kImageSize.fallback, 1, kComponent);
    patch_size_ = option_int(host, o, kPatchSize.key, kPatchSize.fallback, 1, kComponent);
    channels_ = option_int(host, o, kChannels.key, kChannels.fallback, 1, kComponent);
    if (image_size_ % patch_size_ != 0)
      refuse("option patch_size (" + std::to_string(patch_size_) + ") does not divide option image_size (" +
             std::to_string(image_size_) + "): the image must cut into whole patches");
    const int64_t side = image_size_ / patch_size_;
    patches_ = side * side;
    patch_dim_ = channels_ * patch_size_ * patch_size_;
    // Megatron's names (CLIPViTModel.conv1, .position_embeddings); conv1 has no bias.
    params_.push_back(make_param("conv1.weight", {hidden_, channels_, patch_size_, patch_size_},
                                 PLX_INIT_NORMAL, init_std_, 0));
    params_.push_back(
        make_param("position_embeddings.weight", {patches_, hidden_}, PLX_INIT_NORMAL, init_std_, 0));
  }

  // The output is [B, P, hidden] in the master dtype, float32: the engine gives the embedding
  // unit's output the run's activation dtype, and the forward computes in the output's dtype.
  void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs, uint32_t num_outputs,
                   plx_tensor_desc* outputs) const override {
    expect_descs(num_inputs, num_outputs);
    const plx_tensor_desc& d = inputs[0];
    precision_of(d.dtype, kComponent, "input 0 (pixels)");
    expect_pixels_shape(d.dims, d.ndim);
    plx_tensor_desc out{};
    out.ndim = 3;
    out.dtype = plx_dtype_f32();
    out.dims[0] = d.dims[0];
    out.dims[1] = patches_;
    out.dims[2] = hidden_;
    outputs[0] = out;
  }

  // One product [B P, patch_dim] x [patch_dim, hidden], 2 FLOPs per multiply-add; backward: conv1's
  // weight gradient, the same count (the pixels need no gradient).
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_descs(num_inputs, 1);
    expect_pixels_shape(inputs[0].dims, inputs[0].ndim);
    forward = 2.0 * static_cast<double>(inputs[0].dims[0] * patches_) * static_cast<double>(patch_dim_) *
              static_cast<double>(hidden_);
    backward = forward;
  }

  void forward(plexus::sdk::LayerState& state, uint32_t stage, const plx_forward_args& args) override {
    expect_call(stage, args.num_inputs, args.num_outputs, args.num_params);
    auto& st = static_cast<PatchState&>(state);
    // The output's dtype decides (as transformer.embedding's): the engine sets the activations'.
    if (precision_of(args.outputs[0].dtype, kComponent, "output 0 (patch embeddings)") == Precision::f32)
      run_forward<float>(st, args);
    else
      run_forward<double>(st, args);
  }

  void backward(plexus::sdk::LayerState& state, uint32_t stage, const plx_backward_args& args) override {
    expect_call(stage, args.num_inputs, args.num_outputs, args.num_params);
    auto& st = static_cast<PatchState&>(state);
    if (precision_of(args.grad_outputs[0].dtype, kComponent, "grad output 0") == Precision::f32)
      run_backward<float>(st, args);
    else
      run_backward<double>(st, args);
  }

  std::unique_ptr<plexus::sdk::LayerState> create_state(uint32_t) override {
    return std::make_unique<PatchState>();
  }

 private:
  // [batch, P, patch_dim] with P and patch_dim those of the options.
  void expect_pixels_shape(const int64_t* dims, int64_t ndim) const {
    if (ndim != 3)
      refuse("input 0 (pixels): expected shape [batch, patches, patch_dim] = [batch, " +
             std::to_string(patches_) + ", " + std::to_string(patch_dim_) + "], got " +
             shape_text(dims, ndim));
    if (dims[1] != patches_)
      refuse("input 0 (pixels) " + shape_text(dims, ndim) + " has " + std::to_string(dims[1]) +
             " patches per image, but image_size " + std::to_string(image_size_) + " and patch_size " +
             std::to_string(patch_size_) + " give (" + std::to_string(image_size_) + " / " +
             std::to_string(patch_size_) + ")^2 = " + std::to_string(patches_));
    if (dims[2] != patch_dim_)
      refuse("input 0 (pixels) " + shape_text(dims, ndim) + " has " + std::to_string(dims[2]) +
             " values per patch, but channels " + std::to_string(channels_) + " x patch_size " +
             std::to_string(patch_size_) + " x patch_size " + std::to_string(patch_size_) + " = " +
             std::to_string(patch_dim_));
  }

  // The pixels [batch, P, patch_dim] (float32 or float64, whatever the compute dtype): returns the
  // batch and their precision.
  int64_t expect_pixels(const DLTensor& px, Precision& precision) const {
    precision = precision_of(px.dtype, kComponent, "input 0 (pixels)");
    plexus::sdk::expect_dense(px, device_, px.dtype, std::string(kComponent) + ": input 0 (pixels)");
    expect_pixels_shape(px.shape, px.ndim);
    return px.shape[0];
  }

  template <class T>
  void run_forward(PatchState& st, const plx_forward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    Precision pixel_precision = Precision::f32;
    const int64_t batch = expect_pixels(args.inputs[0], pixel_precision);
    expect_tensor(args.outputs[0], device_, dt, {batch, patches_, hidden_},
                  std::string(kComponent) + ": output 0 (patch embeddings)");
    expect_params(args.params, nullptr, dt);
    const bool train = (args.flags & PLX_FORWARD_TRAINING) != 0;
    const int64_t n = batch * patches_;
    const auto count = static_cast<std::size_t>(n * patch_dim_);

    // The pixels in the compute dtype (kept by a training forward for conv1's weight gradient).
    k::Buffer call_x;
    T* x = (train ? st.x : call_x).get<T>(count);
    if (pixel_precision == Precision::f32) {
      const float* p = data<float>(args.inputs[0]);
      for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<T>(p[i]);
    } else {
      const double* p = data<double>(args.inputs[0]);
      for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<T>(p[i]);
    }

    // out = x W^T  ([n, patch_dim] x [patch_dim, hidden]), then + pos[patch].
    const T* w = data<T>(args.params[0]);
    const T* pos = data<T>(args.params[1]);
    T* out = data<T>(args.outputs[0]);
    k::gemm_parallel<T>(Trans::N, Trans::T, n, hidden_, patch_dim_, T(1), x, patch_dim_, w, patch_dim_, T(0),
                        out, hidden_);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t p = 0; p < patches_; ++p) {
        T* o = out + (b * patches_ + p) * hidden_;
        const T* row = pos + p * hidden_;
        for (int64_t i = 0; i < hidden_; ++i) o[i] += row[i];
      }

    st.saved = train;
    st.precision = precision_v<T>;
    st.pixel_precision = pixel_precision;
    st.batch = batch;
    if (!train) st.x.release();
  }

  template <class T>
  void run_backward(PatchState& st, const plx_backward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    const DLTensor& gy = args.grad_outputs[0];
    plexus::sdk::expect_dense(gy, device_, dt, std::string(kComponent) + ": grad output 0");
    if (gy.ndim != 3 || gy.shape[1] != patches_ || gy.shape[2] != hidden_)
      refuse("grad output 0: expected shape [batch, " + std::to_string(patches_) + ", " +
             std::to_string(hidden_) + "], got " + shape_text(gy));
    const int64_t batch = gy.shape[0];
    expect_saved(st.saved, st.precision, precision_v<T>, st.batch, patches_, batch, patches_);
    expect_params(args.params, args.param_grads, dt);
    const int64_t n = batch * patches_;
    const T* dy = data<T>(gy);
    const T* x = st.x.data<T>();

    // dW += dy^T x  ([hidden, n] x [n, patch_dim]): the sum over every (image, patch).
    if (T* dw = grad_or_null<T>(args.param_grads, 0))
      k::gemm_parallel<T>(Trans::T, Trans::N, hidden_, patch_dim_, n, T(1), dy, hidden_, x, patch_dim_, T(1),
                          dw, patch_dim_);
    // dpos[p] += sum over images of dy[b, p], in image order.
    if (T* dpos = grad_or_null<T>(args.param_grads, 1))
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t p = 0; p < patches_; ++p) {
          T* row = dpos + p * hidden_;
          const T* d = dy + (b * patches_ + p) * hidden_;
          for (int64_t i = 0; i < hidden_; ++i) row[i] += d[i];
        }

    // The pixels need no gradient: the engine passes data == NULL. A caller that asks for one
    // (a test, an encoder fed by another layer) gets dx = dy W, written in the pixels' dtype.
    const DLTensor& gx = args.grad_inputs[0];
    if (gx.data == nullptr) return;
    const DLDataType pixel_dt = dtype_of(st.pixel_precision);
    expect_tensor(gx, device_, pixel_dt, {batch, patches_, patch_dim_},
                  std::string(kComponent) + ": grad input 0");
    const auto count = static_cast<std::size_t>(n * patch_dim_);
    k::Buffer call_dx;
    T* dx = st.pixel_precision == precision_v<T> ? data<T>(gx) : call_dx.get<T>(count);
    k::gemm_parallel<T>(Trans::N, Trans::N, n, patch_dim_, hidden_, T(1), dy, hidden_,
                        data<T>(args.params[0]), patch_dim_, T(0), dx, patch_dim_);
    if (st.pixel_precision == precision_v<T>) return;
    if (st.pixel_precision == Precision::f32) {
      float* out = data<float>(gx);
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(dx[i]);
    } else {
      double* out = data<double>(gx);
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<double>(dx[i]);
    }
  }

  int64_t image_size_ = 0, patch_size_ = 0, channels_ = 0;
  int64_t patches_ = 0;    // P = (image_size / patch_size)^2
  int64_t patch_dim_ = 0;  // channels x patch_size^2
};

}  // namespace

const plx_component_desc* patch_embedding_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<PatchEmbedding>(
      kComponent,
      "ViT patch embedding (Megatron's CLIPViTModel conv1 + position_embeddings) on pre-cut patches [B, P, "
      "channels x patch_size^2]",
      options_schema());
  return &desc;
}

}  // namespace plexus::vision
