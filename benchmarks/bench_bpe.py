"""Byte-level BPE: tokformer vs tiktoken vs Hugging Face `tokenizers`, and the exact candidates, encoding and training.

Run: ``python benchmarks/bench_bpe.py [--quick] [--size-mb 6] [--vocab-size 50257]``. Prints
Markdown and writes ``benchmarks/results/bpe.md``.

Like with like. One vocabulary for every tool: trained by tokformer (GPT-2 pattern,
``<|endoftext|>``) on documents disjoint from the measured ones, exported to tiktoken and
riptoken (ids as ranks) and to HF's ``tokenizer.json`` (which gigatoken reads); before any
timing every measured document's ids are checked equal between tokformer's two encoders (its
default backend and the pure-Python reference) and HF, and each other library's are compared.
Corpora come from files on the machine, no download: English (license, copyright and changelog
files under /usr/share), multilingual (vim's translated message catalogs, 30+ languages) and
code (the standard library), each as whole documents and as the same text cut into lines.

First pass is the headline: each round encodes its own slice, never seen before, with a
fresh instance of each tool (the Python encoder and HF cache words, the compiled ones do
not). The Python encoder's second pass re-encodes the round's slice with the warmed instance.
HF runs in worker processes, one per thread count, because Rayon reads RAYON_NUM_THREADS once
per process, and outside this repository, whose ``tokenizers/`` folder would shadow HF's package.
``data prepare lm`` is timed on each round's own folder of English documents, on all cores and
on one.
"""

from __future__ import annotations

import argparse
import gc
import gettext
import gzip
import json
import multiprocessing
import os
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness import MIN_REPEATS, Machine, Timing, cores, interleave, markdown_table, ratio_cell, write_results

from tokformer.tasks.lm_shards import prepare_lm
from tokformer.tokenizers import BPETokenizer
from tokformer.tokenizers.bpe_files import BPEFiles
from tokformer.tokenizers.bpe_train import count_pretokens
from tokformer.tokenizers.pretokenize import PATTERNS, safe_chunks

SPECIALS = ["<|endoftext|>"]
TRAIN_SHARE = 5  # every 5th document goes to vocabulary training, the rest is measured
PACKAGES = ("regex", "riptoken", "tiktoken", "gigatoken", "tokenizers", "torch")

HF_WORKER = textwrap.dedent(
    """
    import json, sys
    from tokenizers import Tokenizer, pre_tokenizers, trainers, models
    tokenizer_json, slices = sys.argv[1], json.load(open(sys.argv[2], encoding="utf-8"))
    fresh = {}
    for line in sys.stdin:
        command, key, arg = line.rstrip().split("\\t")  # keys hold spaces
        if command == "prepare":  # fresh instances (empty word caches) for every round, before timing
            fresh = {r: Tokenizer.from_file(tokenizer_json) for r in range(len(slices[key]))}
        elif command in ("encode", "again"):
            fresh[int(arg) + 1].encode_batch(slices[key][int(arg) + 1], add_special_tokens=False)
        elif command == "ids":
            tok = Tokenizer.from_file(tokenizer_json)
            ids = [[e.ids for e in tok.encode_batch(s, add_special_tokens=False)] for s in slices[key]]
            json.dump(ids, open(arg, "w"))
        elif command == "train":
            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            trainer = trainers.BpeTrainer(vocab_size=int(arg), special_tokens=["<|endoftext|>"], show_progress=False,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
            tok.train_from_iterator(slices[key][0], trainer)
        print("ok", flush=True)
    """
)


# ----------------------------------------------------------------------------- corpora


def natural_docs() -> Iterator[str]:
    """English: the license texts, then every package's copyright and changelog file (sorted paths)."""
    licenses = Path("/usr/share/common-licenses")
    paths = sorted(licenses.iterdir()) if licenses.is_dir() else []
    paths += sorted(p for p in Path("/usr/share/doc").rglob("*") if p.name.startswith(("copyright", "changelog")))
    for path in paths:
        if path.is_file() and not path.is_symlink():
            text = _read_text(path)
            if text:
                yield text


def multilingual_docs(messages: int = 200) -> Iterator[str]:
    """Vim's translated messages, language by language, ``messages`` to a document (a catalog is large)."""
    for path in sorted(Path("/usr/share/vim").rglob("*.mo")):
        try:
            with path.open("rb") as handle:
                catalog = gettext.GNUTranslations(handle)._catalog
        except (OSError, UnicodeError, LookupError, ValueError):  # a catalog in a legacy charset: skipped
            continue
        texts = [v for k, v in catalog.items() if k and isinstance(v, str)]
        for start in range(0, len(texts), messages):
            yield "\n".join(texts[start : start + messages])


def code_docs() -> Iterator[str]:
    """The standard library's ``.py`` files, one document each."""
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        text = _read_text(path)
        if text:
            yield text


CORPORA: dict[str, Callable[[], Iterator[str]]] = {
    "English": natural_docs,
    "multilingual": multilingual_docs,
    "code": code_docs,
}


def _read_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None


def megabytes(texts: list[str]) -> float:
    return sum(len(t.encode("utf-8")) for t in texts) / 1e6


@dataclass
class Corpus:
    """A corpus cut into a training part and per-round measured slices (slice r + 1 for round r)."""

    name: str
    train: list[str]
    slices: list[list[str]]

    def lines(self) -> list[list[str]]:
        """The same slices as line-sized documents."""
        return [[line for doc in docs for line in doc.splitlines(keepends=True)] for docs in self.slices]


def load_corpus(name: str, size_mb: float, rounds: int) -> Corpus | None:
    """Up to ``size_mb`` MB of measured documents in ``rounds`` slices of about equal size, plus training documents."""
    train: list[str] = []
    measured: list[str] = []
    size = 0
    for i, doc in enumerate(CORPORA[name]()):
        if i % TRAIN_SHARE == 0:
            train.append(doc)
            continue
        measured.append(doc)
        size += len(doc.encode("utf-8"))
        if size >= size_mb * 1e6:
            break
    slices: list[list[str]] = [[] for _ in range(rounds)]
    filled, index = 0, 0
    for doc in measured:
        if filled >= size * (index + 1) / rounds and index < rounds - 1:
            index += 1
        slices[index].append(doc)
        filled += len(doc.encode("utf-8"))
    return Corpus(name, train, slices) if all(slices) else None


# ----------------------------------------------------------------------------- tools


class HFWorker:
    """A Hugging Face process with a fixed Rayon thread count that runs commands on preloaded slices."""

    def __init__(self, tokenizer_json: Path, slices: dict[str, list[list[str]]], threads: int, tmp: Path) -> None:
        data = tmp / f"slices-{threads}.json"
        data.write_text(json.dumps(slices), encoding="utf-8")
        env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM=str(threads > 1).lower())
        self.process = subprocess.Popen(
            [sys.executable, "-c", HF_WORKER, str(tokenizer_json), str(data)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp,
        )  # fmt: skip

    def __call__(self, command: str, key: str, arg: object = "-") -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{command}\t{key}\t{arg}\n")
        self.process.stdin.flush()
        if self.process.stdout.readline().strip() != "ok":
            raise RuntimeError(f"HF worker failed on {command} {key}")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def tiktoken_encoding(tok: BPETokenizer):
    import tiktoken

    return tiktoken.Encoding(
        name="tokformer-bench", pat_str=tok.pattern, mergeable_ranks=tok.mergeable_ranks(), special_tokens={}
    )


def other_libraries(tok: BPETokenizer, tokenizer_json: Path) -> dict[str, Callable[[list[str]], object]]:
    """The other exact candidates installed here, each as "encode these texts on one thread" on the same
    vocabulary: riptoken's core as its users call it, and gigatoken from the tokenizer.json."""
    found: dict[str, Callable[[list[str]], object]] = {}
    try:
        import riptoken

        core = riptoken.CoreBPE(tok.mergeable_ranks(), {}, tok.pattern)
        found["riptoken"] = lambda texts: [core.encode_ordinary(t) for t in texts]
    except ImportError:
        pass
    try:
        import gigatoken

        giga = gigatoken.Tokenizer(str(tokenizer_json))
        found["gigatoken"] = lambda texts: giga.encode_batch_list(texts, parallel=False)
    except ImportError:
        pass
    return found


def fresh_copy(files: BPEFiles, backend: str = "auto") -> BPETokenizer:
    """A new instance (empty caches) whose encoder is already chosen, so no timing pays for the choice."""
    tok = BPETokenizer.from_files(files, backend=backend)
    tok.backend  # noqa: B018 - the choice is made on first use
    return tok


def check_ids(tok: BPETokenizer, enc, others: dict, hf: HFWorker, key: str, slices: list[list[str]],
              tmp: Path) -> list[str]:
    """Fail loudly unless tokformer (both encoders) and HF give the same ids on every measured document;
    return a note for each other library that differs from them on some document (timed all the same)."""
    out = tmp / "ids.json"
    hf("ids", key, out)
    hf_ids = json.loads(out.read_text())
    ours, reference = fresh_copy(tok.files()), fresh_copy(tok.files(), "python")
    tools = {"tiktoken": lambda texts: [enc.encode_ordinary(t) for t in texts], **others}
    differ: Counter[str] = Counter()
    for docs, theirs in zip(slices, hf_ids, strict=True):
        mine = [ours.encode(doc) for doc in docs]
        if mine != theirs or [reference.encode(doc) for doc in docs] != theirs:
            raise SystemExit(f"{key}: tokformer's ids differ from HF's")
        for name, encode in tools.items():
            differ[name] += sum(list(map(int, a)) != b for a, b in zip(encode(docs), mine, strict=True))
    return [f"{key}: {name}'s ids differ on {n} document(s)" for name, n in differ.items() if n]


# ----------------------------------------------------------------------------- measurements


def per_mb(timings: dict[str, Timing], sizes: list[float]) -> dict[str, Timing]:
    """Seconds per MB of each round's own slice, so ``rate_cell(1)`` is MB/s although slices differ a little."""
    return {name: Timing(tuple(s / mb for s, mb in zip(t.seconds, sizes, strict=True))) for name, t in timings.items()}


def encode_single(files: BPEFiles, enc, others: dict, hf: HFWorker, key: str, slices: list[list[str]],
                  repeats: int) -> dict:
    """One thread: first pass (fresh instances) for each tool, and the second pass of the caching ones."""
    ours = [fresh_copy(files) for _ in slices]
    python = [fresh_copy(files, "python") for _ in slices]
    hf("prepare", key)
    cases = {
        "tokformer": lambda r: ours[r + 1].encode_batch(slices[r + 1], num_workers=1),
        "tokformer python": lambda r: python[r + 1].encode_batch(slices[r + 1], num_workers=1),
        "tiktoken": lambda r: [enc.encode_ordinary(t) for t in slices[r + 1]],
        **{name: (lambda r, encode=encode: encode(slices[r + 1])) for name, encode in others.items()},
        "HF": lambda r: hf("encode", key, r),
        "tokformer python again": lambda r: python[r + 1].encode_batch(slices[r + 1], num_workers=1),
        "HF again": lambda r: hf("again", key, r),
    }
    return per_mb(interleave(cases, repeats, settle=gc.collect), [megabytes(s) for s in slices[1:]])


_CEILING_ENCODE = None  # the raw library's encode_ordinary, set before the ceiling's processes fork


def _encode_part(texts: list[str]) -> None:
    for text in texts:
        _CEILING_ENCODE(text)


def balanced(texts: list[str], parts: int, pattern: str) -> list[list[str]]:
    """``texts`` cut at safe points and dealt into ``parts`` lists of about equal size, largest first."""
    pieces = sorted((p for t in texts for p in safe_chunks(t, 1 << 16, pattern)), key=len, reverse=True)
    out: list[list[str]] = [[] for _ in range(parts)]
    sizes = [0] * parts
    for piece in pieces:
        smallest = sizes.index(min(sizes))
        out[smallest].append(piece)
        sizes[smallest] += len(piece)
    return out


def encode_parallel(files: BPEFiles, enc, hf: HFWorker, key: str, slices: list[list[str]], repeats: int) -> dict:
    """All cores, first pass: tokformer's threads (pool started before timing) against its own one thread,
    tiktoken's threads and HF's."""
    n = cores()
    ours = [fresh_copy(files) for _ in slices]
    alone = [fresh_copy(files) for _ in slices]
    for tok in ours:
        tok.encode_batch(["", ""], num_workers=n)  # start the pool
    packed = [[array("I", ids) for ids in alone[0].encode_batch(docs, num_workers=1)] for docs in slices]
    hf("prepare", key)
    cases = {
        "tokformer": lambda r: ours[r + 1].encode_batch(slices[r + 1], num_workers=n),
        "tokformer 1": lambda r: alone[r + 1].encode_batch(slices[r + 1], num_workers=1),
        "tiktoken": lambda r: enc.encode_ordinary_batch(slices[r + 1], num_threads=n),
        "HF": lambda r: hf("encode", key, r),
        "lists": lambda r: [ids.tolist() for ids in packed[r + 1]],  # what must hold the GIL: the ids as Python ints
    }
    global _CEILING_ENCODE
    _CEILING_ENCODE = ours[0]._compiled.encode_ordinary
    parts = [balanced(docs, n, files.pattern) for docs in slices]
    pool = multiprocessing.get_context("fork").Pool(n)  # the library alone on n processes: no GIL, no lists
    cases["ceiling"] = lambda r: pool.map(_encode_part, parts[r + 1], chunksize=1)
    cases["ceiling 1"] = lambda r: pool.map(_encode_part, [[p for part in parts[r + 1] for p in part]], chunksize=1)
    try:
        return per_mb(interleave(cases, repeats, settle=gc.collect), [megabytes(s) for s in slices[1:]])
    finally:
        pool.close()
        pool.join()
        for tok in ours:
            tok.close()


def target_cell(value: float, goal: float) -> str:
    return f">= {goal:g}x: {'met' if value >= goal else 'NOT met'}"


def median_ratio(ours: Timing, other: Timing) -> float:
    return other.median / ours.median


def single_rows(label: str, t: dict[str, Timing], others: list[str]) -> tuple[list[str], list[str]]:
    """A corpus and form at one thread: the row against the anchors (with its target), and the row that
    compares the exact candidates with tiktoken (> 1: faster than tiktoken)."""
    ours = t["tokformer"]
    goal = ("HF", 2.0) if label.endswith("lines") else ("tiktoken", 1.0)
    row = [f"{label}, first pass", ours.rate_cell(1), t["tokformer python"].rate_cell(1), t["tiktoken"].rate_cell(1),
           t["HF"].rate_cell(1), ratio_cell(ours, t["tiktoken"]), ratio_cell(ours, t["HF"]),
           target_cell(median_ratio(ours, t[goal[0]]), goal[1]) + f" ({goal[0]})"]  # fmt: skip
    candidates = [label, *(ratio_cell(t[name], t["tiktoken"]) for name in
                           ["tokformer", *others, "tokformer python", "tokformer python again", "HF"])]
    return row, candidates


def parallel_row(label: str, t: dict[str, Timing]) -> list[str]:
    """The row of one corpus and form on all cores, with the share of one thread's time spent making the Python
    lists of ids (which holds the GIL) and the speedup that share allows (Amdahl)."""
    n = cores()
    share = t["lists"].median / t["tokformer 1"].median
    return [f"{label}, first pass", t["tokformer"].rate_cell(1), t["tokformer 1"].rate_cell(1),
            t["tiktoken"].rate_cell(1), t["HF"].rate_cell(1), ratio_cell(t["tokformer"], t["tokformer 1"]),
            f"{100 * share:.0f}% / {1 / (share + (1 - share) / n):.2f}x", ratio_cell(t["ceiling"], t["ceiling 1"]),
            ratio_cell(t["tokformer"], t["tiktoken"]),
            target_cell(median_ratio(t["tokformer"], t["tokformer 1"]), 1.8) + f" ({n} cores vs 1)"]  # fmt: skip


def prepare_rows(tok: BPETokenizer, docs: list[str], megabytes_wanted: float, repeats: int, tmp: Path) -> str:
    """``tokformer data prepare lm`` on all cores against one core, on a folder of ``megabytes_wanted`` MB of
    documents, and on a folder of one short file (what the command costs besides encoding: loading and
    checking the tokenizer, starting processes, writing the folder)."""
    n = cores()
    saved = tok.save(tmp / "prepare-tokenizer")
    folder, tiny = tmp / "prepare", tmp / "prepare-tiny"
    folder.mkdir()
    tiny.mkdir()
    (tiny / "one.txt").write_text("one short document\n", encoding="utf-8")
    size, count = 0.0, 0
    while size < megabytes_wanted:
        doc = docs[count % len(docs)]
        (folder / f"{count:06d}.txt").write_text(doc, encoding="utf-8")
        size, count = size + megabytes([doc]), count + 1

    def prepare(source: Path, workers: int) -> None:
        prepare_lm(str(source), tmp / f"shards-{workers}", tokenizer=saved, workers=workers, overwrite=True,
                   show_progress=False)

    cases = {"n": lambda r: prepare(folder, n), "1": lambda r: prepare(folder, 1),
             "fixed n": lambda r: prepare(tiny, n), "fixed 1": lambda r: prepare(tiny, 1)}
    t = interleave(cases, repeats, settle=gc.collect)
    encode_n, encode_1 = t["n"].median - t["fixed n"].median, t["1"].median - t["fixed 1"].median
    row = [f"{size:.1f} MB in {count} files", t["n"].rate_cell(size), t["1"].rate_cell(size),
           ratio_cell(t["n"], t["1"]), f"{t['fixed n'].median:.2f} s / {t['fixed 1'].median:.2f} s",
           f"{encode_1 / encode_n:.2f}x", target_cell(median_ratio(t["n"], t["1"]), 1.8)]  # fmt: skip
    return markdown_table(["`data prepare lm`", f"{n} cores MB/s", "1 core MB/s", "speedup",
                           f"one short file, {n} cores / 1", "speedup less that cost (medians)", "target"], [row])


# ----------------------------------------------------------------------------- training


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


def training_rows(docs: list[str], naive_docs: list[str], args: argparse.Namespace, hf: dict[int, HFWorker]) -> str:
    """Training time, interleaved: tokformer vs HF at each thread count, and vs the naive recount on less text."""
    cases: dict[str, Callable[[int], object]] = {
        "tokformer": lambda _: BPETokenizer.train(docs, args.train_vocab_size, special_tokens=SPECIALS),
        **{f"HF {n}": (lambda _, n=n: hf[n]("train", "train", args.train_vocab_size)) for n in hf},
        "tokformer small": lambda _: BPETokenizer.train(naive_docs, args.naive_vocab_size),
        "naive small": lambda _: naive_train(naive_docs, args.naive_vocab_size),
    }
    t = interleave(cases, args.repeats)
    rows = [[f"train {megabytes(docs):.2f} MB to vocab {args.train_vocab_size}, HF on {n} thread(s)",
             t["tokformer"].seconds_cell(), t[f"HF {n}"].seconds_cell(), ratio_cell(t["tokformer"], t[f"HF {n}"])]
            for n in hf]  # fmt: skip
    rows.append(
        [f"train {megabytes(naive_docs):.3f} MB to vocab {args.naive_vocab_size}, vs naive recount",
         t["tokformer small"].seconds_cell(), t["naive small"].seconds_cell(),
         ratio_cell(t["tokformer small"], t["naive small"])]
    )  # fmt: skip
    return markdown_table(["training (code corpus)", "tokformer", "other", "speedup"], rows)


# ----------------------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=6.0, help="measured text per corpus, over all rounds")
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS, help=f"interleaved rounds (>= {MIN_REPEATS})")
    parser.add_argument("--vocab-size", type=int, default=50257, help="vocabulary of the encoding rows")
    parser.add_argument("--train-mb", type=float, default=3.0, help="text the encoding vocabulary is trained on")
    parser.add_argument("--train-vocab-size", type=int, default=8000, help="vocabulary of the training rows")
    parser.add_argument("--train-rows-mb", type=float, default=1.0, help="text of the training rows")
    parser.add_argument("--naive-mb", type=float, default=0.03, help="text of the naive-recount row")
    parser.add_argument("--naive-vocab-size", type=int, default=400)
    parser.add_argument("--prepare-mb", type=float, default=24.0, help="text of the `data prepare lm` rows")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small text and vocabularies")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.vocab_size, args.train_mb = 0.6, 2000, 0.3
        args.train_vocab_size, args.train_rows_mb, args.naive_mb, args.naive_vocab_size = 1000, 0.1, 0.01, 300
        args.prepare_mb = 2.0
    return args


def take(texts: list[str], mb: float) -> list[str]:
    """The first texts up to ``mb`` MB."""
    out: list[str] = []
    for text in texts:
        if megabytes(out) >= mb:
            break
        out.append(text)
    return out


@contextmanager
def hf_workers(tokenizer_json: Path, slices: dict[str, list[list[str]]], tmp: Path) -> Iterator[dict[int, HFWorker]]:
    workers = {n: HFWorker(tokenizer_json, slices, n, tmp) for n in sorted({1, cores()})}
    try:
        yield workers
    finally:
        for worker in workers.values():
            worker.close()


def train_vocabulary(found: dict[str, Corpus], args: argparse.Namespace) -> tuple[BPETokenizer, str]:
    """The one vocabulary of the encoding rows, from every corpus's training documents, and a note saying so."""
    docs = [doc for c in found.values() for doc in take(c.train, args.train_mb / len(found))]
    start = time.perf_counter()
    tok = BPETokenizer.train(docs, args.vocab_size, special_tokens=SPECIALS)
    seconds = time.perf_counter() - start
    return tok, (
        f"vocabulary: {tok.vocab_size} tokens trained by tokformer on {megabytes(docs):.2f} MB "
        f"(every {TRAIN_SHARE}th document, never measured) in {seconds:.0f} s"
    )


def encoding_tables(tok: BPETokenizer, hf: dict[int, HFWorker], slices: dict[str, list[list[str]]], repeats: int,
                    tmp: Path) -> tuple[dict[str, str], list[str]]:
    """Check ids on every measured slice, then time each corpus and form at one thread and at all cores."""
    enc = tiktoken_encoding(tok)
    others = other_libraries(tok, tmp / "tokenizer.json")
    notes = [note for key, data in slices.items() for note in check_ids(tok, enc, others, hf[1], key, data, tmp)]
    print("ids equal across tokformer's two encoders and HF on every measured document", *notes, sep="\n", flush=True)
    single, candidates, parallel = [], [], []
    for key, data in slices.items():
        timings = encode_single(tok.files(), enc, others, hf[1], key, data, repeats)
        row, compared = single_rows(key, timings, list(others))
        single.append(row)
        candidates.append(compared)
        if cores() > 1:
            parallel.append(parallel_row(key, encode_parallel(tok.files(), enc, hf[cores()], key, data, repeats)))
        print(f"{key}: done", flush=True)
    n = cores()
    head = ["corpus, form", f"tokformer ({tok.backend}) MB/s", "tokformer Python MB/s", "tiktoken MB/s", "HF MB/s",
            "vs tiktoken", "vs HF", "target"]
    tables = {
        f"Encoding, 1 thread, first pass (tokformer `encode_batch(num_workers=1)` on its default backend, "
        f"{tok.backend}; tiktoken `encode_ordinary`; HF `encode_batch` with RAYON_NUM_THREADS=1)":
            markdown_table(head, single),
        "The exact candidates against tiktoken, 1 thread (tiktoken's time / theirs: > 1 is faster than tiktoken)":
            markdown_table(["corpus, form", "tokformer", *others, "tokformer Python, first pass",
                            "tokformer Python, second pass (warm cache)", "HF"], candidates),
        f"Encoding, all {n} cores, first pass (tokformer `encode_batch(num_workers={n})` on threads, tiktoken "
        f"`encode_ordinary_batch(num_threads={n})`, HF `encode_batch` on {n} Rayon threads)": (
            markdown_table(["corpus, form", f"tokformer {n} MB/s", "tokformer 1 MB/s", "tiktoken MB/s", "HF MB/s",
                            f"tokformer {n} vs 1", "making the lists of ids: share of 1 thread / bound",
                            f"its compiled encoder alone, {n} processes vs 1 (balanced parts)", "vs tiktoken",
                            "target"],
                           parallel)
            if parallel else "(one core: no parallel rows)"
        ),
    }
    return tables, notes


def render(machine: Machine, notes: list[str], sections: dict[str, str]) -> str:
    """The results file: title, machine line, notes, then one titled section per table."""
    title = "# Byte-level BPE: tokformer vs tiktoken vs Hugging Face tokenizers"
    head = [title, "", machine.line(f"1 and {cores()} threads"), "", *(f"- {note}" for note in notes)]
    return "\n".join(head + [part for name, body in sections.items() for part in ("", f"## {name}", "", body)])


def main() -> None:
    args = parse_args()
    machine = Machine(PACKAGES)
    rounds = args.repeats + 1  # the warm-up round -1 reads slice 0
    corpora = {name: load_corpus(name, args.size_mb, rounds) for name in CORPORA}
    notes = [
        f"corpus {name!r}: absent or under {rounds} documents here, skipped" for name, c in corpora.items() if not c
    ]
    found = {name: c for name, c in corpora.items() if c is not None}
    tok, vocab_note = train_vocabulary(found, args)
    notes.append(vocab_note)
    print(*notes, sep="\n", flush=True)
    slices = {
        f"{c.name} {form}": s for c in found.values() for form, s in (("documents", c.slices), ("lines", c.lines()))
    }
    train = take(found["code"].train if "code" in found else next(iter(found.values())).train, args.train_rows_mb)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tok.save_hf_json(tmp / "tokenizer.json")
        with hf_workers(tmp / "tokenizer.json", {**slices, "train": [train]}, tmp) as hf:
            sections, differ = encoding_tables(tok, hf, slices, args.repeats, tmp)
            if cores() > 1:
                every_doc = [doc for c in found.values() for docs in c.slices for doc in docs]
                sections["`tokformer data prepare lm`, all cores against one (the same files every round: the "
                         "compiled encoder keeps no cache and each run loads the tokenizer afresh)"] = prepare_rows(
                    tok, every_doc, args.prepare_mb, args.repeats, tmp)
            sections["Training"] = training_rows(train, take(train, args.naive_mb), args, hf)
    sizes = ", ".join(f"{key}: {sum(map(megabytes, data[1:])):.2f} MB" for key, data in slices.items())
    notes += [
        f"measured text over {args.repeats} rounds (each round its own slice, never seen before): {sizes}",
        "ids checked equal between tokformer (both encoders) and HF on every measured document before timing; "
        + ("; ".join(differ) if differ else "tiktoken's and the other libraries' too"),
        "MB/s = UTF-8 MB / s, median (min-max) over the rounds; ratios = other's time / tokformer's (> 1: ours "
        "faster), median (min-max of per-round ratios)",
    ]
    write_results("bpe.md", render(machine, notes, sections))


if __name__ == "__main__":
    main()
