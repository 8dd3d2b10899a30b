// The local comm backend (plugins/comm_local): a world of one process, loaded through the plugin
// host. Every collective is a copy from send to recv (nothing in place), the requests are
// complete when returned, there is no peer for send/recv, split gives a one-rank communicator
// or NULL, a job of more ranks is refused at init naming the backends that run it, and abort
// ends the process with a non-zero status. No mpirun.
#define BOOST_TEST_MODULE mpi_comm_local
#include <boost/test/unit_test.hpp>

#include "comm_harness.hpp"

namespace utf = boost::unit_test;
using namespace plexus::test;

namespace {

struct Local {
  Backend backend{"comm_local", "local"};
  void* world = nullptr;
  Local() {
    const auto args = init_args(-1, -1, 0);
    const Outcome o = outcome(backend->init(&args, &world));
    BOOST_TEST_REQUIRE(o.ok(), o.message);
  }
  ~Local() { backend->destroy(world); }
  const plx_comm_v1& t() const { return *backend; }
};

void require_ok(const Outcome& o) {
  BOOST_TEST_REQUIRE(o.ok(), o.message);
}

utf::assertion_result in_abort_child(utf::test_unit_id) {
  return utf::assertion_result(std::getenv("PLEXUS_TEST_LOCAL_ABORT") != nullptr);
}
utf::assertion_result not_in_abort_child(utf::test_unit_id) {
  return utf::assertion_result(std::getenv("PLEXUS_TEST_LOCAL_ABORT") == nullptr);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(local, *utf::precondition(not_in_abort_child))

BOOST_AUTO_TEST_CASE(a_world_of_one_rank_on_the_cpu) {
  Local l;
  BOOST_TEST(l.t().device_mask == PLX_DEVICE_BIT(kDLCPU));
  int32_t rank = -1;
  int32_t size = 0;
  require_ok(outcome(l.t().rank_size(l.world, &rank, &size)));
  BOOST_TEST(rank == 0);
  BOOST_TEST(size == 1);
  // The launcher's own numbers for a job of one are accepted too.
  void* world = nullptr;
  const auto args = init_args(0, 1, 1000);
  require_ok(outcome(l.t().init(&args, &world)));
  l.t().destroy(world);
}

BOOST_AUTO_TEST_CASE(a_job_of_more_ranks_is_refused_naming_the_backends_that_run_it) {
  Backend backend("comm_local", "local");
  void* world = reinterpret_cast<void*>(1);
  auto args = init_args(-1, 4, 0);
  Outcome o = outcome(backend->init(&args, &world));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(world == nullptr);
  BOOST_TEST(contains(o.message, "the local backend runs one process; this job has 4 ranks: use mpi or nccl"),
             o.message);
  args = init_args(2, -1, 0);
  o = outcome(backend->init(&args, &world));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "RANK=2"), o.message);
  args = init_args(-1, -1, 0);
  args.device = DLDevice{kDLCUDA, 0};
  o = outcome(backend->init(&args, &world));
  BOOST_TEST(o.status == PLX_ERR_UNSUPPORTED);
}

BOOST_AUTO_TEST_CASE(every_collective_is_a_copy_and_in_place_changes_nothing) {
  Local l;
  const std::vector<float> values{1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  for (int32_t op : {PLX_REDUCE_SUM, PLX_REDUCE_AVG, PLX_REDUCE_MAX, PLX_REDUCE_MIN}) {
    Tensor<float> send(values);
    Tensor<float> recv(values.size(), -9.0f);
    require_ok(outcome(l.t().all_reduce(l.world, send.view(), recv.view(), op, nullptr, nullptr)));
    BOOST_TEST(recv.values == values, boost::test_tools::per_element());
    require_ok(outcome(l.t().all_reduce(l.world, send.view(), send.view(), op, nullptr, nullptr)));
    BOOST_TEST(send.values == values, boost::test_tools::per_element());
    Tensor<float> scattered(values.size(), -9.0f);
    require_ok(outcome(l.t().reduce_scatter(l.world, send.view(), scattered.view(), op, nullptr, nullptr)));
    BOOST_TEST(scattered.values == values, boost::test_tools::per_element());
  }
  Tensor<int64_t> send(std::vector<int64_t>{4, 5, 6});
  Tensor<int64_t> gathered(3, -1);
  require_ok(outcome(l.t().all_gather(l.world, send.view(), gathered.view(), nullptr, nullptr)));
  BOOST_TEST((gathered.values == std::vector<int64_t>{4, 5, 6}));
  require_ok(outcome(l.t().broadcast(l.world, send.view(), 0, nullptr, nullptr)));
  BOOST_TEST((send.values == std::vector<int64_t>{4, 5, 6}));
  require_ok(outcome(l.t().barrier(l.world)));

  // all_to_all_v: rank 0's block to itself, from one offset to another.
  Tensor<int32_t> from(std::vector<int32_t>{-1, 10, 11, 12, -1});
  Tensor<int32_t> to(6, 0);
  const int64_t count = 3;
  const int64_t send_offset = 1;
  const int64_t recv_offset = 2;
  require_ok(outcome(l.t().all_to_all_v(l.world, from.view(), &count, &send_offset, to.view(), &count,
                                        &recv_offset, nullptr, nullptr)));
  BOOST_TEST((to.values == std::vector<int32_t>{0, 0, 10, 11, 12, 0}));
}

BOOST_AUTO_TEST_CASE(requests_are_complete_when_returned) {
  Local l;
  Tensor<double> x(std::vector<double>{1.0, 2.0});
  Tensor<double> y(2);
  void* request = nullptr;
  require_ok(outcome(l.t().all_reduce(l.world, x.view(), y.view(), PLX_REDUCE_SUM, nullptr, &request)));
  BOOST_TEST_REQUIRE(request != nullptr);
  int32_t done = 0;
  require_ok(outcome(l.t().test(l.world, request, &done)));
  BOOST_TEST(done == 1);
  require_ok(outcome(l.t().wait(l.world, request, 0)));
  BOOST_TEST((y.values == std::vector<double>{1.0, 2.0}));
}

BOOST_AUTO_TEST_CASE(split_gives_one_rank_or_null) {
  Local l;
  void* none = reinterpret_cast<void*>(1);
  require_ok(outcome(l.t().split(l.world, -1, 0, &none)));
  BOOST_TEST(none == nullptr);
  void* sub = nullptr;
  require_ok(outcome(l.t().split(l.world, 3, 0, &sub)));
  BOOST_TEST_REQUIRE(sub != nullptr);
  int32_t rank = -1;
  int32_t size = 0;
  require_ok(outcome(l.t().rank_size(sub, &rank, &size)));
  BOOST_TEST(rank == 0);
  BOOST_TEST(size == 1);
  Tensor<int32_t> v(std::vector<int32_t>{8, 9});
  Tensor<int32_t> w(2);
  require_ok(outcome(l.t().all_reduce(sub, v.view(), w.view(), PLX_REDUCE_SUM, nullptr, nullptr)));
  BOOST_TEST((w.values == std::vector<int32_t>{8, 9}));
  Tensor<float> bad(3);
  const Outcome o = outcome(l.t().all_reduce(sub, v.view(), bad.view(), PLX_REDUCE_SUM, nullptr, nullptr));
  BOOST_TEST(contains(o.message, "all_reduce (world/3, 1 rank)"), o.message);
  l.t().destroy(sub);
}

BOOST_AUTO_TEST_CASE(there_is_no_peer_and_bad_arguments_are_named) {
  Local l;
  Tensor<float> four(4);
  Tensor<float> three(3);
  Outcome o = outcome(l.t().send(l.world, four.view(), 0, 0, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "send to rank 0 (world, 1 rank): peer 0 is this rank itself"), o.message);
  o = outcome(l.t().recv(l.world, four.view(), 2, 0, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(
      contains(o.message, "recv from rank 2 (world, 1 rank): peer 2 is not a rank of this communicator"),
      o.message);
  o = outcome(l.t().all_reduce(l.world, four.view(), three.view(), PLX_REDUCE_SUM, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "all_reduce (world, 1 rank): send has 4 elements but recv has 3 (float32"),
             o.message);
  o = outcome(l.t().all_reduce(l.world, four.view(), four.view(), 9, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "op 9"), o.message);
  o = outcome(l.t().broadcast(l.world, four.view(), 1, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "root 1 is not a rank of this communicator"), o.message);
  const int64_t count = 4;
  const int64_t other = 3;
  const int64_t zero = 0;
  o = outcome(
      l.t().all_to_all_v(l.world, four.view(), &count, &zero, four.view(), &other, &zero, nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(contains(o.message, "send_counts[0] = 4 but recv_counts[0] = 3"), o.message);
  DLTensor on_gpu = *four.view();
  on_gpu.device = DLDevice{kDLCUDA, 0};
  o = outcome(l.t().all_gather(l.world, &on_gpu, four.view(), nullptr, nullptr));
  BOOST_TEST(o.status == PLX_ERR_UNSUPPORTED);
}

BOOST_AUTO_TEST_CASE(abort_ends_the_process_with_a_non_zero_status) {
  const auto run =
      run_process("env PLEXUS_TEST_LOCAL_ABORT=1 " + quote(self_executable()) + " --run_test=abort_child");
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(contains(run.output, "local: aborting: the reason given"), run.output);
  BOOST_TEST(!contains(run.output, "returned from abort"), run.output);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(abort_child, *utf::precondition(in_abort_child))

BOOST_AUTO_TEST_CASE(aborts) {
  Local l;
  l.t().abort(l.world, "the reason given");
  std::printf("returned from abort\n");
}

BOOST_AUTO_TEST_SUITE_END()
