"""megatron-core's own schedule tables and warmup counts, for test_pipeline_schedules_megatron.

    python megatron_schedules.py SHAPES.json OUT.json

SHAPES.json is a list of {"P", "r", "M", "V", "N", "overlap"}; OUT.json gets, for each, what
megatron.core.pipeline_parallel.schedules reports: get_pp_rank_microbatches' total, warmup,
remaining and all-in-warmup flag, and (V > 1) get_schedule_table as [[microbatch, chunk], ...].
A V of 1 means no virtual pipeline (Megatron's non-interleaved 1F1B). Needs only megatron-core
and torch, no GPU and no process group: the pipeline's size and rank are handed to megatron-core
through a stand-in communicator (or its parallel_state setters on versions without one).
"""

import inspect
import json
import sys
import types

from megatron.core import parallel_state
from megatron.core.pipeline_parallel import schedules


def rank_counts(P, r, M, V, N, overlap):
    params = inspect.signature(schedules.get_pp_rank_microbatches).parameters
    kwargs = {"forward_only": False}
    if "overlap_moe_expert_parallel_comm" in params:
        kwargs["overlap_moe_expert_parallel_comm"] = overlap
    elif overlap:
        return None  # this megatron-core predates the EP overlap
    vp = V if V > 1 else None
    if "p2p_communicator" in params:
        group = types.SimpleNamespace(size=lambda: P, rank=lambda: r)
        kwargs["p2p_communicator"] = types.SimpleNamespace(pp_group=group, virtual_pipeline_model_parallel_size=vp)
    else:
        parallel_state.set_pipeline_model_parallel_world_size(P)
        parallel_state.set_pipeline_model_parallel_rank(r)
        parallel_state.set_virtual_pipeline_model_parallel_world_size(vp)
    total, all_warmup, warmup, remaining = schedules.get_pp_rank_microbatches(M, V, N, **kwargs)
    return {"total": total, "warmup": warmup, "remaining": remaining, "all_in_warmup": bool(all_warmup)}


def main():
    with open(sys.argv[1]) as f:
        shapes = json.load(f)
    results = []
    for s in shapes:
        out = dict(s)
        out["counts"] = rank_counts(s["P"], s["r"], s["M"], s["V"], s["N"], s["overlap"])
        if s["V"] > 1:
            out["table"] = [list(map(int, e)) for e in schedules.get_schedule_table(s["M"], s["V"], s["N"])]
        results.append(out)
    try:
        from megatron.core.package_info import __version__ as version
    except ImportError:
        version = "?"
    with open(sys.argv[2], "w") as f:
        json.dump({"megatron_core": version, "results": results}, f)


if __name__ == "__main__":
    main()
