#!/usr/bin/env python3
"""Megatron-LM's indexed dataset format (.idx + .bin), read and written as Megatron does it.

A standalone re-implementation (numpy only; no torch, no Megatron install) of
megatron/core/datasets/indexed_dataset.py from NVIDIA/Megatron-LM:

- read:  _IndexReader.__init__ (struct-unpacked header, then numpy.memmap of the .idx and
         numpy.frombuffer of the int32 lengths, int64 pointers and int64 document indices at
         their unaligned offsets), IndexedDataset's consistency assertions, and
         _MMapBinReader.read (numpy.frombuffer of the memmapped .bin at each sequence pointer).
- write: IndexedDatasetBuilder.add_item / end_document / finalize and _IndexWriter
         (header, lengths, pointers = running sum of length * itemsize, document indices
         starting with 0).

The Plexus tests use it to check the C++ reader and writer against Megatron's logic from the
other side. Run it with a Python 3 that has numpy (Debian: python3-numpy).

  megatron_indexed_dataset.py read PREFIX [--first N]
      prints one JSON object: dtype, dtype_code, sequence_count, document_count (documents,
      i.e. len(document_indices) - 1, as Megatron logs it), token_count, first_tokens (the
      first N tokens of the concatenated sequences) and token_sum.
  megatron_indexed_dataset.py write PREFIX --dtype NAME --json FILE
      FILE holds {"documents": [[[token, ...], ...], ...]}: each document a list of
      sequences (Megatron writes one sequence per document unless sentences are split).
"""

import argparse
import json
import struct
import sys

import numpy

_INDEX_HEADER = b"MMIDIDX\x00\x00"

# megatron.core.datasets.indexed_dataset.DType
_CODES = {
    1: numpy.uint8,
    2: numpy.int8,
    3: numpy.int16,
    4: numpy.int32,
    5: numpy.int64,
    6: numpy.float64,
    7: numpy.float32,
    8: numpy.uint16,
}
_NAMES = {dtype.__name__: code for code, dtype in _CODES.items()}


def read(prefix, first):
    idx_path, bin_path = prefix + ".idx", prefix + ".bin"
    with open(idx_path, "rb") as stream:
        header = stream.read(9)
        assert header == _INDEX_HEADER, f"bad header, cannot read: {idx_path}"
        version = struct.unpack("<Q", stream.read(8))[0]
        assert version == 1, f"bad version, cannot read: {idx_path}"
        code = struct.unpack("<B", stream.read(1))[0]
        dtype = _CODES[code]
        sequence_count = struct.unpack("<Q", stream.read(8))[0]
        document_count = struct.unpack("<Q", stream.read(8))[0]
        offset = stream.tell()

    idx_mmap = numpy.memmap(idx_path, mode="r", order="C")
    idx_buffer = memoryview(idx_mmap)
    sequence_lengths = numpy.frombuffer(idx_buffer, dtype=numpy.int32, count=sequence_count, offset=offset)
    sequence_pointers = numpy.frombuffer(
        idx_buffer, dtype=numpy.int64, count=sequence_count, offset=offset + sequence_lengths.nbytes
    )
    document_indices = numpy.frombuffer(
        idx_buffer,
        dtype=numpy.int64,
        count=document_count,
        offset=offset + sequence_lengths.nbytes + sequence_pointers.nbytes,
    )
    # IndexedDataset.__init__
    assert sequence_lengths.shape[0] == document_indices[-1]
    assert sequence_lengths.shape[0] == sequence_count

    # _MMapBinReader; an empty .bin cannot be memory-mapped, and holds no tokens anyway.
    with open(bin_path, "rb") as stream:
        empty = len(stream.read(1)) == 0
    bin_buffer = b"" if empty else memoryview(numpy.memmap(bin_path, mode="r", order="C").data)
    token_count = int(sequence_lengths.astype(numpy.int64).sum())
    first_tokens = []
    token_sum = 0
    for i in range(sequence_count):
        sequence = numpy.frombuffer(
            bin_buffer, dtype=dtype, count=int(sequence_lengths[i]), offset=int(sequence_pointers[i])
        )
        token_sum += int(sequence.astype(numpy.int64).sum())
        if len(first_tokens) < first:
            first_tokens.extend(int(t) for t in sequence[: first - len(first_tokens)])

    return {
        "dtype": dtype.__name__,
        "dtype_code": code,
        "sequence_count": int(sequence_count),
        "document_count": int(document_count) - 1,
        "token_count": token_count,
        "first_tokens": first_tokens,
        "token_sum": token_sum,
    }


def write(prefix, dtype_name, documents):
    dtype = _CODES[_NAMES[dtype_name]]
    itemsize = numpy.dtype(dtype).itemsize
    sequence_lengths = []
    document_indices = [0]
    with open(prefix + ".bin", "wb") as data_file:
        for document in documents:
            for sequence in document:  # IndexedDatasetBuilder.add_item
                array = numpy.array(sequence, dtype=dtype)
                data_file.write(array.tobytes(order="C"))
                sequence_lengths.append(array.size)
            document_indices.append(len(sequence_lengths))  # end_document
    sequence_pointers = []
    pointer = 0
    for length in sequence_lengths:  # _IndexWriter._sequence_pointers
        sequence_pointers.append(pointer)
        pointer += length * itemsize
    with open(prefix + ".idx", "wb") as idx_writer:  # _IndexWriter.__enter__ and write
        idx_writer.write(_INDEX_HEADER)
        idx_writer.write(struct.pack("<Q", 1))
        idx_writer.write(struct.pack("<B", _NAMES[dtype_name]))
        idx_writer.write(struct.pack("<Q", len(sequence_lengths)))
        idx_writer.write(struct.pack("<Q", len(document_indices)))
        idx_writer.write(numpy.array(sequence_lengths, dtype=numpy.int32).tobytes(order="C"))
        idx_writer.write(numpy.array(sequence_pointers, dtype=numpy.int64).tobytes(order="C"))
        idx_writer.write(numpy.array(document_indices, dtype=numpy.int64).tobytes(order="C"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    read_parser = commands.add_parser("read")
    read_parser.add_argument("prefix")
    read_parser.add_argument("--first", type=int, default=32)
    write_parser = commands.add_parser("write")
    write_parser.add_argument("prefix")
    write_parser.add_argument("--dtype", required=True, choices=sorted(_NAMES))
    write_parser.add_argument("--json", required=True, dest="json_file")
    args = parser.parse_args()
    if args.command == "read":
        print(json.dumps(read(args.prefix, args.first)))
    else:
        with open(args.json_file) as stream:
            write(args.prefix, args.dtype, json.load(stream)["documents"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
