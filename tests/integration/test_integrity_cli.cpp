// Integrity faults injected for real into what the tools read and write, each of which used to
// pass silently, hang, or kill the process without a word:
//   - a flipped bit in a tensor of a trained checkpoint's model.safetensors (a float made 1e30-ish
//     by its exponent) resumed with exit 0; now the resume and `plexus checkpoint inspect --verify`
//     refuse it naming the file and the tensor;
//   - an infinity in a checkpoint loaded; now it is refused naming the tensor and the element;
//   - a checkpoint written past the file-size limit (`ulimit -f`) killed plexus-train by SIGXFSZ
//     (exit 153, no message); now it is an error naming the file and the limit, and the previous
//     checkpoint stays whole;
//   - a dataset .bin or .idx that is a FIFO hung `plexus data inspect` and plexus-train forever;
//   - a data.tokenizer of the same size as the dataset's, but another tokenizer, trained silently.
#define BOOST_TEST_MODULE integrity_cli
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint_edit.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "run_process.hpp"
#include "temp_dir.hpp"
#include "train_corpus.hpp"

using plexus::test::kBin;
using plexus::test::quote;
using plexus::test::run_process;
namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A corpus and a run of 20 steps on it, its checkpoint of step 20 written.
struct TrainedRun {
  plexus::test::TrainCorpus corpus;
  fs::path out = corpus.dir.path() / "run";
  fs::path checkpoint = out / "checkpoints" / "step_00000020";
  TrainedRun() {
    const auto trained = run_process(corpus.train(out.string(), ""));
    BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
    BOOST_TEST_REQUIRE(fs::exists(checkpoint / ck::kCompleteMarker));
  }
  // The same run continued to `steps`, after `before` (a shell prefix such as "ulimit -f 64;").
  plexus::test::ProcessResult resume(int steps, const std::string& before = "") const {
    const std::string command =
        corpus.train(out.string(), "--set train.steps=" + std::to_string(steps) + " --resume latest");
    return run_process("bash -c " + quote(before + " exec " + command));
  }
  // The name of the largest tensor of model.safetensors, and the file offset of its element i.
  std::pair<std::string, std::size_t> element(std::size_t i) const {
    const auto file = ck::SafetensorsFile::open(checkpoint / ck::kModelFile, ck::ReadMode::read);
    const ck::TensorInfo* largest = &file.layout().tensors.front();
    for (const auto& t : file.layout().tensors)
      if (t.end - t.begin > largest->end - largest->begin) largest = &t;
    return {largest->name, static_cast<std::size_t>(file.layout().data_start() + largest->begin + 4 * i)};
  }
};

void flip(const fs::path& file, std::size_t offset, unsigned char mask) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  f.read(&byte, 1);
  byte = static_cast<char>(static_cast<unsigned char>(byte) ^ mask);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&byte, 1);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_flipped_bit_in_a_checkpoint_stops_the_resume_and_inspect_verify_names_the_tensor) {
  const TrainedRun run;
  const auto [tensor, at] = run.element(5);
  // The top bit of element 5's exponent (byte 3 of the little-endian float): a weight of about
  // 0.02 becomes about 1e36, finite and plausible-looking to anything that only checks values.
  flip(run.checkpoint / ck::kModelFile, at + 3, 0x40);
  const std::string model = (run.checkpoint / ck::kModelFile).string();

  const auto resumed = run.resume(25);
  BOOST_TEST(resumed.status == 1, resumed.output);
  BOOST_TEST(contains(resumed.output, model + ": tensor " + tensor + ": its bytes do not match the checksum"),
             resumed.output);
  BOOST_TEST(!fs::exists(run.out / "checkpoints" / "step_00000025"));

  const auto verified = run_process(kBin + "plexus checkpoint inspect --verify " + quote(run.out.string()));
  BOOST_TEST(verified.status == 1, verified.output);
  BOOST_TEST(contains(verified.output, "failed verification (1 problem)"), verified.output);
  BOOST_TEST(contains(verified.output, model + ": tensor " + tensor + ":"), verified.output);
  BOOST_TEST(contains(verified.output, "the checkpoint is DAMAGED"), verified.output);
  // Without --verify it is shown as it is.
  const auto shown = run_process(kBin + "plexus checkpoint inspect " + quote(run.checkpoint.string()));
  BOOST_TEST(shown.status == 0, shown.output);
  // The JSON report lists it too.
  const auto json = run_process("(" + kBin + "plexus checkpoint inspect --verify --json " +
                                quote(run.checkpoint.string()) + " 2>/dev/null)");
  BOOST_TEST(json.status == 1);
  const auto verification = boost::json::parse(json.output).at("verification");
  BOOST_TEST(verification.at("ok").as_bool() == false);
  BOOST_TEST(verification.at("files").at(0).at("problems").as_array().size() == 1U);

  // Flipped back, the same checkpoint verifies and resumes.
  flip(run.checkpoint / ck::kModelFile, at + 3, 0x40);
  const auto good =
      run_process(kBin + "plexus checkpoint inspect --verify " + quote(run.checkpoint.string()));
  BOOST_TEST(good.status == 0, good.output);
  BOOST_TEST(contains(good.output, "the checkpoint is intact"), good.output);
  const auto again = run.resume(25);
  BOOST_TEST(again.status == 0, again.output);
}

BOOST_AUTO_TEST_CASE(an_infinity_in_a_checkpoint_is_refused_naming_the_tensor_and_the_element) {
  const TrainedRun run;
  const std::string tensor = run.element(0).first;  // not a structured binding: clang 14 cannot capture one
  // Rewritten as a tool would (fresh checksums, COMPLETE updated): only the value is wrong.
  plexus::test::rewrite_checkpoint_file(run.checkpoint, ck::kModelFile, [&](plexus::test::EditableFile& f) {
    auto& bytes = f.tensors.at(tensor).bytes;
    const float inf = std::numeric_limits<float>::infinity();
    std::memcpy(bytes.data() + 4 * 3, &inf, 4);
  });
  const auto resumed = run.resume(25);
  BOOST_TEST(resumed.status == 1, resumed.output);
  BOOST_TEST(contains(resumed.output, "tensor " + tensor + ": element 3 (index [0, 3]) is inf"),
             resumed.output);
  const auto verified =
      run_process(kBin + "plexus checkpoint inspect --verify " + quote(run.checkpoint.string()));
  BOOST_TEST(verified.status == 1, verified.output);
  BOOST_TEST(contains(verified.output, "element 3 (index [0, 3]) is inf"), verified.output);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_written_before_checksums_existed_resumes_and_says_so) {
  const TrainedRun run;
  // model.safetensors as an earlier Plexus wrote it: no checksum entry in its metadata.
  const fs::path model = run.checkpoint / ck::kModelFile;
  std::ifstream in(model, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  in.close();
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  boost::json::object header = boost::json::parse(bytes.substr(8, n)).as_object();
  BOOST_TEST_REQUIRE(header.at("__metadata__").as_object().erase(ck::kChecksumKey) == 1U);
  std::string text = boost::json::serialize(header);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string legacy(8, '\0');
  const std::uint64_t size = text.size();
  std::memcpy(legacy.data(), &size, 8);
  legacy += text;
  legacy += bytes.substr(8 + n);
  std::ofstream(model, std::ios::binary | std::ios::trunc) << legacy;
  const fs::path marker_path = run.checkpoint / ck::kCompleteMarker;
  std::ifstream marker_in(marker_path);
  boost::json::value marker = boost::json::parse(std::string(std::istreambuf_iterator<char>(marker_in), {}));
  marker_in.close();
  marker.at("files").as_object()[ck::kModelFile] = legacy.size();
  std::ofstream(marker_path, std::ios::trunc) << boost::json::serialize(marker) << "\n";

  const auto resumed = run.resume(22);
  BOOST_TEST(resumed.status == 0, resumed.output);
  BOOST_TEST(contains(resumed.output,
                      model.string() + " records no checksums (written before Plexus recorded them)"),
             resumed.output);
  const auto verified =
      run_process(kBin + "plexus checkpoint inspect --verify " + quote(run.checkpoint.string()));
  BOOST_TEST(verified.status == 0, verified.output);
  BOOST_TEST(contains(verified.output, "no checksums recorded"), verified.output);
}

BOOST_AUTO_TEST_CASE(
    a_checkpoint_past_the_file_size_limit_is_an_error_naming_the_file_and_the_last_one_stays) {
  const TrainedRun run;
  const auto model_size = fs::file_size(run.checkpoint / ck::kModelFile);
  // bash's ulimit -f counts 1024-byte blocks: half the model file, far above what the run's log
  // and metrics.jsonl grow to.
  const std::uint64_t blocks = model_size / 1024 / 2;
  BOOST_TEST_REQUIRE(blocks >= 32U);
  const auto resumed = run.resume(30, "ulimit -f " + std::to_string(blocks) + ";");
  BOOST_TEST(resumed.status == 1, "exit status " << resumed.status << " (153: killed by SIGXFSZ)\n"
                                                 << resumed.output);
  const std::string file = (run.out / "checkpoints" / "step_00000030" / ck::kModelFile).string();
  BOOST_TEST(contains(resumed.output, file + ": cannot write: File too large"), resumed.output);
  BOOST_TEST(contains(resumed.output, "the file-size limit of this process (ulimit -f) is " +
                                          std::to_string(blocks * 1024) + " bytes"),
             resumed.output);
  BOOST_TEST(contains(resumed.output, "the checkpoints already there are untouched"), resumed.output);
  // Nothing of step 30 is left, not even its partial directory; step 20 is whole and resumes.
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(run.out / "checkpoints"))
    entries.push_back(e.path().filename().string());
  BOOST_TEST(entries == std::vector<std::string>{"step_00000020"}, boost::test_tools::per_element());
  BOOST_TEST(ck::load_checkpoint(run.checkpoint).step == 20);
  const auto again = run.resume(30);
  BOOST_TEST(again.status == 0, again.output);
  BOOST_TEST(fs::exists(run.out / "checkpoints" / "step_00000030" / ck::kCompleteMarker));
}

BOOST_AUTO_TEST_CASE(a_fifo_as_a_dataset_file_is_refused_by_data_inspect_and_plexus_train_not_waited_on) {
  const plexus::test::TrainCorpus corpus;
  // `timeout` turns the hang this guards against into exit status 124 instead of a stuck suite.
  for (const std::string extension : {".bin", ".idx"}) {
    const fs::path file = corpus.prefix + extension;
    const fs::path kept = corpus.prefix + extension + ".kept";
    fs::rename(file, kept);
    BOOST_TEST_REQUIRE(::mkfifo(file.c_str(), 0644) == 0);
    const auto inspected = run_process("timeout 20 " + kBin + "plexus data inspect " + quote(corpus.prefix));
    BOOST_TEST(inspected.status == 1, "exit status " << inspected.status << "\n" << inspected.output);
    BOOST_TEST(contains(inspected.output, file.string() + ": a FIFO (named pipe), not a regular file"),
               inspected.output);
    const auto trained =
        run_process("timeout 20 " + corpus.train((corpus.dir.path() / ("run" + extension)).string(), ""));
    BOOST_TEST(trained.status == 1, "exit status " << trained.status << "\n" << trained.output);
    BOOST_TEST(contains(trained.output, file.string() + ": a FIFO (named pipe), not a regular file"),
               trained.output);
    fs::remove(file);
    fs::rename(kept, file);
  }
}

namespace {

// Two BPE tokenizers of the same size trained on different text, and a dataset prepared with the
// first: the second passes every check of ids and sizes.
struct TwoTokenizers {
  plexus::test::TempDir dir;
  std::string first, second, prefix;
  int64_t vocab = 0;

  static std::string corpus_text(const std::string& a, const std::string& b) {
    std::string text;
    for (int i = 0; i < 300; ++i)
      text += a + std::to_string(i) + b + std::to_string(i * 37 % 101) + " times.\n\n";
    return text;
  }
  int64_t train(const fs::path& input, const std::string& output) {
    const auto trained = run_process(kBin + "plexus tokenizer train --input " + quote(input.string()) +
                                     " --vocab-size 320 --output " + quote(output));
    BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
    const auto info = run_process(kBin + "plexus tokenizer inspect --json " + quote(output));
    BOOST_TEST_REQUIRE(info.status == 0, info.output);
    return boost::json::parse(info.output).at("vocab_size").as_int64();
  }
  TwoTokenizers() {
    const auto text_a = dir.write("a.txt", corpus_text("The quick brown fox ", " jumps over the lazy dog; "));
    const auto text_b = dir.write("b.txt", corpus_text("Lorem ipsum dolor sit amet ", " consectetur elit; "));
    first = (dir.path() / "first.json").string();
    second = (dir.path() / "second.json").string();
    vocab = train(text_a, first);
    BOOST_TEST_REQUIRE(train(text_b, second) == vocab);  // the same size: only the content differs
    prefix = (dir.path() / "data").string();
    const auto prepared = run_process(kBin + "plexus data prepare --input " + quote(text_a.string()) +
                                      " --output-prefix " + quote(prefix) + " --tokenizer " + quote(first));
    BOOST_TEST_REQUIRE(prepared.status == 0, prepared.output);
  }
  plexus::test::ProcessResult run(const std::string& tokenizer, const std::string& name) const {
    return run_process(kBin + "plexus-train --set data.path=" + quote(prefix) +
                       " --set run.output_dir=" + quote((dir.path() / name).string()) +
                       " --set model.vocab_size=320 --set model.num_layers=1 --set model.hidden_size=32"
                       " --set model.seq_length=16 --set train.micro_batch_size=2 --set train.steps=2"
                       " --set train.eval_interval=0 --set sample.tokens=4 --set data.tokenizer=" +
                       quote(tokenizer));
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_tokenizer_of_the_same_size_that_did_not_prepare_the_dataset_is_refused_naming_both) {
  const TwoTokenizers t;
  const std::string record = t.prefix + ".tokenizer-fingerprint.json";
  BOOST_TEST_REQUIRE(fs::exists(record));
  const auto refused = t.run(t.second, "refused");
  BOOST_TEST(refused.status == 1, refused.output);
  BOOST_TEST(contains(refused.output, "data.tokenizer = " + t.second + " (" + std::to_string(t.vocab) +
                                          " tokens, bpe:xxh64:"),
             refused.output);
  BOOST_TEST(contains(refused.output, "is not the tokenizer " + t.prefix + " was prepared with: " + record +
                                          " records " + t.first),
             refused.output);
  BOOST_TEST(!fs::exists(t.dir.path() / "refused" / "checkpoints"));
  // The tokenizer it was prepared with, and its copy beside the dataset, train.
  const auto same = t.run(t.first, "same");
  BOOST_TEST(same.status == 0, same.output);
  const auto copy = t.run(t.prefix + ".tokenizer.json", "copy");
  BOOST_TEST(copy.status == 0, copy.output);
  // A dataset without a record (prepared earlier, or by Megatron's tools) trains, with a warning.
  fs::remove(record);
  const auto unrecorded = t.run(t.second, "unrecorded");
  BOOST_TEST(unrecorded.status == 0, unrecorded.output);
  BOOST_TEST(contains(unrecorded.output, t.prefix + " has no data.tokenizer-fingerprint.json"),
             unrecorded.output);
}
