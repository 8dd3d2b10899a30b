#include "engine/mimo/mimo_checkpoint.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/checkpoint_tensors.hpp"
#include "engine/parameter_update.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/stored_tensor.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/model.hpp"

namespace plexus {
namespace {

constexpr int32_t kTag = 90;

// One module's tensors, packed on the rank that holds it: their names and shapes (JSON), and
// their float32 values one after another (parameters, then each parameter's two moments).
struct Packed {
  boost::json::array index;  // [{"name", "shape", "offset", "optimizer"}]
  std::vector<float> values;
};

void add(Packed& packed, const std::string& name, const Tensor& value, bool optimizer) {
  const Tensor cpu = value.to(DLDevice{kDLCPU, 0});
  packed.index.push_back(boost::json::object{{"name", name},
                                             {"shape", boost::json::value_from(cpu.shape())},
                                             {"offset", static_cast<int64_t>(packed.values.size())},
                                             {"optimizer", optimizer}});
  packed.values.insert(packed.values.end(), cpu.data<float>(), cpu.data<float>() + cpu.numel());
}

// The whole tensor of parameter p's `local` part: a tensor-parallel shard gathered over the group
// it is split over, tp or the experts' expert_tp (collective: every rank of it packs alike), on
// the host.
Tensor whole_of(const Model& model, const Parameter& p, const Tensor& local) {
  return p.tp.split() ? gather_whole(*model.split_group(p.tp), p.tp, local) : local.to(DLDevice{kDLCPU, 0});
}

// Adds `value` under `name`, or, for an expert divided over `ep`, every ep rank's value under its
// name there (collective over ep: every ep rank packs alike).
void add_gathered(Packed& packed, const distributed::Communicator* ep, bool divided, const std::string& name,
                  const Tensor& value, bool optimizer) {
  if (ep == nullptr || !divided) {
    add(packed, name, value, optimizer);
    return;
  }
  for (const NamedTensor& t : gather_named(*ep, name, value)) add(packed, t.name, t.value, optimizer);
}

// `owned`: by parameter, whether this stage writes it (empty: every one); `ep`: the group the
// module's experts are divided over (nullptr: none is).
Packed pack(Model& model, ParameterUpdate& update, const std::vector<bool>& owned,
            const distributed::Communicator* ep) {
  Packed packed;
  const ParameterStore& store = model.parameters();
  for (std::size_t p = 0; p < store.size(); ++p) {
    if (!owned.empty() && !owned[p]) continue;
    const bool divided = store[p].divided_over_ep();
    add_gathered(packed, ep, divided, store[p].name, whole_of(model, store[p], update.saved_value(p)), false);
    if (store[p].is_buffer()) continue;
    for (int which = 0; which < 2; ++which)
      add_gathered(packed, ep, divided, store[p].name + kMomentSuffix[which],
                   whole_of(model, store[p], update.saved_moment(p, which)), true);
  }
  update.end_save();
  return packed;
}

// The packed module from `from` to world rank 0: its index's length and text, then its values.
void send(const Packed& packed, const distributed::Communicator& world) {
  const std::string text = boost::json::serialize(packed.index);
  int64_t sizes[2] = {static_cast<int64_t>(text.size()), static_cast<int64_t>(packed.values.size())};
  const auto cpu = DLDevice{kDLCPU, 0};
  world.start_send(Tensor::borrowed(sizes, {2}, plx_dtype_i64(), cpu).view(), 0, kTag).wait();
  world
      .start_send(
          Tensor::borrowed(const_cast<char*>(text.data()), {sizes[0]}, plx_dtype(kDLUInt, 8), cpu).view(), 0,
          kTag)
      .wait();
  world
      .start_send(
          Tensor::borrowed(const_cast<float*>(packed.values.data()), {sizes[1]}, plx_dtype_f32(), cpu).view(),
          0, kTag)
      .wait();
}

Packed receive(const distributed::Communicator& world, int32_t from) {
  int64_t sizes[2] = {0, 0};
  const auto cpu = DLDevice{kDLCPU, 0};
  world.start_recv(Tensor::borrowed(sizes, {2}, plx_dtype_i64(), cpu).view(), from, kTag).wait();
  std::string text(static_cast<std::size_t>(sizes[0]), '\0');
  world.start_recv(Tensor::borrowed(text.data(), {sizes[0]}, plx_dtype(kDLUInt, 8), cpu).view(), from, kTag)
      .wait();
  Packed packed;
  packed.index = boost::json::parse(text).as_array();
  packed.values.resize(static_cast<std::size_t>(sizes[1]));
  world
      .start_recv(Tensor::borrowed(packed.values.data(), {sizes[1]}, plx_dtype_f32(), cpu).view(), from, kTag)
      .wait();
  return packed;
}

// Throws CheckpointError naming `dir` and every parameter of the module's model the file lacks or
// holds in another shape (a vocabulary padded for another tp fits). The file holds the other
// modules' too: only this module's are looked at.
void check_module_fits(const checkpoint::SafetensorsFile& file, const Model& model, const std::string& module,
                       const std::filesystem::path& dir) {
  const int64_t vocabulary = model.settings().vocab_size;
  const ParameterStore& store = model.parameters();
  std::string problems;
  for (std::size_t p = 0; p < store.size(); ++p) {
    const std::vector<int64_t>& expected = store[p].whole_shape;
    if (!file.contains(store[p].name)) {
      problems += "\n  checkpoint tensor " + store[p].name + ": missing (expected shape " +
                  shape_string(expected) + ")";
      continue;
    }
    const checkpoint::TensorView view = file.tensor(store[p].name);
    const std::vector<int64_t> found(view.shape.begin(), view.shape.end());
    std::vector<int64_t> fitted = found;
    if (store[p].vocabulary_rows() && !fitted.empty() && !expected.empty() && fitted[0] >= vocabulary)
      fitted[0] = expected[0];
    if (fitted != expected || view.dtype != checkpoint::DType::f32)
      problems += "\n  checkpoint tensor " + store[p].name + ": expected float32 " + shape_string(expected) +
                  ", found " + std::string(checkpoint::to_string(view.dtype)) + " " + shape_string(found);
  }
  if (!problems.empty()) throw CheckpointError(dir, "the " + module + " module does not fit it:" + problems);
}

}  // namespace

std::filesystem::path save_mimo_checkpoint(const std::filesystem::path& root, int64_t step,
                                           const std::vector<MimoModule>& modules,
                                           const std::vector<std::unique_ptr<Model>>& models,
                                           const std::vector<std::unique_ptr<ParameterUpdate>>& updates,
                                           const std::deque<PipelineStages>& stages,
                                           const distributed::Runtime* runtime,
                                           const boost::json::value& state) {
  const int32_t me = runtime != nullptr ? runtime->rank() : 0;
  std::vector<Packed> packed;  // on world rank 0: every stage of every module
  for (std::size_t m = 0; m < modules.size(); ++m)
    for (int64_t s = 0; s < modules[m].stages; ++s) {
      // The stage of the module's first lane packs it (its tp ranks gathering every shard; every
      // lane under a data-parallel strategy, gathering the values over dp, or with its experts
      // divided over ep, gathering them), its rank at the leader's tp position sends it.
      const int32_t owner = modules[m].stage_rank.at(static_cast<std::size_t>(s));
      Packed mine;
      const bool every_lane =
          modules[m].here && (models[m]->sharded() != nullptr || modules[m].ep != nullptr);
      if (modules[m].here && modules[m].stage == s && (modules[m].dp_rank == 0 || every_lane)) {
        const distributed::ModuleGroupScope scope(modules[m].name);
        Packed packed_here = pack(*models[m], *updates[m], stages[m].owned, modules[m].ep);
        if (modules[m].dp_rank == 0) mine = std::move(packed_here);
      }
      if (owner == 0) {
        if (me == 0) packed.push_back(std::move(mine));
        continue;
      }
      if (me == owner) send(mine, runtime->world());
      if (me == 0) packed.push_back(receive(runtime->world(), owner));
    }
  if (me != 0) return {};
  std::vector<checkpoint::TensorData> model_tensors, optimizer_tensors;
  for (const Packed& p : packed)
    for (const boost::json::value& entry : p.index) {
      checkpoint::TensorData t;
      t.name = std::string(entry.at("name").as_string());
      t.dtype = checkpoint::DType::f32;
      int64_t count = 1;
      for (const boost::json::value& d : entry.at("shape").as_array()) {
        t.shape.push_back(d.to_number<int64_t>());
        count *= t.shape.back();
      }
      const float* at = p.values.data() + entry.at("offset").to_number<int64_t>();
      t.bytes = std::as_bytes(std::span<const float>(at, static_cast<std::size_t>(count)));
      (entry.at("optimizer").as_bool() ? optimizer_tensors : model_tensors).push_back(std::move(t));
    }
  return checkpoint::write_checkpoint(root, step, model_tensors, optimizer_tensors, state,
                                      {{"plexus.format", "mimo"}});
}

int64_t load_mimo_checkpoint(const std::filesystem::path& dir, const std::vector<MimoModule>& modules,
                             const std::vector<std::unique_ptr<Model>>& models,
                             const std::vector<std::unique_ptr<ParameterUpdate>>& updates) {
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(dir);
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (!modules[m].here) continue;
    const distributed::ModuleGroupScope scope(modules[m].name);  // a strategy's groups are its module's
    Model& model = *models[m];
    const ParameterStore& store = model.parameters();
    check_module_fits(loaded.model, model, modules[m].name, dir);
    // Each rank reads the whole tensors and keeps its part (read_tensor: any tp, any padding).
    const auto stored = [&](const checkpoint::SafetensorsFile& file, const std::string& name) {
      const checkpoint::TensorView view = file.tensor(name);
      return checkpoint::StoredTensor{name, std::vector<int64_t>(view.shape.begin(), view.shape.end())};
    };
    model.write_parameters([&](std::size_t p) {
      read_tensor(model.parameters()[p].value, loaded.model, stored(loaded.model, store[p].name),
                  store[p].tp);
    });
    updates[m]->load_moments([&](std::size_t p, int which, Tensor& moment) {
      const std::string name = store[p].name + kMomentSuffix[which];
      if (!loaded.optimizer.contains(name))
        throw CheckpointError(dir, "optimizer tensor " + name + " is missing");
      read_tensor(moment, loaded.optimizer, stored(loaded.optimizer, name), store[p].tp);
    });
  }
  return loaded.step;
}

}  // namespace plexus
