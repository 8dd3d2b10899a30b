// `plexus checkpoint inspect|convert` as a user runs them on checkpoints plexus-train wrote.
// The proof of the conversion: "[*-][*-]" (the GPT's grouped layout) and "*-*-" (Megatron's
// ungrouped hybrid layout) compute exactly the same thing: a grouped run's checkpoint, converted,
// resumes as "*-*-" with bit-identical losses (forward), and after five steps its weights and AdamW
// moments, converted back, are byte-identical to the grouped run's (backward and optimizer).
#define BOOST_TEST_MODULE checkpoint_cli
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "run_process.hpp"
#include "train_corpus.hpp"

using plexus::test::kBin;
using plexus::test::quote;
using plexus::test::run_process;
using plexus::test::step_losses;
using Corpus = plexus::test::TrainCorpus;
namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string file_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The value of the "label   value" line of inspect's output that starts with label ("" if none).
std::string line_of(const std::string& output, const std::string& label) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(label + " ")) continue;
    const std::size_t value = line.find_first_not_of(' ', label.size());
    return value == std::string::npos ? "" : line.substr(value);
  }
  return "";
}

const char* const kFiles[] = {ck::kModelFile, ck::kOptimizerFile, ck::kStateFile, ck::kCompleteMarker};

// The corpus's 2-layer GPT spelled as grouped and as ungrouped patterns.
const std::string kGrouped = "--set 'model.pattern=[*-][*-]' --set model.num_layers=4";
const std::string kUngrouped = "--set 'model.pattern=*-*-' --set model.num_layers=4";

plexus::test::ProcessResult convert(const fs::path& source, const fs::path& destination,
                                    const std::string& options) {
  return run_process(kBin + "plexus checkpoint convert " + quote(source.string()) + " " +
                     quote(destination.string()) + " " + options);
}

fs::path step_dir(const fs::path& run, int step) {
  return run / "checkpoints" / ck::checkpoint_dir_name(step);
}

}  // namespace

BOOST_AUTO_TEST_CASE(inspect_lists_the_step_the_model_and_every_tensor) {
  Corpus corpus;
  const fs::path run = corpus.dir.path() / "run";
  const auto trained =
      run_process(corpus.train(run.string(), "--set train.steps=4 --set checkpoint.interval=4"));
  BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
  const fs::path dir = step_dir(run, 4);

  const auto text = run_process(kBin + "plexus checkpoint inspect " + quote(dir.string()));
  BOOST_TEST_REQUIRE(text.status == 0, text.output);
  BOOST_TEST(line_of(text.output, "step") == "4 (COMPLETE marker present, file sizes as recorded)",
             text.output);
  BOOST_TEST(line_of(text.output, "model") ==
             "the GPT of 2 layers, hidden 32, 4 heads, sequence 32, vocabulary 256");
  BOOST_TEST(line_of(text.output, "data_position") == "32");  // 4 steps x 2 microbatches x 4 samples
  BOOST_TEST(line_of(text.output, "format") == "plexus-checkpoint-1");
  BOOST_TEST(contains(text.output, "  decoder.layers.1.  (6 tensors"), text.output);
  // The layers the stack stores under a prefix, in its words.
  BOOST_TEST(contains(text.output, " bytes): attention (transformer.attention) and mlp (transformer.mlp)\n"),
             text.output);
  BOOST_TEST(contains(text.output, "    self_attention.linear_qkv.weight"), text.output);
  BOOST_TEST(contains(text.output, "optimizer.safetensors: 28 tensors"), text.output);
  BOOST_TEST(contains(text.output, "model.safetensors: 14 tensors"),
             text.output);  // 1 + 2 x 6 + 1 (tied head)
  // Layers in numeric order, the embedding before them and the final norm after.
  const auto embedding = text.output.find("embedding.word_embeddings.weight");
  const auto layer0 = text.output.find("decoder.layers.0.");
  const auto layer1 = text.output.find("decoder.layers.1.");
  const auto final_norm = text.output.find("decoder.final_layernorm.weight");
  BOOST_TEST(
      (embedding < layer0 && layer0 < layer1 && layer1 < final_norm && final_norm != std::string::npos));

  // --json: every tensor the file holds, with its shape, dtype and bytes, and the totals.
  const auto json = run_process(kBin + "plexus checkpoint inspect --json " + quote(dir.string()));
  BOOST_TEST_REQUIRE(json.status == 0, json.output);
  const boost::json::value doc = boost::json::parse(json.output);
  const ck::SafetensorsFile model = ck::SafetensorsFile::open(dir / ck::kModelFile);
  BOOST_TEST(doc.at("step").as_int64() == 4);
  BOOST_TEST(doc.at("complete").as_bool());
  BOOST_TEST(doc.at("state").at("data_position").as_int64() == 32);
  BOOST_TEST(doc.at("config").at("model").at("num_layers").as_int64() == 2);
  BOOST_TEST(doc.at("decoder").at("summary").as_string() == "the GPT of 2 layers");
  BOOST_TEST(doc.at("decoder").at("layers").as_array().size() == 4u);
  BOOST_TEST(doc.at("decoder").at("layers").at(3).at("label").as_string() == "decoder.layers.1 mlp");
  const auto& tensors = doc.at("model_file").at("tensors").as_array();
  BOOST_TEST_REQUIRE(tensors.size() == model.size());
  std::int64_t parameters = 0;
  for (const auto& t : tensors) {
    const std::string name(t.at("name").as_string());
    const ck::TensorInfo& info = model.info(name);
    std::vector<std::int64_t> shape;
    for (const auto& d : t.at("shape").as_array()) shape.push_back(d.as_int64());
    BOOST_TEST((shape == info.shape), name);
    BOOST_TEST(t.at("dtype").as_string() == "F32");
    BOOST_TEST(static_cast<std::uint64_t>(t.at("bytes").as_int64()) == info.end - info.begin);
    parameters += t.at("elements").as_int64();
  }
  BOOST_TEST(doc.at("model_file").at("parameters").as_int64() == parameters);
  BOOST_TEST(doc.at("optimizer_file").at("tensor_count").as_int64() ==
             2 * static_cast<std::int64_t>(model.size()));
  BOOST_TEST(doc.at("optimizer_file").at("elements").as_int64() == 2 * parameters);

  // The run directory means its newest complete checkpoint.
  const auto latest = run_process(kBin + "plexus checkpoint inspect " + quote(run.string()));
  BOOST_TEST(latest.status == 0, latest.output);
  BOOST_TEST(contains(latest.output, "using the newest, " + dir.string()), latest.output);
}

// Layers sort by number (2 before 10), whatever wrote the checkpoint; a state without a run config
// is shown as such.
BOOST_AUTO_TEST_CASE(inspect_orders_layers_by_number) {
  plexus::test::TempDir tmp;
  const std::vector<float> values(6, 1.0f);
  const auto bytes = std::as_bytes(std::span(values));
  const std::vector<ck::TensorData> model{
      {"output_layer.weight", ck::DType::f32, {2, 3}, bytes},
      {"decoder.layers.10.mlp.linear_fc2.weight", ck::DType::f32, {6}, bytes},
      {"decoder.layers.2.mlp.linear_fc2.weight", ck::DType::f32, {3, 2}, bytes},
      {"embedding.word_embeddings.weight", ck::DType::f32, {1, 6}, bytes}};
  const fs::path dir = ck::write_checkpoint(tmp.path(), 7, model, {}, boost::json::object{{"step", 7}});
  const auto r = run_process(kBin + "plexus checkpoint inspect " + quote(dir.string()));
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  BOOST_TEST(line_of(r.output, "model") == "unknown (state.json has no run config)", r.output);
  BOOST_TEST(contains(r.output, "model.safetensors: 4 tensors, 24 parameters, 96 bytes"), r.output);
  const std::vector<std::string> order{"embedding.word_embeddings.weight", "decoder.layers.2.",
                                       "decoder.layers.10.", "output_layer.weight"};
  std::size_t at = 0;
  for (const auto& name : order) {
    const std::size_t found = r.output.find(name, at);
    BOOST_TEST(found != std::string::npos, name + " in order in\n" + r.output);
    at = found == std::string::npos ? at : found;
  }
}

// THE PROOF: "[*-][*-]" trains 10 steps; its step-5 checkpoint, converted to "*-*-", resumes with
// the same losses for steps 6..10, bit for bit, and ends with the same weights and moments.
BOOST_AUTO_TEST_CASE(grouped_and_ungrouped_compute_the_same_to_the_bit) {
  Corpus corpus;
  const fs::path grouped = corpus.dir.path() / "grouped";
  const auto a = run_process(
      corpus.train(grouped.string(), kGrouped + " --set train.steps=10 --set checkpoint.interval=5"));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  const std::vector<double> expected = step_losses(grouped / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == 10u);

  const fs::path start = corpus.dir.path() / "ungrouped_start";
  const auto to_hybrid = convert(step_dir(grouped, 5), start, "--direction gpt-to-hybrid");
  BOOST_TEST_REQUIRE(to_hybrid.status == 0, to_hybrid.output);
  BOOST_TEST(contains(to_hybrid.output, "--set 'model.pattern=*-*-' --set model.num_layers=4"),
             to_hybrid.output);
  const ck::LoadedCheckpoint converted = ck::load_checkpoint(start);
  BOOST_TEST(converted.step == 5);
  BOOST_TEST(converted.model.contains("decoder.layers.2.input_layernorm.weight"));  // GPT layer 1's attention
  BOOST_TEST(converted.model.contains("decoder.layers.3.mlp.linear_fc1.weight"));   // GPT layer 1's MLP
  BOOST_TEST(converted.model.contains("decoder.final_norm.weight"));
  BOOST_TEST(converted.optimizer.contains("decoder.layers.3.pre_mlp_layernorm.weight.exp_avg_sq"));
  BOOST_TEST(converted.state.at("config").at("model").at("pattern").as_string() == "*-*-");
  const ck::LoadedCheckpoint original = ck::load_checkpoint(step_dir(grouped, 5));
  BOOST_TEST(converted.state.at("data_position") == original.state.at("data_position"));
  BOOST_TEST(converted.model.size() == original.model.size());
  BOOST_TEST(converted.optimizer.size() == original.optimizer.size());

  const fs::path ungrouped = corpus.dir.path() / "ungrouped";
  const auto b =
      run_process(corpus.train(ungrouped.string(), kUngrouped +
                                                       " --set train.steps=10 --set checkpoint.interval=5"
                                                       " --resume " +
                                                       quote(start.string())));
  BOOST_TEST_REQUIRE(b.status == 0, b.output);
  const std::vector<double> resumed = step_losses(ungrouped / "metrics.jsonl");
  BOOST_TEST_REQUIRE(resumed.size() == 5u);
  const std::vector<double> tail(expected.begin() + 5, expected.end());
  BOOST_TEST(resumed == tail, boost::test_tools::per_element());  // exact: == on doubles

  const fs::path back = corpus.dir.path() / "back";
  const auto to_gpt = convert(step_dir(ungrouped, 10), back, "--direction hybrid-to-gpt");
  BOOST_TEST_REQUIRE(to_gpt.status == 0, to_gpt.output);
  for (const char* file : {ck::kModelFile, ck::kOptimizerFile}) {
    const std::string bytes = file_bytes(back / file);
    BOOST_TEST(!bytes.empty());
    BOOST_TEST((bytes == file_bytes(step_dir(grouped, 10) / file)), file);
  }
}

// GPT -> ungrouped -> GPT gives back the checkpoint it started from, every file byte for byte.
BOOST_AUTO_TEST_CASE(gpt_to_ungrouped_and_back_is_the_identity) {
  Corpus corpus;
  const fs::path run = corpus.dir.path() / "run";
  const auto trained =
      run_process(corpus.train(run.string(), "--set train.steps=3 --set checkpoint.interval=3"));
  BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
  const fs::path hybrid = corpus.dir.path() / "hybrid";
  const fs::path gpt =
      corpus.dir.path() / "gpt" / "step_00000003";  // parents created; the name matches the step
  BOOST_TEST_REQUIRE(convert(step_dir(run, 3), hybrid, "--direction gpt-to-hybrid").status == 0);
  const auto back = convert(hybrid, gpt, "--direction hybrid-to-gpt --hybrid-layer-pattern '*-*-'");
  BOOST_TEST_REQUIRE(back.status == 0, back.output);
  for (const char* file : kFiles)
    BOOST_TEST((file_bytes(gpt / file) == file_bytes(step_dir(run, 3) / file)), file);
  BOOST_TEST(file_bytes(hybrid / ck::kModelFile) != file_bytes(gpt / ck::kModelFile));  // renamed in between
}

// Transformer Engine's names (the norms fused into linear_qkv and linear_fc1) convert by their
// layer's prefix like the local ones: a GPT checkpoint spelled that way, written by the core.
BOOST_AUTO_TEST_CASE(transformer_engine_names_convert_by_prefix) {
  Corpus corpus;
  const fs::path run = corpus.dir.path() / "run";
  const auto trained =
      run_process(corpus.train(run.string(), "--set train.steps=2 --set checkpoint.interval=2"));
  BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
  const ck::LoadedCheckpoint local = ck::load_checkpoint(step_dir(run, 2));
  const auto te_name = [](std::string name) {
    for (const auto& [from, to] :
         {std::pair<std::string, std::string>{"input_layernorm.weight",
                                              "self_attention.linear_qkv.layer_norm_weight"},
          {"pre_mlp_layernorm.weight", "mlp.linear_fc1.layer_norm_weight"}})
      if (const auto at = name.find(from); at != std::string::npos) name.replace(at, from.size(), to);
    return name;
  };
  std::vector<ck::TensorData> model, optimizer;
  for (const auto& t : local.model.tensors())
    model.push_back({te_name(std::string(t.name)), t.dtype, {t.shape.begin(), t.shape.end()}, t.bytes});
  for (const auto& t : local.optimizer.tensors())
    optimizer.push_back({te_name(std::string(t.name)), t.dtype, {t.shape.begin(), t.shape.end()}, t.bytes});
  const fs::path te = ck::write_checkpoint(corpus.dir.path() / "te", 2, model, optimizer, local.state);

  const fs::path hybrid = corpus.dir.path() / "hybrid";
  const auto r = convert(te, hybrid, "--direction gpt-to-hybrid");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  const ck::LoadedCheckpoint converted = ck::load_checkpoint(hybrid);
  BOOST_TEST(converted.model.contains("decoder.layers.2.self_attention.linear_qkv.layer_norm_weight"));
  BOOST_TEST(converted.model.contains("decoder.layers.3.mlp.linear_fc1.layer_norm_weight"));
  BOOST_TEST(converted.optimizer.contains("decoder.layers.3.mlp.linear_fc1.layer_norm_weight.exp_avg"));
  BOOST_TEST(!converted.model.contains("decoder.layers.2.mlp.linear_fc1.layer_norm_weight"));
  // GPT layer 1's MLP norm, bytes unchanged under its new name.
  const auto moved = converted.model.tensor("decoder.layers.3.mlp.linear_fc1.layer_norm_weight").bytes;
  const auto original = local.model.tensor("decoder.layers.1.pre_mlp_layernorm.weight").bytes;
  BOOST_TEST(std::equal(moved.begin(), moved.end(), original.begin(), original.end()));
}

// mHC's connection parameters go with their sublayer; the converted run continues exactly.
BOOST_AUTO_TEST_CASE(mhc_connections_follow_their_layers) {
  Corpus corpus;
  const std::string mhc =
      R"(--set mhc.enabled=true --set 'plugins.load=["sequential_scheduler","transformer","mhc_native"]')";
  const fs::path gpt = corpus.dir.path() / "gpt";
  const auto a =
      run_process(corpus.train(gpt.string(), mhc + " --set train.steps=4 --set checkpoint.interval=2"));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  const fs::path start = corpus.dir.path() / "start";
  const auto converted = convert(step_dir(gpt, 2), start, "--direction gpt-to-hybrid");
  BOOST_TEST_REQUIRE(converted.status == 0, converted.output);
  const ck::SafetensorsFile model = ck::SafetensorsFile::open(start / ck::kModelFile);
  BOOST_TEST(model.contains("decoder.layers.2.self_attention_hyper_connection.mapping_proj.weight"));
  BOOST_TEST(model.contains("decoder.layers.3.mlp_hyper_connection.alpha_res"));
  const fs::path hybrid = corpus.dir.path() / "hybrid";
  const auto b = run_process(corpus.train(
      hybrid.string(), mhc + " " + kUngrouped + " --set train.steps=4 --resume " + quote(start.string())));
  BOOST_TEST_REQUIRE(b.status == 0, b.output);
  const std::vector<double> expected = step_losses(gpt / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == 4u);
  BOOST_TEST(
      step_losses(hybrid / "metrics.jsonl") == std::vector<double>(expected.begin() + 2, expected.end()),
      boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(what_cannot_be_converted_is_refused_and_nothing_is_written) {
  Corpus corpus;
  const fs::path run = corpus.dir.path() / "run";
  BOOST_TEST_REQUIRE(
      run_process(corpus.train(run.string(), "--set train.steps=2 --set checkpoint.interval=2")).status == 0);
  const fs::path source = step_dir(run, 2);
  const fs::path out = corpus.dir.path() / "out";
  const auto refused = [&](const std::string& options, const std::string& message, const fs::path& from) {
    const auto r = convert(from, out, options);
    BOOST_TEST(r.status == 1, options);
    BOOST_TEST(contains(r.output, message), r.output);
    BOOST_TEST(!fs::exists(out), options);
  };
  // A layer with no GPT counterpart, in the destination or in the source.
  refused("--direction gpt-to-hybrid --hybrid-layer-pattern 'M*-*-'",
          "layer decoder.layers.0 mamba (mamba.mixer) has no GPT counterpart", source);
  refused("--direction gpt-to-hybrid --hybrid-layer-pattern '*-*--'",
          "has 2 attention layers (transformer.attention) and 3 mlp layers (transformer.mlp)", source);
  refused("--direction gpt-to-hybrid --hybrid-layer-pattern '*-*-*-'",
          "holds the layers of the GPT of 3 layers, the checkpoint those of the GPT of 2 layers", source);
  refused("--direction gpt-to-hybrid --hybrid-layer-pattern '*-*-/*-'", "multi-token-prediction", source);
  refused("--direction gpt-to-hybrid --hybrid-layer-pattern '[*-][*-]'", "resumes with it unconverted",
          source);
  refused("--direction hybrid-to-gpt", "already stores a GPT's tensors", source);
  refused("--direction sideways", "expected gpt-to-hybrid or hybrid-to-gpt", source);
  {  // a source whose pattern has a Mamba layer, written by the core's writer from the real tensors
    const ck::LoadedCheckpoint real = ck::load_checkpoint(source);
    boost::json::value state = real.state;
    state.at("config").at("model").as_object()["pattern"] = "M*-*-";
    state.at("config").at("model").as_object()["num_layers"] = 5;
    std::vector<ck::TensorData> model, optimizer;
    for (const auto& t : real.model.tensors())
      model.push_back({std::string(t.name), t.dtype, {t.shape.begin(), t.shape.end()}, t.bytes});
    for (const auto& t : real.optimizer.tensors())
      optimizer.push_back({std::string(t.name), t.dtype, {t.shape.begin(), t.shape.end()}, t.bytes});
    const fs::path mamba = ck::write_checkpoint(corpus.dir.path() / "mamba", 2, model, optimizer, state);
    refused("--direction hybrid-to-gpt",
            "the checkpoint's decoder (the pattern \"M*-*-\"): layer decoder.layers.0 mamba (mamba.mixer)",
            mamba);
  }
  // A partial checkpoint (no COMPLETE marker), named.
  const fs::path partial = corpus.dir.path() / "partial";
  fs::copy(source, partial);
  fs::remove(partial / ck::kCompleteMarker);
  refused("--direction gpt-to-hybrid", "incomplete checkpoint (no COMPLETE marker)", partial);
  BOOST_TEST(contains(convert(partial, out, "--direction gpt-to-hybrid").output, partial.string()));
  const auto inspect = run_process(kBin + "plexus checkpoint inspect " + quote(partial.string()));
  BOOST_TEST(inspect.status == 1);
  BOOST_TEST(contains(inspect.output, partial.string() + ": incomplete checkpoint"), inspect.output);
  // An existing destination is never written over.
  fs::create_directory(out);
  std::ofstream(out / "keep") << "mine";
  const auto exists = convert(source, out, "--direction gpt-to-hybrid");
  BOOST_TEST(exists.status == 1);
  BOOST_TEST(contains(exists.output, out.string() + ": already exists"), exists.output);
  BOOST_TEST(file_bytes(out / "keep") == "mine");
  BOOST_TEST(std::distance(fs::directory_iterator(out), fs::directory_iterator()) == 1);
}
