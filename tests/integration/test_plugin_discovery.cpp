// Loading a component's plugin on demand by reading plugin descriptors, with the real plugins of
// this build: the topology "grid", the scheduler "sequential" and the comm backends "local" and
// "mpi" are found in plugins not named after them; a component nobody provides is an error naming
// the config key, the component and every plugin looked at.
#define BOOST_TEST_MODULE plugin_discovery
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "plexus/comm.h"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"
#include "plexus/plugin.h"
#include "temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const fs::path kPluginDir = fs::path(PLEXUS_BUILD_DIR) / "lib" / "plexus" / "plugins";

// The default config, loading no plugin up front.
boost::json::value config_without_plugins() {
  return plexus::load_run_config(std::nullopt, {"plugins.load=[]"});
}

}  // namespace

BOOST_AUTO_TEST_CASE(components_are_found_in_plugins_not_named_after_them) {
  struct Case {
    uint32_t kind;
    const char* component;
    const char* plugin;
  };
  std::vector<Case> cases = {{PLX_KIND_TOPOLOGY, "grid", "topology_default"},
                             {PLX_KIND_SCHEDULER, "sequential", "sequential_scheduler"},
                             {PLX_KIND_COMM, "local", "comm_local"},
                             {PLX_KIND_STACK, "hybrid_stack", "hybrid_stack"},
                             {PLX_KIND_LAYER, "mamba.mixer", "mamba"}};
  if (fs::exists(kPluginDir / "libplexus_comm_mpi.so")) cases.push_back({PLX_KIND_COMM, "mpi", "comm_mpi"});
  for (const Case& c : cases) {
    plexus::PluginHost host;
    const plexus::Component& component = host.load_provider(c.kind, c.component, {kPluginDir});
    BOOST_TEST(component.name == c.component);
    BOOST_TEST(component.plugin->name == c.plugin);
    BOOST_TEST(host.plugins().size() == 1U, c.component);  // the provider only: others are read, not loaded
  }
}

BOOST_AUTO_TEST_CASE(ensure_component_loads_on_demand_through_the_config_search_path) {
  plexus::PluginHost host;
  const boost::json::value config = config_without_plugins();
  const plexus::Component& grid =
      plexus::ensure_component(host, PLX_KIND_TOPOLOGY, "grid", "distributed.topology.component", {}, config);
  BOOST_TEST(grid.plugin->name == "topology_default");
  // Already loaded: the same component, nothing read again.
  BOOST_TEST(&plexus::ensure_component(host, PLX_KIND_TOPOLOGY, "grid", "distributed.topology.component", {},
                                       config) == &grid);
  // The distributed runtime's own path: a topology enumerated with nothing loaded beforehand.
  plexus::PluginHost fresh;
  const auto topology = plexus::distributed::enumerate_topology(fresh, config, {}, 4, 0);
  BOOST_TEST(!topology.kinds.empty());
}

BOOST_AUTO_TEST_CASE(a_component_nobody_provides_names_key_component_and_plugins) {
  plexus::test::TempDir dir;
  // A file that looks like a plugin but is not one: named, with why it could not be read.
  dir.write("libplexus_broken.so", "not a library");
  plexus::PluginHost host;
  const boost::json::value config = plexus::load_run_config(
      std::nullopt, {"plugins.load=[]", "plugins.paths=[\"" + dir.path().string() + "\"]"});
  try {
    (void)plexus::ensure_component(host, PLX_KIND_TOPOLOGY, "gird", "distributed.topology.component", {},
                                   config);
    BOOST_FAIL("expected ConfigError");
  } catch (const plexus::config::ConfigError& e) {
    const std::string what = e.what();
    BOOST_TEST(e.path() == "distributed.topology.component");
    BOOST_TEST(contains(what,
                        "config error at distributed.topology.component: no plugin provides the topology "
                        "component 'gird' (did you mean 'grid'?)"),
               what);
    BOOST_TEST(contains(what, "libplexus_broken.so: could not be read:"), what);
    BOOST_TEST(contains(what, "no ELF header"), what);
    BOOST_TEST(contains(what, "libplexus_topology_default.so (plugin topology_default): topology grid"),
               what);
    BOOST_TEST(contains(what, "--plugin-path, the config key plugins.paths or PLEXUS_PLUGIN_PATH"), what);
  }
  BOOST_TEST(host.plugins().empty());
}

// The files read are Plexus plugins only: another library in a plugin directory (a plugin's own
// dependency, say) is never opened.
BOOST_AUTO_TEST_CASE(only_libplexus_files_are_read) {
  plexus::test::TempDir dir;
  dir.write("libother.so", "not a library");
  dir.write("libplexus_x.so", "not a library either");
  const auto files = plexus::plexus_plugin_files_in(dir.path());
  BOOST_TEST_REQUIRE(files.size() == 1U);
  BOOST_TEST(files[0].filename() == "libplexus_x.so");
}
