/* The ABI guard's anchor: a shared library whose only purpose is to make every type of the
 * Plexus SDK's C ABI reachable from an exported function, so that `abidw` records their full
 * layout (from the DWARF of a -g build) and `abidiff` can compare it with the released baseline
 * (sdk/abi/baseline-1.0.abi). tests/abi/abidiff.sh builds it; it is never linked into anything.
 *
 * abidw only describes types that exported functions or variables reach, so each type gets one
 * function taking a pointer to it: pointers are how the types cross the plugin boundary, and a
 * change of a pointed-to struct is reported as a change of that function. Types reached through
 * others (DLTensor through plx_forward_args, ...) are anchored directly as well, so the report
 * names them even if the type that leads to them changes.
 *
 * When a minor version adds a type (a new component kind, a new args struct), add its anchor
 * here; the suppressions accept new anchor functions, since adding types is compatible. Never
 * remove or rename an anchor: the guard would report the removal as the break it is. */
#include "plexus/plexus.h"

#define PLX_ABI_ANCHOR(suffix, type) \
  PLX_EXPORT void plx_abi_anchor_##suffix(type* value);     \
  PLX_EXPORT void plx_abi_anchor_##suffix(type* value) { (void)value; }

/* abi.h, tensor.h: status codes, DLPack views and tensor descriptions. */
PLX_ABI_ANCHOR(status, plx_status)
PLX_ABI_ANCHOR(dl_device, DLDevice)
PLX_ABI_ANCHOR(dl_data_type, DLDataType)
PLX_ABI_ANCHOR(dl_tensor, DLTensor)
PLX_ABI_ANCHOR(tensor_desc, plx_tensor_desc)

/* host.h: the host-services table and its opaque handles. */
PLX_ABI_ANCHOR(host_api, plx_host_api)
PLX_ABI_ANCHOR(stream, plx_stream)
PLX_ABI_ANCHOR(event, plx_event)
PLX_ABI_ANCHOR(config, plx_config)
PLX_ABI_ANCHOR(group, plx_group)
PLX_ABI_ANCHOR(request, plx_request)

/* plugin.h: the entry point's signature, the descriptor and the component entries. */
PLX_ABI_ANCHOR(entry_fn, plx_entry_fn)
PLX_ABI_ANCHOR(component_desc, plx_component_desc)
PLX_ABI_ANCHOR(plugin_descriptor, plx_plugin_descriptor)

/* layer.h */
PLX_ABI_ANCHOR(stage_info, plx_stage_info)
PLX_ABI_ANCHOR(param_spec, plx_param_spec)
PLX_ABI_ANCHOR(layer_info, plx_layer_info)
PLX_ABI_ANCHOR(layer_create_args, plx_layer_create_args)
PLX_ABI_ANCHOR(forward_args, plx_forward_args)
PLX_ABI_ANCHOR(backward_args, plx_backward_args)
PLX_ABI_ANCHOR(layer_v1, plx_layer_v1)
PLX_ABI_ANCHOR(step_args, plx_step_args) /* ABI 1.5 */

/* scheduler.h */
PLX_ABI_ANCHOR(schedule_env, plx_schedule_env)
PLX_ABI_ANCHOR(scheduler_v1, plx_scheduler_v1)

/* stack.h (ABI 1.3) */
PLX_ABI_ANCHOR(stack_create_args, plx_stack_create_args)
PLX_ABI_ANCHOR(stack_layer, plx_stack_layer)
PLX_ABI_ANCHOR(stack_description, plx_stack_description)
PLX_ABI_ANCHOR(stack_v1, plx_stack_v1)

/* data_parallel.h (ABI 1.5) */
PLX_ABI_ANCHOR(dp_unit_desc, plx_dp_unit_desc)
PLX_ABI_ANCHOR(dp_setup, plx_dp_setup)
PLX_ABI_ANCHOR(dp_layout, plx_dp_layout)
PLX_ABI_ANCHOR(dp_memory, plx_dp_memory)
PLX_ABI_ANCHOR(data_parallel_v1, plx_data_parallel_v1)

/* topology.h */
PLX_ABI_ANCHOR(group_sink, plx_group_sink)
PLX_ABI_ANCHOR(topology_args, plx_topology_args)
PLX_ABI_ANCHOR(topology_v1, plx_topology_v1)

/* comm.h */
PLX_ABI_ANCHOR(comm_init_args, plx_comm_init_args)
PLX_ABI_ANCHOR(comm_v1, plx_comm_v1)

/* fusion.h */
PLX_ABI_ANCHOR(fusion_create_args, plx_fusion_create_args)
PLX_ABI_ANCHOR(fusion_backend_v1, plx_fusion_backend_v1)

/* mhc.h: the "mhc" fusion family's table and argument structs. */
PLX_ABI_ANCHOR(mhc_problem, plx_mhc_problem)
PLX_ABI_ANCHOR(mhc_proj_rms_forward_args, plx_mhc_proj_rms_forward_args)
PLX_ABI_ANCHOR(mhc_proj_rms_backward_args, plx_mhc_proj_rms_backward_args)
PLX_ABI_ANCHOR(mhc_mappings_forward_args, plx_mhc_mappings_forward_args)
PLX_ABI_ANCHOR(mhc_mappings_backward_args, plx_mhc_mappings_backward_args)
PLX_ABI_ANCHOR(mhc_aggregate_forward_args, plx_mhc_aggregate_forward_args)
PLX_ABI_ANCHOR(mhc_aggregate_backward_args, plx_mhc_aggregate_backward_args)
PLX_ABI_ANCHOR(mhc_post_res_forward_args, plx_mhc_post_res_forward_args)
PLX_ABI_ANCHOR(mhc_post_res_backward_args, plx_mhc_post_res_backward_args)
PLX_ABI_ANCHOR(mhc_v1, plx_mhc_v1)
