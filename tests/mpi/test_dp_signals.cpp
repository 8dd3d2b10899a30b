// A data-parallel job stopped by SIGTERM: every rank stops after the same step, one checkpoint
// of that step is written, and the job resumed from it continues bit-identically. Two ways a
// signal reaches the ranks, with real processes and real signals:
//  - sent to mpirun, as Slurm and Kubernetes do with the launcher: Open MPI's mpirun answers
//    SIGTERM by sending the ranks SIGCONT, then SIGTERM after odls_base_sigkill_timeout seconds
//    (default 1), then SIGKILL after as many again; the job is given a longer grace period, as
//    docs/distributed.md says to;
//  - sent to one rank only (a user signalling one process): the ranks agree by a collective.
#define BOOST_TEST_MODULE dp_signals
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "mpi_launch.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "train_corpus.hpp"

using plexus::test::BackgroundJob;
using plexus::test::mpirun_command;
using plexus::test::records;
using plexus::test::run_process;
using plexus::test::step_losses;
using Corpus = plexus::test::TrainCorpus;

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the comm_mpi plugin (a build with MPI)")

namespace {

// The grace period given to mpirun in the test: long enough for a step and a checkpoint of the
// tiny model on a loaded 2-core machine, short enough to keep the test quick.
constexpr int kGraceSeconds = 3;
const std::string kGrace = "--mca odls_base_sigkill_timeout " + std::to_string(kGraceSeconds) + " ";
// As in test_train_signals: endless, with a schedule that does not depend on train.steps.
const std::string kEndless =
    " --set train.steps=100000 --set optimizer.lr_decay_style=constant --set distributed.timeout_s=60";

int steps_recorded(const std::filesystem::path& metrics) {
  std::ifstream in(metrics);
  int steps = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"event\":\"step\"") != std::string::npos) ++steps;
  return steps;
}

// The pid of the first process named `name` among the descendants of `root`, or -1.
pid_t find_descendant(pid_t root, const std::string& name) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid_text = entry.path().filename().string();
    if (pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string comm;
    std::getline(std::ifstream(entry.path() / "comm"), comm);
    if (comm != name) continue;
    for (pid_t p = std::stoi(pid_text); p > 1;) {
      if (p == root) return std::stoi(pid_text);
      std::ifstream status("/proc/" + std::to_string(p) + "/status");
      pid_t parent = 0;
      for (std::string line; std::getline(status, line);)
        if (line.rfind("PPid:", 0) == 0) parent = std::stoi(line.substr(5));
      if (parent == 0) break;
      p = parent;
    }
  }
  return -1;
}

struct Job {
  Corpus corpus;
  std::filesystem::path out = corpus.dir.path() / "run";
  BackgroundJob job;

  explicit Job(const std::string& mpirun_options)
      : job(mpirun_command(2, 120) + mpirun_options + corpus.train(out.string(), kEndless),
            corpus.dir.path() / "job.log") {}

  void wait_until_training() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (steps_recorded(out / "metrics.jsonl") < 3) {
      BOOST_TEST_REQUIRE(!job.wait_for(std::chrono::milliseconds(0)).has_value(), job.output());
      BOOST_TEST_REQUIRE((std::chrono::steady_clock::now() < deadline), "not training: " << job.output());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Waits for the job to end and checks what every stopped job leaves: no rank killed, one
  // "interrupted" record, the steps recorded up to it and one complete checkpoint of that step.
  // Returns the job's exit status and the step.
  std::pair<int, int64_t> stopped(double within_seconds) {
    const auto status = job.wait_for(std::chrono::duration<double>(within_seconds));
    BOOST_TEST_REQUIRE(status.has_value(), "still running " << within_seconds << " s after the signal:\n"
                                                            << job.output());
    const std::string output = job.output();
    BOOST_TEST(output.find("exited on signal") == std::string::npos, output);  // nobody killed
    BOOST_TEST(output.find("error") == std::string::npos, output);
    const auto interrupted = records(out / "metrics.jsonl", "interrupted");
    BOOST_TEST_REQUIRE(interrupted.size() == 1U, output);
    const int64_t step = interrupted[0].at("step").as_int64();
    BOOST_TEST(interrupted[0].at("signal").as_string() == "SIGTERM");
    BOOST_TEST(step_losses(out / "metrics.jsonl").size() == static_cast<std::size_t>(step));
    const auto checkpoints = plexus::checkpoint::list_checkpoints(out / "checkpoints");
    BOOST_TEST_REQUIRE(checkpoints.size() == 1U, output);
    BOOST_TEST(checkpoints[0].step == step);
    BOOST_TEST(plexus::checkpoint::load_checkpoint(checkpoints[0].dir).step == step);
    BOOST_TEST(output.find("stopping after step " + std::to_string(step) + ", writing a checkpoint") !=
                   std::string::npos,
               output);
    return {*status, step};
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(sigterm_to_mpirun_stops_every_rank_after_one_step_and_the_job_resumes_exactly) {
  Job run(kGrace);
  run.wait_until_training();
  const pid_t mpirun = find_descendant(run.job.pid(), "mpirun");
  BOOST_TEST_REQUIRE(mpirun > 0);
  const auto signalled = std::chrono::steady_clock::now();
  BOOST_TEST_REQUIRE(::kill(mpirun, SIGTERM) == 0);
  // mpirun waits the grace period before it signals the ranks.
  const auto [status, step] = run.stopped(2 * kGraceSeconds + 20);
  const double seconds = run.job.seconds_since(signalled);
  BOOST_TEST_MESSAGE("job stopped after step " << step << ", " << seconds << " s after SIGTERM to mpirun");
  BOOST_TEST(seconds >= kGraceSeconds * 0.9);  // the ranks were signalled after the grace period
  BOOST_TEST(status != 0);  // mpirun's own status when it was signalled (1), not the ranks' 75

  // Resumed on two ranks to a few steps past the stop, against a job that was never stopped: the
  // same schedule (train.steps sizes the data index), ended by train.exit_interval.
  const std::string until = kEndless + " --set train.exit_interval=" + std::to_string(step + 3);
  const auto resumed =
      run_process(mpirun_command(2, 120) + run.corpus.train(run.out.string(), until + " --resume latest"));
  BOOST_TEST_REQUIRE(resumed.status == 0, resumed.output);
  const auto straight_dir = run.corpus.dir.path() / "straight";
  const auto straight = run_process(mpirun_command(2, 120) + run.corpus.train(straight_dir.string(), until));
  BOOST_TEST_REQUIRE(straight.status == 0, straight.output);
  const std::vector<double> expected = step_losses(straight_dir / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == static_cast<std::size_t>(step + 3));
  BOOST_TEST(step_losses(run.out / "metrics.jsonl") == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(sigterm_to_one_rank_stops_every_rank_after_the_same_step) {
  Job run("");
  run.wait_until_training();
  const pid_t rank_one = plexus::test::find_rank(run.job.pid(), 1);
  BOOST_TEST_REQUIRE(rank_one > 0);
  BOOST_TEST_REQUIRE(::kill(rank_one, SIGTERM) == 0);
  const auto [status, step] = run.stopped(30);
  const std::string output = run.job.output();
  // Rank 0 never saw the signal, yet it stopped at the same step and wrote the checkpoint.
  BOOST_TEST(output.find("SIGTERM received (first by rank 1): stopping after step " + std::to_string(step)) !=
                 std::string::npos,
             output);
  BOOST_TEST(status == 75, output);  // mpirun passes on the ranks' status when not signalled itself
}

BOOST_AUTO_TEST_CASE(a_second_sigterm_to_mpirun_ends_the_job_at_once_without_a_checkpoint) {
  // Open MPI's mpirun exits at once on a second SIGTERM, before its grace period is over; the
  // ranks, which have not been signalled yet, lose their launcher and end too, not left training.
  Job run(kGrace);
  run.wait_until_training();
  const pid_t mpirun = find_descendant(run.job.pid(), "mpirun");
  const pid_t ranks[] = {plexus::test::find_rank(run.job.pid(), 0),
                         plexus::test::find_rank(run.job.pid(), 1)};
  BOOST_TEST_REQUIRE(mpirun > 0);
  BOOST_TEST_REQUIRE((ranks[0] > 0 && ranks[1] > 0));
  BOOST_TEST_REQUIRE(::kill(mpirun, SIGTERM) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto signalled = std::chrono::steady_clock::now();
  BOOST_TEST_REQUIRE(::kill(mpirun, SIGTERM) == 0);
  const auto status = run.job.wait_for(std::chrono::seconds(kGraceSeconds + 20));
  BOOST_TEST_REQUIRE(status.has_value(), run.job.output());
  BOOST_TEST(*status != 0);
  BOOST_TEST(run.job.seconds_since(signalled) < kGraceSeconds);  // before the ranks would be signalled
  // The ranks end within seconds (a zombie waiting for its reaper has ended).
  const auto running = [](pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');
    return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((running(ranks[0]) || running(ranks[1])) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  BOOST_TEST(!running(ranks[0]));
  BOOST_TEST(!running(ranks[1]));
  for (const pid_t pid : ranks)
    if (running(pid)) ::kill(pid, SIGKILL);  // leave nothing behind, whatever happened
  BOOST_TEST(records(run.out / "metrics.jsonl", "interrupted").empty());
  BOOST_TEST(plexus::checkpoint::list_checkpoints(run.out / "checkpoints").empty());
}
