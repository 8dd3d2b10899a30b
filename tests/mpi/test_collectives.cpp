// The mpi comm backend (plugins/comm_mpi) against serial computations of what every operation
// must produce, on 2 and 4 ranks: all_reduce (sum, avg, max, min over float32, float64, int32,
// int64 and bfloat16, in place and not), all_gather, reduce_scatter, all_to_all_v with uneven
// and zero counts at arbitrary offsets, broadcast from a non-zero root, a send/recv ring,
// barrier, sub-communicators from split, several requests in flight waited out of order, progress
// without any call into the backend, and the refusals of bad arguments.
//
// ctest runs this executable without mpirun: it then re-runs itself under
// `mpirun --oversubscribe -np 2` and `-np 4` (suite `ranks`) and once as a plain process that
// initializes MPI itself (suite `singleton`), and checks their exit status and output. Exact
// comparisons throughout: every value is a small integer (or a sum of them), exact in every
// dtype used, so any difference is an error, not rounding.
#define BOOST_TEST_MODULE mpi_collectives
#include <boost/test/unit_test.hpp>

#include <dlfcn.h>

#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "comm_harness.hpp"
#include "skip_module.hpp"

namespace utf = boost::unit_test;
using namespace plexus::test;

PLEXUS_SKIP_MODULE_UNLESS(std::filesystem::exists(plugin_file("comm_mpi")) &&
                              (under_mpirun() || have_mpirun()),
                          "needs the comm_mpi plugin (a build with MPI) and mpirun")

namespace {

// The world communicator of this rank, created on first use and destroyed (MPI_Finalize) after
// the last test. chunk_elements = 1000 makes every all_reduce, broadcast and send/recv of more
// than 1000 elements go in several MPI calls, so the splitting is tested too.
struct World {
  Backend backend{"comm_mpi", "mpi"};
  std::unique_ptr<plexus::ConfigHandle> config = options(R"({"chunk_elements": 1000})");
  void* comm = nullptr;
  int32_t rank = -1;
  int32_t size = 0;
  World() {
    // As a launcher would: the rank and size it knows from the environment, checked by the backend.
    const auto args = init_args(std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")),
                                std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")), 20000, config->get());
    const Outcome o = outcome(backend->init(&args, &comm));
    if (!o.ok()) throw std::runtime_error("init failed: " + o.message);
    backend->rank_size(comm, &rank, &size);
  }
  ~World() { backend->destroy(comm); }
  const plx_comm_v1& t() const { return *backend; }
};
std::unique_ptr<World>& world_slot() {
  static std::unique_ptr<World> world;
  return world;
}
World& world() {
  if (!world_slot()) world_slot() = std::make_unique<World>();
  return *world_slot();
}
struct DestroyWorldAtTheEnd {
  ~DestroyWorldAtTheEnd() { world_slot().reset(); }
};
BOOST_TEST_GLOBAL_FIXTURE(DestroyWorldAtTheEnd);

void require_ok(const Outcome& o) {
  BOOST_TEST_REQUIRE(o.ok(), o.message);
}

// Which part this process plays (see comm_harness.hpp).
utf::assertion_result in_ranks(utf::test_unit_id) {
  return utf::assertion_result(under_mpirun());
}
utf::assertion_result in_singleton(utf::test_unit_id) {
  return utf::assertion_result(std::getenv("PLEXUS_TEST_SINGLETON") != nullptr);
}
utf::assertion_result in_launcher(utf::test_unit_id) {
  return utf::assertion_result(!under_mpirun() && std::getenv("PLEXUS_TEST_SINGLETON") == nullptr);
}

uint16_t bf16(float value) {  // exact for the values used here (at most 8 significant bits)
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

template <class T>
T reduce_serially(int32_t op, int32_t size, std::size_t i, T (*value)(int32_t, std::size_t)) {
  T acc = value(0, i);
  for (int32_t r = 1; r < size; ++r) {
    const T v = value(r, i);
    if (op == PLX_REDUCE_MAX)
      acc = std::max(acc, v);
    else if (op == PLX_REDUCE_MIN)
      acc = std::min(acc, v);
    else
      acc = static_cast<T>(acc + v);
  }
  if (op == PLX_REDUCE_AVG) acc = static_cast<T>(acc / static_cast<T>(size));
  return acc;
}

template <class T>
T element(int32_t rank, std::size_t i) {  // mixed signs, so max and min differ from sum's order
  return static_cast<T>((rank + 1) * static_cast<int>(i % 7 + 1) - 3 * rank);
}

template <class T>
void check_all_reduce(int32_t op, bool in_place, std::size_t n) {
  World& w = world();
  Tensor<T> send(n);
  Tensor<T> recv(n, T(-99));
  for (std::size_t i = 0; i < n; ++i) send.values[i] = element<T>(w.rank, i);
  Tensor<T>& out = in_place ? send : recv;
  DLTensor* s = send.view();
  DLTensor* r = in_place ? s : recv.view();
  require_ok(outcome(w.t().all_reduce(w.comm, s, r, op, nullptr, nullptr)));
  for (std::size_t i = 0; i < n; ++i) {
    const T expected = reduce_serially<T>(op, w.size, i, &element<T>);
    if (out.values[i] != expected) {
      BOOST_TEST(out.values[i] == expected,
                 "op " << op << (in_place ? " in place" : "") << ", element " << i << " of " << n);
      return;
    }
  }
}

template <class T>
void check_all_reduce_every_op() {
  for (int32_t op : {PLX_REDUCE_SUM, PLX_REDUCE_AVG, PLX_REDUCE_MAX, PLX_REDUCE_MIN})
    for (bool in_place : {false, true})
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{37}, std::size_t{2500}})
        check_all_reduce<T>(op, in_place, n);
}

}  // namespace

// ---- the launcher (ctest) ------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(launcher, *utf::precondition(in_launcher))

BOOST_AUTO_TEST_CASE(every_check_passes_on_2_and_4_ranks) {
  for (int ranks : {2, 4}) {
    const Job job = mpirun(ranks, "--run_test=ranks");
    BOOST_TEST_INFO("mpirun -np " << ranks << " (" << job.seconds << " s):\n" << job.output);
    BOOST_TEST(job.status == 0);
    BOOST_TEST(count_of(job.output, "*** No errors detected") == static_cast<std::size_t>(ranks));
  }
}

BOOST_AUTO_TEST_CASE(outside_mpirun_mpi_is_a_singleton_and_a_larger_world_is_refused) {
  const auto run = run_process("env PLEXUS_TEST_SINGLETON=1 timeout 60 " + quote(self_executable()) +
                               " --run_test=singleton");
  BOOST_TEST_INFO(run.output);
  BOOST_TEST(run.status == 0);
  BOOST_TEST(contains(run.output, "*** No errors detected"));
}

BOOST_AUTO_TEST_SUITE_END()

// ---- one rank under mpirun -----------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(ranks, *utf::precondition(in_ranks))

BOOST_AUTO_TEST_CASE(the_world_has_the_ranks_mpirun_started) {
  World& w = world();
  BOOST_TEST(w.size == std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  BOOST_TEST(w.rank == std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  BOOST_TEST(w.t().device_mask == PLX_DEVICE_BIT(kDLCPU));
  // The plugin host opened the plugin (and so libmpi) RTLD_LOCAL, but MPI's dynamically loaded
  // components look for libmpi's symbols in the global scope: after init they must be there
  // (this executable does not link MPI, so only a promotion of libmpi can put them there).
  BOOST_TEST(dlsym(RTLD_DEFAULT, "MPI_Comm_rank") != nullptr);
}

BOOST_AUTO_TEST_CASE(all_reduce_float32) {
  check_all_reduce_every_op<float>();
}
BOOST_AUTO_TEST_CASE(all_reduce_float64) {
  check_all_reduce_every_op<double>();
}
BOOST_AUTO_TEST_CASE(all_reduce_int32) {
  check_all_reduce_every_op<int32_t>();
}
BOOST_AUTO_TEST_CASE(all_reduce_int64) {
  check_all_reduce_every_op<int64_t>();
}

BOOST_AUTO_TEST_CASE(all_reduce_bfloat16_through_the_float_operator) {
  World& w = world();
  const std::size_t n = 64;
  // (r + 1) / 2 + i % 4: sums up to 17 and averages like 4.25, all exact in bfloat16.
  auto value = [](int32_t r, std::size_t i) {
    return 0.5f * static_cast<float>(r + 1) + static_cast<float>(i % 4);
  };
  for (int32_t op : {PLX_REDUCE_SUM, PLX_REDUCE_AVG, PLX_REDUCE_MAX, PLX_REDUCE_MIN}) {
    Tensor<uint16_t> data(n);
    data.dtype = plx_dtype_bf16();
    for (std::size_t i = 0; i < n; ++i) data.values[i] = bf16(value(w.rank, i));
    require_ok(outcome(w.t().all_reduce(w.comm, data.view(), data.view(), op, nullptr, nullptr)));
    for (std::size_t i = 0; i < n; ++i) {
      float expected = value(0, i);
      for (int32_t r = 1; r < w.size; ++r) {
        const float v = value(r, i);
        expected = op == PLX_REDUCE_MAX   ? std::max(expected, v)
                   : op == PLX_REDUCE_MIN ? std::min(expected, v)
                                          : expected + v;
      }
      if (op == PLX_REDUCE_AVG) expected /= static_cast<float>(w.size);
      BOOST_TEST_REQUIRE(data.values[i] == bf16(expected), "op " << op << ", element " << i);
    }
  }
}

BOOST_AUTO_TEST_CASE(all_gather_in_rank_order_and_in_place) {
  World& w = world();
  const std::size_t k = 3;
  Tensor<int64_t> send(k);
  for (std::size_t i = 0; i < k; ++i) send.values[i] = w.rank * 10 + static_cast<int64_t>(i);
  Tensor<int64_t> recv(k * static_cast<std::size_t>(w.size), -1);
  require_ok(outcome(w.t().all_gather(w.comm, send.view(), recv.view(), nullptr, nullptr)));
  for (int32_t r = 0; r < w.size; ++r)
    for (std::size_t i = 0; i < k; ++i)
      BOOST_TEST(recv.values[static_cast<std::size_t>(r) * k + i] == r * 10 + static_cast<int64_t>(i));

  // In place: send is this rank's slot of recv.
  Tensor<float> buffer(k * static_cast<std::size_t>(w.size), -1.0f);
  for (std::size_t i = 0; i < k; ++i)
    buffer.values[static_cast<std::size_t>(w.rank) * k + i] = static_cast<float>(w.rank + 1);
  DLTensor slot = *buffer.slice(static_cast<std::size_t>(w.rank) * k, k);
  int64_t slot_shape = static_cast<int64_t>(k);
  slot.shape = &slot_shape;
  require_ok(outcome(w.t().all_gather(w.comm, &slot, buffer.view(), nullptr, nullptr)));
  for (int32_t r = 0; r < w.size; ++r)
    for (std::size_t i = 0; i < k; ++i)
      BOOST_TEST(buffer.values[static_cast<std::size_t>(r) * k + i] == static_cast<float>(r + 1));
}

BOOST_AUTO_TEST_CASE(all_gather_moves_16_byte_elements_as_opaque_units) {
  World& w = world();
  using Complex = std::array<double, 2>;
  Tensor<Complex> send(2);
  send.dtype = plx_dtype(kDLComplex, 128);
  send.values = {Complex{static_cast<double>(w.rank), 0.5}, Complex{-1.0, static_cast<double>(w.rank)}};
  Tensor<Complex> recv(2 * static_cast<std::size_t>(w.size));
  recv.dtype = send.dtype;
  require_ok(outcome(w.t().all_gather(w.comm, send.view(), recv.view(), nullptr, nullptr)));
  for (int32_t r = 0; r < w.size; ++r) {
    BOOST_TEST((recv.values[2 * static_cast<std::size_t>(r)] == Complex{static_cast<double>(r), 0.5}));
    BOOST_TEST((recv.values[2 * static_cast<std::size_t>(r) + 1] == Complex{-1.0, static_cast<double>(r)}));
  }
}

BOOST_AUTO_TEST_CASE(reduce_scatter_gives_rank_r_chunk_r) {
  World& w = world();
  const std::size_t k = 5;
  const std::size_t n = k * static_cast<std::size_t>(w.size);
  auto value = [](int32_t r, std::size_t i) {
    return static_cast<int32_t>((r + 1) * static_cast<int>(i) - r);
  };
  for (int32_t op : {PLX_REDUCE_SUM, PLX_REDUCE_AVG, PLX_REDUCE_MAX}) {
    Tensor<int32_t> send(n);
    for (std::size_t i = 0; i < n; ++i) send.values[i] = value(w.rank, i);
    Tensor<int32_t> recv(k, -1);
    require_ok(outcome(w.t().reduce_scatter(w.comm, send.view(), recv.view(), op, nullptr, nullptr)));
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t global = static_cast<std::size_t>(w.rank) * k + i;
      int32_t expected = value(0, global);
      for (int32_t r = 1; r < w.size; ++r)
        expected = op == PLX_REDUCE_MAX ? std::max(expected, value(r, global)) : expected + value(r, global);
      if (op == PLX_REDUCE_AVG) expected /= w.size;
      BOOST_TEST(recv.values[i] == expected, "op " << op << ", element " << i);
    }
  }
  Tensor<double> send(n, static_cast<double>(w.rank));
  Tensor<double> recv(k);
  require_ok(
      outcome(w.t().reduce_scatter(w.comm, send.view(), recv.view(), PLX_REDUCE_AVG, nullptr, nullptr)));
  for (double v : recv.values) BOOST_TEST(v == static_cast<double>(w.size - 1) / 2.0);
}

BOOST_AUTO_TEST_CASE(all_to_all_v_with_uneven_and_zero_counts_at_arbitrary_offsets) {
  World& w = world();
  const auto n = static_cast<std::size_t>(w.size);
  auto count = [](int32_t from, int32_t to) {
    return static_cast<int64_t>((from + 2 * to) % 3);
  };  // 0, 1 or 2
  auto value = [](int32_t from, int32_t to, int64_t i) {
    return static_cast<int32_t>(from * 1000 + to * 10 + i);
  };
  // Send: one gap element before each block. Receive: blocks in reverse order of source, two
  // spare elements at the end. Gaps must stay untouched.
  std::vector<int64_t> send_counts(n), send_offsets(n), recv_counts(n), recv_offsets(n);
  int64_t at = 0;
  for (int32_t to = 0; to < w.size; ++to) {
    at += 1;
    send_counts[static_cast<std::size_t>(to)] = count(w.rank, to);
    send_offsets[static_cast<std::size_t>(to)] = at;
    at += count(w.rank, to);
  }
  Tensor<int32_t> send(static_cast<std::size_t>(at), -1);
  for (int32_t to = 0; to < w.size; ++to)
    for (int64_t i = 0; i < count(w.rank, to); ++i)
      send.values[static_cast<std::size_t>(send_offsets[static_cast<std::size_t>(to)] + i)] =
          value(w.rank, to, i);
  at = 0;
  for (int32_t from = w.size - 1; from >= 0; --from) {
    recv_counts[static_cast<std::size_t>(from)] = count(from, w.rank);
    recv_offsets[static_cast<std::size_t>(from)] = at;
    at += count(from, w.rank);
  }
  Tensor<int32_t> recv(static_cast<std::size_t>(at + 2), -7);
  require_ok(
      outcome(w.t().all_to_all_v(w.comm, send.view(), send_counts.data(), send_offsets.data(), recv.view(),
                                 recv_counts.data(), recv_offsets.data(), nullptr, nullptr)));
  std::vector<int32_t> expected(recv.values.size(), -7);
  for (int32_t from = 0; from < w.size; ++from)
    for (int64_t i = 0; i < count(from, w.rank); ++i)
      expected[static_cast<std::size_t>(recv_offsets[static_cast<std::size_t>(from)] + i)] =
          value(from, w.rank, i);
  BOOST_TEST(recv.values == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(broadcast_from_the_last_rank_in_chunks) {
  World& w = world();
  const std::size_t n = 2500;  // three MPI calls of at most 1000 elements
  const int32_t root = w.size - 1;
  Tensor<int64_t> data(n, 0);
  if (w.rank == root)
    for (std::size_t i = 0; i < n; ++i) data.values[i] = static_cast<int64_t>(i) * 3 + 7;
  require_ok(outcome(w.t().broadcast(w.comm, data.view(), root, nullptr, nullptr)));
  for (std::size_t i = 0; i < n; ++i) BOOST_TEST_REQUIRE(data.values[i] == static_cast<int64_t>(i) * 3 + 7);
}

BOOST_AUTO_TEST_CASE(send_recv_around_a_ring_and_matched_by_tag) {
  World& w = world();
  const int32_t next = (w.rank + 1) % w.size;
  const int32_t prev = (w.rank + w.size - 1) % w.size;
  const std::size_t n = 2500;
  Tensor<float> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out.values[i] = static_cast<float>(w.rank * 10000 + static_cast<int>(i));
  Tensor<float> in(n, -1.0f);
  void* sent = nullptr;
  void* received = nullptr;
  require_ok(outcome(w.t().send(w.comm, out.view(), next, 3, nullptr, &sent)));
  require_ok(outcome(w.t().recv(w.comm, in.view(), prev, 3, nullptr, &received)));
  require_ok(outcome(w.t().wait(w.comm, received, 0)));
  require_ok(outcome(w.t().wait(w.comm, sent, 0)));
  for (std::size_t i = 0; i < n; ++i)
    BOOST_TEST_REQUIRE(in.values[i] == static_cast<float>(prev * 10000 + static_cast<int>(i)));

  // Two messages to the same peer, received in the other order: tags tell them apart.
  Tensor<int32_t> a(std::vector<int32_t>{w.rank, 1});
  Tensor<int32_t> b(std::vector<int32_t>{w.rank, 2});
  Tensor<int32_t> got_a(2, -1);
  Tensor<int32_t> got_b(2, -1);
  void* requests[4] = {};
  require_ok(outcome(w.t().send(w.comm, a.view(), next, 11, nullptr, &requests[0])));
  require_ok(outcome(w.t().send(w.comm, b.view(), next, 12, nullptr, &requests[1])));
  require_ok(outcome(w.t().recv(w.comm, got_b.view(), prev, 12, nullptr, &requests[2])));
  require_ok(outcome(w.t().recv(w.comm, got_a.view(), prev, 11, nullptr, &requests[3])));
  for (void* request : {requests[3], requests[2], requests[1], requests[0]})
    require_ok(outcome(w.t().wait(w.comm, request, 0)));
  BOOST_TEST((got_a.values == std::vector<int32_t>{prev, 1}));
  BOOST_TEST((got_b.values == std::vector<int32_t>{prev, 2}));
}

BOOST_AUTO_TEST_CASE(a_message_shorter_than_the_receiving_buffer_is_an_error) {
  // MPI itself accepts it silently; the backend compares the count received with the buffer.
  World& w = world();
  if (w.rank > 1) return;  // point-to-point between ranks 0 and 1 only
  if (w.rank == 0) {
    Tensor<int32_t> ten(10, 5);
    require_ok(outcome(w.t().send(w.comm, ten.view(), 1, 21, nullptr, nullptr)));
    return;
  }
  Tensor<int32_t> twelve(12, -1);
  const Outcome o = outcome(w.t().recv(w.comm, twelve.view(), 0, 21, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "recv from rank 0, tag 21 (world, " + std::to_string(w.size) +
                                     " ranks): received 10 elements into a buffer of 12 (int32): the sizes "
                                     "of send and recv must match"),
             o.message);
}

BOOST_AUTO_TEST_CASE(barrier_holds_every_rank_until_the_last_arrives) {
  World& w = world();
  require_ok(outcome(w.t().barrier(w.comm)));
  const auto start = std::chrono::steady_clock::now();
  if (w.rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  require_ok(outcome(w.t().barrier(w.comm)));
  const auto waited =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // Rank 0 arrives 300 ms late; the others left the first barrier at most a few ms apart (the
  // margin covers that and a 4-ranks-on-2-cores scheduler).
  BOOST_TEST(waited >= 200.0, "waited " << waited << " ms");
}

BOOST_AUTO_TEST_CASE(split_into_even_and_odd_ranks_ordered_by_key) {
  World& w = world();
  void* sub = nullptr;
  require_ok(outcome(w.t().split(w.comm, w.rank % 2, -w.rank, &sub)));  // key -rank: reversed order
  BOOST_TEST_REQUIRE(sub != nullptr);
  std::vector<int32_t> members;
  for (int32_t r = w.size - 1; r >= 0; --r)
    if (r % 2 == w.rank % 2) members.push_back(r);
  int32_t sub_rank = -1;
  int32_t sub_size = 0;
  require_ok(outcome(w.t().rank_size(sub, &sub_rank, &sub_size)));
  BOOST_TEST(sub_size == static_cast<int32_t>(members.size()));
  BOOST_TEST(members[static_cast<std::size_t>(sub_rank)] == w.rank);

  Tensor<int32_t> mine(std::vector<int32_t>{w.rank});
  Tensor<int32_t> all(members.size(), -1);
  require_ok(outcome(w.t().all_gather(sub, mine.view(), all.view(), nullptr, nullptr)));
  BOOST_TEST(all.values == members, boost::test_tools::per_element());
  Tensor<int64_t> sum(std::vector<int64_t>{w.rank});
  require_ok(outcome(w.t().all_reduce(sub, sum.view(), sum.view(), PLX_REDUCE_SUM, nullptr, nullptr)));
  int64_t expected = 0;
  for (int32_t r : members) expected += r;
  BOOST_TEST(sum.values[0] == expected);
  // The world still works while the sub-communicator exists, then the sub-communicator goes first.
  require_ok(outcome(w.t().barrier(w.comm)));
  require_ok(outcome(w.t().barrier(sub)));
  w.t().destroy(sub);
}

BOOST_AUTO_TEST_CASE(split_with_a_negative_color_gives_null_and_the_rest_a_group) {
  World& w = world();
  void* sub = reinterpret_cast<void*>(1);
  require_ok(outcome(w.t().split(w.comm, w.rank == 0 ? -1 : 7, w.rank, &sub)));
  if (w.rank == 0) {
    BOOST_TEST(sub == nullptr);
    return;
  }
  BOOST_TEST_REQUIRE(sub != nullptr);
  int32_t sub_rank = -1;
  int32_t sub_size = 0;
  require_ok(outcome(w.t().rank_size(sub, &sub_rank, &sub_size)));
  BOOST_TEST(sub_size == w.size - 1);
  BOOST_TEST(sub_rank == w.rank - 1);
  Tensor<double> v(std::vector<double>{1.0, static_cast<double>(w.rank)});
  require_ok(outcome(w.t().all_reduce(sub, v.view(), v.view(), PLX_REDUCE_SUM, nullptr, nullptr)));
  BOOST_TEST(v.values[0] == static_cast<double>(w.size - 1));
  BOOST_TEST(v.values[1] == static_cast<double>(w.size * (w.size - 1) / 2));
  w.t().destroy(sub);
}

BOOST_AUTO_TEST_CASE(requests_in_flight_together_are_waited_in_any_order) {
  World& w = world();
  std::vector<Tensor<int32_t>> buffers;
  for (int32_t k = 0; k < 3; ++k) buffers.emplace_back(std::vector<int32_t>(100, (k + 1) * (w.rank + 1)));
  void* requests[3] = {};
  for (int32_t k = 0; k < 3; ++k) {
    DLTensor* view = buffers[static_cast<std::size_t>(k)].view();
    require_ok(outcome(w.t().all_reduce(w.comm, view, view, PLX_REDUCE_SUM, nullptr, &requests[k])));
    BOOST_TEST_REQUIRE(requests[k] != nullptr);
  }
  for (int32_t k : {2, 0, 1}) require_ok(outcome(w.t().wait(w.comm, requests[k], 0)));
  const int32_t ranks_sum = w.size * (w.size + 1) / 2;
  for (int32_t k = 0; k < 3; ++k)
    for (int32_t v : buffers[static_cast<std::size_t>(k)].values)
      BOOST_TEST_REQUIRE(v == (k + 1) * ranks_sum);
}

BOOST_AUTO_TEST_CASE(an_all_reduce_progresses_while_the_caller_computes) {
  // The caller starts an all-reduce and then only asks `test` (which makes no MPI call): the
  // communicator's worker thread must carry the whole operation, which is what lets a scheduler
  // overlap communication with compute.
  World& w = world();
  Tensor<float> data(std::size_t{1} << 20, static_cast<float>(w.rank + 1));
  void* request = nullptr;
  require_ok(outcome(w.t().all_reduce(w.comm, data.view(), data.view(), PLX_REDUCE_SUM, nullptr, &request)));
  int32_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  while (done == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(15)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // "compute"
    require_ok(outcome(w.t().test(w.comm, request, &done)));
  }
  BOOST_TEST(done == 1, "the all-reduce did not complete before wait was called");
  require_ok(outcome(w.t().wait(w.comm, request, 0)));
  BOOST_TEST(data.values.front() == static_cast<float>(w.size * (w.size + 1) / 2));
  BOOST_TEST(data.values.back() == static_cast<float>(w.size * (w.size + 1) / 2));
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_refused_naming_the_operation_and_what_is_wrong) {
  World& w = world();
  const std::string ranks = "world, " + std::to_string(w.size) + " ranks";
  Tensor<float> eight(8);
  Tensor<float> six(6);
  Outcome o = outcome(w.t().all_reduce(w.comm, eight.view(), six.view(), PLX_REDUCE_SUM, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "all_reduce (" + ranks + "): send has 8 elements but recv has 6 (float32"),
             o.message);

  Tensor<double> eight_f64(8);
  o = outcome(w.t().all_reduce(w.comm, eight.view(), eight_f64.view(), PLX_REDUCE_SUM, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "send is float32 but recv is float64"), o.message);

  o = outcome(w.t().all_reduce(w.comm, eight.view(), eight.view(), 7, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "op 7 is not a PLX_REDUCE_* value"), o.message);

  Tensor<uint16_t> half(4);
  half.dtype = plx_dtype(kDLFloat, 16);
  o = outcome(w.t().all_reduce(w.comm, half.view(), half.view(), PLX_REDUCE_SUM, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_UNSUPPORTED);
  BOOST_TEST(contains(o.message, "cannot reduce float16"), o.message);

  o = outcome(w.t().all_gather(w.comm, eight.view(), eight.view(), nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "recv has 8 elements but must hold " + std::to_string(w.size) + " x send"),
             o.message);

  o = outcome(w.t().broadcast(w.comm, eight.view(), w.size, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "broadcast (" + ranks + "): root " + std::to_string(w.size) +
                                     " is not a rank of this communicator (ranks 0.." +
                                     std::to_string(w.size - 1) + ")"),
             o.message);

  o = outcome(w.t().send(w.comm, eight.view(), w.size + 2, 0, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "send to rank " + std::to_string(w.size + 2) + " (" + ranks + "): peer " +
                                     std::to_string(w.size + 2) + " is not a rank"),
             o.message);
  o = outcome(w.t().recv(w.comm, eight.view(), w.rank, 0, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "is this rank itself"), o.message);
  o = outcome(w.t().send(w.comm, eight.view(), (w.rank + 1) % w.size, -1, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "tag -1 is outside 0.."), o.message);

  std::vector<int64_t> counts(static_cast<std::size_t>(w.size), 1);
  std::vector<int64_t> offsets(static_cast<std::size_t>(w.size), 0);
  offsets.back() = 8;  // 8 + 1 > 8 elements
  o = outcome(
      w.t().all_to_all_v(w.comm, eight.view(), counts.data(), offsets.data(), six.view(), counts.data(),
                         std::vector<int64_t>(static_cast<std::size_t>(w.size), 0).data(), nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "send_offsets[" + std::to_string(w.size - 1) + "] + send_counts[" +
                                     std::to_string(w.size - 1) + "] = 8 + 1 exceeds send's 8 elements"),
             o.message);

  // Counts beyond MPI's int are refused before any data is touched (the views only claim it).
  DLTensor huge_send = *eight.view();
  int64_t huge = 3'000'000'000;
  huge_send.shape = &huge;
  DLTensor huge_recv = *six.view();
  int64_t huge_all = huge * w.size;
  huge_recv.shape = &huge_all;
  o = outcome(w.t().all_gather(w.comm, &huge_send, &huge_recv, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "3000000000 elements per rank exceed MPI's count limit (2147483647)"),
             o.message);

  DLTensor on_gpu = *eight.view();
  on_gpu.device = DLDevice{kDLCUDA, 0};
  o = outcome(w.t().all_reduce(w.comm, &on_gpu, &on_gpu, PLX_REDUCE_SUM, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_UNSUPPORTED);
  BOOST_TEST(contains(o.message, "send is on cuda:0; the mpi backend moves CPU tensors"), o.message);

  Tensor<float> matrix(8);
  DLTensor strided = *matrix.view();
  int64_t shape[2] = {4, 2};
  int64_t strides[2] = {1, 4};  // column-major
  strided.ndim = 2;
  strided.shape = shape;
  strided.strides = strides;
  o = outcome(w.t().all_reduce(w.comm, &strided, &strided, PLX_REDUCE_SUM, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "is not contiguous"), o.message);

  // Refused before anything was sent: the ranks are still in step.
  require_ok(outcome(w.t().barrier(w.comm)));
  Tensor<int32_t> one(std::vector<int32_t>{1});
  require_ok(outcome(w.t().all_reduce(w.comm, one.view(), one.view(), PLX_REDUCE_SUM, nullptr, nullptr)));
  BOOST_TEST(one.values[0] == w.size);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- a plain process: MPI initializes itself as a singleton ----------------------------------

BOOST_AUTO_TEST_SUITE(singleton, *utf::precondition(in_singleton))

BOOST_AUTO_TEST_CASE(a_world_of_one_and_the_refusals_of_launcher_numbers_mpi_does_not_see) {
  Backend backend("comm_mpi", "mpi");
  void* world = nullptr;
  auto args = init_args(-1, -1, 5000);
  require_ok(outcome(backend->init(&args, &world)));
  int32_t rank = -1;
  int32_t size = 0;
  require_ok(outcome(backend->rank_size(world, &rank, &size)));
  BOOST_TEST(rank == 0);
  BOOST_TEST(size == 1);
  Tensor<float> v(std::vector<float>{2.5f, -1.0f});
  require_ok(outcome(backend->all_reduce(world, v.view(), v.view(), PLX_REDUCE_AVG, nullptr, nullptr)));
  BOOST_TEST((v.values == std::vector<float>{2.5f, -1.0f}));

  // While MPI runs (the world holds it), a launcher that counts more ranks is refused.
  void* other = reinterpret_cast<void*>(1);
  args = init_args(-1, 2, 5000);
  Outcome o = outcome(backend->init(&args, &other));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(other == nullptr);
  BOOST_TEST(contains(o.message,
                      "WORLD_SIZE=2 from the launcher but MPI sees 1 process: comm_mpi needs the ranks "
                      "started by mpirun or srun"),
             o.message);
  args = init_args(3, -1, 5000);
  o = outcome(backend->init(&args, &other));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "RANK=3 from the launcher but MPI says this process is rank 0 of 1"),
             o.message);

  backend->destroy(world);  // the last communicator: MPI_Finalize
  args = init_args(-1, -1, 5000);
  o = outcome(backend->init(&args, &other));
  BOOST_TEST(o.status == PLX_ERR_UNSUPPORTED);
  BOOST_TEST(contains(o.message, "MPI was already finalized in this process"), o.message);
}

BOOST_AUTO_TEST_SUITE_END()
