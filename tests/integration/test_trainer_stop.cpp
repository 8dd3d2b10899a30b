// The trainer's graceful stop (TrainerEvents::stop_signal), driven in-process so that the moment
// of the request is exact: during a step (a real SIGTERM through StopSignals), before the first
// step, during an evaluation, during a periodic checkpoint, during the last step. Real plugins,
// a real dataset, real checkpoint files. tests/integration/test_train_signals.cpp sends real
// signals to a real plexus-train from outside.
#define BOOST_TEST_MODULE trainer_stop
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/engine/stop_signals.hpp"
#include "plexus/core/engine/trainer.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"
#include "train_corpus.hpp"

using plexus::StopSignals;
using plexus::TrainerEvents;
using plexus::TrainResult;
using Corpus = plexus::test::TrainCorpus;

namespace {

// A 2-layer C=32 model (the one of TrainCorpus::train) built in this process.
struct StopRun {
  Corpus corpus;
  std::filesystem::path out = corpus.dir.path() / "run";
  plexus::PluginHost host;
  std::unique_ptr<plexus::Trainer> trainer;
  std::vector<boost::json::object> records;  // every metrics record, in order
  int polls = 0;

  explicit StopRun(const std::vector<std::string>& extra) {
    std::vector<std::string> overrides{"data.path=" + corpus.prefix, "run.output_dir=" + out.string(),
                                       "model.num_layers=2",         "model.hidden_size=32",
                                       "model.seq_length=32",        "train.micro_batch_size=4",
                                       "train.microbatches=2",       "train.eval_interval=0",
                                       "train.eval_iters=2",         "sample.tokens=0"};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    boost::json::value config = plexus::load_run_config(std::nullopt, overrides);
    plexus::load_configured_plugins(host, config, {});
    plexus::check_components(host, config);
    trainer = std::make_unique<plexus::Trainer>(host, config, plexus::make_indexed_data_source(config));
  }

  // Trains; `stop` answers each poll, `observe` sees each metrics record as it is written.
  TrainResult run(std::function<int()> stop,
                  std::function<void(const boost::json::object&)> observe = nullptr) {
    TrainerEvents events;
    events.stop_signal = [this, stop] {
      ++polls;
      return stop();
    };
    events.on_metrics = [this, observe](const boost::json::object& record) {
      records.push_back(record);
      if (observe) observe(record);
    };
    return trainer->run(events);
  }

  std::vector<int64_t> steps_of(const std::string& event) const {
    std::vector<int64_t> steps;
    for (const auto& r : records)
      if (r.at("event").as_string() == event) steps.push_back(r.at("step").as_int64());
    return steps;
  }
  std::vector<int64_t> checkpoints() const {
    std::vector<int64_t> steps;
    for (const auto& c : plexus::checkpoint::list_checkpoints(out / "checkpoints")) steps.push_back(c.step);
    return steps;
  }
  bool is_event(const boost::json::object& record, const char* event, int64_t step) const {
    return record.at("event").as_string() == event && record.at("step").as_int64() == step;
  }
};

using Steps = std::vector<int64_t>;

}  // namespace

BOOST_AUTO_TEST_CASE(a_signal_during_a_step_stops_the_run_after_it_with_a_checkpoint) {
  StopRun run({"train.steps=10"});
  const StopSignals stop_signals;
  // The step record is written at the end of step 3, before the step's stop poll.
  const TrainResult result = run.run(&StopSignals::received, [&](const boost::json::object& record) {
    if (run.is_event(record, "step", 3)) ::raise(SIGTERM);
  });
  BOOST_TEST_REQUIRE(result.interrupted.has_value());
  BOOST_TEST(result.interrupted->signal == SIGTERM);
  BOOST_TEST(result.interrupted->step == 3);
  BOOST_TEST(result.interrupted->rank == 0);
  BOOST_TEST(run.steps_of("step") == Steps({1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(run.steps_of("eval").empty());  // the final evaluation is not run
  BOOST_TEST(run.checkpoints() == Steps({3}), boost::test_tools::per_element());
  BOOST_TEST(result.last_checkpoint == run.out / "checkpoints" / "step_00000003");
  const boost::json::object& last = run.records.back();
  BOOST_TEST(last.at("event").as_string() == "interrupted");
  BOOST_TEST(last.at("step").as_int64() == 3);
  BOOST_TEST(last.at("signal").as_string() == "SIGTERM");
  BOOST_TEST(last.at("checkpoint").as_string() == result.last_checkpoint.string());
  // The checkpoint is whole: it loads, at the step it names.
  BOOST_TEST(plexus::checkpoint::load_checkpoint(result.last_checkpoint).step == 3);
}

BOOST_AUTO_TEST_CASE(a_stop_before_the_first_step_trains_and_writes_nothing) {
  StopRun run({"train.steps=10"});
  const TrainResult result = run.run([] { return SIGINT; });
  BOOST_TEST_REQUIRE(result.interrupted.has_value());
  BOOST_TEST(result.interrupted->step == 0);
  BOOST_TEST(run.polls == 1);
  BOOST_TEST(run.steps_of("step").empty());
  BOOST_TEST(result.last_checkpoint.empty());
  BOOST_TEST(!std::filesystem::exists(run.out / "checkpoints"));
  BOOST_TEST(run.records.back().at("event").as_string() == "interrupted");
  BOOST_TEST(run.records.back().at("signal").as_string() == "SIGINT");
  BOOST_TEST(run.records.back().at("checkpoint").is_null());
}

BOOST_AUTO_TEST_CASE(a_stop_during_an_evaluation_stops_at_that_step_not_the_next) {
  StopRun run({"train.steps=10", "train.eval_interval=2"});
  int asked = 0;
  const TrainResult result = run.run([&] { return asked; },
                                     [&](const boost::json::object& record) {
                                       if (run.is_event(record, "eval", 4)) asked = SIGTERM;
                                     });
  BOOST_TEST_REQUIRE(result.interrupted.has_value());
  BOOST_TEST(result.interrupted->step == 4);
  BOOST_TEST(run.steps_of("step") == Steps({1, 2, 3, 4}), boost::test_tools::per_element());
  BOOST_TEST(run.steps_of("eval") == Steps({2, 4}), boost::test_tools::per_element());
  BOOST_TEST(run.checkpoints() == Steps({4}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_stop_during_a_periodic_checkpoint_keeps_that_checkpoint) {
  StopRun run({"train.steps=10", "checkpoint.interval=2", "checkpoint.keep_last=5"});
  // Polls: before step 1, after step 1, after step 2, after the checkpoint of step 2 (the 4th).
  ino_t periodic = 0;
  const TrainResult result = run.run([&] {
    if (run.polls < 4) return 0;
    struct stat info {};
    BOOST_TEST_REQUIRE(::stat((run.out / "checkpoints" / "step_00000002").c_str(), &info) == 0);
    periodic = info.st_ino;
    return SIGTERM;
  });
  BOOST_TEST_REQUIRE(result.interrupted.has_value());
  BOOST_TEST(result.interrupted->step == 2);
  BOOST_TEST(run.checkpoints() == Steps({2}), boost::test_tools::per_element());
  // Not written a second time: a rewrite would publish another directory under the name.
  struct stat after {};
  BOOST_TEST_REQUIRE(::stat(result.last_checkpoint.c_str(), &after) == 0);
  BOOST_TEST(after.st_ino == periodic);
}

BOOST_AUTO_TEST_CASE(a_stop_during_the_last_step_lets_the_run_complete) {
  StopRun run({"train.steps=4"});
  int asked = 0;
  const TrainResult result = run.run([&] { return asked; },
                                     [&](const boost::json::object& record) {
                                       if (run.is_event(record, "step", 4)) asked = SIGTERM;
                                     });
  BOOST_TEST(!result.interrupted.has_value());
  BOOST_TEST(run.steps_of("step") == Steps({1, 2, 3, 4}), boost::test_tools::per_element());
  BOOST_TEST(run.steps_of("eval") == Steps({4}), boost::test_tools::per_element());
  BOOST_TEST(run.checkpoints() == Steps({4}), boost::test_tools::per_element());
  BOOST_TEST(run.steps_of("interrupted").empty());
}

BOOST_AUTO_TEST_CASE(the_stop_is_polled_at_every_step_boundary) {
  // Before step 1, after steps 1..4 (not after the last), after the evaluations at 2 and 4.
  StopRun run({"train.steps=5", "train.eval_interval=2"});
  const TrainResult result = run.run([] { return 0; });
  BOOST_TEST(!result.interrupted.has_value());
  BOOST_TEST(run.polls == 1 + 4 + 2);
}
