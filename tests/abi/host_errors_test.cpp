#define BOOST_TEST_MODULE abi_host_errors
#include <boost/test/unit_test.hpp>

// Every way a plugin can be broken, one fixture each: the host must refuse it with a PluginError
// that names the file and says what is wrong, keep nothing of it, and go on working (each case
// ends by loading and running the good C plugin in the same host). A component that fails at run
// time must surface as a ComponentCallError instead of taking the process down.

#include <fstream>

#include "abi_fixtures.hpp"

using abi_test::expect_host_still_works;
using abi_test::fixture;
using abi_test::mentions;
using abi_test::mentions_any;
using abi_test::refusal;
using abi_test::TempDir;
namespace fs = std::filesystem;

namespace {
constexpr auto kMode0755 = static_cast<fs::perms>(0755);
constexpr auto kMode0757 = static_cast<fs::perms>(0757);  // 0755 plus writable by others

// "1.<minor>" as the host prints versions.
std::string version_text(uint32_t major, uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}
}  // namespace

BOOST_AUTO_TEST_CASE(missing_file) {
  TempDir dir;
  plexus::PluginHost host;
  const std::string message = refusal(host, dir.path() / "libplexus_missing.so");
  BOOST_TEST(mentions_any(message, {"does not exist", "no such file", "not found"}), message);
  expect_host_still_works(host);
}

BOOST_AUTO_TEST_CASE(file_that_is_not_a_shared_object) {
  TempDir dir;
  const fs::path file = dir.path() / "libplexus_fake.so";
  std::ofstream(file) << "this is not an ELF file, whatever its name says\n";
  plexus::PluginHost host;
  const std::string message = refusal(host, file);
  BOOST_TEST(mentions_any(message, {"ELF", "shared object", "shared library", "file too short"}), message);
  expect_host_still_works(host);
}

BOOST_AUTO_TEST_CASE(shared_library_without_the_entry_symbol) {
  plexus::PluginHost host;
  const std::string message = refusal(host, fixture("fixture_no_entry"));
  BOOST_TEST(mentions(message, PLX_ENTRY_SYMBOL), message);
  expect_host_still_works(host);
}

BOOST_AUTO_TEST_CASE(abi_major_mismatch_names_both_versions) {
  plexus::PluginHost host;
  const std::string message = refusal(host, fixture("fixture_abi_major2"));
  BOOST_TEST(mentions(message, "2.0"), message);
  BOOST_TEST(mentions(message, version_text(PLX_ABI_MAJOR, PLX_ABI_MINOR)), message);
  expect_host_still_works(host);
}

BOOST_AUTO_TEST_CASE(plugin_needing_a_newer_host_names_both_versions) {
  plexus::PluginHost host;
  const std::string message = refusal(host, fixture("fixture_needs_newer_host"));
  BOOST_TEST(mentions(message, version_text(PLX_ABI_MAJOR, PLX_ABI_MINOR + 1)), message);
  BOOST_TEST(mentions(message, version_text(PLX_ABI_MAJOR, PLX_ABI_MINOR)), message);
  expect_host_still_works(host);
}

BOOST_AUTO_TEST_CASE(duplicate_component_name_refuses_the_second_plugin_only) {
  plexus::PluginHost host;
  host.load(fixture("fixture_dup_a"));
  const std::string message = refusal(host, fixture("fixture_dup_b"));
  BOOST_TEST(mentions(message, "fixture.dup"), message);
  BOOST_TEST(mentions(message, "fixture_dup_a"), "names the plugin that has it: " << message);
  BOOST_TEST(mentions(message, "fixture_dup_b"), "names the plugin refused: " << message);

  // The first registration stands and still works; nothing of the refused plugin remains, not
  // even its component whose name was free.
  const plexus::Component* dup = host.find(PLX_KIND_LAYER, "fixture.dup");
  BOOST_TEST_REQUIRE(dup != nullptr);
  BOOST_TEST(dup->plugin->name == "fixture_dup_a");
  abi_test::expect_scale_works(*dup);
  BOOST_TEST(host.find(PLX_KIND_LAYER, "fixture.dup_b_only") == nullptr);
  BOOST_TEST(!abi_test::has_plugin(host, "fixture_dup_b"));
  expect_host_still_works(host);
}

BOOST_AUTO_TEST_CASE(unknown_component_kind_names_the_kind) {
  plexus::PluginHost host;
  const std::string message = refusal(host, fixture("fixture_unknown_kind"));
  BOOST_TEST(mentions(message, "kind"), message);
  BOOST_TEST(mentions(message, "99"), message);
  expect_host_still_works(host);
}

BOOST_AUTO_TEST_CASE(failing_init_shows_the_plugins_message) {
  plexus::PluginHost host;
  const std::string message = refusal(host, fixture("fixture_init_fails"));
  BOOST_TEST(mentions(message, "missing license key"), message);
  BOOST_TEST(host.find(PLX_KIND_LAYER, "fixture.licensed") == nullptr);
  expect_host_still_works(host);
}

BOOST_AUTO_TEST_CASE(missing_required_function_names_component_and_function) {
  plexus::PluginHost host;
  const std::string message = refusal(host, fixture("fixture_missing_function"));
  BOOST_TEST(mentions(message, "fixture.incomplete"), message);
  BOOST_TEST(mentions(message, "forward"), message);
  expect_host_still_works(host);
}

BOOST_AUTO_TEST_CASE(exception_in_forward_becomes_a_component_call_error) {
  plexus::PluginHost host;
  host.load(fixture("fixture_cpp_throws"));
  abi_test::LayerConfigs configs;
  const plexus::LayerInstance layer(host.get(PLX_KIND_LAYER, "fixture.throws"), configs.create_args());
  const auto state = layer.create_state(0);

  abi_test::HostTensor x({1.0f}), y({0.0f});
  DLTensor xv = x.view(), yv = y.view();
  const plx_forward_args args = abi_test::forward_args(&xv, &yv, nullptr, 0);

  try {
    layer.forward(*state, 0, args);
    BOOST_FAIL("forward of fixture.throws returned normally");
  } catch (const plexus::ComponentCallError& e) {
    const std::string message = e.what();
    BOOST_TEST_MESSAGE("failed as expected: " << message);
    BOOST_TEST(e.status() == PLX_ERR_INTERNAL);
    BOOST_TEST(mentions(message, "fixture forward exploded"), message);
    BOOST_TEST(mentions(message, "fixture.throws"), message);
    BOOST_TEST(mentions(message, "fixture_cpp_throws"), message);
  }
  expect_host_still_works(host);
}

// The permission checks need a copy of a good plugin in a directory the test controls. Refused
// plugins must say how to allow them; with the option they load and run.
BOOST_AUTO_TEST_CASE(world_writable_file_is_refused_unless_allowed) {
  TempDir dir;  // 0700: only the file's own mode is at fault
  const fs::path file = abi_test::copy_fixture("fixture_c_layer", dir.path(), kMode0757);
  plexus::PluginHost host;
  const std::string message = refusal(host, file);
  BOOST_TEST(mentions(message, "writable"), message);
  BOOST_TEST(mentions_any(message, {"allow_world_writable", "allow-world-writable"}), message);

  host.load(file, plexus::LoadOptions{.allow_world_writable = true});
  expect_host_still_works(host);  // runs the copy just loaded
}

BOOST_AUTO_TEST_CASE(world_writable_directory_is_refused_unless_allowed) {
  TempDir dir;
  const fs::path plugins = dir.path() / "plugins";
  fs::create_directory(plugins);
  const fs::path file = abi_test::copy_fixture("fixture_c_layer", plugins, kMode0755);
  fs::permissions(plugins, kMode0757, fs::perm_options::replace);
  plexus::PluginHost host;
  const std::string message = refusal(host, file);
  BOOST_TEST(mentions(message, "writable"), message);
  BOOST_TEST(mentions_any(message, {"allow_world_writable", "allow-world-writable"}), message);

  host.load(file, plexus::LoadOptions{.allow_world_writable = true});
  expect_host_still_works(host);
}
