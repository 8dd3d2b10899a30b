/* Plexus SDK: the communication-backend kind (PLX_KIND_COMM), table version 1.
 *
 * A comm backend provides collectives and point-to-point transfers over communicators (MPI for
 * CPU tensors, NCCL for GPU tensors, a single-process backend for world size 1). Plugins that
 * merely USE communication go through plx_host_api's group functions; this table is what the
 * host calls underneath. A communicator is the backend's own object (`comm`). Asynchronous
 * calls return a request completed by `wait`, which lets a scheduler overlap communication
 * with compute. Counts and offsets are in elements.
 *
 * The contract every backend keeps (docs/comm-backend.md has the long form):
 * - Tensors are contiguous (strides NULL or compact), byte_offset honoured, on a device in
 *   device_mask. Reductions take PLX_REDUCE_* (AVG = SUM / group size); a dtype a backend
 *   cannot reduce is PLX_ERR_UNSUPPORTED naming it.
 * - Sizes: all_reduce send and recv have equal sizes (send == recv: in place); all_gather's
 *   recv holds size x send, in rank order; reduce_scatter's send holds size x recv and rank r
 *   gets chunk r; all_to_all_v's counts and offsets are arrays of `size` entries, in elements.
 * - out_request NULL makes a call blocking, bounded by the communicator's timeout; otherwise
 *   the call starts the operation and returns a request that exactly one `wait` completes and
 *   releases (`test` only asks). Every rank of a communicator starts its collectives in the
 *   same order; requests may be waited on in any order.
 * - wait's timeout_ms: 0 means the communicator's own timeout (init's timeout_ms; 0 there:
 *   none). Past it the call returns PLX_ERR_TIMEOUT and its message names the ranks that did
 *   not take part (dead, stopped, or still behind), so no job hangs without saying who.
 * - After a timeout or a dead peer the communicator is unusable: the host reports the error
 *   and calls abort, which ends every rank of the job (non-zero exit). */
#ifndef PLEXUS_COMM_H
#define PLEXUS_COMM_H

#include "plexus/abi.h"
#include "plexus/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct plx_comm_init_args {
  uint32_t struct_size;
  int32_t rank;       /* from the launcher; -1 when the backend discovers it itself (mpirun) */
  int32_t world_size; /* likewise */
  uint32_t timeout_ms; /* a peer silent for longer is an error naming it (0 = no limit) */
  DLDevice device;
  plx_config config;
} plx_comm_init_args;

typedef struct plx_comm_v1 {
  uint32_t struct_size;
  uint32_t reserved;
  uint64_t device_mask; /* devices whose memory it can communicate */
  plx_status (*init)(const plx_comm_init_args* args, void** out_world);
  void (*destroy)(void* comm); /* sub-communicators first, the world last */
  plx_status (*rank_size)(void* comm, int32_t* rank, int32_t* size);
  /* Collective over `comm`: ranks with equal color form a new communicator ordered by key;
   * color < 0 joins none and gets NULL. */
  plx_status (*split)(void* comm, int32_t color, int32_t key, void** out_comm);
  plx_status (*all_reduce)(void* comm, const DLTensor* send, DLTensor* recv, int32_t op,
                           plx_stream stream, void** out_request);
  plx_status (*all_gather)(void* comm, const DLTensor* send, DLTensor* recv, plx_stream stream,
                           void** out_request);
  plx_status (*reduce_scatter)(void* comm, const DLTensor* send, DLTensor* recv, int32_t op,
                               plx_stream stream, void** out_request);
  plx_status (*all_to_all_v)(void* comm, const DLTensor* send, const int64_t* send_counts,
                             const int64_t* send_offsets, DLTensor* recv,
                             const int64_t* recv_counts, const int64_t* recv_offsets,
                             plx_stream stream, void** out_request);
  plx_status (*broadcast)(void* comm, DLTensor* buffer, int32_t root, plx_stream stream,
                          void** out_request);
  plx_status (*send)(void* comm, const DLTensor* buffer, int32_t peer, int32_t tag,
                     plx_stream stream, void** out_request);
  plx_status (*recv)(void* comm, DLTensor* buffer, int32_t peer, int32_t tag, plx_stream stream,
                     void** out_request);
  plx_status (*barrier)(void* comm);
  /* Completes and releases a request; PLX_ERR_TIMEOUT (naming the silent rank) past timeout_ms. */
  plx_status (*wait)(void* comm, void* request, uint32_t timeout_ms);
  plx_status (*test)(void* comm, void* request, int32_t* done);
  /* Tears the job down after a fault so no rank blocks forever (optional). */
  plx_status (*abort)(void* comm, const char* reason);
} plx_comm_v1;

PLX_PIN_OFFSET(plx_comm_init_args, device, 16);
PLX_PIN_SIZE(plx_comm_init_args, 32);
PLX_PIN_OFFSET(plx_comm_v1, init, 16);
PLX_PIN_OFFSET(plx_comm_v1, all_reduce, 48);
PLX_PIN_OFFSET(plx_comm_v1, abort, 128);
PLX_PIN_SIZE(plx_comm_v1, 136);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_COMM_H */
