// Checkpoint directories: write and load, partial and incomplete ones ignored by listing,
// pruning to the last K, replacing a step, creating a new directory without replacing anything,
// each load error, and the tensor-match report.
#define BOOST_TEST_MODULE checkpoint_dir
#include <boost/test/unit_test.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "temp_dir.hpp"

namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;
using plexus::CheckpointError;

namespace {

// Model and optimizer tensors of a tiny model, with values depending on the step.
struct Fixture {
  explicit Fixture(float step) {
    for (std::size_t i = 0; i < weight.size(); ++i) weight[i] = step + static_cast<float>(i);
    exp_avg.assign(weight.size(), step * 0.5f);
  }
  std::vector<float> weight = std::vector<float>(6);
  std::vector<float> bias{0.25f, -0.25f};
  std::vector<float> exp_avg;
  std::vector<ck::TensorData> model() const {
    return {{"decoder.layers.0.mlp.linear_fc1.weight", ck::DType::f32, {2, 3}, std::as_bytes(std::span(weight))},
            {"decoder.layers.0.mlp.linear_fc1.bias", ck::DType::f32, {2}, std::as_bytes(std::span(bias))}};
  }
  std::vector<ck::TensorData> optimizer() const {
    return {{"decoder.layers.0.mlp.linear_fc1.weight.exp_avg", ck::DType::f32, {2, 3},
             std::as_bytes(std::span(exp_avg))}};
  }
};

fs::path write_step(const fs::path& root, std::int64_t step) {
  const Fixture f(static_cast<float>(step));
  return ck::write_checkpoint(root, step, f.model(), f.optimizer(),
                              boost::json::object{{"step", step}, {"rng", "seed-7"}, {"data", {{"epoch", 0}}}});
}

std::vector<std::int64_t> steps_of(const std::vector<ck::CheckpointInfo>& list) {
  std::vector<std::int64_t> steps;
  for (const auto& c : list) steps.push_back(c.step);
  return steps;
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void overwrite(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The CheckpointError load_checkpoint throws for dir ("" if it loads).
std::string load_error(const fs::path& dir, std::string* file = nullptr) {
  try {
    (void)ck::load_checkpoint(dir);
  } catch (const CheckpointError& e) {
    if (file) *file = e.file();
    return e.problem();
  }
  return "";
}

// A pid no process can have: above the kernel's largest pid_max (2^22).
constexpr int kDeadPid = 4194305;

}  // namespace

BOOST_AUTO_TEST_CASE(a_written_checkpoint_loads_with_its_tensors_and_state) {
  plexus::test::TempDir tmp;
  const fs::path root = tmp.path() / "ckpt";  // created by the write
  const fs::path dir = write_step(root, 10);
  BOOST_TEST(dir == root / "step_00000010");
  BOOST_TEST((entries(root) == std::vector<std::string>{"step_00000010"}));  // no partial left
  BOOST_TEST((entries(dir) == std::vector<std::string>{"COMPLETE", "model.safetensors", "optimizer.safetensors",
                                                       "state.json"}));
  const auto marker = boost::json::parse(read_all(dir / "COMPLETE"));
  BOOST_TEST(marker.at("step").as_int64() == 10);

  for (const auto mode : {ck::ReadMode::map, ck::ReadMode::read}) {
    const ck::LoadedCheckpoint c = ck::load_checkpoint(dir, mode);
    BOOST_TEST(c.step == 10);
    BOOST_TEST(c.dir == dir);
    BOOST_TEST(c.state.at("rng").as_string() == "seed-7");
    BOOST_TEST(c.state.at("data").at("epoch").as_int64() == 0);
    BOOST_TEST(c.model.size() == 2U);
    BOOST_TEST(c.optimizer.size() == 1U);
    const auto w = c.model.tensor("decoder.layers.0.mlp.linear_fc1.weight");
    std::vector<float> values(6);
    std::memcpy(values.data(), w.bytes.data(), w.bytes.size());
    BOOST_TEST(values == Fixture(10).weight);
    BOOST_TEST(c.model.metadata().at("plexus.step") == "10");
  }
  BOOST_TEST(ck::checkpoint_dir_name(123456789) == "step_123456789");
}

BOOST_AUTO_TEST_CASE(listing_ignores_partial_and_unmarked_directories_and_says_why) {
  plexus::test::TempDir tmp;
  const fs::path root = tmp.path();
  write_step(root, 2);
  write_step(root, 1);
  write_step(root, 30);
  // What a run killed mid-write leaves: a partial directory, with or without files.
  const fs::path partial = root / ".step_00000040.partial-4242";
  fs::create_directory(partial);
  overwrite(partial / "model.safetensors", "half a file");
  // A step directory without its marker (copied by hand, or damaged).
  fs::create_directory(root / "step_00000050");
  fs::create_directory(root / "logs");
  fs::create_directory(root / "step_7");  // not our spelling

  BOOST_TEST((steps_of(ck::list_checkpoints(root)) == std::vector<std::int64_t>{1, 2, 30}));
  BOOST_TEST(ck::latest_checkpoint(root)->step == 30);
  BOOST_TEST(ck::latest_checkpoint(root)->dir == root / "step_00000030");

  const auto scan = ck::scan_checkpoints(root);
  BOOST_TEST(scan.skipped.size() == 4U);
  for (const auto& s : scan.skipped) {
    const std::string name = s.path.filename().string();
    BOOST_TEST_INFO(name << ": " << s.reason);
    if (name == ".step_00000040.partial-4242") BOOST_TEST(contains(s.reason, "partial checkpoint"));
    else if (name == "step_00000050") BOOST_TEST(contains(s.reason, "no COMPLETE marker"));
    else BOOST_TEST(contains(s.reason, "not a checkpoint directory"));
  }

  // No root yet: no checkpoints. A root that is a file: an error naming it.
  BOOST_TEST(ck::list_checkpoints(root / "missing").empty());
  BOOST_TEST(!ck::latest_checkpoint(root / "missing").has_value());
  const fs::path file = tmp.write("file", "x");
  BOOST_CHECK_EXCEPTION((void)ck::list_checkpoints(file), CheckpointError,
                        [&](const CheckpointError& e) { return e.file() == file.string(); });
}

BOOST_AUTO_TEST_CASE(prune_keeps_the_last_k_and_removes_stale_partials_only) {
  plexus::test::TempDir tmp;
  const fs::path root = tmp.path();
  for (std::int64_t step = 1; step <= 5; ++step) write_step(root, step);
  const fs::path dead_partial = root / (".step_00000006.partial-" + std::to_string(kDeadPid));
  const fs::path own_partial = root / (".step_00000007.partial-" + std::to_string(::getpid()));  // not being written
  const fs::path live_partial = root / ".step_00000008.partial-1";  // pid 1 runs: maybe still writing
  const fs::path dead_deleting = root / (".step_00000001.deleting-" + std::to_string(kDeadPid));
  for (const auto& p : {dead_partial, own_partial, live_partial, dead_deleting}) fs::create_directory(p);
  fs::create_directory(root / "step_00000009");  // incomplete: left for a person to look at
  tmp.write("notes.txt", "keep me");

  BOOST_CHECK_THROW(ck::prune_checkpoints(root, 0), std::invalid_argument);
  auto removed = ck::prune_checkpoints(root, 2);
  std::sort(removed.begin(), removed.end());
  std::vector<fs::path> expected{root / "step_00000001", root / "step_00000002", root / "step_00000003",
                                 dead_partial, own_partial, dead_deleting};
  std::sort(expected.begin(), expected.end());
  BOOST_TEST((removed == expected), boost::test_tools::per_element());
  BOOST_TEST((steps_of(ck::list_checkpoints(root)) == std::vector<std::int64_t>{4, 5}));
  BOOST_TEST((entries(root) == std::vector<std::string>{".step_00000008.partial-1", "notes.txt", "step_00000004",
                                                        "step_00000005", "step_00000009"}));
  // Keeping more than there are removes nothing; the newest always survives K = 1.
  BOOST_TEST(ck::prune_checkpoints(root, 10).empty());
  BOOST_TEST(ck::prune_checkpoints(root, 1).size() == 1U);
  BOOST_TEST((steps_of(ck::list_checkpoints(root)) == std::vector<std::int64_t>{5}));
  BOOST_TEST(ck::load_checkpoint(root / "step_00000005").step == 5);
}

BOOST_AUTO_TEST_CASE(writing_a_step_again_replaces_it_whole) {
  plexus::test::TempDir tmp;
  const fs::path root = tmp.path();
  write_step(root, 3);
  const Fixture f(99);
  ck::write_checkpoint(root, 3, f.model(), f.optimizer(), boost::json::object{{"step", 3}, {"second", true}});
  const auto c = ck::load_checkpoint(root / "step_00000003");
  BOOST_TEST(c.state.at("second").as_bool());
  std::vector<float> values(6);
  std::memcpy(values.data(), c.model.tensor("decoder.layers.0.mlp.linear_fc1.weight").bytes.data(), 24);
  BOOST_TEST(values == f.weight);
  BOOST_TEST((entries(root) == std::vector<std::string>{"step_00000003"}));
}

BOOST_AUTO_TEST_CASE(a_failed_write_creates_no_checkpoint_and_leaves_no_partial) {
  plexus::test::TempDir tmp;
  const fs::path root = tmp.path();
  write_step(root, 1);
  // Invalid tensors are refused before anything is written.
  const std::vector<float> two{1, 2};
  const std::vector<ck::TensorData> bad{{"w", ck::DType::f32, {3}, std::as_bytes(std::span(two))}};
  BOOST_CHECK_THROW(ck::write_checkpoint(root, 2, bad, {}, boost::json::object{}), std::invalid_argument);
  BOOST_CHECK_THROW(write_step(root, -1), std::invalid_argument);
  BOOST_TEST((entries(root) == std::vector<std::string>{"step_00000001"}));
  // A root that cannot be a directory.
  const fs::path file = tmp.write("plain", "x");
  BOOST_CHECK_EXCEPTION(write_step(file / "sub", 2), CheckpointError, [&](const CheckpointError& e) {
    BOOST_TEST_INFO(e.what());
    return contains(e.what(), (file / "sub").string());
  });
  BOOST_TEST(ck::load_checkpoint(root / "step_00000001").step == 1);
}

// create_checkpoint writes exactly the directory named, and never over anything.
BOOST_AUTO_TEST_CASE(create_checkpoint_writes_a_new_directory_only) {
  plexus::test::TempDir tmp;
  const Fixture f(4);
  const boost::json::object state{{"step", 4}, {"converted", true}};
  const fs::path dir = tmp.path() / "missing" / "parent" / "converted";  // parents are created
  const std::map<std::string, std::string> metadata{{"plexus.layout", "kept"}};
  BOOST_TEST(ck::create_checkpoint(dir, 4, f.model(), f.optimizer(), state, metadata) == dir);
  BOOST_TEST((entries(dir.parent_path()) == std::vector<std::string>{"converted"}));  // no partial left
  const ck::LoadedCheckpoint c = ck::load_checkpoint(dir);
  BOOST_TEST(c.step == 4);
  BOOST_TEST(c.state.at("converted").as_bool());
  BOOST_TEST(c.model.size() == 2U);
  BOOST_TEST(c.optimizer.size() == 1U);
  BOOST_TEST(c.model.metadata().at("plexus.layout") == "kept");
  BOOST_TEST(c.optimizer.metadata().at("plexus.step") == "4");
  // The same bytes as write_checkpoint writes for the same content.
  const fs::path written =
      ck::write_checkpoint(tmp.path() / "root", 4, f.model(), f.optimizer(), state, metadata);
  for (const char* file : {ck::kModelFile, ck::kOptimizerFile, ck::kStateFile, ck::kCompleteMarker})
    BOOST_TEST(read_all(dir / file) == read_all(written / file), file);

  // An existing path, a checkpoint or an empty directory or a file, is refused and left as it was.
  const std::string model_bytes = read_all(dir / ck::kModelFile);
  const fs::path empty = tmp.path() / "empty";
  fs::create_directory(empty);
  const fs::path file = tmp.write("file", "keep");
  for (const fs::path& existing : {dir, empty, file}) {
    const Fixture other(9);
    BOOST_CHECK_EXCEPTION(ck::create_checkpoint(existing, 9, other.model(), other.optimizer(), state), CheckpointError,
                          [&](const CheckpointError& e) {
                            BOOST_TEST_INFO(e.what());
                            return e.file() == existing.string() && contains(e.problem(), "already exists");
                          });
  }
  BOOST_TEST(read_all(dir / ck::kModelFile) == model_bytes);
  BOOST_TEST(fs::is_empty(empty));
  BOOST_TEST(read_all(file) == "keep");
  BOOST_TEST((entries(tmp.path()) == std::vector<std::string>{"empty", "file", "missing", "root"}));

  // A directory named for another step would not load; a canonical name of this step is fine.
  BOOST_CHECK_THROW(ck::create_checkpoint(tmp.path() / "step_00000005", 4, f.model(), f.optimizer(), state),
                    std::invalid_argument);
  BOOST_TEST(!fs::exists(tmp.path() / "step_00000005"));
  const fs::path named = tmp.path() / "step_00000004";
  BOOST_TEST(ck::load_checkpoint(ck::create_checkpoint(named, 4, f.model(), f.optimizer(), state)).step == 4);
  // Invalid tensors are refused before anything is created.
  const std::vector<float> two{1, 2};
  const std::vector<ck::TensorData> bad{{"w", ck::DType::f32, {3}, std::as_bytes(std::span(two))}};
  BOOST_CHECK_THROW(ck::create_checkpoint(tmp.path() / "bad", 1, bad, {}, state), std::invalid_argument);
  BOOST_TEST(!fs::exists(tmp.path() / "bad"));
}

BOOST_AUTO_TEST_CASE(loading_names_each_problem) {
  plexus::test::TempDir tmp;
  const fs::path root = tmp.path();
  std::string file;

  BOOST_TEST(contains(load_error(root / "step_00000099"), "checkpoint directory does not exist"));

  // A partial directory as a crash leaves it: everything but the marker.
  const fs::path dir = write_step(root, 1);
  const fs::path partial = root / ".step_00000002.partial-77";
  fs::copy(dir, partial);
  fs::remove(partial / "COMPLETE");
  BOOST_TEST(load_error(partial, &file) ==
             "incomplete checkpoint (no COMPLETE marker): it was being written when the run stopped");
  BOOST_TEST(file == partial.string());

  const auto fresh = [&](std::int64_t step) { return write_step(root, step); };

  const fs::path missing = fresh(3);
  fs::remove(missing / "optimizer.safetensors");
  BOOST_TEST(load_error(missing, &file) == "missing from the checkpoint");
  BOOST_TEST(file == (missing / "optimizer.safetensors").string());

  // Same size, corrupt header: the reader's own message comes through.
  const fs::path corrupt = fresh(4);
  std::string bytes = read_all(corrupt / "model.safetensors");
  bytes.replace(bytes.find("\"dtype\""), 7, "\"dtypf\"");
  overwrite(corrupt / "model.safetensors", bytes);
  BOOST_TEST(contains(load_error(corrupt, &file), "entry is missing \"dtype\""));
  BOOST_TEST(file == (corrupt / "model.safetensors").string());

  const fs::path truncated = fresh(5);
  bytes = read_all(truncated / "model.safetensors");
  overwrite(truncated / "model.safetensors", bytes.substr(0, bytes.size() - 4));
  BOOST_TEST(contains(load_error(truncated, &file), "but the COMPLETE marker recorded"));
  BOOST_TEST(file == (truncated / "model.safetensors").string());

  const fs::path bad_state = fresh(6);
  std::string state = read_all(bad_state / "state.json");
  state[0] = 'x';
  overwrite(bad_state / "state.json", state);
  BOOST_TEST(contains(load_error(bad_state, &file), "not valid JSON"));
  BOOST_TEST(file == (bad_state / "state.json").string());

  const fs::path bad_marker = fresh(7);
  overwrite(bad_marker / "COMPLETE", "garbage");
  BOOST_TEST(contains(load_error(bad_marker, &file), "not a valid completion marker"));

  const fs::path renamed = root / "step_00000070";
  fs::rename(fresh(8), renamed);
  BOOST_TEST(contains(load_error(renamed), "records step 8 but the directory is step_00000070"));
  // A checkpoint copied elsewhere under another name still loads (and trailing slashes are fine).
  const fs::path copy = tmp.path() / "best";
  fs::copy(fresh(9), copy);
  BOOST_TEST(ck::load_checkpoint(copy).step == 9);
  BOOST_TEST(ck::load_checkpoint(root / "step_00000009/").step == 9);
}

BOOST_AUTO_TEST_CASE(tensor_mismatches_are_reported_all_at_once) {
  plexus::test::TempDir tmp;
  const auto c = ck::load_checkpoint(write_step(tmp.path(), 1));
  const std::vector<ck::ExpectedTensor> expected{
      {"decoder.layers.0.mlp.linear_fc1.weight", {512, 128}, ck::DType::f32},
      {"decoder.layers.0.mlp.linear_fc1.bias", {2}, ck::DType::bf16},
      {"decoder.layers.0.mlp.linear_fc2.weight", {128, 512}, std::nullopt},
  };
  const auto problems = ck::tensor_mismatches(c.model, expected);
  const std::vector<std::string> want{
      "checkpoint tensor decoder.layers.0.mlp.linear_fc1.weight: expected shape [512, 128], found [2, 3]",
      "checkpoint tensor decoder.layers.0.mlp.linear_fc1.bias: expected dtype BF16, found F32",
      "checkpoint tensor decoder.layers.0.mlp.linear_fc2.weight: missing (expected shape [128, 512])",
  };
  BOOST_TEST(problems == want, boost::test_tools::per_element());
  BOOST_CHECK_EXCEPTION(ck::expect_tensors_match(c.model, expected), CheckpointError,
                        [&](const CheckpointError& e) {
                          BOOST_TEST_INFO(e.what());
                          return e.file() == c.model.path().string() &&
                                 contains(e.problem(), "3 tensors do not match what the model expects:\n  " + want[0]) &&
                                 contains(e.problem(), want[2]);
                        });

  // A model that lost a tensor: the checkpoint's extra one is named.
  const std::vector<ck::ExpectedTensor> smaller{{"decoder.layers.0.mlp.linear_fc1.weight", {2, 3}, ck::DType::f32}};
  BOOST_TEST((ck::tensor_mismatches(c.model, smaller) ==
              std::vector<std::string>{
                  "checkpoint tensor decoder.layers.0.mlp.linear_fc1.bias: not expected (found shape [2], F32)"}));
  // Everything matches: no exception.
  const std::vector<ck::ExpectedTensor> exact{{"decoder.layers.0.mlp.linear_fc1.weight", {2, 3}, ck::DType::f32},
                                              {"decoder.layers.0.mlp.linear_fc1.bias", {2}, std::nullopt}};
  BOOST_CHECK_NO_THROW(ck::expect_tensors_match(c.model, exact));
  const std::vector<ck::ExpectedTensor> twice{{"a", {1}, std::nullopt}, {"a", {1}, std::nullopt}};
  BOOST_CHECK_THROW((void)ck::tensor_mismatches(c.model, twice), std::invalid_argument);
}
