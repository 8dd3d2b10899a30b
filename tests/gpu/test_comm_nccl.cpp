// The NCCL comm backend (plugins/comm_nccl, the real built plugin, through the plugin host) on one
// GPU. A world of one rank is formed in the environment of a TCP launch (MASTER_ADDR = 127.0.0.1,
// MASTER_PORT = a free port, bootstrap "auto" and "tcp"; a world of one needs no exchange, the
// exchange itself is covered by integration.test_tcp_rendezvous and, through the plugin, by the
// world of two below) and every operation of plx_comm_v1 runs on device buffers: all_reduce with
// each reduction, out of place and in place, in every dtype the backend reduces
// (float32, float64, float16, bfloat16, int32, int64, uint8); all_gather, reduce_scatter,
// broadcast, all_to_all_v (the chunk a rank sends itself, at offsets) and a dtype NCCL lacks moved
// as bytes; requests on a host stream completed by test and wait in any order; split (a color and
// no color) and a collective over the split; barrier. With one rank every collective must
// reproduce its input exactly, so results are compared bit for bit (no tolerance), against
// outputs pre-filled with a sentinel so that an element the backend does not write shows up.
// Refusals: a CPU tensor, a dtype it cannot reduce, wrong sizes, a send to itself, a root or
// reduction that does not exist, a device that is not there, MASTER_ADDR/MASTER_PORT missing, and
// a world of two whose second rank never comes (init times out naming rank 1 and the address).
//
// Reported skipped by ctest (exit 77) without a CUDA GPU or without the plugin (a build without
// CUDA or NCCL).
#define BOOST_TEST_MODULE comm_nccl
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "plexus/comm.h"
#include "plexus/core/device.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "skip_module.hpp"

namespace {

const DLDevice kGpu{kDLCUDA, 0};
const DLDevice kCpu{kDLCPU, 0};
const std::string kPluginFile = std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins/libplexus_comm_nccl.so";

const char* skip_reason() {
  if (plexus::device::cuda_device_count() == 0) return "no CUDA GPU here (or a build without CUDA)";
  if (!std::filesystem::exists(kPluginFile))
    return "no comm_nccl plugin in this build (it needs CUDA and NCCL; see the cmake status lines)";
  return nullptr;
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(skip_reason() == nullptr, skip_reason())

namespace {

plexus::PluginHost& plugins() {
  static plexus::PluginHost host;
  static const bool loaded = [] {
    host.load(kPluginFile);
    return true;
  }();
  static_cast<void>(loaded);
  return host;
}

const plx_comm_v1& nccl() {
  return plugins().get(PLX_KIND_COMM, "nccl").as<plx_comm_v1>();
}

// A port nobody listens on right now.
uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  socklen_t length = sizeof(a);
  BOOST_REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The environment of a rank launched over TCP, without any mpirun variables.
void launch_environment(uint16_t port) {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE"})
    ::unsetenv(name);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
}

struct Status {
  plx_status code;
  std::string message;
};

Status init_world(int32_t rank, int32_t size, uint32_t timeout_ms, void** out, DLDevice device = kGpu,
                  boost::json::object options = {}) {
  plexus::ConfigHandle config(options, "comm.options");
  plx_comm_init_args args{};
  args.struct_size = sizeof(args);
  args.rank = rank;
  args.world_size = size;
  args.timeout_ms = timeout_ms;
  args.device = device;
  args.config = config.get();
  plexus::HostServices::clear_last_error();
  const plx_status s = nccl().init(&args, out);
  return {s, plexus::HostServices::take_last_error()};
}

// A world of one rank on cuda:0 over the TCP path, destroyed at the end of each test.
struct World {
  World() {
    launch_environment(free_port());
    const Status s = init_world(0, 1, 60000, &comm);
    BOOST_TEST_REQUIRE(s.code == PLX_OK, s.message);
    BOOST_TEST_REQUIRE(comm != nullptr);
  }
  ~World() {
    if (comm != nullptr) nccl().destroy(comm);
  }
  void* comm = nullptr;
};

// A device buffer of one dtype with a DLTensor view; host-side values travel as raw bytes.
class Gpu {
 public:
  Gpu(DLDataType dtype, int64_t n) : dtype_(dtype), shape_{n} {
    bytes_ = static_cast<std::size_t>(n) * dtype.bits * dtype.lanes / 8;
    data_ = plexus::device::allocate(kGpu, bytes_ == 0 ? 1 : bytes_);
  }
  ~Gpu() { plexus::device::free(kGpu, data_); }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  template <class T>
  void upload(const std::vector<T>& values) {
    BOOST_TEST_REQUIRE(values.size() * sizeof(T) == bytes_);
    plexus::device::copy(data_, kGpu, values.data(), kCpu, bytes_);
  }
  template <class T>
  std::vector<T> download() const {
    plexus::device::synchronize(kGpu);
    std::vector<T> values(bytes_ / sizeof(T));
    plexus::device::copy(values.data(), kCpu, data_, kGpu, bytes_);
    return values;
  }
  DLTensor* tensor() {
    view_ = DLTensor{};
    view_.data = data_;
    view_.device = kGpu;
    view_.ndim = 1;
    view_.dtype = dtype_;
    view_.shape = shape_.data();
    return &view_;
  }

 private:
  DLDataType dtype_;
  std::vector<int64_t> shape_;
  std::size_t bytes_ = 0;
  void* data_ = nullptr;
  DLTensor view_{};
};

std::vector<float> ramp(int n, float scale = 0.5f, float offset = -3.0f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = offset + scale * static_cast<float>(i);
  return v;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

Status last(plx_status code) {
  return {code, plexus::HostServices::take_last_error()};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_world_of_one_forms_in_a_tcp_launch_environment) {
  World w;
  int32_t rank = -1, size = -1;
  BOOST_TEST(nccl().rank_size(w.comm, &rank, &size) == PLX_OK);
  BOOST_TEST(rank == 0);
  BOOST_TEST(size == 1);
  BOOST_TEST(nccl().device_mask == PLX_DEVICE_BIT(kDLCUDA));
}

BOOST_AUTO_TEST_CASE(rank_and_size_come_from_the_environment_when_the_host_passes_minus_one) {
  launch_environment(free_port());
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  void* comm = nullptr;
  const Status s = init_world(-1, -1, 60000, &comm, kGpu, {{"bootstrap", "tcp"}});
  BOOST_TEST_REQUIRE(s.code == PLX_OK, s.message);
  int32_t rank = -1, size = -1;
  BOOST_TEST(nccl().rank_size(comm, &rank, &size) == PLX_OK);
  BOOST_TEST(rank == 0);
  BOOST_TEST(size == 1);
  nccl().destroy(comm);
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
}

BOOST_AUTO_TEST_CASE(all_reduce_with_every_reduction_out_of_place_and_in_place) {
  World w;
  const int n = 1000;
  const std::vector<float> input = ramp(n);
  Gpu send(plx_dtype_f32(), n), recv(plx_dtype_f32(), n);
  send.upload(input);
  for (int32_t op : {PLX_REDUCE_SUM, PLX_REDUCE_AVG, PLX_REDUCE_MAX, PLX_REDUCE_MIN}) {
    BOOST_TEST_CONTEXT("reduction " << op) {
      recv.upload(std::vector<float>(n, kNaN));
      BOOST_TEST(nccl().all_reduce(w.comm, send.tensor(), recv.tensor(), op, nullptr, nullptr) == PLX_OK);
      BOOST_TEST(same_bits(recv.download<float>(), input));
      BOOST_TEST(nccl().all_reduce(w.comm, send.tensor(), send.tensor(), op, nullptr, nullptr) == PLX_OK);
      BOOST_TEST(same_bits(send.download<float>(), input));
    }
  }
}

BOOST_AUTO_TEST_CASE(every_reducible_dtype_all_reduces) {
  World w;
  auto check = [&](DLDataType dtype, const auto& values, auto sentinel) {
    using T = typename std::decay_t<decltype(values)>::value_type;
    const int64_t n = static_cast<int64_t>(values.size());
    Gpu send(dtype, n), recv(dtype, n);
    send.upload(values);
    recv.upload(std::vector<T>(values.size(), sentinel));
    const plx_status s =
        nccl().all_reduce(w.comm, send.tensor(), recv.tensor(), PLX_REDUCE_SUM, nullptr, nullptr);
    BOOST_TEST(s == PLX_OK, plexus::HostServices::take_last_error());
    BOOST_TEST((recv.download<T>() == values));
  };
  check(plx_dtype_f64(), std::vector<double>{1.5, -2.25, 1e300, 0.0, 3.0}, -1.0);
  check(plx_dtype(kDLFloat, 16), std::vector<uint16_t>{0x3C00, 0xC200, 0x7BFF, 0x0001}, uint16_t{0xFFFF});
  // bfloat16: 1, -3, 0.5, the largest finite value, the smallest subnormal.
  check(plx_dtype_bf16(), std::vector<uint16_t>{0x3F80, 0xC040, 0x3F00, 0x7F7F, 0x0001}, uint16_t{0xFFFF});
  check(plx_dtype_i32(), std::vector<int32_t>{1, -7, 2147483647, -2147483647 - 1}, int32_t{42});
  check(plx_dtype_i64(), std::vector<int64_t>{1, -7, int64_t{1} << 62}, int64_t{42});
  check(plx_dtype(kDLUInt, 8), std::vector<uint8_t>{0, 1, 200, 255}, uint8_t{7});
}

BOOST_AUTO_TEST_CASE(bf16_all_reduce_averages_in_place) {
  World w;
  std::vector<uint16_t> values(4096);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint16_t>(0x3F80 + (i % 128));
  Gpu buffer(plx_dtype_bf16(), static_cast<int64_t>(values.size()));
  buffer.upload(values);
  BOOST_TEST(nccl().all_reduce(w.comm, buffer.tensor(), buffer.tensor(), PLX_REDUCE_AVG, nullptr, nullptr) ==
             PLX_OK);
  BOOST_TEST((buffer.download<uint16_t>() == values));  // the average over one rank is the value itself
}

BOOST_AUTO_TEST_CASE(all_gather_reduce_scatter_and_broadcast) {
  World w;
  const int n = 777;
  const std::vector<float> input = ramp(n, 0.25f, 1.0f);
  Gpu send(plx_dtype_f32(), n), recv(plx_dtype_f32(), n);
  send.upload(input);

  recv.upload(std::vector<float>(n, kNaN));
  BOOST_TEST(nccl().all_gather(w.comm, send.tensor(), recv.tensor(), nullptr, nullptr) == PLX_OK);
  BOOST_TEST(same_bits(recv.download<float>(), input));

  recv.upload(std::vector<float>(n, kNaN));
  BOOST_TEST(nccl().reduce_scatter(w.comm, send.tensor(), recv.tensor(), PLX_REDUCE_SUM, nullptr, nullptr) ==
             PLX_OK);
  BOOST_TEST(same_bits(recv.download<float>(), input));

  BOOST_TEST(nccl().broadcast(w.comm, send.tensor(), 0, nullptr, nullptr) == PLX_OK);
  BOOST_TEST(same_bits(send.download<float>(), input));

  // A dtype NCCL does not have (uint16) still moves, as bytes.
  const std::vector<uint16_t> words{1, 2, 65535, 4};
  Gpu wsend(plx_dtype(kDLUInt, 16), 4), wrecv(plx_dtype(kDLUInt, 16), 4);
  wsend.upload(words);
  wrecv.upload(std::vector<uint16_t>(4, 9));
  BOOST_TEST(nccl().all_gather(w.comm, wsend.tensor(), wrecv.tensor(), nullptr, nullptr) == PLX_OK);
  BOOST_TEST((wrecv.download<uint16_t>() == words));
}

BOOST_AUTO_TEST_CASE(all_to_all_v_moves_a_ranks_own_chunk_between_offsets) {
  World w;
  const std::vector<float> input = ramp(10, 1.0f, 0.0f);  // 0, 1, ..., 9
  Gpu send(plx_dtype_f32(), 10), recv(plx_dtype_f32(), 8);
  send.upload(input);
  recv.upload(std::vector<float>(8, -1.0f));
  const int64_t send_counts[] = {4}, send_offsets[] = {3}, recv_counts[] = {4}, recv_offsets[] = {2};
  BOOST_TEST(nccl().all_to_all_v(w.comm, send.tensor(), send_counts, send_offsets, recv.tensor(), recv_counts,
                                 recv_offsets, nullptr, nullptr) == PLX_OK);
  BOOST_TEST((recv.download<float>() == std::vector<float>{-1, -1, 3, 4, 5, 6, -1, -1}));
}

BOOST_AUTO_TEST_CASE(requests_on_a_host_stream_complete_by_test_and_wait_in_any_order) {
  World w;
  const plx_host_api* api = plugins().services().table_for("test");
  plx_stream stream = nullptr;
  BOOST_TEST_REQUIRE(api->stream_create(api->ctx, kGpu, 0, &stream) == PLX_OK);
  const int n = 1 << 20;
  const std::vector<float> a = ramp(n, 0.5f, -7.0f), b = ramp(n, -0.125f, 2.0f);
  Gpu a_send(plx_dtype_f32(), n), a_recv(plx_dtype_f32(), n), b_buf(plx_dtype_f32(), n);
  a_send.upload(a);
  a_recv.upload(std::vector<float>(static_cast<std::size_t>(n), kNaN));
  b_buf.upload(b);

  void* first = nullptr;
  void* second = nullptr;
  BOOST_TEST_REQUIRE(
      nccl().all_reduce(w.comm, a_send.tensor(), a_recv.tensor(), PLX_REDUCE_SUM, stream, &first) == PLX_OK);
  BOOST_TEST_REQUIRE(nccl().broadcast(w.comm, b_buf.tensor(), 0, stream, &second) == PLX_OK);
  BOOST_TEST_REQUIRE(first != nullptr);
  BOOST_TEST_REQUIRE(second != nullptr);
  // test only asks; poll the second until done (bounded), then wait on both, the later one first.
  int32_t done = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (done == 0 && std::chrono::steady_clock::now() < give_up)
    BOOST_TEST_REQUIRE(nccl().test(w.comm, second, &done) == PLX_OK);
  BOOST_TEST(done == 1);
  BOOST_TEST(nccl().wait(w.comm, second, 5000) == PLX_OK);
  BOOST_TEST(nccl().wait(w.comm, first, 0) == PLX_OK);
  BOOST_TEST(same_bits(a_recv.download<float>(), a));
  BOOST_TEST(same_bits(b_buf.download<float>(), b));
  api->stream_destroy(api->ctx, stream);
}

BOOST_AUTO_TEST_CASE(split_with_a_color_and_without_one) {
  World w;
  void* sub = nullptr;
  const plx_status s = nccl().split(w.comm, 5, 0, &sub);
  BOOST_TEST_REQUIRE(s == PLX_OK, plexus::HostServices::take_last_error());
  BOOST_TEST_REQUIRE(sub != nullptr);
  int32_t rank = -1, size = -1;
  BOOST_TEST(nccl().rank_size(sub, &rank, &size) == PLX_OK);
  BOOST_TEST(rank == 0);
  BOOST_TEST(size == 1);
  const std::vector<float> input = ramp(100);
  Gpu send(plx_dtype_f32(), 100), recv(plx_dtype_f32(), 100);
  send.upload(input);
  recv.upload(std::vector<float>(100, kNaN));
  BOOST_TEST(nccl().all_reduce(sub, send.tensor(), recv.tensor(), PLX_REDUCE_MAX, nullptr, nullptr) ==
             PLX_OK);
  BOOST_TEST(same_bits(recv.download<float>(), input));
  BOOST_TEST(nccl().barrier(sub) == PLX_OK);

  void* none = reinterpret_cast<void*>(uintptr_t{1});
  BOOST_TEST(nccl().split(w.comm, -1, 0, &none) == PLX_OK);
  BOOST_TEST(none == nullptr);  // color < 0 joins no communicator
  nccl().destroy(sub);          // sub-communicators first, the world last (World's destructor)
}

BOOST_AUTO_TEST_CASE(barrier_returns_once_every_rank_is_there) {
  World w;
  BOOST_TEST(nccl().barrier(w.comm) == PLX_OK);
  BOOST_TEST(nccl().barrier(w.comm) == PLX_OK);
}

BOOST_AUTO_TEST_CASE(what_the_backend_cannot_do_is_refused_naming_it) {
  World w;
  Gpu f32(plx_dtype_f32(), 8), f32_small(plx_dtype_f32(), 4), u16(plx_dtype(kDLUInt, 16), 8);
  std::vector<float> host(8, 1.0f);
  int64_t shape[] = {8};
  DLTensor cpu{};
  cpu.data = host.data();
  cpu.device = kCpu;
  cpu.ndim = 1;
  cpu.dtype = plx_dtype_f32();
  cpu.shape = shape;

  Status s = last(nccl().all_reduce(w.comm, &cpu, &cpu, PLX_REDUCE_SUM, nullptr, nullptr));
  BOOST_TEST(s.code == PLX_ERR_UNSUPPORTED);
  BOOST_TEST(contains(s.message, "cpu:0"), s.message);

  s = last(nccl().all_reduce(w.comm, u16.tensor(), u16.tensor(), PLX_REDUCE_SUM, nullptr, nullptr));
  BOOST_TEST(s.code == PLX_ERR_UNSUPPORTED);
  BOOST_TEST(contains(s.message, "cannot reduce uint16"), s.message);

  s = last(nccl().all_reduce(w.comm, f32.tensor(), f32_small.tensor(), PLX_REDUCE_SUM, nullptr, nullptr));
  BOOST_TEST(s.code == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(s.message, "must be equal"), s.message);

  s = last(nccl().all_reduce(w.comm, f32.tensor(), f32.tensor(), 9, nullptr, nullptr));
  BOOST_TEST(s.code == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(s.message, "unknown reduction 9"), s.message);

  s = last(nccl().all_gather(w.comm, f32.tensor(), f32_small.tensor(), nullptr, nullptr));
  BOOST_TEST(s.code == PLX_ERR_INVALID_ARGUMENT);

  s = last(nccl().broadcast(w.comm, f32.tensor(), 1, nullptr, nullptr));
  BOOST_TEST(s.code == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(s.message, "root 1"), s.message);

  s = last(nccl().send(w.comm, f32.tensor(), 0, 0, nullptr, nullptr));
  BOOST_TEST(s.code == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(s.message, "itself"), s.message);

  const int64_t counts[] = {5}, offsets[] = {4};  // 4 + 5 > 8
  s = last(nccl().all_to_all_v(w.comm, f32.tensor(), counts, offsets, f32.tensor(), counts, offsets, nullptr,
                               nullptr));
  BOOST_TEST(s.code == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(s.message, "outside"), s.message);

  // The communicator is still usable after refusals.
  BOOST_TEST(nccl().barrier(w.comm) == PLX_OK);
}

BOOST_AUTO_TEST_CASE(init_refuses_devices_that_are_not_there) {
  launch_environment(free_port());
  void* comm = nullptr;
  Status s = init_world(0, 1, 10000, &comm, kCpu);
  BOOST_TEST(s.code == PLX_ERR_UNSUPPORTED);
  BOOST_TEST(contains(s.message, "cpu:0"), s.message);
  const int count = plexus::device::cuda_device_count();
  s = init_world(0, 1, 10000, &comm, DLDevice{kDLCUDA, count});
  BOOST_TEST(s.code == PLX_ERR_UNSUPPORTED);
  BOOST_TEST(contains(s.message, "cuda:" + std::to_string(count)), s.message);
  s = init_world(2, 2, 10000, &comm);
  BOOST_TEST(s.code == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(s.message, "rank 2 is not a rank of world size 2"), s.message);
}

BOOST_AUTO_TEST_CASE(a_world_of_two_without_master_addr_names_the_variables) {
  launch_environment(free_port());
  ::unsetenv("MASTER_ADDR");
  ::unsetenv("MASTER_PORT");
  void* comm = nullptr;
  const Status s = init_world(1, 2, 10000, &comm);
  BOOST_TEST(s.code == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(s.message, "MASTER_ADDR and MASTER_PORT are not set"), s.message);
}

BOOST_AUTO_TEST_CASE(init_times_out_naming_the_rank_that_never_came) {
  const uint16_t port = free_port();
  launch_environment(port);
  void* comm = nullptr;
  const auto start = std::chrono::steady_clock::now();
  const Status s = init_world(0, 2, 1500, &comm);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BOOST_TEST(s.code == PLX_ERR_TIMEOUT);
  BOOST_TEST(contains(s.message, "waiting for ranks {1}"), s.message);
  BOOST_TEST(contains(s.message, "127.0.0.1:" + std::to_string(port)), s.message);
  BOOST_TEST(contains(s.message, "MASTER_PORT=" + std::to_string(port)), s.message);
  // The limit was 1.5 s; allow 3 s more for a loaded machine (rank 0 gives up at its deadline).
  BOOST_TEST(seconds >= 1.4);
  BOOST_TEST(seconds <= 4.5);
  BOOST_TEST(comm == nullptr);
}
