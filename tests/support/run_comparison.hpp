// Two training runs compared, for the model-parallel tests (pipeline, tensor): plexus-train on one
// rank or under mpirun, the step losses and the checkpoints' weights and Adam moments side by
// side, and a run expected to fail.
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi_launch.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "run_process.hpp"
#include "tensor_difference.hpp"
#include "train_corpus.hpp"

namespace plexus::test {

// A checkpoint's directory name: "step_00000020".
inline std::string step_dir(int step) {
  std::string digits = std::to_string(step);
  return "step_" + std::string(8 - digits.size(), '0') + digits;
}

// One OpenMP thread per process in every run: results do not depend on the thread count
// (integration.test_cpu_threads), but a process per rank on 2 cores runs best with one.
inline const std::string kOneThread = "env OMP_NUM_THREADS=1 ";

// plexus-train of the corpus's model with `extra`, on `ranks` processes (mpirun when more than
// one), writing into `out`; it must succeed.
inline void train_ranks(const TrainCorpus& corpus, const std::filesystem::path& out, int ranks,
                        const std::string& extra) {
  const std::string command = corpus.train(out.string(), extra);
  const auto result = run_process(kOneThread + (ranks > 1 ? mpirun_command(ranks) + command : command));
  BOOST_TEST_REQUIRE(result.status == 0, out.filename() << ":\n" << result.output);
}

// The output of a run expected to fail (any rank's message).
inline std::string refused_run(const TrainCorpus& corpus, const std::filesystem::path& out, int ranks,
                               const std::string& extra) {
  const auto result =
      run_process(kOneThread + mpirun_command(ranks, 120) + corpus.train(out.string(), extra));
  BOOST_TEST(result.status != 0, out.filename() << " was expected to fail");
  return result.output;
}

struct RunDifference {
  double losses = 0, weights = 0, moments = 0;
};

// The worst relative differences of two runs' step losses and of the weights and Adam moments in
// their checkpoints of step `step` (per tensor: its worst element difference over its largest
// element, at least `floor`); both checkpoints must hold the same tensors.
inline RunDifference compare_runs(const std::filesystem::path& a, const std::filesystem::path& b, int step,
                                  double floor = 0) {
  const std::vector<double> la = step_losses(a / "metrics.jsonl");
  const std::vector<double> lb = step_losses(b / "metrics.jsonl");
  BOOST_TEST_REQUIRE(la.size() == lb.size());
  BOOST_TEST_REQUIRE(!la.empty());
  RunDifference d;
  for (std::size_t i = 0; i < la.size(); ++i)
    d.losses = std::max(d.losses, std::abs(la[i] - lb[i]) / std::abs(la[i]));
  const auto ca = checkpoint::load_checkpoint(a / "checkpoints" / step_dir(step));
  const auto cb = checkpoint::load_checkpoint(b / "checkpoints" / step_dir(step));
  BOOST_TEST_REQUIRE(ca.model.names() == cb.model.names());
  BOOST_TEST_REQUIRE(ca.optimizer.names() == cb.optimizer.names());
  d.weights = worst_difference(ca.model, cb.model, floor);
  d.moments = worst_difference(ca.optimizer, cb.optimizer, floor);
  BOOST_TEST_MESSAGE(b.filename() << " against " << a.filename() << ": losses " << d.losses << ", weights "
                                  << d.weights << ", moments " << d.moments);
  return d;
}

}  // namespace plexus::test
