#!/usr/bin/env python3
"""Hugging Face's `tokenizers` side of the interop tests (tests/integration/test_tokenizers_interop.cpp).
Runs in the environment scripts/python-env.sh makes (tokenizers pinned there).

  texts OUT.jsonl                      the texts both sides encode: fixed cases (contractions,
                                       whitespace runs, numbers, punctuation, non-ASCII letters,
                                       emoji, CJK, special tokens) and random mixes
  sweep OUT.jsonl                      every code point but the surrogates, in texts of 8192
  train KIND CORPUS OUT.json           a byte-level BPE trained by tokenizers; KIND is bytelevel
                                       (ByteLevelBPETokenizer), prefix (add_prefix_space), llama3
                                       (Sequence[Split(Llama 3's regex), ByteLevel], ignore_merges),
                                       o200k (a regex with \\p{Lu}/\\p{Ll}/\\p{M} classes), gpt2split
                                       (GPT-2's regex as an explicit Split)
  gpt2 CORPUS OUT.json                 a tokenizer.json laid out as GPT-2's: merges as "a b"
                                       strings, <|endoftext|> the last vocab entry and an added
                                       token, ByteLevel pre-tokenizer, post-processor and decoder
  compare TOK TEXTS IDS DECODED [exact] IDS (a JSON array per line) must be what tokenizers encodes
                                       each text to (add_special_tokens=False) and DECODED (a JSON
                                       string per line) what it decodes them to (special tokens
                                       kept), and with `exact` the text itself; prints a JSON
                                       summary, exits 1 on any difference
  pieces TOK TEXTS PIECES              PIECES must be the pre-tokenizer's pieces of each text
"""
import json
import random
import re
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
O200K = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"])
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
SPECIALS = ["<|endoftext|>", "<|begin_of_text|>"]

FIXED = [
    "Hello world", "Hello, World! How are you?", "  leading spaces", "trailing   ", "a  b   c    d",
    "tabs\tand\nnewlines\r\nand\r\rcarriage", "\n\n\n", " ", "", "x" * 300,
    "it's they're we've I'm you'll he'd IT'S THEY'RE We'Ve", "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D",
    "'\u017f '\u212a", "don't won't can't", "numbers 1 12 123 1234 12345 3.14159 1,000,000 0x1F",
    "\u0663\u0664\u0665 \u2167 \u00bd \u2460", "punct!!! ...?? --- ((x)) [y] {z} @#$%^&*", "a.b,c;d:e", "$100 \u20ac50 \u00a330",
    "\u00dcn\u00efc\u00f6d\u00e9 fa\u00e7ade na\u00efve r\u00e9sum\u00e9", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947", "emoji \U0001f389\U0001f389 \U0001f469\u200d\U0001f469\u200d\U0001f467 \U0001f44d\U0001f3fd",
    "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "mixed\u00a0nbsp\u2003em\u3000ideo\u2028line\u2029para\u0085nel", "zero\u200bwidth\ufeffbom", "combining e\u0301 a\u0308",
    "<|endoftext|>", "before<|endoftext|>after", "<|endoftext|><|endoftext|>", "x <|begin_of_text|> y <|endoftext|>",
    "\u017fs \u00df \ufb06 \u0130stanbul", "Cyrillic \u1c89\u1c8a new in Unicode 16", "tab\t\tx \t y",
    "code: def f(x):\n    return x**2  # square\n", "https://example.com/path?q=1&r=two#frag",
]


def random_texts(rng, count):
    pools = [list(range(32, 127)) * 4, list(range(0xA0, 0x250)), list(range(0x370, 0x400)), list(range(0x400, 0x500)),
             list(range(0x600, 0x670)), list(range(0x900, 0x980)), list(range(0x3040, 0x3100)),
             list(range(0x4E00, 0x4F00)), list(range(0xAC00, 0xAD00)), list(range(0x1F300, 0x1F650)),
             [9, 10, 13, 32, 32, 32, 0x85, 0xA0, 0x2028, 0x3000], list(range(0x300, 0x370)), list(range(0x660, 0x66A)),
             [ord("'"), ord("s"), ord("t"), ord("S"), ord("d"), 0x17F, 0x212A], list(range(0x2000, 0x2070))]
    texts = []
    for _ in range(count):
        length = rng.randint(0, 80)
        texts.append("".join(chr(rng.choice(rng.choice(pools))) for _ in range(length)))
    return texts


def sweep_texts():
    """Every code point but the surrogates, in texts of 8192 mixed with spaces, digits and
    letters so that each is classified in context (letter, number, space or other)."""
    code_points = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    texts = []
    for start in range(0, len(code_points), 8192):
        chunk = code_points[start:start + 8192]
        text = []
        for i, cp in enumerate(chunk):
            text.append(chr(cp))
            if i % 7 == 3:
                text.append(" ")
            if i % 11 == 5:
                text.append("a1")
        texts.append("".join(text))
    return texts


def write_texts(out, texts=None):
    if texts is None:
        texts = FIXED + random_texts(random.Random(20240611), 600)
    with open(out, "w", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps(text) + "\n")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def trainer(vocab_size=1200):
    return trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)


def train(kind, corpus, out):
    if kind == "bytelevel":
        tok = tokenizers.ByteLevelBPETokenizer()
        tok.train([corpus], vocab_size=1200, min_frequency=2, special_tokens=SPECIALS, show_progress=False)
        tok.save(out)
        return
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "prefix":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    else:
        pattern = {"llama3": LLAMA3, "o200k": O200K, "gpt2split": GPT2}[kind]
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train([corpus], trainer())
    tok.save(out)


def gpt2(corpus, out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([corpus], trainers.BpeTrainer(vocab_size=1199, min_frequency=2, show_progress=False,
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    doc = json.loads(tok.to_str())
    model = doc["model"]
    eot = len(model["vocab"])
    model["vocab"]["<|endoftext|>"] = eot
    model["merges"] = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    doc["added_tokens"] = [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": True, "special": True}]
    doc["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    doc["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=2)
    Tokenizer.from_file(out)  # tokenizers itself reads it back


def compare(tok_file, texts_file, ids_file, decoded_file, exact=None):
    tok = Tokenizer.from_file(tok_file)
    texts, ids, decoded = read_jsonl(texts_file), read_jsonl(ids_file), read_jsonl(decoded_file)
    summary = {"tokenizers": tokenizers.__version__, "texts": len(texts), "id_mismatches": 0,
               "decode_mismatches": 0, "round_trip_failures": 0, "first": []}
    if not len(texts) == len(ids) == len(decoded):
        summary["first"].append(f"{len(texts)} texts, {len(ids)} id lines, {len(decoded)} decoded lines")
        summary["id_mismatches"] = 1
    for text, plexus_ids, plexus_text in zip(texts, ids, decoded):
        expected = tok.encode(text, add_special_tokens=False).ids
        if expected != plexus_ids:
            summary["id_mismatches"] += 1
            if len(summary["first"]) < 5:
                at = next((i for i, (a, b) in enumerate(zip(expected, plexus_ids)) if a != b),
                          min(len(expected), len(plexus_ids)))
                summary["first"].append({"text": text[:120], "at": at, "tokenizers": expected[at:at + 8],
                                         "plexus": plexus_ids[at:at + 8]})
        hf_text = tok.decode(plexus_ids, skip_special_tokens=False)
        if hf_text != plexus_text:
            summary["decode_mismatches"] += 1
            if len(summary["first"]) < 5:
                summary["first"].append({"text": text[:120], "tokenizers_decode": hf_text[:120],
                                         "plexus_decode": plexus_text[:120]})
        if exact == "exact" and plexus_text != text:
            summary["round_trip_failures"] += 1
    print(json.dumps(summary))
    sys.exit(0 if summary["id_mismatches"] == summary["decode_mismatches"] == summary["round_trip_failures"] == 0 else 1)


def pieces(tok_file, texts_file, pieces_file):
    tok = Tokenizer.from_file(tok_file)
    texts, plexus_pieces = read_jsonl(texts_file), read_jsonl(pieces_file)
    summary = {"texts": len(texts), "mismatches": 0, "first": []}
    # Added tokens are cut out whole before pre-tokenization, the longest at the leftmost place.
    added = sorted((t.content for t in tok.get_added_tokens_decoder().values()), key=len, reverse=True)
    cut = re.compile("(" + "|".join(map(re.escape, added)) + ")") if added else None
    for text, theirs in zip(texts, plexus_pieces):
        expected = []
        for i, segment in enumerate(cut.split(text) if cut else [text]):
            if i % 2 == 1:
                expected.append(segment)
            elif segment:
                expected += [piece for piece, _ in tok.pre_tokenizer.pre_tokenize_str(segment)]
        if expected != theirs:
            summary["mismatches"] += 1
            if len(summary["first"]) < 3:
                at = next((i for i, (a, b) in enumerate(zip(expected, theirs)) if a != b), 0)
                summary["first"].append({"at": at, "tokenizers": expected[at:at + 4], "plexus": theirs[at:at + 4]})
    if len(texts) != len(plexus_pieces):
        summary["mismatches"] += 1
    print(json.dumps(summary, ensure_ascii=False))
    sys.exit(0 if summary["mismatches"] == 0 else 1)


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "texts":
        write_texts(*args)
    elif command == "sweep":
        write_texts(args[0], sweep_texts())
    elif command == "train":
        train(*args)
    elif command == "gpt2":
        gpt2(*args)
    elif command == "compare":
        compare(*args)
    elif command == "pieces":
        pieces(*args)
    else:
        sys.exit(f"tokenizers_interop: unknown command {command}")


if __name__ == "__main__":
    main()
