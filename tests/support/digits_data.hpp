// scikit-learn's 8x8 digits prepared as a multimodal dataset for the MIMO tests: the CSV from
// Debian's python3-sklearn, extracted into the build's data folder by scripts/fetch-digits.sh
// (scripts/test.sh runs it), or installed with the package. Tests skip (exit 77) without it.
#pragma once

#include <filesystem>
#include <mutex>
#include <optional>
#include <string>

#include "run_process.hpp"

namespace plexus::test {

inline std::optional<std::filesystem::path> digits_csv() {
  for (const std::filesystem::path& candidate :
       {std::filesystem::path(PLEXUS_BUILD_DIR) / "data/digits.csv.gz",
        std::filesystem::path("/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz")})
    if (std::filesystem::exists(candidate)) return candidate;
  return std::nullopt;
}

// The dataset prefix, made once per process under `dir` by plexus data digits.
inline std::filesystem::path digits_dataset(const std::filesystem::path& dir) {
  const std::filesystem::path prefix = dir / "digits";
  if (!std::filesystem::exists(prefix.string() + ".mimo.json")) {
    const auto made =
        run_process(std::string(PLEXUS_BUILD_DIR) + "/bin/plexus data digits --csv " +
                    quote(digits_csv()->string()) + " --output-prefix " + quote(prefix.string()));
    if (made.status != 0) throw std::runtime_error("plexus data digits failed:\n" + made.output);
  }
  return prefix;
}

// plexus-train of configs/mimo_digits.json on `data`, writing into `out`, with more --set
// arguments in `extra` (quoted already).
inline std::string mimo_train_command(const std::filesystem::path& data, const std::filesystem::path& out,
                                      const std::string& extra) {
  return std::string(PLEXUS_BUILD_DIR) + "/bin/plexus-train --config " +
         quote(std::string(PLEXUS_SOURCE_DIR) + "/configs/mimo_digits.json") + " --plugin-path " +
         quote(std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins") + " --set " +
         quote("data.path=" + data.string()) + " --set " + quote("run.output_dir=" + out.string()) + " " +
         extra;
}

// The mimo topology's --set argument: encoder "images" on `images` ranks from `images_offset`,
// "language" on `language` ranks from `language_offset`.
inline std::string mimo_topology(int images, int images_offset, int language, int language_offset) {
  return "--set " + quote("distributed.topology={\"component\": \"mimo\", \"options\": {\"modules\": [" +
                          std::string("{\"name\": \"images\", \"num_ranks\": ") + std::to_string(images) +
                          ", \"rank_offset\": " + std::to_string(images_offset) +
                          "}, {\"name\": \"language\", \"num_ranks\": " + std::to_string(language) +
                          ", \"rank_offset\": " + std::to_string(language_offset) + "}]}}");
}

}  // namespace plexus::test
