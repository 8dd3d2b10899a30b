// No data-parallel job hangs forever: when one rank dies (kill -9) or stops answering (SIGSTOP,
// a stand-in for a rank stuck in a driver or a deadlocked kernel), the others end the job with
// a non-zero exit within distributed.timeout_s, and the output names the rank. Real processes,
// real signals, sent from outside while the job trains.
#define BOOST_TEST_MODULE dp_faults
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "mpi_launch.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "train_corpus.hpp"

using plexus::test::BackgroundJob;
using plexus::test::mpirun_command;
using Corpus = plexus::test::TrainCorpus;

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the comm_mpi plugin (a build with MPI)")

namespace {

constexpr int kTimeoutSeconds = 5;
// Beyond the timeout: the liveness probe's grace period, MPI_Abort tearing the job down, and a
// loaded 2-core CI machine.
constexpr double kSlackSeconds = 15;

// Steps recorded so far in a metrics file.
int steps_done(const std::filesystem::path& metrics) {
  std::ifstream in(metrics);
  int steps = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"event\":\"step\"") != std::string::npos) ++steps;
  return steps;
}

struct FaultRun {
  Corpus corpus;
  std::filesystem::path out = corpus.dir.path() / "run";
  BackgroundJob job{
      mpirun_command(2, 120) + corpus.train(out.string(),
                                            "--set train.steps=1000000 --set train.microbatches=1"
                                            " --set distributed.timeout_s=" +
                                                std::to_string(kTimeoutSeconds)),
      corpus.dir.path() / "job.log"};

  // Waits until the job trains, then returns rank 1's pid.
  pid_t rank_one_when_training() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (steps_done(out / "metrics.jsonl") < 3) {
      BOOST_TEST_REQUIRE(!job.wait_for(std::chrono::milliseconds(0)).has_value(), job.output());
      BOOST_TEST_REQUIRE((std::chrono::steady_clock::now() < deadline),
                         "the job did not start training: " << job.output());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const pid_t pid = plexus::test::find_rank(job.pid(), 1);
    BOOST_TEST_REQUIRE(pid > 0);
    return pid;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_killed_rank_ends_the_job_naming_it) {
  FaultRun run;
  const pid_t victim = run.rank_one_when_training();
  const auto signalled = std::chrono::steady_clock::now();
  BOOST_TEST_REQUIRE(::kill(victim, SIGKILL) == 0);
  const auto status = run.job.wait_for(std::chrono::duration<double>(kTimeoutSeconds + kSlackSeconds));
  BOOST_TEST_REQUIRE(status.has_value(), "the job still runs " << kTimeoutSeconds + kSlackSeconds
                                                               << " s after rank 1 was killed:\n"
                                                               << run.job.output());
  const std::string output = run.job.output();
  BOOST_TEST(*status != 0, output);
  BOOST_TEST(output.find("rank 1") != std::string::npos, output);
  BOOST_TEST_MESSAGE("job ended " << run.job.seconds_since(signalled) << " s after kill -9 of rank 1");
}

BOOST_AUTO_TEST_CASE(a_stopped_rank_ends_the_job_within_the_timeout_naming_it) {
  FaultRun run;
  const pid_t victim = run.rank_one_when_training();
  const auto signalled = std::chrono::steady_clock::now();
  BOOST_TEST_REQUIRE(::kill(victim, SIGSTOP) == 0);
  const auto status = run.job.wait_for(std::chrono::duration<double>(kTimeoutSeconds + kSlackSeconds));
  ::kill(victim, SIGKILL);  // whatever happened, leave nothing stopped behind
  BOOST_TEST_REQUIRE(status.has_value(), "the job still runs " << kTimeoutSeconds + kSlackSeconds
                                                               << " s after rank 1 stopped:\n"
                                                               << run.job.output());
  const std::string output = run.job.output();
  BOOST_TEST(*status != 0, output);
  // Rank 0's own account, from the comm backend's timeout: the silent rank by number.
  BOOST_TEST(output.find("plexus-train: error on rank 0") != std::string::npos, output);
  BOOST_TEST(output.find("rank 1") != std::string::npos, output);
  const double seconds = run.job.seconds_since(signalled);
  BOOST_TEST(seconds >= kTimeoutSeconds * 0.5);  // it waited for the timeout, not less
  BOOST_TEST_MESSAGE("job ended " << seconds << " s after rank 1 was stopped");
}
