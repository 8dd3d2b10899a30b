// `plexus plugins list`: loads every plugin library in the search path and describes it.
// A library that fails to load is reported with its reason; the others are still listed, and
// the exit status is 1 so scripts notice.
#include <iostream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "plexus/cli.hpp"
#include "plexus/commands.hpp"
#include "plexus/core/plugin_host.hpp"

namespace plexus::cli {
namespace {

constexpr const char* kHelp = R"(usage: plexus plugins list [options]

Loads every plugin library (*.so) in the plugin search path and prints its name, version,
the ABI it was built against, and its components. The search path is, in order: each
--plugin-path, PLEXUS_PLUGIN_PATH (colon-separated), ../lib/plexus/plugins beside this
program, and the install directory.
)";

std::string abi_text(uint32_t version) {
  return std::to_string(PLX_VERSION_MAJOR(version)) + "." + std::to_string(PLX_VERSION_MINOR(version));
}

// "model.attention, model.mlp": the model keys a stack declares (checked when its plugin loaded).
std::string model_keys(const Component& component) {
  std::string keys;
  const boost::json::value schema = boost::json::parse(component.model_schema);
  if (const auto* properties = schema.as_object().if_contains("properties"))
    for (const auto& [key, value] : properties->as_object())
      keys += (keys.empty() ? "model." : ", model.") + std::string(key);
  return keys.empty() ? "none" : keys;
}

struct Failure {
  std::string file;
  std::string message;
};

void print_text(const PluginHost& host, const std::vector<std::filesystem::path>& dirs,
                const std::vector<Failure>& failures) {
  std::cout << "host ABI " << PLX_ABI_MAJOR << "." << PLX_ABI_MINOR << "; searched:";
  for (const auto& dir : dirs) std::cout << "\n  " << dir.string();
  std::cout << "\n";
  const auto plugins = host.plugins();
  if (plugins.empty()) std::cout << "\nno plugins found\n";
  for (const PluginRecord* plugin : plugins) {
    std::cout << "\n" << plugin->name << " " << plugin->version << "  (ABI " << abi_text(plugin->abi_version)
              << ")  " << plugin->file.string() << "\n";
    if (!plugin->description.empty()) std::cout << "  " << plugin->description << "\n";
    for (const Component* c : host.components_of(*plugin)) {
      std::string kind = kind_name(c->kind);
      kind.resize(std::max<std::size_t>(kind.size(), 15), ' ');
      std::cout << "  " << kind << c->name << (c->description.empty() ? "" : "  - " + c->description) << "\n";
      if (!c->model_schema.empty())
        std::cout << "  " << std::string(15, ' ') << "adds model keys: " << model_keys(*c) << "\n";
    }
  }
  for (const Failure& f : failures) std::cerr << "\nplexus: error: " << f.message << "\n";
}

void print_json(const PluginHost& host, const std::vector<std::filesystem::path>& dirs,
                const std::vector<Failure>& failures) {
  boost::json::object out;
  out["host_abi"] = std::to_string(PLX_ABI_MAJOR) + "." + std::to_string(PLX_ABI_MINOR);
  boost::json::array searched;
  for (const auto& dir : dirs) searched.emplace_back(dir.string());
  out["search_path"] = std::move(searched);
  boost::json::array plugins;
  for (const PluginRecord* plugin : host.plugins()) {
    boost::json::object p;
    p["name"] = plugin->name;
    p["version"] = plugin->version;
    p["abi"] = abi_text(plugin->abi_version);
    p["min_host_minor"] = plugin->min_host_minor;
    p["file"] = plugin->file.string();
    p["description"] = plugin->description;
    boost::json::array components;
    for (const Component* c : host.components_of(*plugin)) {
      boost::json::object comp;
      comp["kind"] = kind_name(c->kind);
      comp["name"] = c->name;
      comp["description"] = c->description;
      comp["config_schema"] = c->config_schema.empty() ? boost::json::value(nullptr) : boost::json::parse(c->config_schema);
      comp["model_schema"] =
          c->model_schema.empty() ? boost::json::value(nullptr) : boost::json::parse(c->model_schema);
      components.push_back(std::move(comp));
    }
    p["components"] = std::move(components);
    plugins.push_back(std::move(p));
  }
  out["plugins"] = std::move(plugins);
  boost::json::array errors;
  for (const Failure& f : failures) errors.push_back(boost::json::object{{"file", f.file}, {"message", f.message}});
  out["errors"] = std::move(errors);
  std::cout << boost::json::serialize(out) << "\n";
}

}  // namespace

int plugins_command(const std::vector<std::string>& args) {
  return run_guarded("plexus plugins", [&] {
    if (args.empty() || args[0] != "list") {
      std::cerr << "plexus plugins: error: expected 'list'\n\n" << kHelp;
      return 1;
    }
    PluginOptions plugin_options;
    bool json = false;
    bool help = false;
    po::options_description options("options");
    plugin_options.add_to(options);
    options.add_options()("json", po::bool_switch(&json), "print JSON instead of text")(
        "help,h", po::bool_switch(&help), "this help");
    po::variables_map vm;
    po::store(po::command_line_parser(std::vector<std::string>(args.begin() + 1, args.end())).options(options).run(), vm);
    po::notify(vm);
    if (help) {
      std::cout << kHelp << "\n" << options;
      return 0;
    }
    const auto dirs = plugin_search_path(plugin_options.dirs());
    PluginHost host;
    LoadOptions load_options;
    load_options.allow_world_writable = plugin_options.allow_world_writable;
    std::vector<Failure> failures;
    for (const auto& dir : dirs) {
      for (const auto& file : plugin_files_in(dir)) {
        try {
          host.load(file, load_options);
        } catch (const PluginError& e) {
          failures.push_back({file.string(), e.what()});
        }
      }
    }
    if (json) {
      print_json(host, dirs, failures);
    } else {
      print_text(host, dirs, failures);
    }
    return failures.empty() ? 0 : 1;
  });
}

}  // namespace plexus::cli
