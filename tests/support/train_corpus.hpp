// A small prepared corpus and the plexus-train command line of a tiny model that trains on it in
// about a second, for the trainer's integration tests.
#pragma once

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "run_process.hpp"
#include "temp_dir.hpp"

namespace plexus::test {

inline const std::string kBin = std::string(PLEXUS_BUILD_DIR) + "/bin/";

// The records of one event ("start", "step", "eval", "profile", ...) of a metrics.jsonl file, in
// order.
inline std::vector<boost::json::object> records(const std::filesystem::path& metrics,
                                                const std::string& event) {
  std::vector<boost::json::object> found;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto record = boost::json::parse(line).as_object();
    if (record.at("event").as_string() == event) found.push_back(std::move(record));
  }
  return found;
}

// The loss of every "step" record of a metrics.jsonl file, in order.
inline std::vector<double> step_losses(const std::filesystem::path& metrics) {
  std::vector<double> losses;
  for (const auto& record : records(metrics, "step")) losses.push_back(record.at("loss").as_double());
  return losses;
}

struct TrainCorpus {
  TempDir dir;
  std::string prefix;
  TrainCorpus() {
    std::string text;
    for (int i = 0; i < 400; ++i)
      text += "The quick brown fox " + std::to_string(i) + " jumps over the lazy dog.\n\n";
    const auto file = dir.write("corpus.txt", text);
    prefix = (dir.path() / "corpus").string();
    const auto prepared = run_process(kBin + "plexus data prepare --input " + quote(file.string()) +
                                      " --output-prefix " + quote(prefix));
    BOOST_TEST_REQUIRE(prepared.status == 0, prepared.output);
  }
  // The model and micro-batch train() sets: what `plexus model show` needs to describe its runs.
  static std::string model_flags() {
    return " --set model.num_layers=2 --set model.hidden_size=32 --set model.seq_length=32"
           " --set train.micro_batch_size=4";
  }
  // plexus-train of a 2-layer, C=32 model for 20 steps, writing into `out`, then `extra`.
  std::string train(const std::string& out, const std::string& extra) const {
    return kBin + "plexus-train --set data.path=" + quote(prefix) + " --set run.output_dir=" + quote(out) +
           model_flags() +
           " --set train.microbatches=2 --set train.steps=20"
           " --set train.eval_interval=0 --set sample.tokens=8 " +
           extra;
  }
};

}  // namespace plexus::test
