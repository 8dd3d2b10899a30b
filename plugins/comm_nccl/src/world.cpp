#include "world.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "mpi_bootstrap.hpp"
#include "plexus/cpp/host.hpp"
#include "plexus_rendezvous/rendezvous.hpp"

namespace plexus::comm_nccl {
namespace {

// Without a timeout from the host or the options, forming the world still gives up eventually.
constexpr uint32_t kDefaultInitTimeoutMs = 600000;

struct Launch {
  int32_t rank = 0;
  int32_t size = 1;
  std::string source;  // for the log line
};

std::optional<int32_t> env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  const std::string_view view(text);
  int32_t value = 0;
  const auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
  if (view.empty() || error != std::errc() || end != view.data() + view.size() || value < 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string("environment variable ") + name + "='" + text +
                                              "' is not a non-negative integer");
  return value;
}

// The host's rank and size, or (both -1) the launcher's: mpirun's variables, then RANK/WORLD_SIZE.
Launch launch_of(const plx_comm_init_args& args) {
  if (args.rank >= 0 && args.world_size >= 1) {
    if (args.rank >= args.world_size)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "rank " + std::to_string(args.rank) +
                                                " is not a rank of world size " +
                                                std::to_string(args.world_size));
    return {args.rank, args.world_size, "the host"};
  }
  if (args.rank != -1 || args.world_size != -1)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "rank " + std::to_string(args.rank) + " and world_size " + std::to_string(args.world_size) +
                    ": give both (0 <= rank < world_size), or -1 for both to read them from the launcher's "
                    "environment");
  struct Source {
    const char* rank;
    const char* size;
    const char* launcher;
  };
  for (const Source& s : {Source{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun"},
                          Source{"RANK", "WORLD_SIZE", "RANK/WORLD_SIZE"}}) {
    const std::optional<int32_t> rank = env_int(s.rank);
    const std::optional<int32_t> size = env_int(s.size);
    if (!rank && !size) continue;
    if (!rank || !size)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(rank ? s.rank : s.size) + " is set but " +
                                                (rank ? s.size : s.rank) + " is not: a launch sets both");
    if (*size < 1 || *rank >= *size)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(s.rank) + "=" + std::to_string(*rank) +
                                                " is not a rank of " + s.size + "=" + std::to_string(*size));
    return {*rank, *size, s.launcher};
  }
  return {0, 1, "no launcher: a single process"};
}

// The GPU must be CUDA and visible to this process.
int device_of(const plx_comm_init_args& args) {
  if (args.device.device_type != kDLCUDA)
    throw Error(PLX_ERR_UNSUPPORTED, "nccl communicates CUDA memory, and " + device_text(args.device) +
                                         " is not a CUDA GPU (CPU tensors need another comm backend)");
  int count = 0;
  std::string why;
  if (const cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    why = std::string(" (cudaGetDeviceCount: ") + cudaGetErrorString(status) + ")";
    count = 0;
  }
  if (args.device.device_id < 0 || args.device.device_id >= count)
    throw Error(PLX_ERR_UNSUPPORTED, "nccl cannot use " + device_text(args.device) + ": this process sees " +
                                         std::to_string(count) + " CUDA device(s)" + why);
  return args.device.device_id;
}

// Every rank of one job computes the same tag; a peer of another job that reaches the same
// rendezvous port is then refused instead of joining.
std::string job_tag() {
  std::string tag = "plexus-nccl";
  for (const char* name : {"PLEXUS_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"})
    if (const char* value = std::getenv(name); value != nullptr && value[0] != '\0')
      return tag + ":" + name + "=" + value;
  return tag;
}

plx_status status_of_failure(rendezvous::Failure failure) {
  switch (failure) {
    case rendezvous::Failure::timeout:
      return PLX_ERR_TIMEOUT;
    case rendezvous::Failure::mismatch:
      return PLX_ERR_INVALID_ARGUMENT;
    case rendezvous::Failure::network:
      return PLX_ERR_COMM;
  }
  return PLX_ERR_COMM;
}

// Rank 0's unique id to every rank over TCP; returns how, for the log.
std::string share_over_tcp(ncclUniqueId& id, const Launch& launch, const Deadline& deadline,
                           bool under_mpirun) {
  const char* address = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  std::vector<std::string> missing;
  if (address == nullptr || address[0] == '\0') missing.push_back("MASTER_ADDR");
  if (port == nullptr || port[0] == '\0') missing.push_back("MASTER_PORT");
  if (!missing.empty()) {
    std::string text =
        "a world of " + std::to_string(launch.size) +
        " ranks needs rank 0's NCCL unique id on every rank; over TCP that takes MASTER_ADDR (rank "
        "0's host) and MASTER_PORT (a free port there), and " +
        missing[0] + (missing.size() > 1 ? " and " + missing[1] + " are" : std::string(" is")) + " not set";
    if (under_mpirun && !mpi_built())
      text +=
          " (this process runs under mpirun, but this comm_nccl was built without MPI, so it cannot "
          "bootstrap "
          "over MPI instead)";
    throw Error(PLX_ERR_INVALID_ARGUMENT, text);
  }
  const std::string where = std::string("MASTER_ADDR=") + address + ", MASTER_PORT=" + port;
  try {
    rendezvous::Options o;
    o.address = address;
    o.port = rendezvous::parse_port(port, "MASTER_PORT");
    o.rank = launch.rank;
    o.world_size = launch.size;
    o.job_tag = job_tag();
    o.timeout = deadline.left();
    std::vector<uint8_t> blob;
    if (launch.rank == 0) {
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      blob.assign(bytes, bytes + sizeof(id));
    }
    blob = rendezvous::share_from_rank0(o, blob);
    if (blob.size() != sizeof(id))
      throw Error(PLX_ERR_COMM, "rank 0 sent " + std::to_string(blob.size()) + " bytes instead of the " +
                                    std::to_string(sizeof(id)) + " of an NCCL unique id (" + where + ")");
    std::memcpy(&id, blob.data(), sizeof(id));
  } catch (const rendezvous::Error& e) {
    throw Error(status_of_failure(e.failure()), "NCCL bootstrap over TCP (" + where + "): " + e.what());
  }
  return "TCP via " + where;
}

}  // namespace

std::unique_ptr<Communicator> create_world(const plx_comm_init_args& args, const WorldOptions& options) {
  const Launch launch = launch_of(args);
  const int device = device_of(args);
  const uint32_t init_ms = options.init_timeout_ms != 0 ? options.init_timeout_ms
                           : args.timeout_ms != 0       ? args.timeout_ms
                                                        : kDefaultInitTimeoutMs;
  const Deadline deadline = Deadline::after_ms(init_ms);
  const CurrentDevice current(device);

  ncclUniqueId id{};
  if (launch.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", "rank 0");
  std::string how = "none needed (a world of one rank)";
  if (launch.size > 1) {
    const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
    const bool use_mpi =
        options.bootstrap == "mpi" || (options.bootstrap == "auto" && under_mpirun && mpi_built());
    if (use_mpi) {
      mpi_broadcast_from_rank0(&id, sizeof(id), launch.rank, launch.size);
      how = "MPI_Bcast";
    } else {
      how = share_over_tcp(id, launch, deadline, under_mpirun);
    }
  }

  std::unique_ptr<Communicator> world =
      Communicator::create_world(id, launch.rank, launch.size, device, args.timeout_ms, deadline);
  try {
    int version = 0;
    static_cast<void>(ncclGetVersion(&version));
    plexus::sdk::Host::current().info("nccl world ready: rank " + std::to_string(launch.rank) + " of " +
                                      std::to_string(launch.size) + " (from " + launch.source +
                                      ") on cuda:" + std::to_string(device) + ", NCCL " +
                                      std::to_string(version) + ", unique id: " + how + ", " +
                                      seconds_text(deadline.seconds_since_start()));
  } catch (...) {  // no host to tell (the table driven directly)
  }
  return world;
}

}  // namespace plexus::comm_nccl
