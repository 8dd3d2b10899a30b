#include "engine/checkpoint_tensors.hpp"

#include <algorithm>
#include <cstring>

#include "plexus/core/device.hpp"

namespace plexus {
namespace {

// The stored tensor into `into`, of its stored shape (transposed back when stored transposed).
void copy_into(Tensor& into, const checkpoint::SafetensorsFile& file,
               const checkpoint::StoredTensor& stored) {
  const auto view = file.tensor(stored.name);  // shapes were checked first
  if (!stored.transposed) {
    device::copy(into.raw(), into.device(), view.bytes.data(), DLDevice{kDLCPU, 0}, into.bytes());
    return;
  }
  Tensor host(into.shape(), into.dtype());
  checkpoint::transpose(view.bytes, stored.shape[0], stored.shape[1], sizeof(float),
                        {static_cast<std::byte*>(host.raw()), host.bytes()});
  device::copy(into.raw(), into.device(), host.raw(), DLDevice{kDLCPU, 0}, into.bytes());
}

}  // namespace

Tensor gather_whole(const distributed::Communicator& tp, const TensorSplit& split, const Tensor& local) {
  const Tensor host = local.device().device_type == kDLCPU ? Tensor() : local.to(DLDevice{kDLCPU, 0});
  const Tensor& mine = host.empty() ? local : host;
  Tensor shards({tp.size() * mine.numel()}, mine.dtype());
  tp.all_gather(mine.view(), shards.view());
  Tensor whole(whole_shape(mine.shape(), split), mine.dtype());
  for (int32_t r = 0; r < tp.size(); ++r) {
    const Tensor shard =
        Tensor::borrowed(static_cast<std::byte*>(shards.raw()) + r * static_cast<int64_t>(mine.bytes()),
                         mine.shape(), mine.dtype(), DLDevice{kDLCPU, 0});
    place_shard(shard, split, r, whole);
  }
  return whole;
}

void read_tensor(Tensor& into, const checkpoint::SafetensorsFile& file,
                 const checkpoint::StoredTensor& stored, const TensorSplit& split) {
  const std::vector<int64_t> shape = whole_shape(into.shape(), split);
  const bool repadded = !stored.shape.empty() && stored.shape[0] != shape[0];
  if (!split.split() && !repadded) return copy_into(into, file, stored);
  Tensor whole(shape, into.dtype());
  if (repadded) {
    whole.zero();
    Tensor as_stored(stored.shape, into.dtype());
    copy_into(as_stored, file, stored);
    const std::size_t rows = static_cast<std::size_t>(std::min(stored.shape[0], shape[0]));
    std::memcpy(whole.raw(), as_stored.raw(),
                rows * (as_stored.bytes() / static_cast<std::size_t>(stored.shape[0])));
  } else {
    copy_into(whole, file, stored);
  }
  if (!split.split()) {
    into.copy_from(whole);
    return;
  }
  Tensor shard(into.shape(), into.dtype());
  copy_shard(whole, split, split.rank, shard);
  into.copy_from(shard);
}

}  // namespace plexus
