// The Python of a virtual environment scripts/python-env.sh makes for the interop tests: the one
// the variable names, else <repo>/<dir>; and whether it can run an import (the tests that need
// it report themselves skipped when it cannot).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "run_process.hpp"

namespace plexus::test {

inline std::filesystem::path venv_python(const char* variable, const char* dir) {
  const char* set = std::getenv(variable);
  const std::filesystem::path venv = set != nullptr && *set != '\0'
                                         ? std::filesystem::path(set)
                                         : std::filesystem::path(PLEXUS_SOURCE_DIR) / dir;
  return venv / "bin" / "python";
}

inline bool python_runs(const std::filesystem::path& python, const std::string& statement) {
  return std::filesystem::exists(python) &&
         run_process(quote(python.string()) + " -c '" + statement + "'").status == 0;
}

}  // namespace plexus::test
