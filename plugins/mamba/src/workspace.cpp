#include "workspace.hpp"

#include <iterator>
#include <map>
#include <mutex>
#include <utility>

namespace plexus::mamba {
namespace {

namespace k = plexus::kernels;

// Idle buffers by capacity. Buffers under kMinBytes are not worth caching (glibc's heap keeps
// them); beyond kMaxIdle idle buffers the smallest is freed.
class Cache {
 public:
  static constexpr std::size_t kMinBytes = std::size_t{1} << 20;
  static constexpr std::size_t kMaxIdle = 64;

  static Cache& instance() {
    static Cache cache;
    return cache;
  }

  // The smallest idle buffer of at least `bytes`, or an empty one.
  k::Buffer take(std::size_t bytes) {
    if (bytes < kMinBytes) return {};
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = idle_.lower_bound(bytes);
    if (it == idle_.end()) return {};
    k::Buffer b = std::move(it->second);
    idle_.erase(it);
    return b;
  }

  void give(k::Buffer&& b) noexcept {
    if (b.bytes() < kMinBytes) return;  // freed by its destructor
    try {
      const std::lock_guard<std::mutex> lock(mutex_);
      idle_.emplace(b.bytes(), std::move(b));
      if (idle_.size() > kMaxIdle) idle_.erase(idle_.begin());
    } catch (...) {
      // Out of memory for the map node: the buffer is simply freed.
    }
  }

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, k::Buffer> idle_;
};

}  // namespace

Pooled::~Pooled() {
  Cache::instance().give(std::move(buffer_));
}

Pooled::Pooled(Pooled&& other) noexcept : buffer_(std::move(other.buffer_)) {}

Pooled& Pooled::operator=(Pooled&& other) noexcept {
  if (this != &other) {
    Cache::instance().give(std::move(buffer_));
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

void Pooled::reserve(std::size_t bytes) {
  if (buffer_.bytes() >= bytes) return;
  k::Buffer cached = Cache::instance().take(bytes);
  if (cached.bytes() >= bytes) {
    Cache::instance().give(std::move(buffer_));
    buffer_ = std::move(cached);
  }
}

}  // namespace plexus::mamba
