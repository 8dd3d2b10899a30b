// The tokenizer a dataset was prepared with, recorded beside it, so that plexus-train can refuse
// a data.tokenizer that encodes differently: a tokenizer of the same vocabulary size passes every
// check of ids and sizes, and would train the model on text it decodes into something else.
//
// `plexus data prepare` writes PREFIX.tokenizer-fingerprint.json (a sidecar: the .bin and .idx
// are Megatron's format and stay byte-for-byte what Megatron writes):
//   {"format": "plexus-tokenizer-fingerprint-1",
//    "fingerprint": "bpe:xxh64:...",     Tokenizer::fingerprint(); "byte" for the byte tokenizer
//    "vocab_size": 8192, "tokenizer": "tok.json" (as given to prepare; "" for the byte one),
//    "end_of_document": 8191 (or null),
//    "idx_xxh64": "..."}                 XXH64 of PREFIX.idx, so that a record left beside a
//                                        dataset prepared again by another tool is not believed
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/core/data/tokenizer.hpp"

namespace plexus::data {

// PREFIX + ".tokenizer-fingerprint.json".
[[nodiscard]] std::filesystem::path fingerprint_path(const std::filesystem::path& prefix);

// The record's JSON text for a dataset prepared with `tokenizer` (read from tokenizer_file, ""
// for the byte tokenizer) whose .idx holds idx_bytes.
[[nodiscard]] std::string fingerprint_record(const Tokenizer& tokenizer, const std::string& tokenizer_file,
                                             std::span<const std::byte> idx_bytes);

struct FingerprintCheck {
  enum class Outcome { matches, absent, stale };
  Outcome outcome = Outcome::absent;
  // For absent and stale: why the tokenizer cannot be checked, for a warning naming the files.
  std::string warning;
};

// Compares `tokenizer` (data.tokenizer = tokenizer_file; "" for the byte tokenizer) with the
// record beside `dataset`. A mismatch is a DataError naming both: the tokenizer file and the
// record, with the tokenizer each names and their fingerprints. No record (a dataset prepared
// before Plexus wrote one, or by Megatron's tools) or one that describes another .idx is not an
// error: the outcome says so, with a warning to show. A record that cannot be read is a DataError
// naming it.
[[nodiscard]] FingerprintCheck check_tokenizer_fingerprint(const IndexedDataset& dataset,
                                                           const Tokenizer& tokenizer,
                                                           const std::string& tokenizer_file);

}  // namespace plexus::data
