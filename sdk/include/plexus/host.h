/* Plexus SDK: the host-services table.
 *
 * The host hands this table to a plugin's entry point; everything a plugin needs from the
 * framework (memory, logging, errors, its config, streams, communication) comes through it.
 * A plugin never links the core library, which is what lets it be built by another compiler
 * against another C++ standard library.
 *
 * Every function takes `ctx` (the table's own ctx field) first. Fields are appended per minor
 * version; check PLX_HAS_FIELD(host, plx_host_api, field) before calling one newer than the
 * plugin's plx_plugin_descriptor.min_host_minor. */
#ifndef PLEXUS_HOST_H
#define PLEXUS_HOST_H

#include "plexus/abi.h"
#include "plexus/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Host-owned handles. They stay valid until the host says otherwise (documented per call). */
typedef struct plx_stream_s* plx_stream;   /* NULL means the device's default stream */
typedef struct plx_event_s* plx_event;
typedef struct plx_config_s* plx_config;   /* a node of the validated JSON config */
typedef struct plx_group_s* plx_group;     /* a communicator over a set of ranks */
typedef struct plx_request_s* plx_request; /* a communication in flight */

#define PLX_LOG_DEBUG 0
#define PLX_LOG_INFO 1
#define PLX_LOG_WARN 2
#define PLX_LOG_ERROR 3

#define PLX_REDUCE_SUM 0
#define PLX_REDUCE_AVG 1
#define PLX_REDUCE_MAX 2
#define PLX_REDUCE_MIN 3

typedef struct plx_host_api {
  uint32_t struct_size;
  uint32_t abi_version; /* PLX_ABI_VERSION of the host; this and struct_size are frozen forever */
  void* ctx;

  /* ---- ABI 1.0 ---- */
  /* Logging. The host prefixes time, rank and the plugin's name; `message` is one line. */
  void (*log)(void* ctx, int32_t level, const char* message);
  int32_t (*log_level)(void* ctx); /* the lowest level that will be printed */
  /* Errors. A callee about to return a non-OK status first reports the full message here; the
   * host keeps it per thread and shows it with the plugin's and component's names. */
  void (*set_error)(void* ctx, plx_status status, const char* message);

  /* Memory on `device` (CPU or GPU), from the host's allocator. `alignment` is a power of two
   * (0 = the host's default, at least 64 bytes). Freed by the same host, on the same device. */
  plx_status (*alloc)(void* ctx, DLDevice device, uint64_t bytes, uint64_t alignment, void** out);
  void (*free)(void* ctx, DLDevice device, void* ptr);

  /* Config. A component receives its validated config node (defaults filled in). Getters return
   * PLX_ERR_NOT_FOUND when `key` is absent and PLX_ERR_INVALID_ARGUMENT on a type mismatch; the
   * message names the full JSON path. Strings and nodes stay valid while the component lives. */
  plx_status (*config_get_int)(void* ctx, plx_config node, const char* key, int64_t* out);
  plx_status (*config_get_number)(void* ctx, plx_config node, const char* key, double* out);
  plx_status (*config_get_bool)(void* ctx, plx_config node, const char* key, int32_t* out);
  plx_status (*config_get_string)(void* ctx, plx_config node, const char* key, const char** out);
  plx_status (*config_get_child)(void* ctx, plx_config node, const char* key, plx_config* out);
  /* The node as JSON text, for plugins that parse their own config. */
  plx_status (*config_to_json)(void* ctx, plx_config node, const char** out);
  /* The node's JSON path (e.g. "model.layers[3]"), for a plugin's own error messages. */
  plx_status (*config_path)(void* ctx, plx_config node, const char** out);

  /* Streams and events. On the CPU a stream runs work in order on the calling thread. */
  plx_status (*stream_create)(void* ctx, DLDevice device, int32_t priority, plx_stream* out);
  void (*stream_destroy)(void* ctx, plx_stream stream);
  plx_status (*stream_synchronize)(void* ctx, plx_stream stream);
  /* The native handle (cudaStream_t on CUDA; NULL on the CPU) for launching kernels. */
  plx_status (*stream_native)(void* ctx, plx_stream stream, void** out);
  plx_status (*event_create)(void* ctx, DLDevice device, plx_event* out);
  void (*event_destroy)(void* ctx, plx_event event);
  plx_status (*event_record)(void* ctx, plx_event event, plx_stream stream);
  plx_status (*stream_wait_event)(void* ctx, plx_stream stream, plx_event event);
  plx_status (*event_synchronize)(void* ctx, plx_event event);

  /* Communication over the groups the topology built: "world", "dp", "tp", "cp", "ep", "pp",
   * and whatever else a topology provider names. The host routes each call to the group's comm
   * backend. With out_request NULL a call is blocking; otherwise it starts and the request must
   * be completed with request_wait. Counts and offsets are in elements. send == recv is allowed
   * (in place) for all_reduce. */
  plx_status (*group_get)(void* ctx, const char* name, plx_group* out);
  plx_status (*group_rank)(void* ctx, plx_group group, int32_t* rank, int32_t* size);
  plx_status (*all_reduce)(void* ctx, plx_group group, const DLTensor* send, DLTensor* recv,
                           int32_t op, plx_stream stream, plx_request* out_request);
  plx_status (*all_gather)(void* ctx, plx_group group, const DLTensor* send, DLTensor* recv,
                           plx_stream stream, plx_request* out_request);
  plx_status (*reduce_scatter)(void* ctx, plx_group group, const DLTensor* send, DLTensor* recv,
                               int32_t op, plx_stream stream, plx_request* out_request);
  plx_status (*all_to_all_v)(void* ctx, plx_group group, const DLTensor* send,
                             const int64_t* send_counts, const int64_t* send_offsets,
                             DLTensor* recv, const int64_t* recv_counts,
                             const int64_t* recv_offsets, plx_stream stream,
                             plx_request* out_request);
  plx_status (*broadcast)(void* ctx, plx_group group, DLTensor* buffer, int32_t root,
                          plx_stream stream, plx_request* out_request);
  plx_status (*send)(void* ctx, plx_group group, const DLTensor* buffer, int32_t peer,
                     int32_t tag, plx_stream stream, plx_request* out_request);
  plx_status (*recv)(void* ctx, plx_group group, DLTensor* buffer, int32_t peer, int32_t tag,
                     plx_stream stream, plx_request* out_request);
  plx_status (*barrier)(void* ctx, plx_group group);
  plx_status (*request_wait)(void* ctx, plx_request request); /* completes and releases it */
  plx_status (*request_test)(void* ctx, plx_request request, int32_t* done);

  /* ---- ABI 1.1 ---- */
  /* Adds a value to the run's metrics stream (JSON lines) under "<plugin>/<name>" for the
   * current step, e.g. an MoE layer's load imbalance. Cheap; callable from any thread. */
  void (*report_metric)(void* ctx, const char* name, double value);

  /* ---- ABI 1.2 ---- */
  /* New groups from rank lists, beside the topology's. Collective over "world": every rank
   * calls it with the same arguments. Creates `num_groups` disjoint groups named `name`; group i
   * holds the world ranks ranks[o_i .. o_i + sizes[i]) (o_i = sizes[0] + ... + sizes[i-1]) in
   * group-rank order. *out is this rank's group, or NULL when it is in none; later,
   * group_get(name) finds it too. The name must be new, every rank in the world and in at most
   * one of the groups; arguments that differ across ranks are an error on every rank. */
  plx_status (*group_create)(void* ctx, const char* name, const int32_t* ranks, const uint32_t* sizes,
                             uint32_t num_groups, plx_group* out);
} plx_host_api;

/* Pins of ABI 1.0. A new field goes after the last pinned one; existing pins never change. */
PLX_PIN_OFFSET(plx_host_api, ctx, 8);
PLX_PIN_OFFSET(plx_host_api, log, 16);
PLX_PIN_OFFSET(plx_host_api, alloc, 40);
PLX_PIN_OFFSET(plx_host_api, config_get_int, 56);
PLX_PIN_OFFSET(plx_host_api, config_path, 104);
PLX_PIN_OFFSET(plx_host_api, stream_create, 112);
PLX_PIN_OFFSET(plx_host_api, event_synchronize, 176);
PLX_PIN_OFFSET(plx_host_api, group_get, 184);
PLX_PIN_OFFSET(plx_host_api, request_test, 272);
/* ABI 1.1 */
PLX_PIN_OFFSET(plx_host_api, report_metric, 280);
/* ABI 1.2 */
PLX_PIN_OFFSET(plx_host_api, group_create, 288);
PLX_PIN_SIZE(plx_host_api, 296);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_HOST_H */
