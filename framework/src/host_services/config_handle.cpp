// plx_config nodes: a JSON value plus its path, with stable storage for the strings and child
// nodes handed to plugins (they stay valid while the root handle lives).
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "host_services/config_access.hpp"
#include "plexus/core/host_services.hpp"

namespace plexus {

struct ConfigHandle::Node {
  const boost::json::value* value = nullptr;
  std::string path;
  std::deque<std::string> strings;
  std::deque<std::unique_ptr<Node>> children;
};

ConfigHandle::ConfigHandle(boost::json::value value, std::string path)
    : owned_(std::make_unique<boost::json::value>(std::move(value))), root_(std::make_unique<Node>()) {
  root_->value = owned_.get();
  root_->path = std::move(path);
}

ConfigHandle::~ConfigHandle() = default;

plx_config ConfigHandle::get() noexcept { return reinterpret_cast<plx_config>(root_.get()); }

namespace detail {

ConfigHandle::Node* node_of(plx_config handle) { return reinterpret_cast<ConfigHandle::Node*>(handle); }

const boost::json::value* config_value(plx_config handle) { return node_of(handle)->value; }
const std::string& config_node_path(plx_config handle) { return node_of(handle)->path; }

const char* keep_string(plx_config handle, std::string text) {
  auto* node = node_of(handle);
  node->strings.push_back(std::move(text));
  return node->strings.back().c_str();
}

plx_config child_node(plx_config handle, const boost::json::value& child, std::string path) {
  auto* node = node_of(handle);
  auto created = std::make_unique<ConfigHandle::Node>();
  created->value = &child;
  created->path = std::move(path);
  node->children.push_back(std::move(created));
  return reinterpret_cast<plx_config>(node->children.back().get());
}

}  // namespace detail
}  // namespace plexus
