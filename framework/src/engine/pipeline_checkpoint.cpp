#include "engine/pipeline_checkpoint.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "plexus/core/engine/tensor.hpp"

namespace plexus {
namespace {

// Every checkpoint transfer between the stages is one ordered stream per sender.
constexpr int32_t kListTag = 30001;
constexpr int32_t kBytesTag = 30002;
const DLDataType kBytes{kDLUInt, 8, 1};

Tensor bytes_of(std::span<std::byte> span) {
  return Tensor::borrowed(span.data(), {static_cast<int64_t>(span.size())}, kBytes, DLDevice{kDLCPU, 0});
}

boost::json::array describe(const ChunkedEntries& entries) {
  boost::json::array out;
  for (std::size_t i = 0; i < entries.tensors.size(); ++i) {
    boost::json::array shape;
    for (int64_t d : entries.tensors[i].shape) shape.push_back(d);
    out.push_back(boost::json::array{entries.tensors[i].name, std::move(shape), entries.chunks[i]});
  }
  return out;
}

void send_text(const distributed::Communicator& pp, const std::string& text) {
  Tensor length({1}, plx_dtype_i64());
  *length.data<int64_t>() = static_cast<int64_t>(text.size());
  pp.start_send(length.view(), 0, kListTag).wait();
  Tensor bytes({static_cast<int64_t>(text.size())}, kBytes);
  std::memcpy(bytes.raw(), text.data(), text.size());
  pp.start_send(bytes.view(), 0, kListTag).wait();
}

std::string receive_text(const distributed::Communicator& pp, int32_t from) {
  Tensor length({1}, plx_dtype_i64());
  pp.start_recv(length.view(), from, kListTag).wait();
  Tensor bytes({*length.data<int64_t>()}, kBytes);
  pp.start_recv(bytes.view(), from, kListTag).wait();
  return {static_cast<const char*>(bytes.raw()), static_cast<std::size_t>(bytes.numel())};
}

void order_by_chunk(ChunkedEntries& entries) {
  std::vector<std::size_t> order(entries.tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return entries.chunks[a] < entries.chunks[b]; });
  ChunkedEntries sorted;
  for (std::size_t i : order) {
    sorted.tensors.push_back(std::move(entries.tensors[i]));
    sorted.chunks.push_back(entries.chunks[i]);
  }
  entries = std::move(sorted);
}

}  // namespace

void send_to_writer(const distributed::Communicator& pp, ChunkedEntries& model, ChunkedEntries& optimizer) {
  send_text(pp, boost::json::serialize(
                    boost::json::object{{"model", describe(model)}, {"optimizer", describe(optimizer)}}));
  for (ChunkedEntries* entries : {&model, &optimizer})
    for (checkpoint::TensorData& t : entries->tensors)
      t.fill = [&pp, fill = std::move(t.fill)](std::span<std::byte> out) {
        fill(out);
        pp.start_send(bytes_of(out).view(), 0, kBytesTag).wait();
      };
}

void merge_from_stages(const distributed::Communicator& pp, ChunkedEntries& model,
                       ChunkedEntries& optimizer) {
  for (int32_t stage = 1; stage < pp.size(); ++stage) {
    const boost::json::value lists = boost::json::parse(receive_text(pp, stage));
    for (const char* file : {"model", "optimizer"}) {
      ChunkedEntries& entries = std::string_view(file) == "model" ? model : optimizer;
      for (const auto& e : lists.at(file).as_array()) {
        const boost::json::array& item = e.as_array();
        checkpoint::TensorData t;
        t.name = std::string(item[0].as_string());
        t.dtype = checkpoint::DType::f32;
        for (const auto& d : item[1].as_array()) t.shape.push_back(d.to_number<int64_t>());
        t.fill = [&pp, stage](std::span<std::byte> out) {
          pp.start_recv(bytes_of(out).view(), stage, kBytesTag).wait();
        };
        entries.tensors.push_back(std::move(t));
        entries.chunks.push_back(item[2].to_number<uint32_t>());
      }
    }
  }
  order_by_chunk(model);
  order_by_chunk(optimizer);
}

}  // namespace plexus
