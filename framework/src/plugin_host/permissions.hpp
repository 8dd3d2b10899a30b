#pragma once

#include <filesystem>

namespace plexus::detail {
// Throws PluginError when another user may have written or replaced the file: through the file,
// any directory its path passes through (symbolic links followed, each checked), or their owners
// (permissions.cpp says exactly what is checked).
void check_not_world_writable(const std::filesystem::path& file);
}  // namespace plexus::detail
