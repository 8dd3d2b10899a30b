#include "plexus/data_samples.hpp"

#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <iostream>
#include <optional>

#include "plexus/cli.hpp"
#include "plexus/core/data/blended_dataset.hpp"
#include "plexus/core/data/tokenizer.hpp"
#include "plexus/core/engine/trainer.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus::cli {
namespace {

namespace po = boost::program_options;

constexpr const char* kHelp =
    R"(usage: plexus data samples [--config FILE] [--set KEY=VALUE]... [--split train|valid] [--first N]
                           [--data-parallel N] [--json]

The samples a run with this config trains and validates on, built as plexus-train builds them
(data.path's blend, data.split, model.seq_length, run.seed; train.steps x the global batch
training samples), without training. Prints each split's datasets, sequence ranges, samples and
epochs, then the first N samples of --split (default train) as text (data.tokenizer) or token ids.

examples:
  plexus data samples --set data.path=build/data/fortunes --first 3
  plexus data samples --set 'data.path=[0.3, "a", 0.7, "b"]' --set data.split=90,10,0 --json
)";

boost::json::array first_samples(const data::SplitSamples& samples, uint64_t count, uint32_t seq_length) {
  boost::json::array rows;
  std::vector<int64_t> tokens(std::size_t{seq_length} + 1);
  for (uint64_t i = 0; i < std::min(count, samples.size()); ++i) {
    samples.sample(i, tokens);
    rows.emplace_back(boost::json::array(tokens.begin(), tokens.end()));
  }
  return rows;
}

void describe(const char* name, const data::SplitSamples& samples) {
  std::cout << name << ": " << samples.size() << " samples";
  if (samples.datasets().size() > 1) std::cout << " blended from";
  std::cout << "\n";
  for (const data::GptDataset& part : samples.datasets()) {
    const data::GptIndexParams& p = part.params();
    std::cout << "  " << part.dataset().prefix().string() << ": sequences " << p.first_sequence << " to "
              << p.end_sequence << " of " << part.dataset().sequence_count() << ", " << part.size()
              << " samples of " << p.seq_length + 1 << " tokens, " << part.epochs()
              << (part.epochs() == 1 ? " epoch" : " epochs") << (part.from_cache() ? " (cached indices)" : "")
              << "\n";
  }
}

}  // namespace

int data_samples(const std::vector<std::string>& args) {
  std::string config_file, split = "train";
  std::vector<std::string> overrides;
  uint64_t first = 3;
  int64_t data_parallel = 1;
  bool json = false, help = false;
  po::options_description options("options");
  options.add_options()("config", po::value(&config_file),
                        "run config (JSON); the embedded default when omitted")(
      "set", po::value(&overrides)->composing(), "override a key (repeatable)")(
      "split", po::value(&split), "the split whose first samples are shown: train or valid")(
      "first", po::value(&first), "how many samples to show (default 3)")(
      "data-parallel", po::value(&data_parallel),
      "data-parallel ranks of the run (the global batch's factor)")(
      "json", po::bool_switch(&json), "print sizes and samples (token ids) as JSON")(
      "help,h", po::bool_switch(&help), "this help");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).run(), vm);
  po::notify(vm);
  if (help) {
    std::cout << kHelp << "\n" << options;
    return 0;
  }
  if (split != "train" && split != "valid")
    throw std::invalid_argument("--split must be train or valid, got '" + split + "'");
  if (data_parallel < 1) throw std::invalid_argument("--data-parallel must be at least 1");
  std::optional<std::filesystem::path> file;
  if (!config_file.empty()) file = config_file;
  const boost::json::value run_config = load_run_config(file, overrides);
  const data::MegatronDataConfig config = megatron_data_config(run_config, data_parallel);
  const auto splits = data::build_megatron_datasets(config);
  const std::size_t which = split == "train" ? 0 : 1;

  if (json) {
    boost::json::object out;
    for (std::size_t i = 0; i < 2; ++i) {
      boost::json::object s;
      s["size"] = splits[i]->size();
      s["wanted"] = *config.sizes[i];
      if (i == which) s["samples"] = first_samples(*splits[i], first, config.seq_length);
      out[data::split_name(static_cast<data::Split>(i))] = std::move(s);
    }
    std::cout << boost::json::serialize(out) << "\n";
    return 0;
  }
  describe("train", *splits[0]);
  describe("valid", *splits[1]);
  const auto tokenizer = data::open_tokenizer(std::string(run_config.at("data").at("tokenizer").as_string()));
  const boost::json::array rows = first_samples(*splits[which], first, config.seq_length);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::vector<int32_t> ids;
    for (const auto& v : rows[r].as_array()) ids.push_back(static_cast<int32_t>(v.as_int64()));
    std::cout << "\n" << split << " sample " << r << ":\n" << tokenizer->decode_for_display(ids) << "\n";
  }
  return 0;
}

}  // namespace plexus::cli
