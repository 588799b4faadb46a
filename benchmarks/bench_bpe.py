"""Byte-level BPE: tokformer vs tiktoken vs Hugging Face `tokenizers`, encoding and training.

Run: ``python benchmarks/bench_bpe.py [--quick] [--size-mb 6] [--vocab-size 50257]``. Prints
Markdown and writes ``benchmarks/results/bpe.md``.

Like with like. One vocabulary for every tool: trained by tokformer (GPT-2 pattern,
``<|endoftext|>``) on documents disjoint from the measured ones, exported to tiktoken
(ids as ranks) and to HF's ``tokenizer.json``; before any timing every measured document's
ids are checked equal across the three tools. Corpora come from files on the machine, no
download: English (license, copyright and changelog files under /usr/share), multilingual
(vim's translated message catalogs, 30+ languages) and code (the standard library), each as
whole documents and as the same text cut into lines.

First pass is the headline: each round encodes its own slice, never seen before, with a
fresh instance of each tool (tokformer and HF cache words, tiktoken does not). The second
pass re-encodes the round's slice with the warmed instance. HF runs in worker processes,
one per thread count, because Rayon reads RAYON_NUM_THREADS once per process, and outside
this repository, whose ``tokenizers/`` folder would shadow HF's package.
"""

from __future__ import annotations

import argparse
import gettext
import gzip
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness import MIN_REPEATS, Machine, Timing, cores, interleave, markdown_table, ratio_cell, write_results

from tokformer.tokenizers import BPETokenizer
from tokformer.tokenizers.bpe_files import BPEFiles
from tokformer.tokenizers.bpe_train import count_pretokens
from tokformer.tokenizers.pretokenize import PATTERNS

SPECIALS = ["<|endoftext|>"]
TRAIN_SHARE = 5  # every 5th document goes to vocabulary training, the rest is measured
PACKAGES = ("regex", "tiktoken", "tokenizers", "torch")

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


def fresh_copy(files: BPEFiles) -> BPETokenizer:
    return BPETokenizer.from_files(files)


def check_ids(tok: BPETokenizer, enc, hf: HFWorker, key: str, slices: list[list[str]], tmp: Path) -> None:
    """Fail loudly unless tokformer, tiktoken and HF give the same ids on every measured document."""
    out = tmp / "ids.json"
    hf("ids", key, out)
    hf_ids = json.loads(out.read_text())
    ours = fresh_copy(tok.files())
    for docs, theirs in zip(slices, hf_ids, strict=True):
        for doc, hf_doc in zip(docs, theirs, strict=True):
            mine = ours.encode(doc)
            if mine != enc.encode_ordinary(doc) or mine != hf_doc:
                raise SystemExit(f"{key}: ids differ from tiktoken's or HF's on document {doc[:60]!r}")


# ----------------------------------------------------------------------------- measurements


def per_mb(timings: dict[str, Timing], sizes: list[float]) -> dict[str, Timing]:
    """Seconds per MB of each round's own slice, so ``rate_cell(1)`` is MB/s although slices differ a little."""
    return {name: Timing(tuple(s / mb for s, mb in zip(t.seconds, sizes, strict=True))) for name, t in timings.items()}


def encode_single(files: BPEFiles, enc, hf: HFWorker, key: str, slices: list[list[str]], repeats: int) -> dict:
    """One thread: first pass (fresh instances) and second pass (the same instances again) for each tool."""
    ours = [fresh_copy(files) for _ in slices]
    hf("prepare", key)
    cases = {
        "tokformer": lambda r: ours[r + 1].encode_batch(slices[r + 1], num_workers=1),
        "tiktoken": lambda r: [enc.encode_ordinary(t) for t in slices[r + 1]],
        "HF": lambda r: hf("encode", key, r),
        "tokformer again": lambda r: ours[r + 1].encode_batch(slices[r + 1], num_workers=1),
        "HF again": lambda r: hf("again", key, r),
    }
    return per_mb(interleave(cases, repeats), [megabytes(s) for s in slices[1:]])


def encode_parallel(files: BPEFiles, enc, hf: HFWorker, key: str, slices: list[list[str]], repeats: int) -> dict:
    """All cores, first pass: tokformer's process pool (started before timing) vs tiktoken's and HF's threads."""
    n = cores()
    ours = [fresh_copy(files) for _ in slices]
    for tok in ours:
        tok.encode_batch([""], num_workers=n)  # start the pool: forks with the empty cache
    hf("prepare", key)
    cases = {
        "tokformer": lambda r: ours[r + 1].encode_batch(slices[r + 1], num_workers=n),
        "tiktoken": lambda r: enc.encode_ordinary_batch(slices[r + 1], num_threads=n),
        "HF": lambda r: hf("encode", key, r),
    }
    try:
        return per_mb(interleave(cases, repeats), [megabytes(s) for s in slices[1:]])
    finally:
        for tok in ours:
            tok.close()


def target_cell(value: float, goal: float) -> str:
    return f">= {goal:g}x: {'met' if value >= goal else 'NOT met'}"


def median_ratio(ours: Timing, other: Timing) -> float:
    return other.median / ours.median


def encode_rows(label: str, t: dict[str, Timing], goals: dict[str, float], parallel: bool) -> list[list[str]]:
    """Table rows of one corpus and form: first pass, then (one thread only) the second pass."""
    goal_cells = [target_cell(median_ratio(t["tokformer"], t[tool]), g) for tool, g in goals.items()]
    rows = [
        [f"{label}, first pass", t["tokformer"].rate_cell(1), t["tiktoken"].rate_cell(1), t["HF"].rate_cell(1),
         ratio_cell(t["tokformer"], t["tiktoken"]), ratio_cell(t["tokformer"], t["HF"]), "; ".join(goal_cells)],
    ]  # fmt: skip
    if not parallel:
        rows.append(
            [f"{label}, second pass (warm caches)", t["tokformer again"].rate_cell(1), "(as first pass)",
             t["HF again"].rate_cell(1), ratio_cell(t["tokformer again"], t["tiktoken"]),
             ratio_cell(t["tokformer again"], t["HF again"]), "secondary"]
        )  # fmt: skip
    return rows


def profile(files: BPEFiles, docs_by_round: list[list[str]], repeats: int) -> str:
    """Where a tokformer encode spends its time: each stage timed alone on the same slices.

    The chunk regex is the scan every call pays; the cache lookups are a warm encode
    minus that scan; a first pass adds the misses: splitting each new chunk into GPT-2
    pieces, and the merge loop over each new piece (timed alone, on the round's distinct
    pieces). The piece-level GPT-2 regex is what the scan cost before chunking.
    """
    cold = [fresh_copy(files) for _ in docs_by_round]
    probe = fresh_copy(files)
    distinct = []
    for docs in docs_by_round:
        chunks = {c for d in docs for c in probe._chunk(d)}
        distinct.append(sorted({p for c in chunks for p in probe._split(c)}))
    warm = fresh_copy(files)
    for docs in docs_by_round:
        warm.encode_batch(docs, num_workers=1)
    cases = {
        "first-pass encode": lambda r: cold[r + 1].encode_batch(docs_by_round[r + 1], num_workers=1),
        "second-pass encode": lambda r: warm.encode_batch(docs_by_round[r + 1], num_workers=1),
        "chunk regex (scan)": lambda r: [probe._chunk(d) for d in docs_by_round[r + 1]],
        "merge loop over the distinct pieces": lambda r: [probe._encode_piece(p, p) for p in distinct[r + 1]],
        "GPT-2 piece regex (before chunking)": lambda r: [probe._split(d) for d in docs_by_round[r + 1]],
    }
    t = per_mb(interleave(cases, repeats), [megabytes(s) for s in docs_by_round[1:]])
    first, second, scan = t["first-pass encode"].median, t["second-pass encode"].median, t["chunk regex (scan)"].median
    merge = t["merge loop over the distinct pieces"].median
    stages = [
        ("chunk regex (scan)", scan),
        ("cache lookups (second pass - scan)", second - scan),
        ("merge loop over the distinct pieces", merge),
        ("chunk -> pieces split and bookkeeping of misses (rest)", first - second - merge),
    ]
    rows = [[name, f"{1e3 * s:.0f}", f"{100 * s / first:.0f}%", f"{100 * s / second:.0f}%" if i < 2 else "-"]
            for i, (name, s) in enumerate(stages)]  # fmt: skip
    rows += [[name, f"{1e3 * t[name].median:.0f}", "-", "-"] for name in ("first-pass encode", "second-pass encode")]
    rows.append(["GPT-2 piece regex (before chunking)", f"{1e3 * t['GPT-2 piece regex (before chunking)'].median:.0f}",
                 "-", "-"])  # fmt: skip
    distinct_per_mb = sum(map(len, distinct[1:])) / sum(megabytes(s) for s in docs_by_round[1:])
    return "\n".join([
        f"Profile (English documents, 1 thread; {distinct_per_mb:.0f} distinct pieces per MB of a first pass):",
        "",
        markdown_table(["stage", "ms per MB", "share of first pass", "share of second pass"], rows),
    ])  # fmt: skip


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
    parser.add_argument("--quick", action="store_true", help="a smoke run: small text and vocabularies")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.vocab_size, args.train_mb = 0.6, 2000, 0.3
        args.train_vocab_size, args.train_rows_mb, args.naive_mb, args.naive_vocab_size = 1000, 0.1, 0.01, 300
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


def encoding_tables(
    tok: BPETokenizer, hf: dict[int, HFWorker], slices: dict[str, list[list[str]]], repeats: int, tmp: Path
) -> tuple[list[list[str]], list[list[str]]]:
    """Check ids on every measured slice, then time each corpus and form at one thread and at all cores."""
    enc = tiktoken_encoding(tok)
    for key, data in slices.items():
        check_ids(tok, enc, hf[1], key, data, tmp)
    print("ids equal across tokformer, tiktoken and HF on every measured document", flush=True)
    single, parallel = [], []
    for key, data in slices.items():
        goals = {"HF": 2.0} if key.endswith("lines") else {"tiktoken": 1.0}
        single += encode_rows(key, encode_single(tok.files(), enc, hf[1], key, data, repeats), goals, False)
        if cores() > 1:
            t = encode_parallel(tok.files(), enc, hf[cores()], key, data, repeats)
            parallel += encode_rows(key, t, {"tiktoken": 1.0}, True)
        print(f"{key}: done", flush=True)
    return single, parallel


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
            single, parallel = encoding_tables(tok, hf, slices, args.repeats, tmp)
            english = slices.get("English documents") or next(iter(slices.values()))
            profile_text = profile(tok.files(), english, args.repeats)
            training = training_rows(train, take(train, args.naive_mb), args, hf)
    header = ["corpus, form, pass", "tokformer MB/s", "tiktoken MB/s", "HF MB/s", "vs tiktoken", "vs HF", "target"]
    sizes = ", ".join(f"{key}: {sum(map(megabytes, data[1:])):.2f} MB" for key, data in slices.items())
    notes += [
        f"measured text over {args.repeats} rounds (each round its own slice, never seen before): {sizes}",
        "ids checked equal across the three tools on every measured document before timing",
        "MB/s = UTF-8 MB / s, median (min-max) over the rounds; ratios = other's time / tokformer's (> 1: ours "
        "faster), median (min-max of per-round ratios)",
    ]
    n = cores()
    sections = {
        "Encoding, 1 thread (tokformer `encode_batch(num_workers=1)`, tiktoken `encode_ordinary`, HF `encode_batch` "
        "with RAYON_NUM_THREADS=1)": markdown_table(header, single),
        f"Encoding, all {n} cores, first pass (tokformer `encode_batch(num_workers={n})`, tiktoken "
        f"`encode_ordinary_batch(num_threads={n})`, HF `encode_batch` on {n} Rayon threads)": (
            markdown_table(header, parallel) if parallel else "(one core: no parallel rows)"
        ),
        "Where tokformer's encoder spends its time": profile_text,
        "Training": training,
    }
    write_results("bpe.md", render(machine, notes, sections))


if __name__ == "__main__":
    main()
