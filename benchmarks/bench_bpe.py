"""Byte-level BPE: tokformer vs Hugging Face `tokenizers` vs a naive recount trainer.

Run: ``python benchmarks/bench_bpe.py [--size-mb 10] [--vocab-size 8000]``. Prints a
Markdown table and writes it to ``benchmarks/results/bpe.md``.

Like with like: the same corpus, vocabulary size, pattern (GPT-2) and special tokens for
every trainer; the same tokenizer.json and documents for every encoder; ids and merges are
checked equal before any number is reported. HF runs in a fresh subprocess per thread
setting, because Rayon reads RAYON_NUM_THREADS once per process. The corpus is the
standard library's ``.py`` files (sorted, concatenated up to the target size), so the
benchmark needs no download and is the same on every machine with the same Python.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

from tokformer.tokenizers import BPETokenizer
from tokformer.tokenizers.bpe_train import count_pretokens
from tokformer.tokenizers.byte_level import token_to_str
from tokformer.tokenizers.pretokenize import PATTERNS

RESULTS = Path(__file__).resolve().parent / "results" / "bpe.md"
SPECIALS = ["<|endoftext|>"]

HF_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    docs = json.load(open(sys.argv[1], encoding="utf-8"))
    vocab_size, tokenizer_json, out = int(sys.argv[2]), sys.argv[3], sys.argv[4]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    start = time.perf_counter(); tok.train_from_iterator(docs, trainer); train_s = time.perf_counter() - start
    merges = json.loads(tok.to_str())["model"]["merges"]
    enc = Tokenizer.from_file(tokenizer_json)
    timings = []
    for _ in range(2):
        start = time.perf_counter(); ids = enc.encode_batch(docs, add_special_tokens=False)
        timings.append(time.perf_counter() - start)
    json.dump({"train_s": train_s, "merges": merges, "encode_s": timings,
               "ids": [e.ids for e in ids]}, open(out, "w"))
    """
)


def build_corpus(size_mb: float) -> list[str]:
    """Stdlib ``.py`` files in sorted order until ``size_mb`` MB of UTF-8; one document per file."""
    docs, total = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        docs.append(text)
        total += len(text.encode())
        if total >= size_mb * 1e6:
            break
    return docs


def naive_train(docs: list[str], vocab_size: int) -> list[tuple[int, int]]:
    """The textbook trainer: recount every pair of every (unique) word after each merge."""
    words = {tuple(w.encode()): c for w, c in count_pretokens(docs, PATTERNS["gpt2"]).items()}
    merges, next_id = [], 256
    while 256 + len(merges) < vocab_size:
        pairs: Counter[tuple[int, int]] = Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:], strict=False):
                pairs[pair] += count
        if not pairs:
            break
        best = max(pairs, key=pairs.__getitem__)
        merges.append(best)
        words = {_replace(word, best, next_id): count for word, count in words.items()}
        next_id += 1
    return merges


def _replace(word: tuple[int, ...], pair: tuple[int, int], new: int) -> tuple[int, ...]:
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def run_hf(docs_file: Path, vocab_size: int, tokenizer_json: Path, threads: int | None) -> dict:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="true")
    env.pop("RAYON_NUM_THREADS", None)
    if threads is not None:
        env.update(RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false" if threads == 1 else "true")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "hf.json"
        subprocess.run(
            [sys.executable, "-c", HF_SCRIPT, str(docs_file), str(vocab_size), str(tokenizer_json), str(out)],
            env=env, cwd=tmp, check=True,
        )  # fmt: skip
        return json.loads(out.read_text())


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=10.0)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--naive-size-mb", type=float, default=0.5, help="smaller corpus for the naive trainer")
    parser.add_argument("--naive-vocab-size", type=int, default=1000)
    args = parser.parse_args()
    cores = os.cpu_count() or 1

    docs = build_corpus(args.size_mb)
    megabytes = sum(len(d.encode()) for d in docs) / 1e6
    print(f"corpus: {len(docs)} stdlib files, {megabytes:.2f} MB; vocab {args.vocab_size}; {cores} cores", flush=True)

    train_s, ours = timed(lambda: BPETokenizer.train(docs, args.vocab_size, special_tokens=SPECIALS))
    with tempfile.TemporaryDirectory() as tmp:
        docs_file, tokenizer_json = Path(tmp) / "docs.json", Path(tmp) / "tokenizer.json"
        docs_file.write_text(json.dumps(docs), encoding="utf-8")
        ours.save_hf_json(tokenizer_json)
        hf_single = run_hf(docs_file, args.vocab_size, tokenizer_json, threads=1)
        hf_multi = run_hf(docs_file, args.vocab_size, tokenizer_json, threads=None)
        our_merges = [[token_to_str(a), token_to_str(b)] for a, b in ours.merges]
        hf_merges = [m.split(" ") if isinstance(m, str) else m for m in hf_single["merges"]]
        assert our_merges == hf_merges, "trained merges differ from HF's"

        cold = BPETokenizer.from_hf_json(tokenizer_json)  # fresh, empty cache
        enc_cold_s, ids = timed(lambda: cold.encode_batch(docs, num_workers=1))
        enc_warm_s, _ = timed(lambda: cold.encode_batch(docs, num_workers=1))
        multi = BPETokenizer.from_hf_json(tokenizer_json)
        enc_multi_cold_s, ids_multi = timed(lambda: multi.encode_batch(docs, num_workers=cores))
        enc_multi_warm_s, _ = timed(lambda: multi.encode_batch(docs, num_workers=cores))
        assert ids == ids_multi == hf_single["ids"], "encoded ids differ from HF's"

    naive_docs = build_corpus(args.naive_size_mb)
    naive_s, naive_merges = timed(lambda: naive_train(naive_docs, args.naive_vocab_size))
    small_s, small = timed(lambda: BPETokenizer.train(naive_docs, args.naive_vocab_size))
    assert len(naive_merges) == len(small.merges)
    naive_mb = sum(len(d.encode()) for d in naive_docs) / 1e6

    def rate(seconds: float) -> str:
        return f"{megabytes / seconds:.2f}"

    hf1_cold, hf1_warm = hf_single["encode_s"]
    hfn_cold, hfn_warm = hf_multi["encode_s"]
    rows = [
        ("training, 1 process", f"{train_s:.2f} s", f"{hf_single['train_s']:.2f} s (1 thread)",
         f"{hf_single['train_s'] / train_s:.2f}x"),
        ("training, all cores", f"{train_s:.2f} s (1 process)", f"{hf_multi['train_s']:.2f} s ({cores} threads)",
         f"{hf_multi['train_s'] / train_s:.2f}x"),
        ("encode MB/s, 1 core, first pass", rate(enc_cold_s), rate(hf1_cold), f"{hf1_cold / enc_cold_s:.2f}x"),
        ("encode MB/s, 1 core, second pass", rate(enc_warm_s), rate(hf1_warm), f"{hf1_warm / enc_warm_s:.2f}x"),
        (f"encode MB/s, {cores} cores, first pass", rate(enc_multi_cold_s), rate(hfn_cold),
         f"{hfn_cold / enc_multi_cold_s:.2f}x"),
        (f"encode MB/s, {cores} cores, second pass", rate(enc_multi_warm_s), rate(hfn_warm),
         f"{hfn_warm / enc_multi_warm_s:.2f}x"),
        (f"training vs naive recount ({naive_mb:.2f} MB, vocab {args.naive_vocab_size})", f"{small_s:.2f} s",
         f"naive: {naive_s:.2f} s", f"{naive_s / small_s:.1f}x"),
    ]  # fmt: skip
    table = "\n".join(
        [
            f"Corpus: {len(docs)} stdlib `.py` files of Python {sys.version.split()[0]}, {megabytes:.2f} MB; "
            f"vocab {args.vocab_size} (GPT-2 pattern, 1 special token); {cores} cores. "
            "Merges and ids checked equal to HF's. Speedup = other's time / ours (> 1: ours faster).",
            "",
            "| measurement | tokformer | other | speedup |",
            "|---|---|---|---|",
            *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
        ]
    )
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
