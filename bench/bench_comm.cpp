// Bus bandwidth of a comm backend's all_reduce and all_to_all through the real plugin, reported
// the way nccl-tests reports it, so numbers compare across backends and machines:
//   algbw = bytes / time;  busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for all_to_all
// (busbw is what each rank's link carries, independent of n for a bandwidth-optimal algorithm).
// `bytes` is the size of one rank's buffer (float32); all_to_all sends bytes/n to every rank.
// Each repeat is timed between two barriers on every rank; a repeat's time is the slowest
// rank's, and the table shows the median over the repeats, after warm-up runs. After timing,
// the results are checked (the `wrong` column counts bad elements, as nccl-tests does).
//
//   cmake --build build --target bench_comm
//   mpirun -np 2 build/bin/bench_comm [--plugin comm_mpi] [--component mpi] [--min-bytes 8]
//       [--max-bytes 67108864] [--factor 4] [--warmup 5] [--reps 20] [--timeout-ms 60000] [--json FILE]
// (as root: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; more ranks than cores:
// mpirun --oversubscribe). --plugin is a name (libplexus_<name>.so beside the other plugins) or
// a path to a .so.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "plexus/comm.h"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"

namespace {

struct Options {
  std::string plugin = "comm_mpi";
  std::string component = "mpi";
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{64} << 20;
  int64_t factor = 4;
  int warmup = 5;
  int reps = 20;
  uint32_t timeout_ms = 60000;
  std::string json;
};

struct Row {
  std::string op;
  int64_t bytes = 0;
  double time_us = 0;
  double algbw = 0;  // GB/s (1e9 bytes per second)
  double busbw = 0;
  int64_t wrong = 0;
};

class Bench {
 public:
  Bench(const plx_comm_v1& table, void* comm) : t_(table), comm_(comm) {
    check(t_.rank_size(comm_, &rank_, &size_));
  }
  int32_t rank() const { return rank_; }
  int32_t size() const { return size_; }

  void check(plx_status status) const {
    if (status == PLX_OK) return;
    throw std::runtime_error(plexus::HostServices::take_last_error());
  }

  // The median over `reps` of the slowest rank's time (seconds) of `op`, after `warmup` runs.
  template <class Op>
  double time(Op op, int warmup, int reps) {
    for (int i = 0; i < warmup; ++i) op();
    std::vector<double> seconds(static_cast<std::size_t>(reps));
    for (double& s : seconds) {
      check(t_.barrier(comm_));
      const auto start = std::chrono::steady_clock::now();
      op();
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    DLTensor view = f64_view(seconds);
    check(t_.all_reduce(comm_, &view, &view, PLX_REDUCE_MAX, nullptr, nullptr));
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
  }

  Row all_reduce(int64_t bytes, const Options& o) {
    const int64_t count = std::max<int64_t>(1, bytes / 4);
    std::vector<float> send(static_cast<std::size_t>(count), static_cast<float>(rank_ + 1));
    std::vector<float> recv(send.size(), 0.0f);
    int64_t shape = count;
    DLTensor s = f32_view(send, &shape);
    DLTensor r = f32_view(recv, &shape);
    const double seconds = time(
        [&] { check(t_.all_reduce(comm_, &s, &r, PLX_REDUCE_SUM, nullptr, nullptr)); }, o.warmup, o.reps);
    Row row{"all_reduce", count * 4, seconds * 1e6, 0, 0, 0};
    const auto expected = static_cast<float>(size_ * (size_ + 1) / 2);
    row.wrong = std::count_if(recv.begin(), recv.end(), [&](float v) { return v != expected; });
    row.algbw = static_cast<double>(row.bytes) / seconds / 1e9;
    row.busbw = row.algbw * 2.0 * (size_ - 1) / size_;
    return row;
  }

  Row all_to_all(int64_t bytes, const Options& o) {
    const int64_t block = std::max<int64_t>(1, bytes / 4 / size_);  // elements to each rank
    const int64_t count = block * size_;
    std::vector<float> send(static_cast<std::size_t>(count));
    for (int32_t j = 0; j < size_; ++j)
      std::fill_n(send.begin() + j * block, block, static_cast<float>(rank_ * 1000 + j));
    std::vector<float> recv(send.size(), -1.0f);
    std::vector<int64_t> counts(static_cast<std::size_t>(size_), block);
    std::vector<int64_t> offsets(static_cast<std::size_t>(size_));
    for (int32_t j = 0; j < size_; ++j) offsets[static_cast<std::size_t>(j)] = j * block;
    int64_t shape = count;
    DLTensor s = f32_view(send, &shape);
    DLTensor r = f32_view(recv, &shape);
    const double seconds = time(
        [&] {
          check(t_.all_to_all_v(comm_, &s, counts.data(), offsets.data(), &r, counts.data(), offsets.data(),
                                nullptr, nullptr));
        },
        o.warmup, o.reps);
    Row row{"all_to_all", count * 4, seconds * 1e6, 0, 0, 0};
    for (int32_t i = 0; i < size_; ++i)
      row.wrong += std::count_if(recv.begin() + i * block, recv.begin() + (i + 1) * block,
                                 [&](float v) { return v != static_cast<float>(i * 1000 + rank_); });
    row.algbw = static_cast<double>(row.bytes) / seconds / 1e9;
    row.busbw = row.algbw * (size_ - 1) / size_;
    return row;
  }

  // The sum over ranks of a count (the `wrong` column covers every rank).
  int64_t total(int64_t value) {
    std::vector<int64_t> v{value};
    int64_t shape = 1;
    DLTensor view{};
    view.data = v.data();
    view.device = DLDevice{kDLCPU, 0};
    view.ndim = 1;
    view.dtype = plx_dtype_i64();
    view.shape = &shape;
    check(t_.all_reduce(comm_, &view, &view, PLX_REDUCE_SUM, nullptr, nullptr));
    return v[0];
  }

 private:
  static DLTensor f32_view(std::vector<float>& v, int64_t* shape) {
    DLTensor t{};
    t.data = v.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = plx_dtype_f32();
    t.shape = shape;
    return t;
  }
  DLTensor f64_view(std::vector<double>& v) {
    shape_ = static_cast<int64_t>(v.size());
    DLTensor t{};
    t.data = v.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = plx_dtype_f64();
    t.shape = &shape_;
    return t;
  }

  const plx_comm_v1& t_;
  void* comm_;
  int32_t rank_ = 0;
  int32_t size_ = 1;
  int64_t shape_ = 0;
};

std::string human(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

int run(const Options& o) {
  plexus::PluginHost host;
  const bool is_path = o.plugin.find('/') != std::string::npos || o.plugin.ends_with(".so");
  host.load(is_path ? std::filesystem::path(o.plugin)
                    : std::filesystem::path(PLEXUS_PLUGIN_DIR) / ("libplexus_" + o.plugin + ".so"));
  const auto& table = host.get(PLX_KIND_COMM, o.component).as<plx_comm_v1>();
  plx_comm_init_args args{};
  args.struct_size = sizeof(args);
  args.rank = -1;
  args.world_size = -1;
  args.timeout_ms = o.timeout_ms;
  args.device = DLDevice{kDLCPU, 0};
  void* world = nullptr;
  if (table.init(&args, &world) != PLX_OK) {
    std::fprintf(stderr, "bench_comm: %s\n", plexus::HostServices::take_last_error().c_str());
    return 1;
  }
  std::vector<Row> rows;
  int32_t rank = 0;
  int32_t size = 1;
  {
    Bench bench(table, world);
    rank = bench.rank();
    size = bench.size();
    if (rank == 0) {
      std::printf(
          "# bench_comm: %s (%s), %d ranks, float32, %d warm-up runs, median of %d repeats (slowest rank)\n",
          o.component.c_str(), o.plugin.c_str(), size, o.warmup, o.reps);
      std::printf("# %10s  %10s | %-36s | %-36s\n", "", "", "all_reduce (out of place, sum)",
                  "all_to_all (equal blocks)");
      std::printf("# %10s  %10s | %9s %8s %8s %6s | %9s %8s %8s %6s\n", "bytes", "size", "time(us)", "algbw",
                  "busbw", "wrong", "time(us)", "algbw", "busbw", "wrong");
    }
    std::vector<int64_t> sizes;
    for (int64_t b = o.min_bytes; b < o.max_bytes; b *= o.factor) sizes.push_back(b);
    sizes.push_back(o.max_bytes);
    for (int64_t bytes : sizes) {
      Row a = bench.all_reduce(bytes, o);
      Row b = bench.all_to_all(bytes, o);
      a.wrong = bench.total(a.wrong);
      b.wrong = bench.total(b.wrong);
      if (rank == 0)
        std::printf("  %10lld  %10s | %9.1f %8.3f %8.3f %6lld | %9.1f %8.3f %8.3f %6lld\n",
                    static_cast<long long>(bytes), human(bytes).c_str(), a.time_us, a.algbw, a.busbw,
                    static_cast<long long>(a.wrong), b.time_us, b.algbw, b.busbw,
                    static_cast<long long>(b.wrong));
      std::fflush(stdout);
      rows.push_back(a);
      rows.push_back(b);
    }
  }
  table.destroy(world);
  if (rank == 0 && !o.json.empty()) {
    boost::json::array results;
    for (const Row& r : rows)
      results.push_back({{"op", r.op},
                         {"bytes", r.bytes},
                         {"time_us", r.time_us},
                         {"algbw_gbps", r.algbw},
                         {"busbw_gbps", r.busbw},
                         {"wrong", r.wrong}});
    const boost::json::object doc{{"backend", o.component}, {"plugin", o.plugin}, {"ranks", size},
                                  {"dtype", "float32"},     {"warmup", o.warmup}, {"reps", o.reps},
                                  {"results", results}};
    std::ofstream(o.json) << boost::json::serialize(doc) << "\n";
  }
  for (const Row& r : rows)
    if (r.wrong != 0) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--plugin")
      o.plugin = v;
    else if (k == "--component")
      o.component = v;
    else if (k == "--min-bytes")
      o.min_bytes = std::stoll(v);
    else if (k == "--max-bytes")
      o.max_bytes = std::stoll(v);
    else if (k == "--factor")
      o.factor = std::stoll(v);
    else if (k == "--warmup")
      o.warmup = std::stoi(v);
    else if (k == "--reps")
      o.reps = std::stoi(v);
    else if (k == "--timeout-ms")
      o.timeout_ms = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--json")
      o.json = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.factor < 2 || o.reps < 1 || o.warmup < 0) {
    std::fprintf(stderr, "bench_comm: need 4 <= --min-bytes <= --max-bytes, --factor >= 2, --reps >= 1\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_comm: %s\n", e.what());
    return 1;
  }
}
