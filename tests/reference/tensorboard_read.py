#!/usr/bin/env python3
"""Reads a TensorBoard log directory with TensorBoard's own reader (event_accumulator) and prints
what it found as JSON: {"scalars": {tag: [[step, value], ...]}, "texts": {tag: [[step, text], ...]}}.

Usage (the venv of scripts/python-env.sh): tensorboard_read.py LOGDIR
"""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator


def main():
    acc = event_accumulator.EventAccumulator(
        sys.argv[1], size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    out = {"scalars": {}, "texts": {}}
    for tag in tags["scalars"]:
        out["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
    for tag in tags["tensors"]:
        out["texts"][tag] = [[e.step, e.tensor_proto.string_val[0].decode("utf-8")] for e in acc.Tensors(tag)]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
