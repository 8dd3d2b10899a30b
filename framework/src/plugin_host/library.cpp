#include "plugin_host/library.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <string>

#include "plexus/core/errors.hpp"
#include "plexus/core/regular_file.hpp"

namespace plexus::detail {
namespace {

// Whether the file starts with the ELF magic. Opened without blocking, so a FIFO swapped in after
// the host's checks is never waited on (nor read as a plugin).
bool has_elf_magic(const std::filesystem::path& file) {
  try {
    const RegularFile opened = RegularFile::open(file);
    std::array<char, 4> magic{};
    std::size_t got = 0;
    while (got < magic.size()) {
      const ssize_t n = ::read(opened.fd(), magic.data() + got, magic.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    return got == 4 && magic[0] == '\x7f' && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
  } catch (const FileReadError&) {
    return false;
  }
}

}  // namespace

boost::dll::shared_library open_library(const std::filesystem::path& file) {
  const std::string name = file.string();
  if (!has_elf_magic(file))
    throw PluginError(name, "cannot load plugin '" + name + "': not a shared object (no ELF header)");
  ::dlerror();  // clear, so the message read below is this load's
  std::error_code ec;
  boost::dll::shared_library library(
      file, ec, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  if (ec || !library.is_loaded()) {
    const char* reason = ::dlerror();
    throw PluginError(name, "cannot load plugin '" + name + "': " +
                                (reason != nullptr ? std::string(reason) : ec.message()));
  }
  return library;
}

}  // namespace plexus::detail
