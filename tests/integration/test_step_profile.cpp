// plexus-train --set train.profile=true: where a step's time goes, part by part. The records in
// metrics.jsonl name every unit and mHC connection of the model, the parts add up to the step,
// the end of the run prints the table, and the same run without the option writes no record and
// trains to the same losses (timing does not touch the arithmetic).
#define BOOST_TEST_MODULE step_profile
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "run_process.hpp"
#include "train_corpus.hpp"

using plexus::test::records;
using plexus::test::run_process;
using plexus::test::step_losses;
using plexus::test::TrainCorpus;

namespace {

double number(const boost::json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return v == nullptr ? 0.0 : v->to_number<double>();
}

const std::string kMhc = R"( --set mhc.enabled=true --set mhc.num_residual_streams=2)"
                         R"( --set 'plugins.load=["sequential_scheduler","transformer","mhc_fused"]')"
                         R"( --set mhc.backend=mhc_fused)";

}  // namespace

BOOST_AUTO_TEST_CASE(every_part_is_timed_and_the_parts_add_up_to_the_step) {
  TrainCorpus corpus;
  const auto out = corpus.dir.path() / "profiled";
  const auto run =
      run_process(corpus.train(out.string(), kMhc + " --set train.profile=true --set train.log_interval=5"));
  BOOST_TEST_REQUIRE(run.status == 0, run.output);

  const auto profiles = records(out / "metrics.jsonl", "profile");
  BOOST_TEST_REQUIRE(profiles.size() == 4u);  // 20 steps, one record per 5
  int64_t steps = 0;
  for (const auto& p : profiles) {
    steps += p.at("steps").as_int64();
    const double step_ms = number(p, "step_ms");
    BOOST_TEST(step_ms > 0.0);
    double parts_ms = 0;
    std::set<std::string> names;
    for (const auto& entry : p.at("parts").as_array()) {
      const auto& part = entry.as_object();
      names.insert(std::string(part.at("part").as_string()));
      parts_ms += number(part, "forward_ms") + number(part, "backward_ms") + number(part, "update_ms");
    }
    const double untimed = number(p, "untimed_ms");
    // Exclusive times: a part nested in another (an mHC connection in its unit's stage) is not
    // counted twice, so the parts cannot add up to more than the step they were timed in (the
    // step's clock starts before the first part and stops after the last) ...
    BOOST_TEST(parts_ms <= step_ms * (1 + 1e-9),
               "parts " << parts_ms << " ms of a " << step_ms << " ms step");
    // ... and they cover most of it: the untimed rest is data loading and loss reads.
    BOOST_TEST(parts_ms > 0.5 * step_ms, "parts " << parts_ms << " ms of a " << step_ms << " ms step");
    BOOST_TEST(untimed == step_ms - parts_ms, boost::test_tools::tolerance(1e-6));
    for (const std::string expected :
         {"embedding (transformer.embedding)", "decoder.layers.0 attention (transformer.attention)",
          "decoder.layers.0 attention (transformer.attention) mHC", "decoder.layers.1 mlp (transformer.mlp)",
          "decoder.layers.1 mlp (transformer.mlp) mHC", "mHC streams (expand, mean, adjoints)",
          "final norm (transformer.norm)", "head (transformer.lm_head)", "optimizer (clip, AdamW)",
          "gradient finiteness check"})
      BOOST_TEST(names.count(expected) == 1u, "no part \"" << expected << "\"");
    // 2 layers x (attention, MLP) and their 4 connections, the embedding, final norm, head, the
    // streams, the finiteness check and the optimizer (no gradient averaging in one process).
    BOOST_TEST(names.size() == 14u);
  }
  BOOST_TEST(steps == 20);
  BOOST_TEST(run.output.find("step profile") != std::string::npos, run.output);
  BOOST_TEST(run.output.find("decoder.layers.1 mlp (transformer.mlp) mHC") != std::string::npos);

  // The same run unprofiled: no profile record, and the same losses bit for bit.
  const auto plain_out = corpus.dir.path() / "plain";
  const auto plain = run_process(corpus.train(plain_out.string(), kMhc + " --set train.log_interval=5"));
  BOOST_TEST_REQUIRE(plain.status == 0, plain.output);
  BOOST_TEST(records(plain_out / "metrics.jsonl", "profile").empty());
  BOOST_TEST(plain.output.find("step profile") == std::string::npos);
  const std::vector<double> a = step_losses(out / "metrics.jsonl"),
                            b = step_losses(plain_out / "metrics.jsonl");
  BOOST_TEST(a == b, boost::test_tools::per_element());
}
