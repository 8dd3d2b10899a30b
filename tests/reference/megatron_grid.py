#!/usr/bin/env python3
"""Megatron-LM's process groups for given parallel sizes, computed independently of Plexus, for
tests/unit/test_topology_grid.cpp to compare with what the "grid" topology provider enumerates.

What Megatron-LM's parallel_state builds (facts of its design, not its code):
  - Two grids share one order string (default "tp-cp-ep-dp-pp", the first name varying fastest:
    in the default order rank = tp + TP * (cp + CP * (ep + EP * (dp + DP * pp)))).
      dense grid:  tp, cp, dp, pp with ep = 1 and dp = world / (tp * cp * pp)
      expert grid: expert_tp (in the "tp" slot), ep, expert_dp (in the "dp" slot), pp with
                   cp = 1 and expert_dp = world / (expert_tp * ep * pp)
    A name whose size is 1 may be left out of the order.
  - A group of a kind spanning some axes is a set of ranks whose coordinates agree on every
    other axis. Inside a group, ranks are ordered by their spanned coordinates read as a number
    (axes in grid order, the first fastest); groups are ordered by the other coordinates read
    the same way.

This script buckets every rank by its coordinates (rather than generating each group from its
index as Megatron does), so the two computations share only the definition above.

Usage (the system python; needs nothing but the standard library):
  megatron_grid.py --world N [--tp T] [--cp C] [--ep E] [--pp P] [--expert-tp X] [--order O]
Prints one JSON object {kind: [[world ranks...], ...]} with the kinds
  tp, cp, dp, pp, dp_cp, tp_cp, mp (tp-pp), tp_dp_cp        from the dense grid
  ep, expert_tp, expert_dp, tp_ep (expert tp x ep)          from the expert grid
Exit status 0, or 2 with a message on stderr when the sizes do not factor the world.
"""
import argparse
import json
import sys

NAMES = ("tp", "cp", "ep", "dp", "pp")

# kind -> (grid, the axes it spans)
KINDS = {
    "tp": ("dense", {"tp"}),
    "cp": ("dense", {"cp"}),
    "dp": ("dense", {"dp"}),
    "pp": ("dense", {"pp"}),
    "dp_cp": ("dense", {"dp", "cp"}),
    "tp_cp": ("dense", {"tp", "cp"}),
    "mp": ("dense", {"tp", "pp"}),
    "tp_dp_cp": ("dense", {"tp", "dp", "cp"}),
    "ep": ("expert", {"ep"}),
    "expert_tp": ("expert", {"tp"}),
    "expert_dp": ("expert", {"dp"}),
    "tp_ep": ("expert", {"tp", "ep"}),
}


def digits(value, radices):
    """value as mixed-radix digits, the first radix least significant."""
    out = []
    for r in radices:
        out.append(value % r)
        value //= r
    return out


def number(pairs):
    """The inverse of digits: [(digit, radix), ...], the first least significant."""
    value, weight = 0, 1
    for d, r in pairs:
        value += d * weight
        weight *= r
    return value


def groups(axes, sizes, spanned):
    """Every group of the grid (axes in order, sizes by name) that spans `spanned`."""
    radices = [sizes[a] for a in axes]
    world = 1
    for r in radices:
        world *= r
    buckets = {}
    for rank in range(world):
        coords = digits(rank, radices)
        outside = number([(c, r) for a, c, r in zip(axes, coords, radices) if a not in spanned])
        inside = number([(c, r) for a, c, r in zip(axes, coords, radices) if a in spanned])
        buckets.setdefault(outside, {})[inside] = rank
    return [[members[i] for i in sorted(members)] for _, members in sorted(buckets.items())]


def fail(message):
    print("megatron_grid.py: " + message, file=sys.stderr)
    sys.exit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, required=True)
    for name in ("tp", "cp", "ep", "pp"):
        parser.add_argument("--" + name, type=int, default=1)
    parser.add_argument("--expert-tp", type=int, default=None)
    parser.add_argument("--order", default="tp-cp-ep-dp-pp")
    args = parser.parse_args()
    expert_tp = args.tp if args.expert_tp is None else args.expert_tp

    if args.world % (args.tp * args.cp * args.pp):
        fail("world %d does not factor into tp x cp x pp" % args.world)
    if args.world % (expert_tp * args.ep * args.pp):
        fail("world %d does not factor into expert_tp x ep x pp" % args.world)
    sizes = {
        "dense": {"tp": args.tp, "cp": args.cp, "ep": 1, "pp": args.pp,
                  "dp": args.world // (args.tp * args.cp * args.pp)},
        "expert": {"tp": expert_tp, "cp": 1, "ep": args.ep, "pp": args.pp,
                   "dp": args.world // (expert_tp * args.ep * args.pp)},
    }
    axes = args.order.split("-")
    if len(set(axes)) != len(axes) or not set(axes) <= set(NAMES):
        fail("bad order " + args.order)
    for name in NAMES:
        if name not in axes:
            if sizes["dense"][name] != 1 or sizes["expert"][name] != 1:
                fail("order %s leaves out %s, whose size is not 1" % (args.order, name))
            axes.append(name)

    result = {kind: groups(axes, sizes[grid], spanned) for kind, (grid, spanned) in KINDS.items()}
    json.dump(result, sys.stdout, separators=(",", ":"))
    print()


if __name__ == "__main__":
    main()
