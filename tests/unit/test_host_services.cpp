// The host-services table as a plugin sees it: typed config reads with path-naming errors,
// memory, per-thread error messages, CPU streams, and plain errors where no runtime exists.
#define BOOST_TEST_MODULE host_services
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "plexus/core/host_services.hpp"

namespace {

struct Fixture {
  plexus::HostServices services;
  const plx_host_api* api = services.table_for("test_plugin");
  plexus::ConfigHandle config{boost::json::parse(R"({"n": 4, "big": 18446744073709551615, "lr": 0.5,
      "flag": true, "name": "gelu", "child": {"depth": 2}, "list": [1, 2]})"),
                              "model"};
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(host_services, Fixture)

BOOST_AUTO_TEST_CASE(table_is_complete_and_versioned) {
  BOOST_TEST(api->struct_size == sizeof(plx_host_api));
  BOOST_TEST(api->abi_version == PLX_ABI_VERSION);
  // Every function pointer of this host's table is set: a plugin may call any of them.
  const auto* words = reinterpret_cast<const unsigned char*>(api);
  for (std::size_t offset = offsetof(plx_host_api, log); offset < sizeof(plx_host_api); offset += sizeof(void*)) {
    void* fn = nullptr;
    std::memcpy(&fn, words + offset, sizeof(fn));
    BOOST_TEST(fn != nullptr, "host table field at offset " << offset << " is NULL");
  }
}

BOOST_AUTO_TEST_CASE(typed_config_reads) {
  int64_t n = 0;
  double lr = 0;
  int32_t flag = 0;
  const char* name = nullptr;
  BOOST_TEST(api->config_get_int(api->ctx, config.get(), "n", &n) == PLX_OK);
  BOOST_TEST(n == 4);
  BOOST_TEST(api->config_get_number(api->ctx, config.get(), "lr", &lr) == PLX_OK);
  BOOST_TEST(lr == 0.5);
  BOOST_TEST(api->config_get_number(api->ctx, config.get(), "n", &lr) == PLX_OK);  // integers are numbers
  BOOST_TEST(lr == 4.0);
  BOOST_TEST(api->config_get_bool(api->ctx, config.get(), "flag", &flag) == PLX_OK);
  BOOST_TEST(flag == 1);
  BOOST_TEST(api->config_get_string(api->ctx, config.get(), "name", &name) == PLX_OK);
  BOOST_TEST(std::string(name) == "gelu");
  plx_config child = nullptr;
  BOOST_TEST(api->config_get_child(api->ctx, config.get(), "child", &child) == PLX_OK);
  BOOST_TEST(api->config_get_int(api->ctx, child, "depth", &n) == PLX_OK);
  BOOST_TEST(n == 2);
  const char* path = nullptr;
  BOOST_TEST(api->config_path(api->ctx, child, &path) == PLX_OK);
  BOOST_TEST(std::string(path) == "model.child");
  const char* json = nullptr;
  BOOST_TEST(api->config_to_json(api->ctx, child, &json) == PLX_OK);
  BOOST_TEST(boost::json::parse(json) == boost::json::parse(R"({"depth": 2})"));
}

BOOST_AUTO_TEST_CASE(config_errors_name_the_path) {
  int64_t n = 0;
  plexus::HostServices::clear_last_error();
  BOOST_TEST(api->config_get_int(api->ctx, config.get(), "missing", &n) == PLX_ERR_NOT_FOUND);
  BOOST_TEST(plexus::HostServices::take_last_error() == "config error at model.missing: missing");
  BOOST_TEST(api->config_get_int(api->ctx, config.get(), "lr", &n) == PLX_ERR_INVALID_ARGUMENT);
  const std::string wrong_type = plexus::HostServices::take_last_error();
  BOOST_TEST(wrong_type.find("model.lr") != std::string::npos);
  BOOST_TEST(wrong_type.find("expected an integer") != std::string::npos);
  // 2^64-1 does not fit int64: refused rather than wrapped to -1.
  BOOST_TEST(api->config_get_int(api->ctx, config.get(), "big", &n) == PLX_ERR_INVALID_ARGUMENT);
  plx_config child = nullptr;
  BOOST_TEST(api->config_get_child(api->ctx, config.get(), "list", &child) == PLX_OK);
  BOOST_TEST(api->config_get_int(api->ctx, child, "x", &n) == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(plexus::HostServices::take_last_error().find("model.list: expected an object") != std::string::npos);
  BOOST_TEST(plexus::HostServices::take_last_error().empty());  // taking clears it
}

BOOST_AUTO_TEST_CASE(errors_are_per_thread) {
  api->set_error(api->ctx, PLX_ERR_INTERNAL, "main thread failure");
  std::string seen_in_other_thread = "unset";
  std::thread([&] { seen_in_other_thread = plexus::HostServices::take_last_error(); }).join();
  BOOST_TEST(seen_in_other_thread.empty());
  BOOST_TEST(plexus::HostServices::take_last_error() == "main thread failure");
}

BOOST_AUTO_TEST_CASE(cpu_memory_is_aligned_and_usable) {
  const DLDevice cpu{kDLCPU, 0};
  for (uint64_t alignment : {0ULL, 64ULL, 256ULL, 4096ULL}) {
    void* ptr = nullptr;
    BOOST_TEST_REQUIRE(api->alloc(api->ctx, cpu, 1000, alignment, &ptr) == PLX_OK);
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(ptr) % (alignment == 0 ? 64 : alignment) == 0U);
    std::memset(ptr, 0xab, 1000);  // writable over its whole size (valgrind/ASan would see otherwise)
    api->free(api->ctx, cpu, ptr);
  }
  void* ptr = nullptr;
  BOOST_TEST(api->alloc(api->ctx, cpu, 16, 48, &ptr) == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(plexus::HostServices::take_last_error().find("not a power of two") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(unavailable_devices_and_groups_are_clear_errors) {
  void* ptr = nullptr;
  BOOST_TEST(api->alloc(api->ctx, DLDevice{kDLCUDA, 1}, 16, 0, &ptr) == PLX_ERR_UNSUPPORTED);
  BOOST_TEST(plexus::HostServices::take_last_error().find("cuda:1") != std::string::npos);
  plx_group group = nullptr;
  BOOST_TEST(api->group_get(api->ctx, "dp", &group) == PLX_ERR_NOT_FOUND);
  BOOST_TEST(plexus::HostServices::take_last_error().find("group 'dp'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(cpu_streams_and_events) {
  const DLDevice cpu{kDLCPU, 0};
  plx_stream stream = nullptr;
  plx_event event = nullptr;
  BOOST_TEST_REQUIRE(api->stream_create(api->ctx, cpu, 0, &stream) == PLX_OK);
  BOOST_TEST_REQUIRE(api->event_create(api->ctx, cpu, &event) == PLX_OK);
  BOOST_TEST(stream != nullptr);
  BOOST_TEST(api->event_record(api->ctx, event, stream) == PLX_OK);
  BOOST_TEST(api->stream_wait_event(api->ctx, stream, event) == PLX_OK);
  BOOST_TEST(api->stream_synchronize(api->ctx, stream) == PLX_OK);
  void* native = &native;
  BOOST_TEST(api->stream_native(api->ctx, stream, &native) == PLX_OK);
  BOOST_TEST(native == nullptr);
  api->event_destroy(api->ctx, event);
  api->stream_destroy(api->ctx, stream);
}

BOOST_AUTO_TEST_CASE(metrics_reach_the_sink_named_by_plugin) {
  BOOST_TEST_REQUIRE(PLX_HAS_FIELD(api, plx_host_api, report_metric));
  api->report_metric(api->ctx, "dropped_without_sink", 1.0);  // logged at debug, no crash
  std::string seen;
  double value = 0;
  services.set_metric_sink([&](const std::string& plugin, const std::string& name, double v) {
    seen = plugin + "/" + name;
    value = v;
  });
  api->report_metric(api->ctx, "load_imbalance", 1.5);
  BOOST_TEST(seen == "test_plugin/load_imbalance");
  BOOST_TEST(value == 1.5);
}

BOOST_AUTO_TEST_SUITE_END()
