#define BOOST_TEST_MODULE abi_c_plugin
#include <boost/test/unit_test.hpp>

// A plugin written in plain C99, driven through the host's C++ API: its layer describes itself,
// computes exact values and reports errors through set_error; its scheduler drives the engine's
// plx_schedule_env callbacks in exactly the documented order.

#include <optional>
#include <ostream>

#include "abi_fixtures.hpp"

using abi_test::fixture;
using abi_test::HostTensor;
using abi_test::mentions;

namespace {

// One PluginHost with the C plugin loaded, per test case.
struct CPlugin {
  plexus::PluginHost host;
  CPlugin() { host.load(fixture("fixture_c_layer")); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(c_layer, CPlugin)

BOOST_AUTO_TEST_CASE(describes_itself) {
  abi_test::LayerConfigs configs;
  const plexus::LayerInstance layer(host.get(PLX_KIND_LAYER, "fixture.c_scale"), configs.create_args());

  const plx_layer_info info = layer.info();
  BOOST_TEST(info.flags == 0u);
  BOOST_TEST(info.num_params == 1u);
  BOOST_TEST(info.num_stages == 1u);
  BOOST_TEST(info.num_inputs == 1u);
  BOOST_TEST(info.num_outputs == 1u);

  const plx_param_spec weight = layer.param(0);
  BOOST_TEST(std::string(weight.name) == "weight");
  BOOST_TEST(weight.desc.ndim == 1u);
  BOOST_TEST(weight.desc.dims[0] == 1);
  BOOST_TEST(plx_dtype_equal(weight.desc.dtype, plx_dtype_f32()));
  BOOST_TEST(weight.init == uint32_t{PLX_INIT_ONES});

  const plx_stage_info stage = layer.stage(0);
  BOOST_TEST(stage.kind == uint32_t{PLX_STAGE_COMPUTE});
  BOOST_TEST(std::string(stage.name) == "scale");

  plx_tensor_desc input{};
  input.ndim = 2;
  input.dtype = plx_dtype_f32();
  input.dims[0] = 3;
  input.dims[1] = 5;
  const std::vector<plx_tensor_desc> outputs = layer.output_desc({input});
  BOOST_TEST_REQUIRE(outputs.size() == 1u);
  BOOST_TEST(outputs[0].ndim == 2u);
  BOOST_TEST(outputs[0].dims[0] == 3);
  BOOST_TEST(outputs[0].dims[1] == 5);
  BOOST_TEST(plx_dtype_equal(outputs[0].dtype, plx_dtype_f32()));
}

BOOST_AUTO_TEST_CASE(forward_and_backward_are_exact) {
  abi_test::expect_scale_works(host.get(PLX_KIND_LAYER, "fixture.c_scale"));
}

// A C plugin has no exceptions: it calls set_error, returns a status, and the host must attach
// that message to the error it throws.
BOOST_AUTO_TEST_CASE(errors_reported_through_set_error_reach_the_caller) {
  const plexus::Component& component = host.get(PLX_KIND_LAYER, "fixture.c_scale");
  abi_test::LayerConfigs configs;
  const plexus::LayerInstance layer(component, configs.create_args());
  const auto state = layer.create_state(0);

  std::vector<double> x_values{1.0, 2.0};  // fp64: the layer takes fp32 only
  int64_t x_shape[1] = {2};
  DLTensor xv{};
  xv.data = x_values.data();
  xv.device = DLDevice{kDLCPU, 0};
  xv.ndim = 1;
  xv.dtype = plx_dtype_f64();
  xv.shape = x_shape;
  HostTensor y({0.0f, 0.0f}), w({1.0f});
  DLTensor yv = y.view(), wv = w.view();
  const plx_forward_args args = abi_test::forward_args(&xv, &yv, &wv, 0);

  try {
    layer.forward(*state, 0, args);
    BOOST_FAIL("forward accepted an fp64 input");
  } catch (const plexus::ComponentCallError& e) {
    BOOST_TEST_MESSAGE("failed as expected: " << e.what());
    BOOST_TEST(e.status() == PLX_ERR_INVALID_ARGUMENT);
    BOOST_TEST(mentions(e.what(), "contiguous float32 CPU tensors"), e.what());
    BOOST_TEST(mentions(e.what(), "fixture.c_scale"), e.what());
  }
  BOOST_CHECK_THROW(layer.param(1), plexus::ComponentCallError);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- fixture.c_sequential ----------------------------------------------------------------------

namespace {

// One callback the scheduler made: 'F'orward, 'B'ackward or 'W'eight gradients of (mb, unit,
// stage), and whether it ran on the comm stream.
struct Call {
  char what;
  uint32_t mb;
  uint32_t unit;
  uint32_t stage;
  bool comm;
  bool operator==(const Call&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Call& c) {
  return os << c.what << "(mb " << c.mb << ", unit " << c.unit << ", stage " << c.stage << (c.comm ? ", comm)" : ")");
}

// A stand-in for the engine: three units with 1, 2 and 1 stages, unit 1's second stage being
// communication. It records every callback and can fail the n-th one.
class FakeEngine {
 public:
  std::vector<Call> calls;
  std::optional<std::size_t> fail_call;  // this call (0-based) returns PLX_ERR_COMM

  plx_schedule_env env(uint32_t microbatches, bool split_weight_grads) {
    plx_schedule_env e{};
    e.struct_size = sizeof(e);
    e.num_microbatches = microbatches;
    e.num_units = 3;
    e.ctx = this;
    e.compute_stream = reinterpret_cast<plx_stream>(&compute_tag_);
    e.comm_stream = reinterpret_cast<plx_stream>(&comm_tag_);
    e.unit_num_stages = &num_stages;
    e.unit_stage = &stage_info;
    e.forward = &forward;
    e.backward = &backward;
    e.backward_weights = split_weight_grads ? &backward_weights : nullptr;
    return e;
  }

 private:
  static constexpr uint32_t kStages[3] = {1, 2, 1};
  char compute_tag_ = 0;
  char comm_tag_ = 0;

  static FakeEngine& self(void* ctx) { return *static_cast<FakeEngine*>(ctx); }
  static bool is_comm(uint32_t unit, uint32_t stage) { return unit == 1 && stage == 1; }

  plx_status record(Call call) {
    calls.push_back(call);
    return fail_call == calls.size() - 1 ? PLX_ERR_COMM : PLX_OK;
  }
  plx_status record_stage(char what, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream stream) {
    // A stage on the wrong stream is recorded as such and shows up in the comparison.
    return record({what, mb, unit, stage, stream == reinterpret_cast<plx_stream>(&comm_tag_)});
  }

  static plx_status num_stages(void* /*ctx*/, uint32_t unit, uint32_t* out) noexcept {
    if (unit >= 3) return PLX_ERR_INVALID_ARGUMENT;
    *out = kStages[unit];
    return PLX_OK;
  }
  static plx_status stage_info(void* /*ctx*/, uint32_t unit, uint32_t stage, plx_stage_info* out) noexcept {
    if (unit >= 3 || stage >= kStages[unit]) return PLX_ERR_INVALID_ARGUMENT;
    out->kind = is_comm(unit, stage) ? PLX_STAGE_COMM : PLX_STAGE_COMPUTE;
    out->name = is_comm(unit, stage) ? "exchange" : "compute";
    return PLX_OK;
  }
  static plx_status forward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream stream) noexcept {
    return self(ctx).record_stage('F', mb, unit, stage, stream);
  }
  static plx_status backward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream stream) noexcept {
    return self(ctx).record_stage('B', mb, unit, stage, stream);
  }
  static plx_status backward_weights(void* ctx, uint32_t mb, uint32_t unit, plx_stream /*stream*/) noexcept {
    return self(ctx).record({'W', mb, unit, 0, false});
  }
};

// One microbatch's calls without split weight gradients.
std::vector<Call> microbatch_calls(uint32_t mb) {
  return {{'F', mb, 0, 0, false}, {'F', mb, 1, 0, false}, {'F', mb, 1, 1, true},  {'F', mb, 2, 0, false},
          {'B', mb, 2, 0, false}, {'B', mb, 1, 1, true},  {'B', mb, 1, 0, false}, {'B', mb, 0, 0, false}};
}

struct Scheduler : CPlugin {
  plexus::ConfigHandle config{boost::json::object{}, "schedule"};
  plexus::SchedulerInstance scheduler{host.get(PLX_KIND_SCHEDULER, "fixture.c_sequential"), config.get()};
  FakeEngine engine;
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(c_sequential, Scheduler)

BOOST_AUTO_TEST_CASE(runs_each_microbatch_forward_then_backward_in_reverse) {
  scheduler.run_step(engine.env(2, false));
  std::vector<Call> expected = microbatch_calls(0);
  const std::vector<Call> second = microbatch_calls(1);
  expected.insert(expected.end(), second.begin(), second.end());
  BOOST_TEST(engine.calls == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(runs_split_weight_gradients_right_after_each_units_backward) {
  scheduler.run_step(engine.env(1, true));
  const std::vector<Call> expected{{'F', 0, 0, 0, false}, {'F', 0, 1, 0, false}, {'F', 0, 1, 1, true},
                                   {'F', 0, 2, 0, false}, {'B', 0, 2, 0, false}, {'W', 0, 2, 0, false},
                                   {'B', 0, 1, 1, true},  {'B', 0, 1, 0, false}, {'W', 0, 1, 0, false},
                                   {'B', 0, 0, 0, false}, {'W', 0, 0, 0, false}};
  BOOST_TEST(engine.calls == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(stops_at_the_first_failing_callback) {
  engine.fail_call = 3;  // mb 0's forward of unit 2
  try {
    scheduler.run_step(engine.env(2, false));
    BOOST_FAIL("run_step ignored a failed forward");
  } catch (const plexus::ComponentCallError& e) {
    BOOST_TEST_MESSAGE("failed as expected: " << e.what());
    BOOST_TEST(e.status() == PLX_ERR_COMM);
  }
  BOOST_TEST(engine.calls.size() == 4u);
}

BOOST_AUTO_TEST_SUITE_END()
