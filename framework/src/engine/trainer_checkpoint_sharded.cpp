// Checkpoints of a model whose parameters live with a data-parallel strategy: the same files as
// the whole-model path (Megatron names and layouts, every expert under its global name), written
// and read unit by unit, so no rank holds more than one unit's whole values (and, under expert
// parallelism, one layer's experts) at a time.
//
// Saving: every rank walks the same list of tensors in the file's storage order; each tensor's
// fill acquires its unit for reading (a gather, collective) or gathers its optimizer moment, and
// rank 0 writes the bytes while the others discard them. Loading: each unit is acquired for
// writing, filled from the file, and released, which keeps this rank's shard; each moment is
// assembled whole for one unit and this rank's slice kept.
#include <cstring>
#include <map>
#include <optional>

#include "engine/checkpoint_io.hpp"
#include "engine/trainer_impl.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/stored_tensor.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/logging.hpp"

namespace plexus {
namespace {

using namespace checkpoint_io;

// `value` (any device) written into `out` as `form` stores it.
void write_stored(const checkpoint::StoredTensor& form, const Tensor& value, std::span<std::byte> out) {
  const Tensor host = value.device().device_type == kDLCPU ? Tensor() : value.to(DLDevice{kDLCPU, 0});
  const Tensor& source = host.empty() ? value : host;
  const std::span<const std::byte> bytes{static_cast<const std::byte*>(source.raw()), source.bytes()};
  if (form.transposed)
    checkpoint::transpose(bytes, source.shape()[0], source.shape()[1], sizeof(float), out);
  else
    std::memcpy(out.data(), bytes.data(), bytes.size());
}

// The parameter's part of a whole unit-laid-out tensor.
Tensor part_of(const Tensor& whole, int64_t offset, const std::vector<int64_t>& shape) {
  return Tensor::borrowed(static_cast<std::byte*>(whole.raw()) + offset * static_cast<int64_t>(sizeof(float)), shape,
                          plx_dtype_f32(), whole.device());
}

// What the fills of one checkpoint share: the unit open for reading, and gathered values kept
// until the walk moves to another unit or buffer.
class UnitStream {
 public:
  UnitStream(ShardedParameters& sharded, ShardedAdamW& optimizer, const distributed::Communicator* ep)
      : sharded_(sharded), optimizer_(optimizer), ep_(ep) {}
  ~UnitStream() {
    try {
      close();
    } catch (const std::exception& e) {
      log_warn("trainer", std::string("releasing a unit after a checkpoint: ") + e.what());
    }
  }
  UnitStream(const UnitStream&) = delete;
  UnitStream& operator=(const UnitStream&) = delete;

  // Parameter p's whole value (its unit acquired for reading).
  const Tensor& value(ParameterStore& params, std::size_t p) {
    open(sharded_.unit_of(p));
    return params[p].value;
  }
  // Every ep rank's value of parameter p (an expert), in ep-rank order.
  const std::vector<NamedTensor>& expert_values(ParameterStore& params, std::size_t p) {
    open(sharded_.unit_of(p));
    auto found = experts_.find(p);
    if (found == experts_.end()) found = experts_.emplace(p, gather_named(*ep_, params[p].name, params[p].value)).first;
    return found->second;
  }
  // Parameter p's part of optimizer moment `which` (0: exp_avg, 1: exp_avg_sq), gathered whole.
  Tensor moment(const ParameterStore& params, std::size_t p, int which) {
    const std::size_t k = sharded_.buffer_of(p);
    if (moment_buffer_ != k) {
      moments_.clear();
      moment_buffer_ = k;
    }
    auto found = moments_.find(which);
    if (found == moments_.end()) {
      const ShardedParameters::Buffer& b = sharded_.buffers()[k];
      Tensor whole({b.layout.padded_numel}, plx_dtype_f32(), sharded_.device());
      DLTensor full = whole.view();
      const Tensor& shard = which == 0 ? optimizer_.exp_avg(k) : optimizer_.exp_avg_sq(k);
      sharded_.strategy().gather(static_cast<uint32_t>(k), shard.view(), full);
      found = moments_.emplace(which, std::move(whole)).first;
    }
    return part_of(found->second, sharded_.offset_of(p), params[p].shape);
  }
  // Every ep rank's part of moment `which` of expert parameter p.
  const std::vector<NamedTensor>& expert_moments(const ParameterStore& params, std::size_t p, int which,
                                                 const std::string& name) {
    const auto key = std::make_pair(p, which);
    auto found = expert_moments_.find(key);
    if (found == expert_moments_.end()) {
      const Tensor mine = moment(params, p, which);
      Tensor copy(mine.shape(), mine.dtype(), mine.device());
      copy.copy_from(mine);
      found = expert_moments_.emplace(key, gather_named(*ep_, name, copy)).first;
    }
    return found->second;
  }
  void close() {
    experts_.clear();
    expert_moments_.clear();
    if (open_) sharded_.end_read(*open_);
    open_.reset();
  }

 private:
  void open(std::size_t unit) {
    if (open_ == unit) return;
    close();
    sharded_.begin_read(unit);
    open_ = unit;
  }
  ShardedParameters& sharded_;
  ShardedAdamW& optimizer_;
  const distributed::Communicator* ep_;
  std::optional<std::size_t> open_;
  std::map<std::size_t, std::vector<NamedTensor>> experts_;
  std::size_t moment_buffer_ = static_cast<std::size_t>(-1);
  std::map<int, Tensor> moments_;
  std::map<std::pair<std::size_t, int>, std::vector<NamedTensor>> expert_moments_;
};

const char* const kMomentSuffix[2] = {".exp_avg", ".exp_avg_sq"};

}  // namespace

std::filesystem::path Trainer::Impl::save_sharded_checkpoint(int64_t steps_done) {
  const std::filesystem::path root = output_dir / "checkpoints";
  ShardedParameters& sharded = *model->sharded();
  ParameterStore& params = model->parameters();
  const distributed::Communicator* ep = runtime->group("ep");
  const bool experts_divided = ep != nullptr && ep->size() > 1;
  UnitStream stream(sharded, *sharded_optimizer, ep);
  std::vector<checkpoint::TensorData> model_tensors, optimizer_tensors;
  const auto entry = [&](const std::string& name, const std::vector<int64_t>& shape,
                         std::function<void(const checkpoint::StoredTensor&, std::span<std::byte>)> fill) {
    const checkpoint::StoredTensor form = checkpoint::stored_form(name, shape, checkpoint_names);
    checkpoint::TensorData t;
    t.name = form.name;
    t.dtype = checkpoint::DType::f32;
    t.shape = form.shape;
    t.fill = [form, fill = std::move(fill)](std::span<std::byte> out) { fill(form, out); };
    return t;
  };
  for (std::size_t p = 0; p < params.size(); ++p) {
    const Parameter& param = params[p];
    if (param.is_buffer()) {  // whole on every rank, in the store; no moments
      model_tensors.push_back(entry(param.name, param.shape, [&, p](const auto& form, std::span<std::byte> out) {
        write_stored(form, params[p].value, out);
      }));
      continue;
    }
    if (experts_divided && param.grad_group != "dp") {
      // Every rank lists every expert (the names of its ep group), so all walk the same list.
      const std::vector<std::string> names = gather_names(*ep, param.name);
      for (std::size_t r = 0; r < names.size(); ++r)
        model_tensors.push_back(entry(names[r], param.shape, [&, p, r](const auto& form, std::span<std::byte> out) {
          write_stored(form, stream.expert_values(params, p).at(r).value, out);
        }));
      for (int which = 0; which < 2; ++which) {
        const std::string mine = param.name + kMomentSuffix[which];
        const std::vector<std::string> moment_names = gather_names(*ep, mine);
        for (std::size_t r = 0; r < moment_names.size(); ++r)
          optimizer_tensors.push_back(
              entry(moment_names[r], param.shape, [&, p, r, which, mine](const auto& form, std::span<std::byte> out) {
                write_stored(form, stream.expert_moments(params, p, which, mine).at(r).value, out);
              }));
      }
      continue;
    }
    model_tensors.push_back(entry(param.name, param.shape, [&, p](const auto& form, std::span<std::byte> out) {
      write_stored(form, stream.value(params, p), out);
    }));
    for (int which = 0; which < 2; ++which)
      optimizer_tensors.push_back(entry(param.name + kMomentSuffix[which], param.shape,
                                        [&, p, which](const auto& form, std::span<std::byte> out) {
                                          write_stored(form, stream.moment(params, p, which), out);
                                        }));
  }
  std::filesystem::path dir = root / checkpoint::checkpoint_dir_name(steps_done);
  if (writer) {
    dir = checkpoint::write_checkpoint(root, steps_done, model_tensors, optimizer_tensors, checkpoint_state(steps_done),
                                       {{checkpoint::kLinearLayoutKey, checkpoint::kLinearLayoutOutIn}});
    for (const auto& removed : checkpoint::prune_checkpoints(root, keep_last))
      Logger::global().log(LogLevel::debug, "trainer", "removed old checkpoint " + removed.string());
  } else {
    checkpoint::run_checkpoint_fills(model_tensors, optimizer_tensors);
  }
  stream.close();
  barrier();
  return dir;
}

void Trainer::Impl::load_sharded_tensors(const std::filesystem::path& dir, const checkpoint::LoadedCheckpoint& loaded) {
  ShardedParameters& sharded = *model->sharded();
  ParameterStore& params = model->parameters();
  // Shapes only, to find and check every tensor before anything is read.
  std::deque<Tensor> shapes;
  std::vector<std::pair<std::string, Tensor*>> parameters, moments;
  std::vector<std::size_t> moment_of(params.size(), 0);  // where parameter p's two moments start in `moments`
  for (std::size_t p = 0; p < params.size(); ++p) {
    Tensor* shape = &shapes.emplace_back(Tensor::borrowed(nullptr, params[p].shape, plx_dtype_f32(), DLDevice{kDLCPU, 0}));
    parameters.emplace_back(params[p].name, shape);
    moment_of[p] = moments.size();
    if (params[p].is_buffer()) continue;  // checkpointed as a value only
    for (const char* suffix : kMomentSuffix) moments.emplace_back(params[p].name + suffix, shape);
  }
  std::vector<std::pair<std::string, const Tensor*>> other_parameters, other_moments;
  if (const distributed::Communicator* ep = runtime->group("ep"); ep != nullptr && ep->size() > 1) {
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (params[p].grad_group == "dp") continue;
      for (const std::string& name : gather_names(*ep, params[p].name))
        if (name != params[p].name) other_parameters.emplace_back(name, parameters[p].second);
      for (std::size_t m = moment_of[p]; m < moment_of[p] + 2; ++m)
        for (const std::string& name : gather_names(*ep, moments[m].first))
          if (name != moments[m].first) other_moments.emplace_back(name, moments[m].second);
    }
  }
  std::vector<std::string> earlier_parameters, earlier_moments;
  const auto stored_parameters =
      locate_all(loaded.model, parameters, checkpoint_names, earlier_parameters, other_parameters);
  const auto stored_moments = locate_all(loaded.optimizer, moments, checkpoint_names, earlier_moments, other_moments);
  for (std::size_t p = 0; p < params.size(); ++p)
    if (params[p].is_buffer()) copy_into(params[p].value, loaded.model, stored_parameters[p]);
  for (std::size_t f = 0; f < sharded.num_units(); ++f) {
    sharded.begin_write(f);
    for (const ShardedParameters::Buffer& b : sharded.buffers())
      if (b.fsdp == f)
        for (std::size_t p : b.params) copy_into(params[p].value, loaded.model, stored_parameters[p]);
    sharded.end_write(f);
  }
  for (std::size_t k = 0; k < sharded.buffers().size(); ++k) {
    const ShardedParameters::Buffer& b = sharded.buffers()[k];
    for (int which = 0; which < 2; ++which) {
      Tensor whole({b.layout.padded_numel}, plx_dtype_f32(), sharded.device());
      for (std::size_t p : b.params) {
        Tensor part = part_of(whole, sharded.offset_of(p), params[p].shape);
        copy_into(part, loaded.optimizer, stored_moments[moment_of[p] + static_cast<std::size_t>(which)]);
      }
      Tensor& shard = which == 0 ? sharded_optimizer->exp_avg(k) : sharded_optimizer->exp_avg_sq(k);
      device::copy(shard.raw(), shard.device(),
                   static_cast<std::byte*>(whole.raw()) + b.layout.shard_offset * static_cast<int64_t>(sizeof(float)),
                   whole.device(), shard.bytes());
    }
  }
  report_earlier_layout(dir, earlier_parameters, earlier_moments);
}

}  // namespace plexus
