// Plexus SDK C++ helpers: everything of an "mhc" fusion backend (plexus/mhc.h) but its kernels.
//
// plexus/cpp/mhc.hpp turns a class with eight member functions into the family's table and
// checks every call's contract. What is left between that class and the kernels is the same for
// every backend: one instance per device, each call routed to the device its tensors are on, the
// CPU's dtype picked (float32 or float64), and the refusals of the devices and dtypes it does not
// run. MhcBackendScaffold<Kernels> is that class, so a backend writes only its primitives:
//
//   // kernels.hpp, in the backend's namespace: the CPU primitives, a class template over the
//   // activation type T with the eight as static members (aggregate_forward and so on)
//   PLEXUS_MHC_PRIMITIVES(CpuPrimitives);
//
//   // aggregate.cpp (each pair of primitives in its own file, say)
//   template <class T>
//   void CpuPrimitives<T>::aggregate_forward(const MhcProblem& p, const plx_mhc_aggregate_forward_args& a) {
//     ...
//   }
//   ... aggregate_backward likewise
//   PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, aggregate, float);
//   PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, aggregate, double);
//
//   // plugin.cpp
//   struct MyKernels {
//     static constexpr const char* name = "my_mhc";  // the component's name, in every message
//     template <class T>
//     using Cpu = CpuPrimitives<T>;                   // run for float32 and float64 activations
//     // using Cuda = ...;  optional: the instance that runs the calls on one CUDA GPU
//   };
//   using MyMhc = plexus::sdk::MhcBackendScaffold<MyKernels>;
//   const plx_component_desc kMyMhc = MyMhc::component("one line for plugins list", kSchemaJson);
//   PLEXUS_PLUGIN("my_mhc", "1.0.0", "what the plugin offers", &kMyMhc)
//
// Kernels::Cuda, when a backend has one, is constructed as Cuda(Kernels::name, device_id) once per
// GPU (it may throw Error(PLX_ERR_UNSUPPORTED) for a GPU that is not there) and has the eight
// functions of mhc.hpp's class, (const MhcProblem&, const args&, plx_stream), which pick their own
// dtypes; `static constexpr bool runs_bfloat16 = true` in it adds "bfloat16 runs on CUDA" to the
// CPU's refusal of bfloat16. The in-tree backends' CUDA instance is
// plugins/common/mhc_backend's MhcCudaInstance.
//
// Header-only and C++17, like the rest of the SDK's C++ helpers.
#ifndef PLEXUS_CPP_MHC_BACKEND_HPP
#define PLEXUS_CPP_MHC_BACKEND_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "plexus/cpp/components.hpp"
#include "plexus/cpp/error.hpp"
#include "plexus/cpp/mhc.hpp"
#include "plexus/cpp/tensor.hpp"
#include "plexus/mhc.h"

// Declares, in the namespace it is expanded in (the backend's),
// - Name<T>: a class template with the eight primitives as static member functions,
//     static void proj_rms_forward(const MhcProblem&, const plx_mhc_proj_rms_forward_args&);
//   and so on, the names and argument types the scaffold calls them by. T is the activation type
//   they are instantiated for (PLEXUS_MHC_INSTANTIATE_PAIR); the backend defines them in its own
//   source files, and receives arguments that plexus/cpp/mhc.hpp has checked;
// - the names they are written with: MhcProblem and the typed tensor accessors (mhc_in, mhc_out,
//   mhc_in_if, mhc_out_if, mhc_given), by a using-directive for plexus::sdk::mhc_kernel_names.
#define PLEXUS_MHC_PRIMITIVES(Name) PLEXUS_MHC_DETAIL_PRIMITIVES(Name, )
// The same with a leading parameter of type `Context` (a GPU's handle, say):
//   static void proj_rms_forward(Context, const MhcProblem&, const plx_mhc_proj_rms_forward_args&);
#define PLEXUS_MHC_PRIMITIVES_WITH(Name, Context) PLEXUS_MHC_DETAIL_PRIMITIVES(Name, Context, )

// Instantiates one pair of primitives, `pair`_forward and `pair`_backward (pair: proj_rms,
// mappings, aggregate or post_res), of the class template `Primitives` for type T, in the file
// that defines them: the scaffold's calls, made from another file, then link to them.
#define PLEXUS_MHC_INSTANTIATE_PAIR(Primitives, pair, T) \
  PLEXUS_MHC_DETAIL_INSTANTIATE_PAIR(Primitives, pair, T, )
// The same for primitives declared with PLEXUS_MHC_PRIMITIVES_WITH(Name, Context).
#define PLEXUS_MHC_INSTANTIATE_PAIR_WITH(Primitives, pair, T, Context) \
  PLEXUS_MHC_DETAIL_INSTANTIATE_PAIR(Primitives, pair, T, Context, )

// (Implementation: `...` is empty, or the leading parameter's type and a comma.)
#define PLEXUS_MHC_DETAIL_PRIMITIVES(Name, ...)                                  \
  using namespace ::plexus::sdk::mhc_kernel_names;                               \
  template <class T>                                                             \
  struct Name {                                                                  \
    static void proj_rms_forward(__VA_ARGS__ const ::plexus::sdk::MhcProblem&,   \
                                 const plx_mhc_proj_rms_forward_args&);          \
    static void proj_rms_backward(__VA_ARGS__ const ::plexus::sdk::MhcProblem&,  \
                                  const plx_mhc_proj_rms_backward_args&);        \
    static void mappings_forward(__VA_ARGS__ const ::plexus::sdk::MhcProblem&,   \
                                 const plx_mhc_mappings_forward_args&);          \
    static void mappings_backward(__VA_ARGS__ const ::plexus::sdk::MhcProblem&,  \
                                  const plx_mhc_mappings_backward_args&);        \
    static void aggregate_forward(__VA_ARGS__ const ::plexus::sdk::MhcProblem&,  \
                                  const plx_mhc_aggregate_forward_args&);        \
    static void aggregate_backward(__VA_ARGS__ const ::plexus::sdk::MhcProblem&, \
                                   const plx_mhc_aggregate_backward_args&);      \
    static void post_res_forward(__VA_ARGS__ const ::plexus::sdk::MhcProblem&,   \
                                 const plx_mhc_post_res_forward_args&);          \
    static void post_res_backward(__VA_ARGS__ const ::plexus::sdk::MhcProblem&,  \
                                  const plx_mhc_post_res_backward_args&);        \
  }
#define PLEXUS_MHC_DETAIL_INSTANTIATE_PAIR(Primitives, pair, T, ...)                         \
  template void Primitives<T>::pair##_forward(__VA_ARGS__ const ::plexus::sdk::MhcProblem&,  \
                                              const plx_mhc_##pair##_forward_args&);         \
  template void Primitives<T>::pair##_backward(__VA_ARGS__ const ::plexus::sdk::MhcProblem&, \
                                               const plx_mhc_##pair##_backward_args&)

namespace plexus::sdk {

// The names a backend's primitives are written with, which PLEXUS_MHC_PRIMITIVES brings into the
// backend's namespace: the checked problem and the typed tensor accessors of plexus/cpp/mhc.hpp.
namespace mhc_kernel_names {
using plexus::sdk::mhc_given;
using plexus::sdk::mhc_in;
using plexus::sdk::mhc_in_if;
using plexus::sdk::mhc_out;
using plexus::sdk::mhc_out_if;
using plexus::sdk::MhcProblem;
}  // namespace mhc_kernel_names

namespace detail::mhc {

// Kernels::Cuda, or void for a backend (or a build) without CUDA.
template <class Kernels, class = void>
struct CudaOf {
  using type = void;
};
template <class Kernels>
struct CudaOf<Kernels, std::void_t<typename Kernels::Cuda>> {
  using type = typename Kernels::Cuda;
};

// Whether a CUDA instance says it runs bfloat16 activations (Cuda::runs_bfloat16).
template <class Cuda, class = void>
struct RunsBfloat16 : std::false_type {};
template <class Cuda>
struct RunsBfloat16<Cuda, std::enable_if_t<Cuda::runs_bfloat16>> : std::true_type {};

// What a CPU instance holds in place of a CUDA one.
struct NoCudaInstance {};

}  // namespace detail::mhc

// An "mhc" backend, for plexus::sdk::mhc_backend (mhc.hpp), made of the primitives of `Kernels`
// (see the top of this file). One instance per device, as the family creates them: a CPU instance
// keeps nothing (each call works on its arguments only); a CUDA instance owns a Kernels::Cuda.
template <class Kernels>
class MhcBackendScaffold {
  using Cuda = typename detail::mhc::CudaOf<Kernels>::type;

 public:
  static constexpr bool runs_on_cuda = !std::is_void_v<Cuda>;

  // The devices a backend of these kernels declares: the CPU, and CUDA GPUs when it has a Cuda.
  static constexpr uint64_t device_mask() noexcept {
    return PLX_DEVICE_BIT(kDLCPU) | (runs_on_cuda ? PLX_DEVICE_BIT(kDLCUDA) : uint64_t{0});
  }

  // The component descriptor of the backend, named Kernels::name; its fusion-backend table has
  // static storage (one per Kernels).
  static plx_component_desc component(const char* description, const char* config_schema = nullptr) {
    static const plx_fusion_backend_v1 backend = mhc_backend<MhcBackendScaffold>(device_mask());
    return fusion_component(Kernels::name, description, &backend, config_schema);
  }

  explicit MhcBackendScaffold(const plx_fusion_create_args& args) : device_(args.device) {
    if (device_.device_type == kDLCPU) return;
    if constexpr (runs_on_cuda) {
      if (device_.device_type == kDLCUDA) {
        cuda_ = std::make_unique<Cuda>(Kernels::name, device_.device_id);
        return;
      }
    }
    throw Error(PLX_ERR_UNSUPPORTED,
                std::string(Kernels::name) +
                    (runs_on_cuda ? " runs on the CPU and on CUDA GPUs, not on device type "
                                  : " runs on the CPU only, not on device type ") +
                    std::to_string(device_.device_type));
  }

  // The eight functions of plexus/cpp/mhc.hpp's backend class: on the CPU, Kernels::Cpu<float> or
  // Kernels::Cpu<double>, done when the call returns (the stream needs no handling); on a GPU,
  // this instance's Kernels::Cuda, which enqueues on the call's stream.
#define PLEXUS_MHC_DETAIL_ROUTE(primitive, args_type)                           \
  void primitive(const MhcProblem& p, const args_type& a, plx_stream s) const { \
    if (on_cpu(p)) {                                                            \
      if (cpu_runs_double(p))                                                   \
        Kernels::template Cpu<double>::primitive(p, a);                         \
      else                                                                      \
        Kernels::template Cpu<float>::primitive(p, a);                          \
      return;                                                                   \
    }                                                                           \
    if constexpr (runs_on_cuda)                                                 \
      cuda_->primitive(p, a, s);                                                \
    else                                                                        \
      static_cast<void>(s); /* on_cpu refused every other device */             \
  }
  PLEXUS_MHC_DETAIL_ROUTE(proj_rms_forward, plx_mhc_proj_rms_forward_args)
  PLEXUS_MHC_DETAIL_ROUTE(proj_rms_backward, plx_mhc_proj_rms_backward_args)
  PLEXUS_MHC_DETAIL_ROUTE(mappings_forward, plx_mhc_mappings_forward_args)
  PLEXUS_MHC_DETAIL_ROUTE(mappings_backward, plx_mhc_mappings_backward_args)
  PLEXUS_MHC_DETAIL_ROUTE(aggregate_forward, plx_mhc_aggregate_forward_args)
  PLEXUS_MHC_DETAIL_ROUTE(aggregate_backward, plx_mhc_aggregate_backward_args)
  PLEXUS_MHC_DETAIL_ROUTE(post_res_forward, plx_mhc_post_res_forward_args)
  PLEXUS_MHC_DETAIL_ROUTE(post_res_backward, plx_mhc_post_res_backward_args)
#undef PLEXUS_MHC_DETAIL_ROUTE

 private:
  // Whether the call runs on the CPU (else on this instance's GPU). Refuses a call whose tensors
  // are on another device than this instance's: one instance per device.
  bool on_cpu(const MhcProblem& p) const {
    if (p.device.device_type != kDLCPU && !runs_on_cuda)
      throw Error(PLX_ERR_UNSUPPORTED,
                  std::string(Kernels::name) +
                      " runs on the CPU only, but this call's tensors are on device type " +
                      std::to_string(p.device.device_type));
    const bool same_device = p.device.device_type == device_.device_type &&
                             (p.device.device_type == kDLCPU || p.device.device_id == device_.device_id);
    if (!same_device)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(Kernels::name) + ": this call's tensors are on " +
                                                device_text(p.device) +
                                                ", but this instance was created for " +
                                                device_text(device_) + " (create one instance per device)");
    return p.device.device_type == kDLCPU;
  }

  // A CPU call's activation type: float (false) or double (true); bfloat16 is refused.
  static bool cpu_runs_double(const MhcProblem& p) {
    if (plx_dtype_equal(p.activation_dtype, plx_dtype_f32())) return false;
    if (plx_dtype_equal(p.activation_dtype, plx_dtype_f64())) return true;
    const bool on_cuda_instead =
        detail::mhc::RunsBfloat16<Cuda>::value && plx_dtype_equal(p.activation_dtype, plx_dtype_bf16());
    throw Error(PLX_ERR_UNSUPPORTED,
                std::string(Kernels::name) + " supports float32 and float64 activations, not " +
                    dtype_name(p.activation_dtype) + (on_cuda_instead ? " (bfloat16 runs on CUDA)" : ""));
  }

  DLDevice device_;
  // Set on a CUDA instance only.
  std::unique_ptr<std::conditional_t<runs_on_cuda, Cuda, detail::mhc::NoCudaInstance>> cuda_;
};

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_MHC_BACKEND_HPP
