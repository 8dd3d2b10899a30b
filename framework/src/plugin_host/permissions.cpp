// Refuses plugin files that another local user could have replaced: a plugin runs with the
// full rights of every job that loads it.
#include "plugin_host/permissions.hpp"

#include <sys/stat.h>

#include "plexus/core/errors.hpp"

namespace plexus::detail {

void check_not_world_writable(const std::filesystem::path& file) {
  const auto writable_by_others = [](const std::filesystem::path& p, bool& is_dir_sticky) {
    struct stat info {};
    if (::stat(p.c_str(), &info) != 0) return false;
    is_dir_sticky = (info.st_mode & S_ISVTX) != 0;
    return (info.st_mode & S_IWOTH) != 0;
  };
  bool sticky = false;
  const std::string hint =
      "; fix the permissions (chmod o-w) or, if this is intended, allow it explicitly with "
      "--allow-world-writable-plugins or the config key plugins.allow_world_writable";
  if (writable_by_others(file, sticky))
    throw PluginError(file.string(), "refusing to load plugin '" + file.string() +
                                         "': the file is writable by others" + hint);
  const std::filesystem::path dir = file.parent_path();
  // A sticky world-writable directory (like /tmp) does not let others replace our file.
  if (writable_by_others(dir, sticky) && !sticky)
    throw PluginError(file.string(), "refusing to load plugin '" + file.string() + "': its directory '" +
                                         dir.string() + "' is writable by others" + hint);
}

}  // namespace plexus::detail
