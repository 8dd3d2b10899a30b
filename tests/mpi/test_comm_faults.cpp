// Faults under the mpi comm backend: a rank that is stopped (SIGSTOP, in the world and in a
// sub-communicator), killed (SIGKILL, with and without mpirun ending the job), late, or never
// sends what its peer waits for. The waiting ranks must get PLX_ERR_TIMEOUT within the timeout
// plus the probe's grace period, with a message naming the rank at fault and what it is doing;
// abort must then end the whole job with a non-zero status. Nothing may hang.
//
// ctest runs this executable without mpirun: each launcher case runs one scenario as
// `timeout 60 mpirun -np N <itself> --run_test=ranks/<scenario>` and checks the job's exit
// status, its duration and the lines the ranks print ("FAULT rank=... message=...").
#define BOOST_TEST_MODULE mpi_comm_faults
#include <boost/test/unit_test.hpp>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <thread>

#include "comm_harness.hpp"
#include "skip_module.hpp"

namespace utf = boost::unit_test;
using namespace plexus::test;

PLEXUS_SKIP_MODULE_UNLESS(std::filesystem::exists(plugin_file("comm_mpi")) &&
                              (under_mpirun() || have_mpirun()),
                          "needs the comm_mpi plugin (a build with MPI) and mpirun")

namespace {

using Millis = std::chrono::duration<double, std::milli>;

utf::assertion_result in_ranks(utf::test_unit_id) {
  return utf::assertion_result(under_mpirun());
}
utf::assertion_result in_launcher(utf::test_unit_id) {
  return utf::assertion_result(!under_mpirun());
}

// ---- the rank side ----

struct World {
  Backend backend{"comm_mpi", "mpi"};
  void* comm = nullptr;
  int32_t rank = -1;
  int32_t size = 0;
  explicit World(uint32_t timeout_ms) {
    const auto args = init_args(-1, -1, timeout_ms);
    const Outcome o = outcome(backend->init(&args, &comm));
    if (!o.ok()) throw std::runtime_error("init failed: " + o.message);
    backend->rank_size(comm, &rank, &size);
  }
  const plx_comm_v1& t() const { return *backend; }
};

int faulty_rank() {
  const char* text = std::getenv("PLEXUS_FAULT_RANK");
  return text != nullptr ? std::atoi(text) : 1;
}

// One line per waiting rank for the launcher to check, then the job is torn down as the host
// does after a communication error.
[[noreturn]] void report_and_abort(World& w, const Outcome& o, double elapsed_ms) {
  std::printf("FAULT rank=%d status=%d elapsed_ms=%.0f message=%s\n", w.rank, o.status, elapsed_ms,
              o.message.c_str());
  std::fflush(stdout);
  w.t().abort(w.comm, o.ok() ? "the fault was not detected" : o.message.c_str());
  std::_Exit(3);  // abort does not return; if it did, the job still fails
}

// Every rank but `faulty` runs an all-reduce (collective #2, after a barrier) and reports.
template <class Fault>
void all_reduce_with_a_faulty_rank(uint32_t timeout_ms, Fault fault) {
  World w(timeout_ms);
  BOOST_TEST_REQUIRE(outcome(w.t().barrier(w.comm)).ok());  // collective #1: everyone is up
  if (w.rank == faulty_rank()) {
    fault();
    // Resumed by the job's teardown (mpirun continues stopped ranks to end them): take no part.
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::_Exit(4);
  }
  Tensor<float> data(1024, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  const Outcome o =
      outcome(w.t().all_reduce(w.comm, data.view(), data.view(), PLX_REDUCE_SUM, nullptr, nullptr));
  report_and_abort(w, o, Millis(std::chrono::steady_clock::now() - start).count());
}

// ---- the launcher side ----

struct Fault {
  int rank = -1;
  int status = -1;
  double elapsed_ms = -1;
  std::string message;
};
std::vector<Fault> faults_in(const std::string& output) {
  static const std::regex line(R"(FAULT rank=(\d+) status=(\d+) elapsed_ms=(\d+) message=([^\n]*))");
  std::vector<Fault> faults;
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
    faults.push_back(Fault{std::stoi((*it)[1]), std::stoi((*it)[2]), std::stod((*it)[3]), (*it)[4]});
  return faults;
}

// The backend's grace period for probes: min(2 s, max(200 ms, timeout / 2)).
double grace_ms(double timeout_ms) {
  return std::min(2000.0, std::max(200.0, timeout_ms / 2));
}
// Scheduling slack on 2 cores shared by up to 4 ranks and their worker threads.
constexpr double kSlackMs = 1500;

}  // namespace

// ---- the launcher (ctest) ------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(launcher, *utf::precondition(in_launcher))

BOOST_AUTO_TEST_CASE(a_stopped_rank_is_named_after_the_timeout_and_abort_ends_the_job) {
  const Job job = mpirun(2, "--run_test=ranks/stopped_rank", "PLEXUS_FAULT_RANK=1");
  BOOST_TEST_INFO("job (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status != 0);
  BOOST_TEST(job.seconds < 3.0 + grace_ms(3000) / 1000 + 10.0);
  const auto faults = faults_in(job.output);
  BOOST_TEST_REQUIRE(faults.size() == 1u);
  BOOST_TEST(faults[0].rank == 0);
  BOOST_TEST(faults[0].status == PLX_ERR_TIMEOUT);
  BOOST_TEST(faults[0].elapsed_ms >= 3000);
  BOOST_TEST(faults[0].elapsed_ms <= 3000 + grace_ms(3000) + kSlackMs);
  BOOST_TEST(
      contains(faults[0].message,
               "all_reduce #2 (world, 2 ranks) did not complete within 3000 ms: rank 1 did not respond"));
  BOOST_TEST(contains(job.output, "aborts the job"));
}

BOOST_AUTO_TEST_CASE(of_four_ranks_exactly_the_stopped_one_is_named) {
  const Job job = mpirun(4, "--run_test=ranks/stopped_rank", "PLEXUS_FAULT_RANK=2");
  BOOST_TEST_INFO("job (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status != 0);
  BOOST_TEST(job.seconds < 3.0 + grace_ms(3000) / 1000 + 10.0);
  const auto faults = faults_in(job.output);
  // Each waiting rank reports unless the first abort ended it first: at least one line.
  BOOST_TEST_REQUIRE(!faults.empty());
  for (const Fault& f : faults) {
    BOOST_TEST(f.rank != 2);
    BOOST_TEST(f.status == PLX_ERR_TIMEOUT);
    BOOST_TEST(f.elapsed_ms <= 3000 + grace_ms(3000) + kSlackMs);
    BOOST_TEST(contains(f.message,
                        "all_reduce #2 (world, 4 ranks) did not complete within 3000 ms: "
                        "rank 2 did not respond (stopped, dead or unreachable)"),
               f.message);
    for (const char* other : {"rank 0 did", "rank 1 did", "rank 3 did", "has not reached"})
      BOOST_TEST(!contains(f.message, other), f.message);
  }
}

BOOST_AUTO_TEST_CASE(in_a_sub_communicator_the_stopped_rank_is_named_in_both_numberings) {
  const Job job = mpirun(4, "--run_test=ranks/stopped_rank_in_a_group");
  BOOST_TEST_INFO("job (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status != 0);
  BOOST_TEST(job.seconds < 3.0 + grace_ms(3000) / 1000 + 10.0);
  const auto faults = faults_in(job.output);
  BOOST_TEST_REQUIRE(faults.size() == 1u);  // world rank 1, the other odd rank
  BOOST_TEST(faults[0].rank == 1);
  BOOST_TEST(faults[0].status == PLX_ERR_TIMEOUT);
  BOOST_TEST(faults[0].elapsed_ms <= 3000 + grace_ms(3000) + kSlackMs);
  BOOST_TEST(contains(faults[0].message,
                      "all_reduce #2 (world/1, 2 ranks) did not complete within 3000 ms: "
                      "rank 1 (world rank 3) did not respond"));
}

BOOST_AUTO_TEST_CASE(a_killed_rank_ends_the_job_in_bounded_time_and_is_named) {
  const Job job = mpirun(2, "--run_test=ranks/killed_rank", "PLEXUS_FAULT_RANK=1");
  BOOST_TEST_INFO("job (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status != 0);
  BOOST_TEST(job.seconds < 3.0 + grace_ms(3000) / 1000 + 10.0);
  // Either mpirun saw rank 1 die and ended the job, or rank 0 timed out and named it.
  static const std::regex by_mpirun(R"(rank 1 with PID \d+ on node \S+ exited on signal 9)");
  const bool named =
      contains(job.output, "rank 1 did not respond") || std::regex_search(job.output, by_mpirun);
  BOOST_TEST(named);
}

BOOST_AUTO_TEST_CASE(when_mpirun_lets_the_job_run_on_the_survivor_names_the_killed_rank) {
  // Open MPI's mpirun usually ends the job itself when a rank dies (above). Told not to, the
  // job depends on the backend's own timeout: the dead rank never answers the probes.
  const Job job = mpirun(2, "--run_test=ranks/killed_rank", "PLEXUS_FAULT_RANK=1",
                         "--mca orte_abort_on_non_zero_status 0");
  BOOST_TEST_INFO("job (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status != 0);
  BOOST_TEST(job.seconds < 3.0 + grace_ms(3000) / 1000 + 10.0);
  const auto faults = faults_in(job.output);
  BOOST_TEST_REQUIRE(faults.size() == 1u);
  BOOST_TEST(faults[0].status == PLX_ERR_TIMEOUT);
  BOOST_TEST(faults[0].elapsed_ms <= 3000 + grace_ms(3000) + kSlackMs);
  BOOST_TEST(contains(faults[0].message,
                      "all_reduce #2 (world, 2 ranks) did not complete within 3000 ms: "
                      "rank 1 did not respond"));
}

BOOST_AUTO_TEST_CASE(a_late_rank_is_named_with_the_collective_it_is_at) {
  const Job job = mpirun(2, "--run_test=ranks/late_rank", "PLEXUS_FAULT_RANK=1");
  BOOST_TEST_INFO("job (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status != 0);
  const auto faults = faults_in(job.output);
  BOOST_TEST_REQUIRE(faults.size() == 1u);
  BOOST_TEST(faults[0].status == PLX_ERR_TIMEOUT);
  BOOST_TEST(faults[0].elapsed_ms <= 3000 + grace_ms(3000) + kSlackMs);
  BOOST_TEST(contains(faults[0].message,
                      "all_reduce #2 (world, 2 ranks) did not complete within 3000 ms: "
                      "rank 1 has not reached it (it is at collective #1)"));
}

BOOST_AUTO_TEST_CASE(a_receive_whose_sender_never_sends_times_out_on_the_wait_deadline) {
  const Job job = mpirun(2, "--run_test=ranks/silent_sender");
  BOOST_TEST_INFO("job (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status != 0);
  const auto faults = faults_in(job.output);
  BOOST_TEST_REQUIRE(faults.size() == 1u);
  BOOST_TEST(faults[0].status == PLX_ERR_TIMEOUT);
  // wait's own 1000 ms, not the communicator's 30 s.
  BOOST_TEST(faults[0].elapsed_ms >= 1000);
  BOOST_TEST(faults[0].elapsed_ms <= 1000 + grace_ms(1000) + kSlackMs);
  BOOST_TEST(contains(faults[0].message,
                      "recv from rank 1, tag 5 (world, 2 ranks) did not complete within 1000 ms: "
                      "rank 1 is alive but has not sent the matching message (tag 5)"));
}

BOOST_AUTO_TEST_SUITE_END()

// ---- one rank under mpirun -----------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(ranks, *utf::precondition(in_ranks))

BOOST_AUTO_TEST_CASE(stopped_rank) {
  all_reduce_with_a_faulty_rank(3000, [] { ::raise(SIGSTOP); });
}

BOOST_AUTO_TEST_CASE(killed_rank) {
  all_reduce_with_a_faulty_rank(3000, [] { ::raise(SIGKILL); });
}

BOOST_AUTO_TEST_CASE(late_rank) {
  // Alive (its worker answers probes) but busy far beyond the others' timeout (the faulty rank
  // sleeps); their abort ends it.
  all_reduce_with_a_faulty_rank(3000, [] {});
}

BOOST_AUTO_TEST_CASE(stopped_rank_in_a_group) {
  // 4 ranks split into even and odd; world rank 3 (rank 1 of the odd group) stops; the even
  // ranks wait to be ended by the abort.
  World w(3000);
  void* group = nullptr;
  BOOST_TEST_REQUIRE(outcome(w.t().split(w.comm, w.rank % 2, w.rank, &group)).ok());
  if (w.rank % 2 == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::_Exit(4);
  }
  BOOST_TEST_REQUIRE(outcome(w.t().barrier(group)).ok());  // collective #1 of the group
  if (w.rank == 3) {
    ::raise(SIGSTOP);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::_Exit(4);
  }
  Tensor<float> data(16, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  const Outcome o =
      outcome(w.t().all_reduce(group, data.view(), data.view(), PLX_REDUCE_SUM, nullptr, nullptr));
  report_and_abort(w, o, Millis(std::chrono::steady_clock::now() - start).count());
}

BOOST_AUTO_TEST_CASE(silent_sender) {
  World w(30000);
  BOOST_TEST_REQUIRE(outcome(w.t().barrier(w.comm)).ok());
  if (w.rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(20));  // never sends; ended by rank 0's abort
    return;
  }
  Tensor<int32_t> data(16);
  void* request = nullptr;
  BOOST_TEST_REQUIRE(outcome(w.t().recv(w.comm, data.view(), 1, 5, nullptr, &request)).ok());
  const auto start = std::chrono::steady_clock::now();
  const Outcome o = outcome(w.t().wait(w.comm, request, 1000));
  report_and_abort(w, o, Millis(std::chrono::steady_clock::now() - start).count());
}

BOOST_AUTO_TEST_SUITE_END()
