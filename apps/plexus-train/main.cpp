// `plexus-train`: the reference trainer.
//   plexus-train [--config FILE] [--set KEY=VALUE]... [--resume DIR|latest] [--plugin-path DIR]...
//   mpirun -np N plexus-train ...   (or srun, or RANK/WORLD_SIZE from another launcher)
// Validates the whole run (config, plugins, components, dataset) before the first step, then
// trains: progress on stderr, metrics in <run.output_dir>/metrics.jsonl, validation loss and a
// text sample at each evaluation, checkpoints in <run.output_dir>/checkpoints.
//
// Under a launcher every rank runs this same program: the distributed runtime joins them, checks
// that they all run the same config, and the trainer is data parallel (docs/distributed.md). A
// failure on any rank ends the whole job with a non-zero exit, naming the rank.
//
// SIGTERM, SIGINT or SIGHUP (a scheduler's notice, Ctrl-C, a closed terminal or ssh session) stops
// the run after the current step with a checkpoint, all ranks agreeing on the step, and exit
// status 75; a second signal stops at once. SIGXFSZ is ignored, so a write past the file-size
// limit is an error naming the file rather than a silent death.
#include <csignal>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "plexus/cli.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/mimo_trainer.hpp"
#include "plexus/core/engine/stop_signals.hpp"
#include "plexus/core/engine/trainer.hpp"
#include "plexus/core/logging.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"

namespace {

// The exit status of a run stopped by SIGTERM, SIGINT or SIGHUP after writing its checkpoint: EX_TEMPFAIL
// of sysexits.h, "try again later". Distinct from an error (1) and from a process killed by a
// signal (128 + N, which a shell or mpirun reports when nothing was saved), so a job script, or
// Slurm's RequeueExit and a Kubernetes podFailurePolicy on exit codes, can requeue exactly the
// runs that can continue with --resume latest.
constexpr int kExitStopped = 75;

const char* const kExitStatusHelp =
    "\nexit status:\n"
    "  0   the run completed\n"
    "  1   an error (the message names it)\n"
    "  75  SIGTERM, SIGINT or SIGHUP stopped the run: every rank finished the same step and a\n"
    "      checkpoint of it was written; continue with --resume latest. A second signal\n"
    "      stops at once, without one (status 128 + the signal, 143 for SIGTERM).\n"
    "      mpirun signals the ranks and kills them after odls_base_sigkill_timeout\n"
    "      seconds each (default 1): give them time with\n"
    "      mpirun --mca odls_base_sigkill_timeout 60 ... (docs/distributed.md)\n";

// What every rank must agree on before the first step.
boost::json::value agreement(const boost::json::value& run_config, const plexus::PluginHost& host,
                             const std::optional<std::filesystem::path>& resume_dir) {
  boost::json::array plugins;
  for (const plexus::PluginRecord* plugin : host.plugins())
    plugins.emplace_back(plugin->name + " " + plugin->version);
  return boost::json::object{{"config", run_config},
                             {"resume", resume_dir ? resume_dir->string() : std::string()},
                             {"plexus", PLEXUS_VERSION_STRING},
                             {"plugins", std::move(plugins)}};
}

}  // namespace

// The data-parallel ranks that read different samples (the "dp" group: under context
// parallelism its cp ranks read the same ones), the global batch's factor.
int64_t data_parallel_size(const plexus::distributed::Runtime& runtime) {
  const plexus::distributed::Communicator* dp = runtime.group("dp");
  return dp != nullptr ? dp->size() : runtime.data_parallel().size();
}

int main(int argc, char** argv) {
  namespace po = plexus::cli::po;
  // A write past the file-size limit (ulimit -f) would kill the process by SIGXFSZ, without a
  // word; ignored, write() fails with EFBIG instead and the checkpoint writer names the file and
  // the limit, and keeps the checkpoints already written.
  std::signal(SIGXFSZ, SIG_IGN);
  plexus::device::retain_freed_host_memory();  // steps reuse one heap instead of faulting pages in
  // Declared outside the guarded body, in this order, so a failure can still abort the job
  // through the runtime before anything it uses is destroyed.
  plexus::PluginHost host;
  std::unique_ptr<plexus::distributed::Runtime> runtime;
  std::unique_ptr<plexus::Trainer> trainer;
  std::unique_ptr<plexus::MimoTrainer> mimo_trainer;
  return plexus::cli::run_guarded("plexus-train", [&] {
    try {
      plexus::cli::PluginOptions plugin_options;
      std::string config_file;
      std::string resume;
      std::vector<std::string> overrides;
      bool help = false;
      po::options_description options(
          "usage: plexus-train [--config FILE] [--set KEY=VALUE]... [--resume DIR]\n"
          "       mpirun -np N plexus-train ...  (data parallel; docs/distributed.md)\n\noptions");
      plugin_options.add_to(options);
      options.add_options()("config", po::value(&config_file),
                            "run config (JSON); the embedded default when omitted")(
          "set", po::value(&overrides)->composing(),
          "override a key, e.g. --set train.steps=50 (repeatable)")(
          "resume", po::value(&resume),
          "continue from a checkpoint directory, or 'latest' for the newest in <run.output_dir>/checkpoints")(
          "help,h", po::bool_switch(&help), "this help");
      po::variables_map vm;
      po::store(po::parse_command_line(argc, argv, options), vm);
      po::notify(vm);
      if (help) {
        std::cout << options << kExitStatusHelp;
        return 0;
      }
      const plexus::distributed::LaunchEnv launch = plexus::distributed::LaunchEnv::from_process();
      if (launch.rank != 0) plexus::Logger::global().set_rank(launch.rank);
      std::optional<std::filesystem::path> file;
      if (!config_file.empty()) file = config_file;
      boost::json::value run_config = plexus::load_run_config(file, overrides);
      // Before any plugin is loaded: the threads of BLAS and OpenMP inherit the mode.
      if (run_config.at("run").at("flush_denormals").as_bool()) plexus::device::flush_denormals();
      const plexus::PluginLoadOptions load_options{plugin_options.dirs(),
                                                   plugin_options.allow_world_writable};
      plexus::load_configured_plugins(host, run_config, load_options);
      plexus::check_components(host, run_config);
      plexus::check_mimo_modules(host, run_config, load_options);

      const std::filesystem::path checkpoints =
          std::filesystem::path(std::string(run_config.at("run").at("output_dir").as_string())) /
          "checkpoints";
      std::optional<std::filesystem::path> resume_dir;
      if (resume == "latest") {
        const auto latest = plexus::checkpoint::latest_checkpoint(checkpoints);
        if (!latest)
          throw std::runtime_error("--resume latest: no complete checkpoint in " + checkpoints.string());
        resume_dir = latest->dir;
      } else if (!resume.empty()) {
        resume_dir = resume;
      } else if (plexus::checkpoint::latest_checkpoint(checkpoints)) {
        // Starting over would interleave two runs' checkpoints and metrics.
        throw std::runtime_error(checkpoints.string() +
                                 " already holds checkpoints of an earlier run: continue it with "
                                 "--resume latest, or choose another run.output_dir");
      }

      runtime = plexus::distributed::Runtime::start(host, run_config, load_options, launch);
      if (runtime->rank() != 0 && plexus::Logger::global().level() == plexus::LogLevel::info)
        plexus::Logger::global().set_level(plexus::LogLevel::warn);  // rank 0 speaks for the job
      if (runtime->world_size() > 1 && runtime->rank() == 0)
        plexus::log_info("plexus-train", std::to_string(runtime->world_size()) + " ranks from " +
                                             launch.launcher + ", comm backend '" + runtime->settings().comm +
                                             "'");
      runtime->check_same(agreement(run_config, host, resume_dir), "run configs, plugins or --resume");
      // "cuda" in a job of several ranks means this rank's GPU on its machine.
      if (runtime->world_size() > 1 && run_config.at("run").at("device").as_string() == "cuda")
        run_config.at("run").as_object()["device"] = "cuda:" + std::to_string(launch.local_rank);

      // A model of modules (mimo.modules) has its own loop over a multimodal dataset (docs/mimo.md);
      // either trainer runs, stops and reports the same way.
      std::function<plexus::TrainResult(const plexus::TrainerEvents&)> train;
      if (plexus::is_mimo(run_config)) {
        mimo_trainer = std::make_unique<plexus::MimoTrainer>(host, run_config, runtime.get());
        if (resume_dir) mimo_trainer->resume_from(*resume_dir);
        train = [&](const plexus::TrainerEvents& events) { return mimo_trainer->run(events); };
      } else {
        plexus::require_one_model_grid(*runtime);
        trainer = std::make_unique<plexus::Trainer>(
            host, run_config, plexus::make_indexed_data_source(run_config, data_parallel_size(*runtime)),
            runtime.get());
        if (resume_dir) trainer->resume_from(*resume_dir);
        train = [&](const plexus::TrainerEvents& events) { return trainer->run(events); };
      }
      // From here on a stop signal is a request to checkpoint and stop; before, nothing has been
      // trained, so it ends the process at once (the default action). Rank 0 acknowledges it.
      const plexus::StopSignals stop_signals(runtime->rank() == 0);
      plexus::TrainerEvents events;
      events.stop_signal = &plexus::StopSignals::received;
      const plexus::TrainResult result = train(events);
      const auto finish = [&](int status) {
        trainer.reset();
        mimo_trainer.reset();
        runtime.reset();
        return status;
      };
      if (result.interrupted) {
        if (runtime->rank() == 0)
          std::cerr << "plexus-train: stopped by " << plexus::signal_name(result.interrupted->signal)
                    << " after step " << result.interrupted->step << " of "
                    << run_config.at("train").at("steps").to_number<int64_t>() << " (exit status "
                    << kExitStopped << ")\n";
        return finish(kExitStopped);
      }
      if (const int late = plexus::StopSignals::received(); late != 0 && runtime->rank() == 0)
        std::cerr << "plexus-train: " << plexus::signal_name(late)
                  << " received as the run was finishing: it completed instead of stopping\n";
      if (runtime->rank() == 0) {
        std::cerr << "plexus-train: " << (result.exited_at ? "exited (train.exit_interval)" : "done") << ": "
                  << result.steps_done << " steps";
        if (result.final_val_loss) std::cerr << ", val_loss " << *result.final_val_loss;
        if (!result.last_checkpoint.empty()) std::cerr << ", checkpoint " << result.last_checkpoint.string();
        std::cerr << "\n";
      }
      return finish(0);
    } catch (const std::exception& e) {
      // One rank's failure must end the others too, or they would wait on it until the timeout.
      if (runtime && runtime->world_size() > 1) {
        std::cerr << "plexus-train: error on rank " << runtime->rank() << ": " << e.what() << std::endl;
        runtime->abort("rank " + std::to_string(runtime->rank()) + ": " + e.what());
      }
      throw;
    }
  });
}
