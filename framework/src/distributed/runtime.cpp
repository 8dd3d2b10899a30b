#include "plexus/core/distributed/runtime.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <omp.h>

#include "host_services/host_functions.hpp"
#include "plexus/core/components.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/logging.hpp"
#include "plexus/core/run_config.hpp"
#include "plexus/topology.h"

namespace plexus::distributed {
namespace {

// What a topology provider enumerates: every group of every kind, in its order.
struct Enumeration {
  int32_t world_size = 1;
  std::vector<std::string> kinds;
  std::map<std::string, std::vector<std::vector<int32_t>>, std::less<>> groups;
  std::string error;

  static plx_status add(void* ctx, const char* kind, const int32_t* ranks, uint32_t count) noexcept {
    auto* self = static_cast<Enumeration*>(ctx);
    try {
      const std::string name = kind != nullptr ? kind : "";
      if (name.empty() || count == 0 || ranks == nullptr) {
        self->error = "a group with an empty kind or no ranks";
        return PLX_ERR_INVALID_ARGUMENT;
      }
      std::vector<int32_t> group(ranks, ranks + count);
      for (int32_t r : group) {
        if (r < 0 || r >= self->world_size) {
          self->error = "group of kind '" + name + "' names rank " + std::to_string(r) + " of a world of " +
                        std::to_string(self->world_size);
          return PLX_ERR_INVALID_ARGUMENT;
        }
      }
      auto& of_kind = self->groups[name];
      if (of_kind.empty()) self->kinds.push_back(name);
      for (const auto& other : of_kind)
        for (int32_t r : group)
          if (std::find(other.begin(), other.end(), r) != other.end()) {
            self->error = "rank " + std::to_string(r) + " is in two groups of kind '" + name + "'";
            return PLX_ERR_INVALID_ARGUMENT;
          }
      of_kind.push_back(std::move(group));
      return PLX_OK;
    } catch (...) {
      return PLX_ERR_OUT_OF_MEMORY;
    }
  }
};

// Ranks on one machine share its cores: unless the user chose (OMP_NUM_THREADS) or the launcher
// bound each rank to its own cores (OpenMP then already sizes its team to them), each rank's
// OpenMP team gets its share, so that N ranks do not run N x cores threads that preempt each
// other in the middle of every parallel loop.
void share_cpu_threads(const LaunchEnv& env) {
  if (env.local_world_size <= 1 || std::getenv("OMP_NUM_THREADS") != nullptr) return;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores <= 0 || omp_get_num_procs() < cores) return;  // bound: the team fits the binding
  const int threads = std::max(1, cores / env.local_world_size);
  omp_set_num_threads(threads);
  if (env.rank == 0)
    log_info("distributed", std::to_string(env.local_world_size) + " ranks share this machine's " +
                                std::to_string(cores) + " cores: " + std::to_string(threads) +
                                " OpenMP thread(s) each (set OMP_NUM_THREADS to choose)");
}

}  // namespace

Settings Settings::from_run_config(const boost::json::value& run_config, const LaunchEnv& env) {
  Settings s;
  const boost::json::object& section = run_config.at("distributed").as_object();
  s.comm = std::string(section.at("comm").as_string());
  if (s.comm == "auto") {
    const std::string device(run_config.at("run").at("device").as_string());
    s.comm = env.world_size == 1 ? "local" : device.rfind("cuda", 0) == 0 ? "nccl" : "mpi";
  }
  s.timeout_s = section.at("timeout_s").to_number<double>();
  s.comm_options = section.at("comm_options");
  return s;
}

std::unique_ptr<Runtime> Runtime::start(PluginHost& host, const boost::json::value& run_config,
                                        const PluginLoadOptions& plugin_options, const LaunchEnv& env) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->env_ = env;
  rt->settings_ = Settings::from_run_config(run_config, env);
  Settings& s = rt->settings_;
  const Component& comm =
      ensure_component(host, PLX_KIND_COMM, s.comm, "distributed.comm", plugin_options, run_config);
  s.comm_options = validated_component_options(comm, s.comm_options, "distributed.comm_options");
  const auto& table = comm.as<plx_comm_v1>();

  ConfigHandle comm_config(s.comm_options, "distributed.comm_options");
  plx_comm_init_args args{};
  args.struct_size = sizeof(args);
  args.rank = env.launcher == "none" ? 0 : env.rank;
  args.world_size = env.launcher == "none" ? 1 : env.world_size;
  args.timeout_ms = static_cast<uint32_t>(std::min(s.timeout_s * 1000.0, 4.0e9));
  // The device the model's tensors live on, checked here first so that a machine without it
  // gets the same message as a single process (naming run.device), not a backend's.
  const std::string device_text(run_config.at("run").at("device").as_string());
  DLDevice device{kDLCPU, 0};
  try {
    device = device::parse(device_text);
    device::require(device);
  } catch (const std::exception& e) {
    throw config::ConfigError("run.device", e.what());
  }
  if (device.device_type == kDLCUDA && device_text == "cuda") device.device_id = env.local_rank;
  if ((table.device_mask & PLX_DEVICE_BIT(device.device_type)) == 0) {
    // One process communicates nothing for the trainer; plugins that ask get CPU tensors moved.
    if (env.world_size > 1)
      throw config::ConfigError(
          "distributed.comm", "the comm backend '" + s.comm + "' cannot communicate " + device::name(device) +
                                  " tensors (run.device); use one that can" +
                                  (device.device_type == kDLCUDA ? ", e.g. \"nccl\"" : ""));
    device = DLDevice{kDLCPU, 0};
  }
  args.device = device;
  args.config = comm_config.get();
  void* world = nullptr;
  check_call(comm, ("init (" + env.describe() + ")").c_str(), table.init(&args, &world));
  rt->world_ = std::make_unique<Communicator>(comm, world, "world");
  Logger::global().set_rank(rt->rank());
  if (env.launcher != "none" && (rt->rank() != env.rank || rt->world_size() != env.world_size))
    throw std::runtime_error("the comm backend '" + s.comm + "' sees rank " + std::to_string(rt->rank()) +
                             " of " + std::to_string(rt->world_size()) + " but the launcher said " +
                             env.describe());
  rt->build_groups(enumerate_topology(host, run_config, plugin_options, rt->world_size(), rt->rank()));
  detail::set_comm_runtime(rt.get());
  share_cpu_threads(env);
  return rt;
}

Topology enumerate_topology(PluginHost& host, const boost::json::value& run_config,
                            const PluginLoadOptions& plugin_options, int32_t world_size, int32_t rank) {
  const boost::json::object& section = run_config.at("distributed").at("topology").as_object();
  const std::string name(section.at("component").as_string());
  const Component& provider = ensure_component(host, PLX_KIND_TOPOLOGY, name,
                                               "distributed.topology.component", plugin_options, run_config);
  const boost::json::value options_value =
      validated_component_options(provider, section.at("options"), "distributed.topology.options");
  ConfigHandle options(options_value, "distributed.topology.options");
  Enumeration groups;
  groups.world_size = world_size;
  plx_group_sink sink{};
  sink.struct_size = sizeof(sink);
  sink.ctx = &groups;
  sink.add_group = &Enumeration::add;
  plx_topology_args args{};
  args.struct_size = sizeof(args);
  args.world_size = world_size;
  args.rank = rank;
  args.config = options.get();
  const plx_status status = provider.as<plx_topology_v1>().build(&args, &sink);
  if (status != PLX_OK && !groups.error.empty())
    throw std::runtime_error("topology provider '" + name + "': " + groups.error);
  check_call(provider, "build", status);
  return Topology{std::move(groups.kinds), std::move(groups.groups)};
}

void Runtime::build_groups(const Topology& topology) {
  topology_ = topology;
  const Topology& groups = topology;
  // One split per kind, in the provider's order, identical on every rank.
  for (const std::string& kind : groups.kinds) {
    int32_t color = -1, key = 0;
    const auto& of_kind = groups.groups.at(kind);
    for (std::size_t g = 0; g < of_kind.size(); ++g) {
      const auto it = std::find(of_kind[g].begin(), of_kind[g].end(), rank());
      if (it != of_kind[g].end()) {
        color = static_cast<int32_t>(g);
        key = static_cast<int32_t>(it - of_kind[g].begin());
      }
    }
    auto comm = world_->split(color, key, kind);
    if (comm) groups_.emplace(kind, std::move(comm));
    kinds_.push_back(kind);
  }
}

namespace {
thread_local std::string t_module_scope;
}  // namespace

ModuleGroupScope::ModuleGroupScope(std::string module) : previous_(std::move(t_module_scope)) {
  t_module_scope = std::move(module);
}

ModuleGroupScope::~ModuleGroupScope() {
  t_module_scope = std::move(previous_);
}

const std::string& ModuleGroupScope::current() noexcept {
  return t_module_scope;
}

Runtime::~Runtime() {
  detail::set_comm_runtime(nullptr);
  groups_.clear();  // sub-communicators before the world
  world_.reset();
}

const Communicator* Runtime::create_groups(const std::string& name,
                                           const std::vector<std::vector<int32_t>>& groups) {
  if (name.empty() || name == "world" || std::find(kinds_.begin(), kinds_.end(), name) != kinds_.end())
    throw std::runtime_error("group_create: the name '" + name +
                             "' is taken (world and the topology's kinds are)");
  std::vector<int32_t> seen(static_cast<std::size_t>(world_size()), -1);
  int32_t color = -1, key = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty())
      throw std::runtime_error("group_create '" + name + "': group " + std::to_string(g) + " is empty");
    for (std::size_t i = 0; i < groups[g].size(); ++i) {
      const int32_t r = groups[g][i];
      if (r < 0 || r >= world_size())
        throw std::runtime_error("group_create '" + name + "': rank " + std::to_string(r) +
                                 " is not in a world of " + std::to_string(world_size()));
      if (seen[static_cast<std::size_t>(r)] >= 0)
        throw std::runtime_error("group_create '" + name + "': rank " + std::to_string(r) +
                                 " is listed twice");
      seen[static_cast<std::size_t>(r)] = static_cast<int32_t>(g);
      if (r == rank()) {
        color = static_cast<int32_t>(g);
        key = static_cast<int32_t>(i);
      }
    }
  }
  // Every rank must ask for the same groups: a mismatch would pair ranks wrongly, or hang.
  boost::json::array lists;
  for (const auto& g : groups) lists.emplace_back(boost::json::value_from(g));
  check_same(boost::json::object{{"name", name}, {"groups", std::move(lists)}}, "group_create arguments");
  auto comm = world_->split(color, key, name);
  kinds_.push_back(name);
  if (!comm) return nullptr;
  return groups_.emplace(name, std::move(comm)).first->second.get();
}

const Communicator* Runtime::group(std::string_view kind) const {
  if (const std::string& module = ModuleGroupScope::current();
      !module.empty() && kind.find('/') == std::string_view::npos) {
    const std::string scoped = module + "/" + std::string(kind);
    if (const auto it = groups_.find(std::string_view(scoped)); it != groups_.end()) return it->second.get();
  }
  const auto it = groups_.find(kind);
  return it == groups_.end() ? nullptr : it->second.get();
}

std::string Runtime::data_parallel_kind() const {
  // Under context parallelism the parameters are replicated over dp x cp, and that is the group
  // the gradients are averaged and the optimizer sharded over (Megatron's data-parallel group
  // with context parallelism).
  if (const Communicator* cp = group("cp"); cp != nullptr && cp->size() > 1 && group("dp_cp") != nullptr)
    return "dp_cp";
  return group("dp") != nullptr ? "dp" : "world";
}

const Communicator& Runtime::data_parallel() const {
  const std::string kind = data_parallel_kind();
  const Communicator* replicas = kind == "world" ? nullptr : group(kind);
  return replicas != nullptr ? *replicas : *world_;
}

std::vector<std::string> Runtime::group_kinds() const {
  return kinds_;
}

void Runtime::check_same(const boost::json::value& payload, std::string_view what) const {
  const int32_t size = world_size();
  if (size == 1) return;
  const std::string text = boost::json::serialize(payload);
  // Lengths first, then every rank's text padded to the longest.
  std::vector<int64_t> lengths(static_cast<std::size_t>(size));
  int64_t mine = static_cast<int64_t>(text.size());
  const auto cpu = DLDevice{kDLCPU, 0};
  int64_t one_shape[1] = {1};
  int64_t all_shape[1] = {size};
  DLTensor send{&mine, cpu, 1, DLDataType{kDLInt, 64, 1}, one_shape, nullptr, 0};
  DLTensor recv{lengths.data(), cpu, 1, DLDataType{kDLInt, 64, 1}, all_shape, nullptr, 0};
  world_->all_gather(send, recv);
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<char> padded(static_cast<std::size_t>(longest), '\0');
  std::memcpy(padded.data(), text.data(), text.size());
  std::vector<char> texts(static_cast<std::size_t>(longest * size));
  int64_t padded_shape[1] = {longest};
  int64_t texts_shape[1] = {longest * size};
  DLTensor send_text{padded.data(), cpu, 1, DLDataType{kDLUInt, 8, 1}, padded_shape, nullptr, 0};
  DLTensor recv_text{texts.data(), cpu, 1, DLDataType{kDLUInt, 8, 1}, texts_shape, nullptr, 0};
  world_->all_gather(send_text, recv_text);
  const auto text_of = [&](int32_t r) {
    return std::string(texts.data() + r * longest,
                       static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]));
  };
  const std::string reference = text_of(0);
  std::string message;
  for (int32_t r = 1; r < size; ++r) {
    const std::string other = text_of(r);
    if (other == reference) continue;
    std::vector<std::string> differences;
    try {
      differences = json_differences(boost::json::parse(reference), boost::json::parse(other), 3);
    } catch (const std::exception&) {
      differences = {"(unreadable)"};
    }
    message += "\n  rank " + std::to_string(r) + " (rank 0's value vs rank " + std::to_string(r) + "'s):";
    for (const std::string& d : differences) message += "\n    " + d;
  }
  if (!message.empty())
    throw std::runtime_error("ranks started with different " + std::string(what) +
                             "; every rank must run the same one:" + message);
}

}  // namespace plexus::distributed
