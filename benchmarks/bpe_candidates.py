"""The exact candidates for tokformer's compiled BPE backend, beyond speed: exactness and memory.

Run: ``python benchmarks/bpe_candidates.py [--texts 3000] [--words 2000000]``. Writes
``benchmarks/results/bpe_candidates.md``. Speed is ``bench_bpe.py``'s; this script records the
other half of the choice ``tokenizers/bpe_backend.py`` makes, for each library as its users
call it (no tokformer guard or pattern widening):

- exactness against tokformer's pure-Python encoder (the reference, equal to Hugging Face's ids)
  on random Unicode from every plane (seeded), and on long runs of one character;
- resident memory while encoding distinct random words, in a fresh process per library: an
  encoder that caches every word it has seen grows with the text it is given.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from harness import Machine, markdown_table, write_results

from tokformer.tokenizers import BPETokenizer, bpe_backend

PACKAGES = ("riptoken", "tiktoken", "gigatoken", "regex")
CORPUS = [
    "the cat sat on the mat; the dog's bed isn't 42 feet. 1234567 THE'LL 'S\n" * 8,
    "Grüße aus München, 안녕하세요 세계, 你好世界, 🙂🚀👍🏽 emoji.\n\u3000全角\u00a0nbsp\n" * 4,
    "def add(a, b):\n    return a + b\n\n\n\tclass Thing:  # comment   \n        pass\r\n" * 4,
]
RUNS = {"502 newlines + x": "\n" * 502 + "x", "5000 x a": "a" * 5000, "3000 x é": "é" * 3000,
        "1000 spaces + x": " " * 1000 + "x"}

# One library in a fresh process: build it, encode distinct random words chunk by chunk, print RSS after each.
MEMORY_WORKER = textwrap.dedent(
    """
    import json, random, sys
    library, tokenizer_json, words, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sys.path.insert(0, sys.argv[5])
    from bpe_candidates import encoder
    encode = encoder(library, tokenizer_json)
    rss = lambda: int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
    rng = random.Random(0)
    out = [rss()]
    for _ in range(words // chunk):
        encode(" ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(12)) for _ in range(chunk)))
        out.append(rss())
    print(json.dumps(out))
    """
)


def encoder(library: str, tokenizer_json: str):
    """``encode_ordinary`` of ``library`` on the vocabulary in ``tokenizer_json``, as its own users call it."""
    tok = BPETokenizer.from_hf_json(tokenizer_json, backend="python")
    if library == "riptoken":
        import riptoken

        return riptoken.CoreBPE(tok.mergeable_ranks(), {}, tok.pattern).encode_ordinary
    if library == "tiktoken":
        import tiktoken

        return tiktoken.Encoding("x", pat_str=tok.pattern, mergeable_ranks=tok.mergeable_ranks(),
                                 special_tokens={}).encode_ordinary
    if library == "gigatoken":
        import gigatoken

        giga = gigatoken.Tokenizer(tokenizer_json)
        return lambda text: [int(i) for i in giga.encode(text)]
    raise ValueError(library)


def newer_letters() -> str:
    """Letters ``regex`` knows and the libraries' Unicode tables do not (the first 40)."""
    body = (bpe_backend._class_differences("tiktoken") or {}).get(r"\p{L}", "")
    first = [int(h, 16) for h in re.findall(r"\\x\{([0-9a-f]+)\}", body)]
    return "".join(chr(p) for p in first[:40])


def random_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        points = (rng.choice([rng.randrange(0x80), rng.randrange(0x10000), rng.randrange(0x110000)])
                  for _ in range(rng.randrange(1, 80)))
        texts.append("".join(chr(p) for p in points if not 0xD800 <= p <= 0xDFFF))
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=3000, help="random Unicode texts compared")
    parser.add_argument("--words", type=int, default=2_000_000, help="distinct words encoded in the memory rows")
    parser.add_argument("--chunk", type=int, default=400_000, help="words per encode call")
    args = parser.parse_args()
    machine = Machine(PACKAGES)
    reference = BPETokenizer.train(CORPUS, 700, backend="python")
    letters = newer_letters()
    words = [f"{a}{b}{a} {b}a{b}" for a in letters for b in letters[:10]]  # merges that join them with "a"
    newer = BPETokenizer.train(CORPUS + [" ".join(words)] * 3, 1200, backend="python")
    libraries = [name for name in ("riptoken", "tiktoken", "gigatoken") if _installed(name)]
    texts = random_texts(args.texts)
    exact_rows, memory_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path, newer_path = str(Path(tmp) / "tokenizer.json"), str(Path(tmp) / "newer.json")
        reference.save_hf_json(path)
        newer.save_hf_json(newer_path)
        expected = [reference.encode(t) for t in texts]
        for library in libraries:
            encode = encoder(library, path)
            differ = sum(encode(t) != e for t, e in zip(texts, expected, strict=True))
            runs = [name for name, text in RUNS.items() if encode(text) != reference.encode(text)]
            encode_newer = encoder(library, newer_path)
            newer_differ = sum(encode_newer(w) != newer.encode(w) for w in words)
            exact_rows.append([library, f"{differ} of {len(texts)}", ", ".join(runs) or "none",
                               f"{newer_differ} of {len(words)}"])
            result = subprocess.run(
                [sys.executable, "-c", MEMORY_WORKER, library, path, str(args.words), str(args.chunk),
                 str(Path(__file__).parent)], capture_output=True, text=True, check=True, cwd=tmp)
            rss = json.loads(result.stdout)
            memory_rows.append([library, f"{rss[0]:.0f}", " / ".join(f"{r:.0f}" for r in rss[1:]),
                                f"{rss[-1] - rss[1]:+.0f}"])
            print(exact_rows[-1], memory_rows[-1], flush=True)
    steps = ", ".join(f"{(i + 1) * args.chunk:,}" for i in range(args.words // args.chunk))
    body = "\n".join([
        "# The exact BPE candidates: exactness and memory", "", machine.line("1 thread"), "",
        "- reference: tokformer's Python encoder, a 700-token vocabulary trained on built-in text (GPT-2 pattern); "
        "each library as its users call it, without tokformer's guard or pattern widening",
        f"- random texts: {len(texts)} of 1-79 code points from every plane (seed 0), surrogates left out",
        "", "## Exactness", "",
        "Random text rarely shows a pre-tokenizer difference: with a small vocabulary, pieces cut in another place "
        "mostly give the same byte ids. The last column uses a vocabulary trained on words that mix `a` with "
        "letters newer than the libraries' Unicode tables (regex " + _version("regex") + "), so merges cross them.",
        "",
        markdown_table(["library", "random texts whose ids differ", "long runs whose ids differ",
                        "words with newer letters whose ids differ"], exact_rows),
        "", f"## Resident memory (MB) while encoding distinct 12-letter words, after {steps} words", "",
        markdown_table(["library", "before", "after each step", "growth after the first step"], memory_rows),
    ])
    write_results("bpe_candidates.md", body)


def _version(name: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(name)


def _installed(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
