// Internal access to plx_config nodes for the host-services functions.
#pragma once

#include <string>

#include <boost/json/value.hpp>

#include "plexus/host.h"

namespace plexus::detail {

const boost::json::value* config_value(plx_config handle);
const std::string& config_node_path(plx_config handle);
// Stores text in the node so the returned pointer lives as long as the node.
const char* keep_string(plx_config handle, std::string text);
plx_config child_node(plx_config handle, const boost::json::value& child, std::string path);

}  // namespace plexus::detail
