#!/usr/bin/env python3
"""Compares two Plexus checkpoints tensor by tensor: exit 0 when every tensor is identical.

    /usr/bin/python3 scripts/compare_checkpoints.py DIR_A DIR_B [--show N] [--strict-config]

DIR_A and DIR_B are each a checkpoint directory (step_NNNNNNNN, holding model.safetensors,
optimizer.safetensors and state.json), a run's checkpoints/ directory or a run directory (then
its newest complete step_* checkpoint, as `plexus checkpoint inspect` picks it).

Compared:
  * every *.safetensors file of either checkpoint (the model's parameters and the optimizer's
    moments): the same files, in each the same tensor names, and per tensor the same dtype, the
    same shape and the same bytes. Byte equality is the test (so -0.0 against 0.0 or two NaNs of
    different payloads count as differences); for a differing floating-point tensor the report
    adds how many elements differ, the largest absolute difference and where it is.
  * state.json: "format", "step", "data_position", "global_microbatches" and any other key
    outside the run config must be equal. The run config ("config") is shown as notes, without
    run.output_dir (each run writes to its own), and counts as a difference only with
    --strict-config: a change that adds a config key with a default changes no tensor.
  * any other file of the checkpoint directory: its bytes, as a note (COMPLETE, the manifest of
    file sizes, without state.json's size, which changes with the length of run.output_dir).

Output: one line per file, the first --show (default 5) differing tensors of each file, then one
final line, either
    identical: N tensors (M bytes)
or
    DIFFERENT: K of N tensors differ (...)
Exit status: 0 identical, 1 different, 2 bad input (a missing directory, no checkpoint, a file
that is not valid safetensors), each named. Standard library only; run it with the system python.
"""
import argparse
import json
import math
import pathlib
import re
import struct
import sys
from array import array

EXIT_SAME, EXIT_DIFFERENT, EXIT_BAD = 0, 1, 2

# safetensors dtype -> (element size, struct/array code, is floating point)
DTYPES = {
    "BOOL": (1, "B", False), "U8": (1, "B", False), "I8": (1, "b", False),
    "F8_E5M2": (1, None, True), "F8_E4M3": (1, None, True),
    "I16": (2, "h", False), "U16": (2, "H", False), "F16": (2, "e", True), "BF16": (2, "bf16", True),
    "I32": (4, "i", False), "U32": (4, "I", False), "F32": (4, "f", True),
    "I64": (8, "q", False), "U64": (8, "Q", False), "F64": (8, "d", True),
}
STEP_DIR = re.compile(r"^step_\d{8,}$")
STATE_KEYS_IGNORED_IN_CONFIG = {("run", "output_dir")}


class BadInput(Exception):
    pass


def checkpoint_dir(path):
    """The checkpoint directory PATH names: itself, or the newest step_* below PATH or PATH/checkpoints."""
    p = pathlib.Path(path)
    if not p.is_dir():
        raise BadInput(f"{p}: not a directory")
    if (p / "state.json").is_file() or (p / "model.safetensors").is_file():
        return p
    for parent in (p, p / "checkpoints"):
        if parent.is_dir():
            steps = sorted((d for d in parent.iterdir() if d.is_dir() and STEP_DIR.match(d.name)),
                           key=lambda d: int(d.name[5:]))
            if steps:
                return steps[-1]
    raise BadInput(f"{p}: no checkpoint here (no state.json or model.safetensors, no checkpoints/step_* below it)")


def read_safetensors(path):
    """(header dict without __metadata__, metadata dict, the data buffer as bytes)."""
    data = path.read_bytes()
    if len(data) < 8:
        raise BadInput(f"{path}: {len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise BadInput(f"{path}: header length {n} runs past the end of the file ({len(data)} bytes)")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadInput(f"{path}: the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise BadInput(f"{path}: the header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    buffer = memoryview(data)[8 + n:]
    for name, entry in header.items():
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{path}: tensor {name!r}: expected dtype, shape and data_offsets, got {entry!r}") from None
        if dtype not in DTYPES:
            raise BadInput(f"{path}: tensor {name!r}: unknown dtype {dtype!r}")
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise BadInput(f"{path}: tensor {name!r}: bad shape {shape!r}")
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= len(buffer)):
            raise BadInput(f"{path}: tensor {name!r}: data_offsets [{begin}, {end}] outside the "
                           f"{len(buffer)}-byte data buffer")
        if end - begin != math.prod(shape) * DTYPES[dtype][0]:
            raise BadInput(f"{path}: tensor {name!r}: {end - begin} bytes for {dtype} {shape}")
    return header, metadata, buffer


def values(raw, dtype):
    """The elements of a tensor's bytes as Python numbers, or None for a dtype without a reader."""
    size, code, _ = DTYPES[dtype]
    if code is None:
        return None
    if code == "bf16":  # the upper half of a float32
        halves = array("H")
        halves.frombytes(raw)
        if sys.byteorder != "little":
            halves.byteswap()
        return struct.unpack(f"<{len(halves)}f", b"".join(struct.pack("<I", h << 16) for h in halves))
    if code == "e":
        return struct.unpack(f"<{len(raw) // 2}e", raw)
    a = array(code)
    if a.itemsize != size:
        return struct.unpack(f"<{len(raw) // size}{code}", raw)
    a.frombytes(raw)
    if sys.byteorder != "little":
        a.byteswap()
    return a


def unravel(index, shape):
    out = []
    for dim in reversed(shape):
        out.append(index % dim if dim else 0)
        index = index // dim if dim else 0
    return tuple(reversed(out))


def describe_difference(raw_a, raw_b, dtype, shape):
    """How two equally sized tensors differ: elements, largest |a - b| and where."""
    va, vb = values(raw_a, dtype), values(raw_b, dtype)
    if va is None:
        differing = sum(1 for x, y in zip(raw_a, raw_b) if x != y)
        return f"{differing} of {len(raw_a)} bytes differ"
    differing, worst, worst_at, nan_mismatch = 0, -1.0, 0, 0
    for i, (x, y) in enumerate(zip(va, vb)):
        if x == y and not (DTYPES[dtype][2] and math.copysign(1, x) != math.copysign(1, y)):
            continue
        if DTYPES[dtype][2] and (math.isnan(x) or math.isnan(y)):
            if math.isnan(x) and math.isnan(y):
                continue  # same NaN-ness: a payload difference, counted by the bytes only
            nan_mismatch += 1
            differing += 1
            continue
        differing += 1
        d = abs(x - y)
        if d > worst:
            worst, worst_at = d, i
    text = f"{differing} of {len(va)} elements differ"
    if differing == 0:
        return "the same values, different bytes (NaN payloads)"
    if worst >= 0:
        scale = max(abs(va[worst_at]), abs(vb[worst_at]))
        rel = f", relative {worst / scale:.3g}" if scale > 0 else ""
        text += (f", max abs difference {worst:.6g}{rel} at {list(unravel(worst_at, shape))} "
                 f"({va[worst_at]!r} vs {vb[worst_at]!r})")
    if nan_mismatch:
        text += f", {nan_mismatch} NaN on one side only"
    return text


def flatten(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from flatten(v, prefix + (k,))
    else:
        yield prefix, obj


def compare_state(path_a, path_b, strict_config, out):
    """(differences, notes) between two state.json files."""
    try:
        sa, sb = json.loads(path_a.read_text()), json.loads(path_b.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"state.json: {e}") from None
    diffs, notes, lines = 0, 0, []
    for key in sorted(set(sa) | set(sb)):
        if key == "config":
            continue
        if sa.get(key, "<absent>") != sb.get(key, "<absent>"):
            lines.append(f"  state.json: {key}: {sa.get(key, '<absent>')!r} vs {sb.get(key, '<absent>')!r}")
            diffs += 1
    ca = {k: v for k, v in flatten(sa.get("config", {})) if k not in STATE_KEYS_IGNORED_IN_CONFIG}
    cb = {k: v for k, v in flatten(sb.get("config", {})) if k not in STATE_KEYS_IGNORED_IN_CONFIG}
    config_diffs = [k for k in sorted(set(ca) | set(cb)) if ca.get(k, "<absent>") != cb.get(k, "<absent>")]
    for k in config_diffs:
        label = "state.json config" + ("" if strict_config else " (note)")
        lines.append(f"  {label}: {'.'.join(map(str, k))}: {ca.get(k, '<absent>')!r} vs {cb.get(k, '<absent>')!r}")
    if strict_config:
        diffs += len(config_diffs)
    else:
        notes += len(config_diffs)
    step = sa.get("step")
    out(f"state.json: step {step}" + ("" if sa.get("step") == sb.get("step") else f" vs {sb.get('step')}")
        + (", the same state" if diffs == 0 else f", {diffs} difference(s)")
        + (f", {len(config_diffs)} config key(s) differ" if config_diffs else ", the same run config (output_dir aside)"))
    for line in lines:
        out(line)
    return diffs, notes


def same_manifest(path_a, path_b):
    """Whether two COMPLETE manifests ({"format", "step", "files": {name: bytes}}) agree but for
    state.json's size, which differs with the length of run.output_dir."""
    try:
        ma, mb = json.loads(path_a.read_text()), json.loads(path_b.read_text())
        for m in (ma, mb):
            m.get("files", {}).pop("state.json", None)
        return ma == mb
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False


def compare(dir_a, dir_b, show, strict_config, out=print):
    a, b = checkpoint_dir(dir_a), checkpoint_dir(dir_b)
    out(f"A: {a}")
    out(f"B: {b}")
    files_a = {p.name for p in a.iterdir() if p.is_file()}
    files_b = {p.name for p in b.iterdir() if p.is_file()}
    tensor_files = sorted(f for f in files_a | files_b if f.endswith(".safetensors"))
    if not tensor_files:
        raise BadInput(f"{a} and {b}: no .safetensors file in either")
    total_tensors, total_bytes, differing_tensors, other_diffs = 0, 0, 0, 0
    for f in tensor_files:
        if f not in files_a or f not in files_b:
            out(f"{f}: only in {'A' if f in files_a else 'B'}")
            other_diffs += 1
            continue
        ha, ma, ba = read_safetensors(a / f)
        hb, mb, bb = read_safetensors(b / f)
        names = sorted(set(ha) | set(hb))
        bad = []
        file_bytes = 0
        for name in names:
            ea, eb = ha.get(name), hb.get(name)
            if ea is None or eb is None:
                bad.append(f"{name}: only in {'A' if eb is None else 'B'}")
                continue
            if ea["dtype"] != eb["dtype"] or ea["shape"] != eb["shape"]:
                bad.append(f"{name}: {ea['dtype']} {ea['shape']} vs {eb['dtype']} {eb['shape']}")
                continue
            ra = ba[ea["data_offsets"][0]:ea["data_offsets"][1]]
            rb = bb[eb["data_offsets"][0]:eb["data_offsets"][1]]
            file_bytes += len(ra)
            if ra != rb:
                bad.append(f"{name}: {ea['dtype']} {ea['shape']}: "
                           f"{describe_difference(bytes(ra), bytes(rb), ea['dtype'], ea['shape'])}")
        total_tensors += len(names)
        total_bytes += file_bytes
        differing_tensors += len(bad)
        if not bad:
            out(f"{f}: {len(names)} tensors identical ({file_bytes} bytes)")
        else:
            out(f"{f}: {len(bad)} of {len(names)} tensors differ" + (f"; the first {show}:" if len(bad) > show else ":"))
            for line in bad[:show]:
                out(f"  {line}")
        if ma != mb:
            out(f"  {f}: __metadata__ differs (note): {ma!r} vs {mb!r}")
    notes = 0
    if "state.json" in files_a and "state.json" in files_b:
        d, n = compare_state(a / "state.json", b / "state.json", strict_config, out)
        other_diffs += d
        notes += n
    elif "state.json" in files_a or "state.json" in files_b:
        out(f"state.json: only in {'A' if 'state.json' in files_a else 'B'}")
        other_diffs += 1
    for f in sorted((files_a | files_b) - set(tensor_files) - {"state.json"}):
        if f not in files_a or f not in files_b:
            out(f"{f} (note): only in {'A' if f in files_a else 'B'}")
            notes += 1
        elif (a / f).read_bytes() != (b / f).read_bytes() and not same_manifest(a / f, b / f):
            out(f"{f} (note): the bytes differ")
            notes += 1
    if differing_tensors == 0 and other_diffs == 0:
        out(f"identical: {total_tensors} tensors ({total_bytes} bytes)"
            + (f"; {notes} note(s) above" if notes else ""))
        return EXIT_SAME
    parts = [f"{differing_tensors} of {total_tensors} tensors differ"]
    if other_diffs:
        parts.append(f"{other_diffs} other difference(s): files or state.json")
    out(f"DIFFERENT: {'; '.join(parts)}")
    return EXIT_DIFFERENT


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir_a")
    ap.add_argument("dir_b")
    ap.add_argument("--show", type=int, default=5, help="differing tensors listed per file (default 5)")
    ap.add_argument("--strict-config", action="store_true",
                    help="a difference in state.json's run config (output_dir aside) counts as a difference")
    try:
        args = ap.parse_args()
    except SystemExit as e:
        sys.exit(EXIT_BAD if e.code else 0)
    try:
        sys.exit(compare(args.dir_a, args.dir_b, args.show, args.strict_config))
    except BadInput as e:
        print(f"compare_checkpoints: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD)
    except OSError as e:
        print(f"compare_checkpoints: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD)


if __name__ == "__main__":
    main()
