// A build without CUDA: no tensor is ever on a CUDA device (device::require refuses them), so
// these are unreachable; they throw rather than compute something wrong.
#include <stdexcept>

#include "engine/device_ops_cuda.hpp"

namespace plexus::device_ops::cuda {
namespace {
[[noreturn]] void absent() {
  throw std::logic_error("a CUDA tensor in a build without CUDA");
}
}  // namespace

void add_into(Tensor&, const Tensor&) {
  absent();
}
int64_t first_non_finite(const Tensor&) {
  absent();
}
std::vector<int64_t> first_non_finite_each(const std::vector<const Tensor*>&) {
  absent();
}
double sum_of_squares(const std::vector<const Tensor*>&) {
  absent();
}
void add_element(Tensor&, int64_t, const Tensor&, int64_t) {
  absent();
}
void adamw_update(const vector_ops::AdamWStep&, Tensor&, const Tensor&, Tensor&, Tensor&) {
  absent();
}
void expand_streams(const Tensor&, int64_t, int64_t, int64_t, Tensor&) {
  absent();
}
void reduce_streams(const Tensor&, int64_t, int64_t, int64_t, float, Tensor&) {
  absent();
}
void spread_streams(const Tensor&, int64_t, int64_t, int64_t, Tensor&) {
  absent();
}

}  // namespace plexus::device_ops::cuda
