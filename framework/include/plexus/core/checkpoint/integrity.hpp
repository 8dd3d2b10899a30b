// Verifying what a safetensors file holds, beyond its format (which the reader checks on open):
//   - every tensor's bytes against the checksum the writer recorded under kChecksumKey
//     (safetensors.hpp), so a flipped bit anywhere in the data is found and named;
//   - every floating-point value is finite: a NaN or an infinity is never a state a run can
//     continue from (training stops at the first non-finite loss or gradient), whatever wrote it.
// A file written before Plexus recorded checksums has no kChecksumKey: its values are checked,
// its bytes cannot be (FileCheck::has_checksums says which).
//
// load_checkpoint (checkpoint_dir.hpp) runs these on both files of a checkpoint; `plexus
// checkpoint inspect --verify` reports every problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/safetensors.hpp"

namespace plexus::checkpoint {

// The checksums a file records, tensor name -> XXH64 of its bytes, or nullopt for a file that
// records none. Throws CheckpointError naming the file when the entry is not a JSON object of
// 16-hex-digit strings.
[[nodiscard]] std::optional<std::map<std::string, std::uint64_t, std::less<>>> recorded_checksums(
    const SafetensorsFile& file);

// Where a floating-point tensor (F64, F32, F16, BF16, F8_E5M2, F8_E4M3) first holds a value that is
// not finite, as "element 7 (index [1, 3]) is inf"; nullopt when every value is finite or the
// dtype is not floating point.
[[nodiscard]] std::optional<std::string> first_non_finite(const TensorView& tensor);

struct FileCheck {
  std::filesystem::path file;
  bool has_checksums = false;  // false: written before Plexus recorded them; values checked only
  std::size_t tensors = 0;     // tensors checked
  // One line per bad tensor: "tensor <name>: <what is wrong>", in storage order; and for
  // checksums recorded for tensors the file does not have, "tensor <name>: ...".
  std::vector<std::string> problems;
};

// Checks every tensor of file: its bytes against its checksum, if the file records checksums
// (and that the checksums name exactly the file's tensors), and its values for being finite.
// Reads every byte of the file.
[[nodiscard]] FileCheck verify_file(const SafetensorsFile& file);

}  // namespace plexus::checkpoint
