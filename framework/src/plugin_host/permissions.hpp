#pragma once

#include <filesystem>

namespace plexus::detail {
// Throws PluginError when the file or its directory may be written by other users.
void check_not_world_writable(const std::filesystem::path& file);
}  // namespace plexus::detail
