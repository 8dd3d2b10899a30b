// `plexus model show`: the model a run config builds, before any job runs: per logical and
// physical decoder layer its symbol, component, parameters, FLOPs per token and pipeline segment,
// with the embedding, final norm and head, and the totals.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "plexus/cli.hpp"
#include "plexus/commands.hpp"
#include "plexus/core/engine/mimo_trainer.hpp"
#include "plexus/core/engine/model.hpp"
#include "plexus/core/engine/pipeline_layout.hpp"
#include "plexus/core/json_text.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: plexus model show [--config FILE] [--set KEY=VALUE]... [--pp N] [--tp N] [--cp N] [--json]

Builds the model of a run config (the embedded default when no --config) and prints its layers as
the engine assembled them: for every unit (embedding, each decoder layer, final norm, head) the
logical and physical layer number, the pattern symbol, the layer component, the parameters it
holds (its mHC connection's included) and its training FLOPs per token (forward and backward),
and the pipeline segment; then the totals. With --pp N, also the pipeline stage and virtual stage
each unit goes to when the model is cut over N pipeline ranks (distributed.pipeline's settings;
a misfit is refused as plexus-train refuses it). With --tp N, also the parameters each of N
tensor-parallel ranks holds per unit (the layers' split parameters divided, the others whole, the
vocabulary padded for N ranks) and, in the totals, a rank's bytes of float32 parameters,
gradients and AdamW moments; the layers check their own divisibility (heads, query groups, MLP
width) when a job starts. Every unit also shows the activations one training microbatch
(train.micro_batch_size x model.seq_length) leaves on a rank for its backward, as its layer
estimates them (with the connection's and the engine's tensors kept for the backward), and the
totals their sum: with --cp N for a rank holding 1/N of each sequence under context
parallelism (attention keeping one log-sum-exp per query row instead of the probabilities,
Mamba-2 1/N of the heads over the whole sequence); the layers are built whole here, so the
activations are tp 1's even with --tp. A MIMO config (mimo.modules) shows every module's model:
each encoder under its name, then the language model (with --json: {"modules": [...]}, each
with its "module" name). Nothing is trained and nothing is written.
  plexus model show --set 'model.pattern=M*M-' --set model.num_layers=4
  plexus model show --pp 2 --set distributed.pipeline.virtual_stages=2
  plexus model show --tp 4 --set model.num_attention_heads=8
  plexus model show --cp 4 --set model.seq_length=8192
)";

// A rank's elements of a unit at tp ranks.
int64_t per_rank(const Model::UnitSummary& row, int64_t tp) {
  return row.parameters - row.tensor_parallel + row.tensor_parallel / tp;
}

std::string count_text(double value) {
  char buffer[32];
  if (value >= 1e9)
    std::snprintf(buffer, sizeof buffer, "%.2fG", value / 1e9);
  else if (value >= 1e6)
    std::snprintf(buffer, sizeof buffer, "%.2fM", value / 1e6);
  else if (value >= 1e4)
    std::snprintf(buffer, sizeof buffer, "%.1fk", value / 1e3);
  else
    std::snprintf(buffer, sizeof buffer, "%.0f", value);
  return buffer;
}

// Bytes in binary units: "512 B", "3.2 MiB", "1.50 GiB".
std::string bytes_text(double value) {
  char buffer[32];
  if (value >= 1024.0 * 1024 * 1024)
    std::snprintf(buffer, sizeof buffer, "%.2f GiB", value / (1024.0 * 1024 * 1024));
  else if (value >= 1024.0 * 1024)
    std::snprintf(buffer, sizeof buffer, "%.1f MiB", value / (1024.0 * 1024));
  else if (value >= 1024.0)
    std::snprintf(buffer, sizeof buffer, "%.1f KiB", value / 1024.0);
  else
    std::snprintf(buffer, sizeof buffer, "%.0f B", value);
  return buffer;
}

std::string number_or_dash(int64_t value) {
  return value < 0 ? "-" : std::to_string(value);
}

std::string padded(const std::string& text, std::size_t width) {
  return text.size() >= width ? text + " " : text + std::string(width - text.size(), ' ');
}

// What `plexus model show` reports of a built model, at the sizes asked for.
struct Shown {
  const Model& model;
  int64_t tensor_size = 1;
  uint32_t pipeline_size = 1, context_size = 1;
  int64_t micro_batch = 1;
  std::vector<Model::UnitSummary> rows = {};
  Model::ActivationEstimate activations = {};
  int64_t total_parameters = 0, rank_parameters = 0;
  int64_t rank_bytes = 0;  // float32 values, gradients and AdamW's two moments, without ZeRO
  std::optional<double> total_flops = {};
  PipelineLayout layout = {};

  // Where a unit goes at --pp: a decoder layer by its placement, the embedding with chunk 0, the
  // final norm, head and MTP depths with the last.
  PipelineLayout::Stage stage_of(const Model::UnitSummary& row) const {
    if (row.mtp_depth == 0 && row.logical >= 0) return layout.stage_of(static_cast<uint32_t>(row.logical));
    const plexus::ChunkSpec& chunk = row.kind == "embedding" ? layout.chunks.front() : layout.chunks.back();
    return PipelineLayout::Stage{chunk.index % pipeline_size, chunk.index / pipeline_size};
  }
};

Shown shown(const Model& model, const boost::json::value& run_config, int64_t tensor_size,
            uint32_t pipeline_size, uint32_t context_size) {
  Shown s{model, tensor_size, pipeline_size, context_size};
  s.micro_batch = run_config.at("train").at("micro_batch_size").to_number<int64_t>();
  s.rows = model.summary();
  s.activations = model.activation_estimate(s.micro_batch, context_size);
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const Parameter& p = model.parameters()[i];
    s.total_parameters += p.whole_numel();
    s.rank_parameters += p.tp.tensor_parallel() ? p.whole_numel() / tensor_size : p.whole_numel();
  }
  s.rank_bytes = 16 * s.rank_parameters;
  s.total_flops = model.flops_per_token();
  s.layout = pipeline_layout(model.plan(), PipelineSettings::from_run_config(run_config), pipeline_size);
  return s;
}

boost::json::value optional_json(const std::optional<double>& value) {
  return value ? boost::json::value(*value) : boost::json::value(nullptr);
}

boost::json::object to_json(const Shown& s) {
  boost::json::array units;
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    const Model::UnitSummary& row = s.rows[i];
    boost::json::object u{{"label", row.label},        {"kind", row.kind},
                          {"symbol", row.symbol},      {"component", row.component},
                          {"logical", row.logical},    {"physical", row.physical},
                          {"segment", row.segment},    {"parameters", row.parameters},
                          {"mtp_depth", row.mtp_depth}};
    if (s.tensor_size > 1) u["parameters_per_tp_rank"] = per_rank(row, s.tensor_size);
    u["flops_per_token"] = optional_json(row.flops_per_token);
    u["activation_bytes"] = optional_json(s.activations.units[i]);
    u["pipeline_stage"] = s.stage_of(row).rank;
    u["virtual_stage"] = s.stage_of(row).virtual_stage;
    units.push_back(std::move(u));
  }
  return boost::json::object{{"decoder", s.model.plan().summary},
                             {"units", std::move(units)},
                             {"parameters", s.total_parameters},
                             {"pipeline_size", s.pipeline_size},
                             {"tensor_parallel_size", s.tensor_size},
                             {"padded_vocab_size", s.model.settings().padded_vocab_size},
                             {"parameters_per_tp_rank", s.rank_parameters},
                             {"bytes_per_tp_rank", s.rank_bytes},
                             {"virtual_stages", s.layout.virtual_stages},
                             {"flops_per_token", optional_json(s.total_flops)},
                             {"context_parallel_size", s.context_size},
                             {"micro_batch_size", s.micro_batch},
                             {"stream_activation_bytes", s.activations.streams},
                             {"activation_bytes_per_microbatch", optional_json(s.activations.total)}};
}

void print_table(const Shown& s) {
  const Model& model = s.model;
  std::cout << "model: " << model.plan().summary << ", hidden " << model.settings().hidden_size
            << ", sequence " << model.settings().seq_length << "\n";
  std::cout << padded("logical", 9) << padded("physical", 10) << padded("symbol", 8) << padded("unit", 52)
            << padded("parameters", 12) << (s.tensor_size > 1 ? padded("per tp rank", 13) : "")
            << padded("FLOPs/token", 13) << padded("activations", 13) << padded("segment", 9)
            << (s.pipeline_size > 1 ? "stage  vstage" : "") << "\n";
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    const Model::UnitSummary& row = s.rows[i];
    // An MTP depth's layers are numbered within it: "mtp 1" says whose they are.
    const std::string logical =
        row.mtp_depth > 0 ? "mtp " + std::to_string(row.mtp_depth) : number_or_dash(row.logical);
    std::cout << padded(logical, 9) << padded(number_or_dash(row.physical), 10)
              << padded(row.symbol.empty() ? "-" : row.symbol, 8) << padded(row.label, 52)
              << padded(count_text(static_cast<double>(row.parameters)), 12)
              << (s.tensor_size > 1
                      ? padded(count_text(static_cast<double>(per_rank(row, s.tensor_size))), 13)
                      : "")
              << padded(row.flops_per_token ? count_text(*row.flops_per_token) : "?", 13)
              << padded(s.activations.units[i] ? bytes_text(*s.activations.units[i]) : "?", 13)
              << padded(row.mtp_depth > 0 ? "-" : number_or_dash(row.segment), 9);
    if (s.pipeline_size > 1)
      std::cout << padded(std::to_string(s.stage_of(row).rank), 7) << s.stage_of(row).virtual_stage;
    std::cout << "\n";
  }
  std::cout << "total: " << count_text(static_cast<double>(s.total_parameters)) << " parameters ("
            << s.total_parameters << "), "
            << (s.total_flops ? count_text(*s.total_flops) : std::string("unknown"))
            << " training FLOPs per token"
            << (model.produces_loss() && model.settings().tied
                    ? " (the tied embedding and head share one matrix, counted once in the total)"
                    : "")
            << "\n";
  if (s.tensor_size > 1)
    std::cout << "per tp rank of " << s.tensor_size << ": "
              << count_text(static_cast<double>(s.rank_parameters)) << " parameters (" << s.rank_parameters
              << "), " << count_text(static_cast<double>(s.rank_bytes))
              << "B of float32 parameters, gradients and AdamW moments; vocabulary padded to "
              << model.settings().padded_vocab_size << "\n";
  const int64_t seq = model.settings().seq_length;
  std::cout << "activations of one training microbatch on a rank (" << s.micro_batch << " x " << seq
            << " tokens";
  if (s.context_size > 1)
    std::cout << ", cp " << s.context_size << ": " << s.micro_batch << " x " << seq / s.context_size
              << " a rank";
  // The layers here are built whole: what a tp rank keeps is not theirs to tell.
  if (s.tensor_size > 1) std::cout << ", the layers whole as at tp 1";
  std::cout << "): " << (s.activations.total ? bytes_text(*s.activations.total) : std::string("unknown"))
            << ", the streams' " << bytes_text(s.activations.streams)
            << " included; held from its forward to its backward (the schedule decides how many at once)\n";
}

}  // namespace

int model_command(const std::vector<std::string>& args) {
  return run_guarded("plexus model", [&] {
    PluginOptions plugin_options;
    std::string config_file;
    std::vector<std::string> overrides;
    std::string action;
    bool json = false;
    bool help = false;
    uint32_t pipeline_size = 1;
    int64_t tensor_size = 1;
    uint32_t context_size = 1;
    po::options_description options("options");
    plugin_options.add_to(options);
    options.add_options()("config", po::value(&config_file),
                          "run config (JSON); the embedded default when omitted")(
        "set", po::value(&overrides)->composing(), "override a key (repeatable)")(
        "pp", po::value(&pipeline_size),
        "show each unit's stage when the model is cut over N pipeline ranks")(
        "tp", po::value(&tensor_size), "show each tensor-parallel rank's parameters when split over N ranks")(
        "cp", po::value(&context_size),
        "estimate each rank's activations when the sequences are cut over N context-parallel ranks")(
        "json", po::bool_switch(&json), "print the rows and totals as JSON")("help,h", po::bool_switch(&help),
                                                                             "this help");
    po::options_description hidden;
    hidden.add_options()("action", po::value(&action));
    po::options_description all;
    all.add(options).add(hidden);
    po::positional_options_description positional;
    positional.add("action", 1);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
    po::notify(vm);
    if (help) {
      std::cout << kHelp << "\n" << options;
      return 0;
    }
    if (action != "show") {
      std::cerr << "plexus model: error: expected 'show'\n\n" << kHelp;
      return 1;
    }
    std::optional<std::filesystem::path> file;
    if (!config_file.empty()) file = config_file;
    boost::json::value run_config = load_run_config(file, overrides);
    PluginHost host;
    load_configured_plugins(host, run_config, {plugin_options.dirs(), plugin_options.allow_world_writable});
    check_components(host, run_config);
    if (tensor_size < 1)
      throw std::invalid_argument("--tp must be at least 1, got " + std::to_string(tensor_size));
    if (context_size < 1)
      throw std::invalid_argument("--cp must be at least 1, got " + std::to_string(context_size));
    // A MIMO model (mimo.modules) shows each module's model: the encoders, then the language model.
    std::vector<MimoModuleModel> modules;
    if (is_mimo(run_config)) {
      check_mimo_modules(host, run_config, {plugin_options.dirs(), plugin_options.allow_world_writable});
      modules = mimo_module_models(run_config);
    } else {
      modules.push_back({"", run_config, {}});
    }
    boost::json::array shown_modules;
    for (MimoModuleModel& module : modules) {
      module.options.padding_tp = tensor_size;
      const Model model(host, module.run_config, module.options);
      const Shown s = shown(model, module.run_config, tensor_size, pipeline_size, context_size);
      if (!json) {
        if (!module.name.empty())
          std::cout << (&module == &modules.front() ? "" : "\n") << "module " << module.name << ":\n";
        print_table(s);
      } else if (module.name.empty()) {
        std::cout << json_text(to_json(s)) << "\n";
      } else {
        boost::json::object entry = to_json(s);
        entry["module"] = module.name;
        shown_modules.push_back(std::move(entry));
      }
    }
    if (json && !shown_modules.empty())
      std::cout << json_text(boost::json::object{{"modules", shown_modules}}) << "\n";
    return 0;
  });
}

}  // namespace plexus::cli
