// `plexus-train`: the reference trainer.
//   plexus-train [--config FILE] [--set KEY=VALUE]... [--resume DIR|latest] [--plugin-path DIR]...
// Validates the whole run (config, plugins, components, dataset) before the first step, then
// trains: progress on stderr, metrics in <run.output_dir>/metrics.jsonl, validation loss and a
// text sample at each evaluation, checkpoints in <run.output_dir>/checkpoints.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "plexus/cli.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/engine/trainer.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"

int main(int argc, char** argv) {
  namespace po = plexus::cli::po;
  return plexus::cli::run_guarded("plexus-train", [&] {
    plexus::cli::PluginOptions plugin_options;
    std::string config_file;
    std::string resume;
    std::vector<std::string> overrides;
    bool help = false;
    po::options_description options("usage: plexus-train [--config FILE] [--set KEY=VALUE]... [--resume DIR]\n\noptions");
    plugin_options.add_to(options);
    options.add_options()("config", po::value(&config_file), "run config (JSON); the embedded default when omitted")(
        "set", po::value(&overrides)->composing(), "override a key, e.g. --set train.steps=50 (repeatable)")(
        "resume", po::value(&resume),
        "continue from a checkpoint directory, or 'latest' for the newest in <run.output_dir>/checkpoints")(
        "help,h", po::bool_switch(&help), "this help");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, options), vm);
    po::notify(vm);
    if (help) {
      std::cout << options;
      return 0;
    }
    std::optional<std::filesystem::path> file;
    if (!config_file.empty()) file = config_file;
    boost::json::value run_config = plexus::load_run_config(file, overrides);
    plexus::PluginHost host;
    plexus::load_configured_plugins(host, run_config, {plugin_options.dirs(), plugin_options.allow_world_writable});
    plexus::check_components(host, run_config);

    const std::filesystem::path checkpoints =
        std::filesystem::path(std::string(run_config.at("run").at("output_dir").as_string())) / "checkpoints";
    std::optional<std::filesystem::path> resume_dir;
    if (resume == "latest") {
      const auto latest = plexus::checkpoint::latest_checkpoint(checkpoints);
      if (!latest) throw std::runtime_error("--resume latest: no complete checkpoint in " + checkpoints.string());
      resume_dir = latest->dir;
    } else if (!resume.empty()) {
      resume_dir = resume;
    } else if (plexus::checkpoint::latest_checkpoint(checkpoints)) {
      // Starting over would interleave two runs' checkpoints and metrics.
      throw std::runtime_error(checkpoints.string() + " already holds checkpoints of an earlier run: continue it with "
                               "--resume latest, or choose another run.output_dir");
    }

    plexus::Trainer trainer(host, run_config, plexus::make_indexed_data_source(run_config));
    if (resume_dir) trainer.resume_from(*resume_dir);
    const plexus::TrainResult result = trainer.run();
    std::cerr << "plexus-train: done: " << result.steps_done << " steps";
    if (result.final_val_loss) std::cerr << ", val_loss " << *result.final_val_loss;
    if (!result.last_checkpoint.empty()) std::cerr << ", checkpoint " << result.last_checkpoint.string();
    std::cerr << "\n";
    return 0;
  });
}
