// Communication for plugins. Groups come from the distributed runtime (comm backend plus
// topology provider); until it is started, no group exists and every call says so plainly.
#include <string>

#include "host_services/host_functions.hpp"
#include "host_services/last_error.hpp"

namespace plexus::detail {
namespace {

constexpr const char* kNoRuntime =
    "no communication group is available: the distributed runtime is not running in this host";

plx_status group_get(void*, const char* name, plx_group* out) {
  *out = nullptr;
  return fail(PLX_ERR_NOT_FOUND, std::string("group '") + (name != nullptr ? name : "") + "': " + kNoRuntime);
}
plx_status no_group() { return fail(PLX_ERR_UNSUPPORTED, kNoRuntime); }
plx_status group_rank(void*, plx_group, int32_t*, int32_t*) { return no_group(); }
plx_status all_reduce(void*, plx_group, const DLTensor*, DLTensor*, int32_t, plx_stream, plx_request*) { return no_group(); }
plx_status all_gather(void*, plx_group, const DLTensor*, DLTensor*, plx_stream, plx_request*) { return no_group(); }
plx_status reduce_scatter(void*, plx_group, const DLTensor*, DLTensor*, int32_t, plx_stream, plx_request*) { return no_group(); }
plx_status all_to_all_v(void*, plx_group, const DLTensor*, const int64_t*, const int64_t*, DLTensor*,
                        const int64_t*, const int64_t*, plx_stream, plx_request*) {
  return no_group();
}
plx_status broadcast(void*, plx_group, DLTensor*, int32_t, plx_stream, plx_request*) { return no_group(); }
plx_status send(void*, plx_group, const DLTensor*, int32_t, int32_t, plx_stream, plx_request*) { return no_group(); }
plx_status recv(void*, plx_group, DLTensor*, int32_t, int32_t, plx_stream, plx_request*) { return no_group(); }
plx_status barrier(void*, plx_group) { return no_group(); }
plx_status request_wait(void*, plx_request) { return no_group(); }
plx_status request_test(void*, plx_request, int32_t*) { return no_group(); }

}  // namespace

void fill_comm_functions(plx_host_api& api) {
  api.group_get = &group_get;
  api.group_rank = &group_rank;
  api.all_reduce = &all_reduce;
  api.all_gather = &all_gather;
  api.reduce_scatter = &reduce_scatter;
  api.all_to_all_v = &all_to_all_v;
  api.broadcast = &broadcast;
  api.send = &send;
  api.recv = &recv;
  api.barrier = &barrier;
  api.request_wait = &request_wait;
  api.request_test = &request_test;
}

}  // namespace plexus::detail
