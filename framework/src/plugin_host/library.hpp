// Opening a shared library for the host: RTLD_NOW | RTLD_LOCAL through Boost.DLL, with the
// reason for a failure spelled out (Boost.DLL reports only "bad file descriptor").
#pragma once

#include <filesystem>

#define BOOST_DLL_USE_STD_FS
#include <boost/dll/shared_library.hpp>

namespace plexus::detail {

// Throws PluginError naming the file and why it could not be opened.
boost::dll::shared_library open_library(const std::filesystem::path& file);

}  // namespace plexus::detail
