// Opening safetensors files: the bytes are mapped (or read) once, validated by parse_layout, and
// shared by every copy of the SafetensorsFile and every view handed out.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <system_error>
#include <utility>

#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/regular_file.hpp"

namespace plexus::checkpoint {

namespace {

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

// Unmaps on destruction.
class Mapping {
 public:
  Mapping(void* address, std::size_t length) noexcept : address_(address), length_(length) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(address_, length_); }
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(address_), length_};
  }

 private:
  void* address_;
  std::size_t length_;
};

}  // namespace

struct SafetensorsFile::State {
  std::filesystem::path path;
  std::shared_ptr<const void> owner;  // keeps bytes alive: a Mapping or a vector
  std::span<const std::byte> bytes;   // the whole file
  SafetensorsLayout layout;
  std::map<std::string, std::size_t, std::less<>> index;  // name -> layout.tensors position
};

SafetensorsFile SafetensorsFile::validated(std::filesystem::path path, std::shared_ptr<const void> owner,
                                           std::span<const std::byte> bytes) {
  auto state = std::make_shared<State>();
  state->layout = parse_layout(bytes, path);
  for (std::size_t i = 0; i < state->layout.tensors.size(); ++i) state->index.emplace(state->layout.tensors[i].name, i);
  state->path = std::move(path);
  state->owner = std::move(owner);
  state->bytes = bytes;
  return SafetensorsFile(std::move(state));
}

SafetensorsFile::SafetensorsFile(std::shared_ptr<const State> state) : state_(std::move(state)) {}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& file, ReadMode mode) {
  // Never blocks: a FIFO or a device in place of a checkpoint file is refused, not waited on.
  std::optional<RegularFile> opened;
  try {
    opened.emplace(RegularFile::open(file));
  } catch (const FileReadError& e) {
    throw CheckpointError(file, e.what());
  }
  const int fd = opened->fd();
  const auto size = static_cast<std::size_t>(opened->size());

  if (mode == ReadMode::map && size > 0) {
    void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) throw CheckpointError(file, "cannot map into memory: " + errno_text(errno));
    auto mapping = std::make_shared<const Mapping>(address, size);
    const auto bytes = mapping->bytes();
    return validated(file, std::move(mapping), bytes);
  }

  auto data = std::make_shared<std::vector<std::byte>>(size);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, data->data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw CheckpointError(file, "cannot read: " + errno_text(errno));
    if (n == 0) break;  // shrank while being read: validated below as a short file
    done += static_cast<std::size_t>(n);
  }
  data->resize(done);
  const std::span<const std::byte> bytes(*data);
  return validated(file, std::shared_ptr<const void>(std::move(data)), bytes);
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<std::byte> bytes, const std::filesystem::path& origin) {
  auto data = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
  const std::span<const std::byte> view(*data);
  return validated(origin, std::shared_ptr<const void>(std::move(data)), view);
}

const std::filesystem::path& SafetensorsFile::path() const noexcept { return state_->path; }
const SafetensorsLayout& SafetensorsFile::layout() const noexcept { return state_->layout; }
std::size_t SafetensorsFile::size() const noexcept { return state_->layout.tensors.size(); }

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  names.reserve(state_->index.size());
  for (const auto& [name, i] : state_->index) names.push_back(name);
  return names;  // the index is a std::map: already sorted
}

bool SafetensorsFile::contains(std::string_view name) const noexcept {
  return state_->index.find(name) != state_->index.end();
}

const TensorInfo& SafetensorsFile::info(std::string_view name) const {
  const auto it = state_->index.find(name);
  if (it == state_->index.end()) throw CheckpointError(state_->path, "no tensor named '" + std::string(name) + "'");
  return state_->layout.tensors[it->second];
}

TensorView SafetensorsFile::view(const TensorInfo& info) const {
  const auto start = static_cast<std::size_t>(state_->layout.data_start() + info.begin);
  return TensorView{info.name, info.dtype, info.shape,
                    state_->bytes.subspan(start, static_cast<std::size_t>(info.end - info.begin))};
}

TensorView SafetensorsFile::tensor(std::string_view name) const { return view(info(name)); }

std::vector<TensorView> SafetensorsFile::tensors() const {
  std::vector<TensorView> views;
  views.reserve(state_->layout.tensors.size());
  for (const auto& info : state_->layout.tensors) views.push_back(view(info));
  return views;
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const noexcept {
  return state_->layout.metadata;
}

}  // namespace plexus::checkpoint
