#!/usr/bin/env python3
"""The first samples megatron-core's own dataset code builds from a data config, for
test_megatron_data (the other side of `plexus data samples --json`).

    megatron_gpt_dataset.py --blend JSON --split STR --seq-length N --seed N
                            --sizes TRAIN VALID TEST --first N --split-name train|valid

--blend is data.path as JSON (a prefix, or Megatron's list of weights and prefixes). Prints one
JSON object: {"size": samples in the split, "samples": [[token ids of sample i], ...]}, the
token ids being the seq_length + 1 of each sample (Megatron's tokens and the last label).

megatron.core's package __init__ imports its distributed training stack, which needs a newer
torch than Debian's; the dataset modules do not, so the package is entered without running it.
BlendedMegatronDatasetBuilder and GPTDataset are used as Megatron's pretrain_gpt.py uses them,
with a stand-in tokenizer (the samples do not depend on it) and no torch.distributed.
"""

import argparse
import importlib.util
import json
import os
import sys
import types


def import_megatron_datasets():
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("megatron_gpt_dataset.py: megatron-core is not installed")
    root = list(spec.submodule_search_locations)[0]
    for name, sub in (("megatron", ""), ("megatron.core", "core")):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(root, sub)] if sub else [root]
        sys.modules[name] = module
    import megatron.core.tensor_parallel  # noqa: F401  (the order megatron.core's __init__ imports in)
    from megatron.core.datasets import blended_megatron_dataset_builder as builder
    from megatron.core.datasets import gpt_dataset
    from megatron.core.datasets import utils
    from megatron.core.datasets.blended_dataset import BlendedDataset
    return builder, gpt_dataset, utils, BlendedDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--blend", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--seq-length", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--sizes", type=int, nargs=3, required=True)
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--split-name", choices=["train", "valid"], required=True)
    args = parser.parse_args()

    builder, gpt_dataset, utils, BlendedDataset = import_megatron_datasets()
    path = json.loads(args.blend)
    blend = utils.get_blend_from_list([path] if isinstance(path, str) else [str(x) for x in path])
    tokenizer = types.SimpleNamespace(vocab_size=None, eod=0, unique_identifiers={"class": "stand-in"})
    config = gpt_dataset.GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=blend,
        split=args.split,
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    datasets = builder.BlendedMegatronDatasetBuilder(
        gpt_dataset.GPTDataset, args.sizes, lambda: True, config
    ).build()
    dataset = datasets[0 if args.split_name == "train" else 1]

    def text(ds, i):
        if isinstance(ds, BlendedDataset):
            part = ds.datasets[ds.dataset_index[i]]
            return part._query_document_sample_shuffle_indices(int(ds.dataset_sample_index[i]))[0]
        return ds._query_document_sample_shuffle_indices(i)[0]

    samples = [[int(t) for t in text(dataset, i)] for i in range(min(args.first, len(dataset)))]
    print(json.dumps({"size": len(dataset), "samples": samples}))


if __name__ == "__main__":
    main()
