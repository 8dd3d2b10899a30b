// Rewriting one safetensors file of a finished checkpoint directory, as a conversion tool would:
// the tensors and metadata are edited in memory, the file is written again (with fresh checksums)
// and the COMPLETE marker's record of its size and tensor count updated, so the checkpoint still
// loads as a whole. Tests use it to
// build checkpoints in older layouts and damaged ones.
#pragma once

#include <boost/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/checkpoint/stored_tensor.hpp"

namespace plexus::test {

struct EditableTensor {
  checkpoint::DType dtype = checkpoint::DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
};

struct EditableFile {
  std::map<std::string, EditableTensor> tensors;
  std::map<std::string, std::string> metadata;

  // Replaces a two-dimensional tensor by its transpose.
  void transpose(const std::string& name) {
    EditableTensor& t = tensors.at(name);
    std::vector<std::byte> out(t.bytes.size());
    checkpoint::transpose(t.bytes, t.shape.at(0), t.shape.at(1), checkpoint::dtype_size(t.dtype), out);
    t.bytes = std::move(out);
    t.shape = {t.shape[1], t.shape[0]};
  }
};

inline void rewrite_checkpoint_file(const std::filesystem::path& dir, const std::string& file,
                                    const std::function<void(EditableFile&)>& edit) {
  EditableFile editable;
  {
    const auto original = checkpoint::SafetensorsFile::open(dir / file, checkpoint::ReadMode::read);
    for (const auto& view : original.tensors())
      editable.tensors[std::string(view.name)] = {
          view.dtype, {view.shape.begin(), view.shape.end()}, {view.bytes.begin(), view.bytes.end()}};
    editable.metadata = original.metadata();
  }
  edit(editable);
  checkpoint::SafetensorsWriter writer;
  for (const auto& [name, t] : editable.tensors) writer.add(name, t.dtype, t.shape, t.bytes);
  for (const auto& [key, value] : editable.metadata) writer.set_metadata(key, value);
  writer.write(dir / file);

  const auto marker_path = dir / checkpoint::kCompleteMarker;
  std::ifstream in(marker_path);
  boost::json::value marker = boost::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  marker.at("files").as_object()[file] = writer.file_size();
  if (auto* tensors = marker.as_object().if_contains("tensors"))  // recorded since checkpoints are verified
    tensors->as_object()[file] = writer.tensor_count();
  std::ofstream(marker_path) << boost::json::serialize(marker) << '\n';
}

}  // namespace plexus::test
