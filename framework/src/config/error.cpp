// ConfigError: one exception type for every user-facing config problem.
#include "plexus/core/config.hpp"

#include <utility>

namespace plexus::config {

struct ConfigError::Data {
  std::vector<Problem> problems;
  std::string detail;
};

namespace {

std::string prefix(const std::string& path) {
  return path.empty() ? std::string("config error: ") : "config error at " + path + ": ";
}

std::string full_message(const std::vector<Problem>& problems) {
  std::string out;
  for (const Problem& p : problems) {
    if (!out.empty()) out += '\n';
    out += prefix(p.path);
    out += p.message;
  }
  return out;
}

}  // namespace

std::shared_ptr<const ConfigError::Data> ConfigError::make_data(std::vector<Problem> problems) {
  // An empty list would leave path()/detail() meaningless; keep the invariants.
  if (problems.empty()) problems.push_back({"", "unspecified configuration problem"});
  auto data = std::make_shared<Data>();
  const std::string whole = full_message(problems);
  data->detail = whole.substr(prefix(problems.front().path).size());
  data->problems = std::move(problems);
  return data;
}

ConfigError::ConfigError(std::shared_ptr<const Data> data)
    : std::runtime_error(prefix(data->problems.front().path) + data->detail), data_(std::move(data)) {}

ConfigError::ConfigError(std::string path, std::string message)
    : ConfigError(make_data({Problem{std::move(path), std::move(message)}})) {}

ConfigError::ConfigError(std::vector<Problem> problems) : ConfigError(make_data(std::move(problems))) {}

const std::string& ConfigError::path() const noexcept {
  return data_->problems.front().path;
}
const std::string& ConfigError::detail() const noexcept {
  return data_->detail;
}
const std::vector<Problem>& ConfigError::problems() const noexcept {
  return data_->problems;
}

}  // namespace plexus::config
