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

// Every rank's name of the group, in group-rank order, on every rank (as fixed-size records).
std::vector<std::string> gather_names(const distributed::Communicator& group, const std::string& name) {
  constexpr int64_t kNameBytes = 512;
  if (static_cast<int64_t>(name.size()) >= kNameBytes)
    throw std::runtime_error("parameter name " + name + " is too long to gather for a checkpoint (limit " +
                             std::to_string(kNameBytes - 1) + " bytes)");
  const DLDataType bytes_type{kDLUInt, 8, 1};
  const int64_t n = group.size();
  Tensor my_name({kNameBytes}, bytes_type);
  std::memset(my_name.raw(), 0, static_cast<std::size_t>(kNameBytes));
  std::memcpy(my_name.raw(), name.data(), name.size());
  Tensor names({n * kNameBytes}, bytes_type);
  group.all_gather(my_name.view(), names.view());
  std::vector<std::string> out;
  for (int64_t r = 0; r < n; ++r) out.emplace_back(static_cast<const char*>(names.raw()) + r * kNameBytes);
  return out;
}

// Every rank's (name, value) of the group, in group-rank order, on every rank.
std::vector<NamedTensor> gather_named(const distributed::Communicator& group, const std::string& name,
                                      const Tensor& value) {
  const std::vector<std::string> names = gather_names(group, name);
  const int64_t n = group.size();
  const Tensor host = value.device().device_type == kDLCPU ? Tensor() : value.to(DLDevice{kDLCPU, 0});
  const Tensor& mine = value.device().device_type == kDLCPU ? value : host;
  Tensor values({n * mine.numel()}, mine.dtype());
  group.all_gather(mine.view(), values.view());
  std::vector<NamedTensor> out;
  for (int64_t r = 0; r < n; ++r) {
    NamedTensor& t =
        out.emplace_back(NamedTensor{names[static_cast<std::size_t>(r)], Tensor(mine.shape(), mine.dtype())});
    std::memcpy(t.value.raw(),
                static_cast<const std::byte*>(values.raw()) + r * static_cast<int64_t>(mine.bytes()),
                mine.bytes());
  }
  return out;
}

}  // namespace plexus
