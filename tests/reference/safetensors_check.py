#!/usr/bin/python3
"""Independent reader of safetensors files, written from the format's description.

Used by tests/unit/test_safetensors_python.cpp to check that files written by Plexus load
outside Plexus. Debian 12 packages no safetensors module, so this implements the format with
struct + json + numpy:

  8 bytes   N, unsigned little-endian
  N bytes   JSON object: name -> {"dtype", "shape", "data_offsets": [begin, end]},
            optional "__metadata__": {str: str}
  rest      the data buffer, each tensor little-endian row-major at [begin, end)

Prints one JSON object: {name: {"dtype": "F32", "shape": [...], "sum": float}}. When torch
imports, every tensor is also loaded with torch.frombuffer and its sum must agree (a second,
unrelated decoder), and "torch_sum" is added to each entry.

Exit status: 0 when the file is valid, 1 with a message on stderr when it is not, 2 on usage
errors, 3 when numpy is missing (the caller's precondition should have caught that).
"""

import json
import struct
import sys

try:
    import numpy as np
except ImportError:  # pragma: no cover - reported to the caller by exit status
    print("safetensors_check: numpy is not available", file=sys.stderr)
    sys.exit(3)

try:
    import torch  # optional second check
except ImportError:
    torch = None

# Element types with a numpy equivalent, little-endian explicitly.
NUMPY_DTYPES = {
    "BOOL": np.dtype("?"),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
    "F64": np.dtype("<f8"),
}
# Types numpy lacks, decoded here from their bit layouts.
EXTRA_SIZES = {"BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}


def fail(message):
    print("safetensors_check: " + message, file=sys.stderr)
    sys.exit(1)


def f8_table(exponent_bits, mantissa_bits, bias, e4m3fn):
    """float64 value of every byte of an 8-bit float format."""
    table = np.zeros(256, dtype=np.float64)
    for byte in range(256):
        sign = -1.0 if byte & 0x80 else 1.0
        exponent = (byte >> mantissa_bits) & ((1 << exponent_bits) - 1)
        mantissa = byte & ((1 << mantissa_bits) - 1)
        if e4m3fn and exponent == 0xF and mantissa == 0x7:
            value = float("nan")  # E4M3FN: no infinities, one NaN pattern
        elif not e4m3fn and exponent == (1 << exponent_bits) - 1:
            value = float("inf") if mantissa == 0 else float("nan")
        elif exponent == 0:
            value = mantissa / (1 << mantissa_bits) * 2.0 ** (1 - bias)
        else:
            value = (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)
        table[byte] = sign * value
    return table


def decode(dtype, raw, count):
    """The tensor's values as a flat numpy array (float64 for types numpy lacks)."""
    if dtype in NUMPY_DTYPES:
        return np.frombuffer(raw, dtype=NUMPY_DTYPES[dtype], count=count)
    if dtype == "BF16":  # the upper half of a float32
        bits = np.frombuffer(raw, dtype="<u2", count=count).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    if dtype == "F8_E4M3":
        return f8_table(4, 3, 7, True)[np.frombuffer(raw, dtype="u1", count=count)]
    if dtype == "F8_E5M2":
        return f8_table(5, 2, 15, False)[np.frombuffer(raw, dtype="u1", count=count)]
    raise AssertionError(dtype)


def exact_sum(dtype, values):
    """Integers summed exactly (Python ints), floats in float64."""
    if dtype == "BOOL" or dtype[0] in "IU":
        return int(sum(int(v) for v in values.tolist()))
    return float(np.sum(values.astype(np.float64)))


def torch_sum(dtype, raw, shape):
    """The same sum through torch.frombuffer, or None when torch lacks the dtype."""
    names = {
        "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64",
        "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
        "U16": "uint16", "U32": "uint32", "U64": "uint64",
        "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    }
    torch_dtype = getattr(torch, names[dtype], None)
    if torch_dtype is None:
        return None
    if len(raw) == 0:  # frombuffer refuses empty buffers
        tensor = torch.empty(shape, dtype=torch_dtype)
    else:
        tensor = torch.frombuffer(bytearray(raw), dtype=torch_dtype).reshape(shape)
    if dtype == "BOOL" or dtype[0] in "IU":
        return int(tensor.to(torch.int64).sum().item()) if dtype != "U64" else None
    return float(tensor.to(torch.float64).sum().item())


def main():
    if len(sys.argv) != 2:
        print("usage: safetensors_check.py FILE", file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1], "rb") as f:
        content = f.read()
    if len(content) < 8:
        fail("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", content[:8])
    if n > len(content) - 8:
        fail("header length %d past the end of the file" % n)
    header_bytes = content[8 : 8 + n]
    if not header_bytes.startswith(b"{"):
        fail("header does not start with '{'")
    try:
        header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=no_duplicates)
    except (ValueError, UnicodeDecodeError) as e:
        fail("header is not JSON: %s" % e)
    if not isinstance(header, dict):
        fail("header is not an object")
    data = content[8 + n :]

    result = {}
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                fail("__metadata__ is not an object of strings")
            continue
        dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        size = NUMPY_DTYPES[dtype].itemsize if dtype in NUMPY_DTYPES else EXTRA_SIZES.get(dtype)
        if size is None:
            fail("%s: unknown dtype %s" % (name, dtype))
        count = 1
        for dim in shape:
            count *= dim
        if count * size != end - begin or end > len(data):
            fail("%s: shape %s of %s does not fit data_offsets [%d, %d]" % (name, shape, dtype, begin, end))
        raw = data[begin:end]
        values = decode(dtype, raw, count)
        entry_out = {"dtype": dtype, "shape": shape, "sum": exact_sum(dtype, values)}
        if torch is not None:
            other = torch_sum(dtype, raw, shape)
            if other is not None:
                if not close(other, entry_out["sum"]):
                    fail("%s: torch sums to %r, numpy to %r" % (name, other, entry_out["sum"]))
                entry_out["torch_sum"] = other
        result[name] = entry_out
        spans.append((begin, end, name))

    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            fail("%s: starts at %d, expected %d (hole or overlap)" % (name, begin, position))
        position = end
    if position != len(data):
        fail("data buffer has %d bytes, tensors cover %d" % (len(data), position))
    json.dump(result, sys.stdout, sort_keys=True)
    print()


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        fail("repeated key in the header")
    return dict(pairs)


def close(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a != a and b != b:  # both NaN
        return True
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


if __name__ == "__main__":
    main()
