// `plexus`: the tool for inspecting plugins and configs.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "plexus/abi.h"
#include "plexus/cli.hpp"
#include "plexus/commands.hpp"

namespace {

constexpr const char* kUsage = R"(usage: plexus <command> [options]

commands:
  plugins list [--plugin-path DIR]... [--json]   every plugin found, its version, ABI and components
  config check FILE|--default [--set K=V]...     validate a run config and the plugins it names
  config show FILE|--default [--set K=V]...      print a run config with every default filled in
  data prepare --input F... --output-prefix P    text files to a Megatron indexed dataset (P.bin, P.idx)
  data inspect PREFIX                            counts and the start of a Megatron indexed dataset
  tokenizer train --input F... --vocab-size N --output T   learn a byte-level BPE tokenizer.json
  tokenizer encode|decode|inspect --tokenizer T ...        use or look inside a tokenizer.json
  op --backend B --primitive P --input F --output F   one mHC primitive of a fusion backend, fwd + bwd
  bench --backend B[,B...] [--primitive P]       time mHC primitives of fusion backends, check them
  topology WORLD_SIZE [--set K=V]...             the process groups of a job of that many ranks
  model show [--config F] [--set K=V]...         the model a config builds: layers, parameters, FLOPs
  checkpoint inspect DIR [--json]                a checkpoint's step, state, model and tensors
  checkpoint convert SRC DST --direction D       a GPT checkpoint to a hybrid layout ("*-*-...") or back
  version                                        this host's version and plugin ABI

`plexus <command> --help` tells more.
)";

}  // namespace

int main(int argc, char** argv) {
  // A write past the file-size limit (ulimit -f: a dataset, a converted checkpoint) fails with
  // EFBIG, which the writers report naming the file, instead of killing the process silently.
  std::signal(SIGXFSZ, SIG_IGN);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 1 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "plugins") return plexus::cli::plugins_command(rest);
  if (args[0] == "config") return plexus::cli::config_command(rest);
  if (args[0] == "data") return plexus::cli::data_command(rest);
  if (args[0] == "tokenizer") return plexus::cli::tokenizer_command(rest);
  if (args[0] == "op") return plexus::cli::op_command(rest);
  if (args[0] == "topology") return plexus::cli::topology_command(rest);
  if (args[0] == "bench") return plexus::cli::bench_command(rest);
  if (args[0] == "model") return plexus::cli::model_command(rest);
  if (args[0] == "checkpoint") return plexus::cli::checkpoint_command(rest);
  if (args[0] == "version" || args[0] == "--version") {
    std::cout << "plexus " << PLEXUS_VERSION_STRING << " (plugin ABI " << PLX_ABI_MAJOR << "." << PLX_ABI_MINOR << ")\n";
    return 0;
  }
  std::cerr << "plexus: error: unknown command '" << args[0] << "'\n\n" << kUsage;
  return 1;
}
