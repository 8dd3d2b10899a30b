#include "engine/pipeline_stages.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include "plexus/core/engine/tensor.hpp"

namespace plexus {
namespace {

// One stage's parameters as JSON text: [[name, te_name, [shape], buffer, divided, chunk], ...].
std::string describe(const ParameterStore& params, const std::vector<uint32_t>& chunk_of) {
  boost::json::array out;
  for (std::size_t p = 0; p < params.size(); ++p) {
    boost::json::array shape;
    for (int64_t d : params[p].shape) shape.push_back(d);
    out.push_back(boost::json::array{params[p].name, params[p].te_name, std::move(shape),
                                     params[p].is_buffer(), params[p].divided_over_ep(), chunk_of.at(p)});
  }
  return boost::json::serialize(out);
}

// Every rank's text, in group-rank order (lengths first, then the texts padded to the longest).
std::vector<std::string> all_texts(const distributed::Communicator& group, const std::string& mine) {
  const auto n = group.size();
  Tensor length({1}, plx_dtype_i64()), lengths({n}, plx_dtype_i64());
  *length.data<int64_t>() = static_cast<int64_t>(mine.size());
  group.all_gather(length.view(), lengths.view());
  int64_t longest = 1;
  for (int64_t r = 0; r < n; ++r) longest = std::max(longest, lengths.data<int64_t>()[r]);
  const DLDataType bytes{kDLUInt, 8, 1};
  Tensor text({longest}, bytes), texts({n * longest}, bytes);
  std::memcpy(text.raw(), mine.data(), mine.size());
  group.all_gather(text.view(), texts.view());
  std::vector<std::string> out;
  for (int64_t r = 0; r < n; ++r)
    out.emplace_back(static_cast<const char*>(texts.raw()) + r * longest,
                     static_cast<std::size_t>(lengths.data<int64_t>()[r]));
  return out;
}

}  // namespace

double PipelineStages::ordered_sum(const distributed::Communicator& pp,
                                   const std::vector<double>& values) const {
  const std::size_t longest = *std::max_element(stage_sizes.begin(), stage_sizes.end());
  Tensor mine({static_cast<int64_t>(std::max<std::size_t>(longest, 1))}, plx_dtype_f64());
  std::copy(values.begin(), values.end(), mine.data<double>());
  Tensor all({static_cast<int64_t>(mine.numel() * stages)}, plx_dtype_f64());
  pp.all_gather(mine.view(), all.view());
  double sum = 0;
  for (const StageTensor& t : tensors)
    sum += all.data<double>()[static_cast<std::size_t>(t.owner) * static_cast<std::size_t>(mine.numel()) +
                              t.owner_index];
  return sum;
}

bool PipelineStages::holds_shared() const {
  return std::find(shared.begin(), shared.end(), true) != shared.end();
}

PipelineStages gather_pipeline_stages(const distributed::Communicator& pp, const ParameterStore& params,
                                      const std::vector<uint32_t>& chunk_of) {
  PipelineStages out;
  out.stage = static_cast<uint32_t>(pp.rank());
  out.stages = static_cast<uint32_t>(pp.size());
  struct Held {
    StageTensor tensor;
    uint32_t chunk = 0;
    std::size_t order = 0;  // its index in its stage's store
  };
  std::vector<Held> held;
  const std::vector<std::string> texts = all_texts(pp, describe(params, chunk_of));
  for (uint32_t s = 0; s < texts.size(); ++s) {
    const boost::json::array list = boost::json::parse(texts[s]).as_array();
    out.stage_sizes.push_back(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      const boost::json::array& e = list[i].as_array();
      Held h;
      h.tensor.name = std::string(e[0].as_string());
      h.tensor.te_name = std::string(e[1].as_string());
      for (const auto& d : e[2].as_array()) h.tensor.shape.push_back(d.to_number<int64_t>());
      h.tensor.buffer = e[3].as_bool();
      h.tensor.divided = e[4].as_bool();
      h.tensor.owner = s;
      h.tensor.owner_index = i;
      h.chunk = e[5].to_number<uint32_t>();
      h.order = i;
      held.push_back(std::move(h));
    }
  }
  // The whole model's order: chunk by chunk, each in its stage's declaration order.
  std::stable_sort(held.begin(), held.end(), [](const Held& a, const Held& b) {
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.order < b.order;
  });
  std::map<std::string, std::size_t> first;  // name -> index into out.tensors
  std::map<std::string, uint32_t> holders;   // name -> how many stages hold it
  for (Held& h : held) {
    ++holders[h.tensor.name];
    if (first.contains(h.tensor.name)) {
      const StageTensor& owner = out.tensors[first.at(h.tensor.name)];
      if (owner.shape != h.tensor.shape)
        throw std::runtime_error("parameter " + h.tensor.name + " is held by pipeline stages " +
                                 std::to_string(owner.owner) + " and " + std::to_string(h.tensor.owner) +
                                 " with different shapes");
      continue;
    }
    first[h.tensor.name] = out.tensors.size();
    out.tensors.push_back(std::move(h.tensor));
  }
  out.shared.assign(params.size(), false);
  out.owned.assign(params.size(), false);
  for (std::size_t p = 0; p < params.size(); ++p) {
    StageTensor& t = out.tensors.at(first.at(params[p].name));
    out.shared[p] = holders.at(params[p].name) > 1;
    out.owned[p] = t.owner == out.stage;
    if (out.owned[p]) t.local = static_cast<int64_t>(p);
  }
  return out;
}

}  // namespace plexus
