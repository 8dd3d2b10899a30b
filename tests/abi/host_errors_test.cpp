#define BOOST_TEST_MODULE abi_host_errors
#include <boost/test/unit_test.hpp>

// Every way a plugin can be broken, one fixture each: the host must refuse it with a PluginError
// that names the file and says what is wrong, keep nothing of it, and go on working (each case
// ends by loading and running the good C plugin in the same host). A component that fails at run
// time must surface as a ComponentCallError instead of taking the process down.

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <initializer_list>
#include <string_view>

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

// The checks hold for the path as the kernel resolves it, not only for the names given: a link
// from a safe directory into a world-writable one, a safe directory inside a world-writable one,
// and files or directories another user owns could all be swapped for other code by that user.
namespace {

constexpr auto kMode0777 = static_cast<fs::perms>(0777);
constexpr auto kMode1777 = static_cast<fs::perms>(01777);

// The uid of `nobody`: another user than the one running the tests.
uid_t other_uid() {
  const struct passwd* pw = ::getpwnam("nobody");
  return pw != nullptr ? pw->pw_uid : 65534;
}

void expect_refused_then_allowed(const fs::path& file, std::initializer_list<std::string_view> words) {
  plexus::PluginHost host;
  const std::string message = refusal(host, file);
  for (const std::string_view word : words) BOOST_TEST(mentions(message, std::string(word)), message);
  BOOST_TEST(mentions_any(message, {"allow_world_writable", "allow-world-writable"}), message);
  host.load(file, plexus::LoadOptions{.allow_world_writable = true});
  expect_host_still_works(host);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_symlink_into_a_world_writable_directory_is_refused) {
  TempDir dir;  // 0700, as the plugin directory a job names
  const fs::path open_dir = dir.path() / "open";
  fs::create_directory(open_dir);
  fs::permissions(open_dir, kMode0777, fs::perm_options::replace);  // world-writable, not sticky
  const fs::path real = abi_test::copy_fixture("fixture_c_layer", open_dir, kMode0755);
  const fs::path plugins = dir.path() / "plugins";
  fs::create_directory(plugins);
  // The file link: its own directory is safe, the file it leads to is not.
  const fs::path link = plugins / real.filename();
  fs::create_symlink(real, link);
  expect_refused_then_allowed(link, {open_dir.string(), "writable by others", real.string()});
  // A directory link: the plugin directory itself is a link into the open one.
  const fs::path linked_dir = dir.path() / "linked";
  fs::create_directory_symlink(open_dir, linked_dir);
  expect_refused_then_allowed(linked_dir / real.filename(), {open_dir.string(), "writable by others"});
}

BOOST_AUTO_TEST_CASE(a_world_writable_ancestor_directory_is_refused) {
  TempDir dir;
  const fs::path open_dir = dir.path() / "shared";
  const fs::path plugins = open_dir / "team" / "plugins";
  fs::create_directories(plugins);
  const fs::path file = abi_test::copy_fixture("fixture_c_layer", plugins, kMode0755);
  // Two levels up: the plugin's own directory is 0755, but anyone may rename "team" away.
  fs::permissions(open_dir, kMode0777, fs::perm_options::replace);
  expect_refused_then_allowed(
      file, {"the directory '" + open_dir.string() + "' on its path is writable by others"});
  // Sticky, as /tmp: others may not rename our entries, and the plugin loads.
  fs::permissions(open_dir, kMode1777, fs::perm_options::replace);
  plexus::PluginHost host;
  host.load(file);
  expect_host_still_works(host);
}

BOOST_AUTO_TEST_CASE(a_file_or_directory_of_another_user_is_refused) {
  if (::geteuid() != 0) {
    BOOST_TEST_MESSAGE("skipped: giving a file to another user needs root");
    return;
  }
  TempDir dir;
  // In a sticky world-writable directory, like /tmp: another user's file there has safe modes and a
  // safe directory, but that user can replace its content at will.
  const fs::path tmp_like = dir.path() / "tmp";
  fs::create_directory(tmp_like);
  fs::permissions(tmp_like, kMode1777, fs::perm_options::replace);
  const fs::path file = abi_test::copy_fixture("fixture_c_layer", tmp_like, kMode0755);
  BOOST_TEST_REQUIRE(::chown(file.c_str(), other_uid(), static_cast<gid_t>(-1)) == 0);
  expect_refused_then_allowed(file, {"the file belongs to", "uid " + std::to_string(other_uid())});
  // Our file in a directory another user owns (and so may empty and refill).
  const fs::path theirs = dir.path() / "theirs";
  fs::create_directory(theirs);
  const fs::path ours = abi_test::copy_fixture("fixture_c_layer", theirs, kMode0755);
  BOOST_TEST_REQUIRE(::chown(theirs.c_str(), other_uid(), static_cast<gid_t>(-1)) == 0);
  expect_refused_then_allowed(ours, {"its directory '" + theirs.string() + "' belongs to"});
  // Another user's link planted in the sticky directory, leading to a good plugin.
  const fs::path good_dir = dir.path() / "good";
  fs::create_directory(good_dir);
  const fs::path good = abi_test::copy_fixture("fixture_c_layer", good_dir, kMode0755);
  const fs::path planted = tmp_like / "libplexus_planted.so";
  fs::create_symlink(good, planted);
  BOOST_TEST_REQUIRE(::lchown(planted.c_str(), other_uid(), static_cast<gid_t>(-1)) == 0);
  expect_refused_then_allowed(planted, {"the symbolic link '" + planted.string() + "'"});
  // The same link made by us loads.
  fs::remove(planted);
  fs::create_symlink(good, planted);
  plexus::PluginHost host;
  host.load(planted);
  expect_host_still_works(host);
}
