#include "plugin_host/library.hpp"

#include <dlfcn.h>

#include <array>
#include <fstream>
#include <string>

#include "plexus/core/errors.hpp"

namespace plexus::detail {
namespace {

bool has_elf_magic(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::array<char, 4> magic{};
  in.read(magic.data(), magic.size());
  return in.gcount() == 4 && magic[0] == '\x7f' && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
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
