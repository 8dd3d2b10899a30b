// The subcommands of `plexus`. Each takes the arguments after its own name.
#pragma once

#include <string>
#include <vector>

namespace plexus::cli {
int plugins_command(const std::vector<std::string>& args);
int config_command(const std::vector<std::string>& args);
int data_command(const std::vector<std::string>& args);
int tokenizer_command(const std::vector<std::string>& args);
int op_command(const std::vector<std::string>& args);
int topology_command(const std::vector<std::string>& args);
int bench_command(const std::vector<std::string>& args);
int model_command(const std::vector<std::string>& args);
int checkpoint_command(const std::vector<std::string>& args);
}  // namespace plexus::cli
