// plexus checkpoint import --format hf: a Hugging Face transformers LlamaForCausalLM directory
// (config.json and model.safetensors, or the shards model.safetensors.index.json names; float32,
// bfloat16 or float16) as a Plexus checkpoint at step 0 that plexus-train resumes: the mapping of
// hf_export.hpp the other way, zero Adam moments (a fresh optimizer), and the run config the
// model is, whose model keys the resuming run repeats (import prints them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace plexus::cli {

struct HfImportResult {
  std::int64_t tensors = 0;
  std::vector<std::string> model_settings;  // "model.hidden_size=1024", ...: for plexus-train --set
};

// seq_length: the run's model.seq_length (0: the model's max_position_embeddings). Throws
// std::runtime_error naming what transformers' model has that Plexus's GPT has not; creates
// `out` only when the whole import is possible, never over an existing directory.
HfImportResult import_hf(const std::filesystem::path& hf_dir, const std::filesystem::path& out,
                         std::int64_t seq_length);

}  // namespace plexus::cli
