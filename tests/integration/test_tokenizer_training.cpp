// plexus-train on a dataset of BPE token ids. The defect this guards against: a dataset with ids
// above 255 trained with a large enough model.vocab_size died at its first evaluation, printing
// the text sample with the byte tokenizer ("token ... is not a byte"), before that step's
// checkpoint was written. Now the sample shows the ids (or, with data.tokenizer, the text), a
// failing sample never ends a run, and the tokenizer, the dataset's ids and model.vocab_size
// are checked against each other before anything is written.
#define BOOST_TEST_MODULE tokenizer_training
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <filesystem>
#include <string>

#include "run_process.hpp"
#include "temp_dir.hpp"
#include "train_corpus.hpp"

using plexus::test::kBin;
using plexus::test::quote;
using plexus::test::run_process;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A corpus, a BPE tokenizer of up to 600 tokens trained on it, and the dataset it encodes.
struct BpeCorpus {
  plexus::test::TempDir dir;
  std::string prefix, tokenizer;
  int64_t vocab = 0;
  BpeCorpus() {
    std::string text;
    for (int i = 0; i < 400; ++i)
      text += "The quick brown fox " + std::to_string(i) + " jumps over the lazy dog; it's " +
              std::to_string(i * 37 % 101) + " times faster.\n\n";
    const auto file = dir.write("corpus.txt", text);
    tokenizer = (dir.path() / "tokenizer.json").string();
    const auto trained = run_process(kBin + "plexus tokenizer train --input " + quote(file.string()) +
                                     " --vocab-size 600 --output " + quote(tokenizer));
    BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
    const auto info = run_process(kBin + "plexus tokenizer inspect --json " + quote(tokenizer));
    BOOST_TEST_REQUIRE(info.status == 0, info.output);
    vocab = boost::json::parse(info.output).at("vocab_size").as_int64();
    BOOST_TEST_REQUIRE(vocab > 300);
    prefix = (dir.path() / "bpe").string();
    const auto prepared =
        run_process(kBin + "plexus data prepare --input " + quote(file.string()) + " --output-prefix " +
                    quote(prefix) + " --tokenizer " + quote(tokenizer));
    BOOST_TEST_REQUIRE(prepared.status == 0, prepared.output);
  }
  // 20 steps of a tiny model, evaluating (with a sample) and checkpointing every 10.
  std::string train(const fs::path& out, const std::string& extra) const {
    return kBin + "plexus-train --set data.path=" + quote(prefix) +
           " --set run.output_dir=" + quote(out.string()) +
           " --set model.num_layers=2 --set model.hidden_size=32 --set model.seq_length=32"
           " --set train.micro_batch_size=4 --set train.steps=20 --set train.eval_interval=10"
           " --set train.eval_iters=2 --set checkpoint.interval=10 --set sample.tokens=12 " +
           extra;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(ids_above_255_without_a_tokenizer_reach_the_first_evaluation_and_checkpoint) {
  const BpeCorpus corpus;
  const fs::path out = corpus.dir.path() / "run";
  const auto run = run_process(corpus.train(out, "--set model.vocab_size=640"));
  BOOST_TEST(run.status == 0, run.output);
  BOOST_TEST(contains(run.output, "eval at step 10"), run.output);
  BOOST_TEST(
      contains(run.output, "--- sample ---\n[token ids: the dataset is not byte-level; set data.tokenizer"),
      run.output);
  BOOST_TEST(contains(run.output, "beyond the byte tokenizer's 0..255"), run.output);
  BOOST_TEST(contains(run.output, corpus.prefix + ".tokenizer.json, beside it"), run.output);  // the hint
  BOOST_TEST(fs::exists(out / "checkpoints" / "step_00000010"));
  BOOST_TEST(fs::exists(out / "checkpoints" / "step_00000020"));
}

BOOST_AUTO_TEST_CASE(with_data_tokenizer_the_sample_is_text) {
  const BpeCorpus corpus;
  const fs::path out = corpus.dir.path() / "run";
  // model.vocab_size above the tokenizer's: the model may sample an id the tokenizer lacks,
  // which the sample shows as <|id N|> rather than failing.
  const auto run = run_process(corpus.train(
      out, "--set model.vocab_size=640 --set data.tokenizer=" + quote(corpus.prefix + ".tokenizer.json") +
               " --set 'sample.prompt=The quick'"));
  BOOST_TEST(run.status == 0, run.output);
  BOOST_TEST(contains(run.output, "--- sample ---"), run.output);
  BOOST_TEST(!contains(run.output, "[token ids"), run.output);
  BOOST_TEST(!contains(run.output, "no sample"), run.output);
  BOOST_TEST(fs::exists(out / "checkpoints" / "step_00000010"));
}

BOOST_AUTO_TEST_CASE(vocabulary_mismatches_are_refused_at_start_naming_keys_files_and_numbers) {
  const BpeCorpus corpus;
  const std::string vocab = std::to_string(corpus.vocab);
  const std::string max_id = std::to_string(corpus.vocab - 1);  // <|endoftext|> ends every document

  const fs::path small_model = corpus.dir.path() / "small_model";
  auto run = run_process(corpus.train(small_model, "--set model.vocab_size=256"));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(
      contains(run.output, "config error at model.vocab_size: model.vocab_size is 256, but data.path = " +
                               corpus.prefix + " holds token ids up to " + max_id),
      run.output);
  BOOST_TEST(!fs::exists(small_model), "nothing may be written before the check");

  const fs::path below_tokenizer = corpus.dir.path() / "below_tokenizer";
  run = run_process(corpus.train(
      below_tokenizer, "--set model.vocab_size=300 --set data.tokenizer=" + quote(corpus.tokenizer)));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(contains(run.output,
                      "config error at model.vocab_size: model.vocab_size is 300, but the tokenizer "
                      "data.tokenizer = " +
                          corpus.tokenizer + " has " + vocab + " tokens"),
             run.output);
  BOOST_TEST(!fs::exists(below_tokenizer));

  // A tokenizer smaller than the one the data was prepared with.
  const std::string other = (corpus.dir.path() / "other.json").string();
  const auto text = corpus.dir.write("other.txt", "a few words of other text, other words\n");
  BOOST_TEST_REQUIRE(run_process(kBin + "plexus tokenizer train --input " + quote(text.string()) +
                                 " --vocab-size 280 --output " + quote(other))
                         .status == 0);
  const fs::path wrong_tokenizer = corpus.dir.path() / "wrong_tokenizer";
  run = run_process(
      corpus.train(wrong_tokenizer, "--set model.vocab_size=640 --set data.tokenizer=" + quote(other)));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(contains(run.output, "config error at data.tokenizer: " + other), run.output);
  BOOST_TEST(contains(run.output, "holds token ids up to " + max_id +
                                      ": the dataset was prepared with another tokenizer"),
             run.output);
  BOOST_TEST(!fs::exists(wrong_tokenizer));

  const fs::path missing = corpus.dir.path() / "missing";
  run = run_process(
      corpus.train(missing, "--set model.vocab_size=640 --set data.tokenizer=/nonexistent/tok.json"));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(
      contains(run.output, "config error at data.tokenizer: /nonexistent/tok.json: no such tokenizer file"),
      run.output);
  BOOST_TEST(!fs::exists(missing));
}

BOOST_AUTO_TEST_CASE(a_byte_dataset_still_trains_with_the_byte_tokenizer_and_text_samples) {
  plexus::test::TrainCorpus corpus;  // byte-level
  const fs::path out = corpus.dir.path() / "run";
  const auto run = run_process(corpus.train(out.string(), "--set train.eval_interval=10"));
  BOOST_TEST(run.status == 0, run.output);
  BOOST_TEST(contains(run.output, "--- sample ---"), run.output);
  BOOST_TEST(!contains(run.output, "[token ids"), run.output);
  BOOST_TEST(!contains(run.output, "beyond the byte tokenizer"), run.output);
}
