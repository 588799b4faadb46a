"""Hugging Face `tokenizers` (a test-only dependency) as the reference BPE trainer of the parity tests."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from tokformer.tokenizers.pretokenize import PATTERNS


def hf_tokenizers():
    """Import Hugging Face's package even when this repo's ``tokenizers/`` folder is on sys.path."""
    repo = str(Path(__file__).resolve().parents[1])
    saved = sys.path[:]
    shadow = sys.modules.get("tokenizers")
    if shadow is not None and not hasattr(shadow, "Tokenizer"):
        del sys.modules["tokenizers"]
    sys.path[:] = [p for p in sys.path if p not in ("", ".", repo)]
    try:
        return importlib.import_module("tokenizers")
    finally:
        sys.path[:] = saved


hf = hf_tokenizers()


def train_hf(texts: list[str], vocab_size: int, pattern: str, min_frequency: int, specials: list[str]):
    pre = hf.pre_tokenizers
    tokenizer = hf.Tokenizer(hf.models.BPE())
    if pattern == "gpt2":
        tokenizer.pre_tokenizer = pre.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tokenizer.pre_tokenizer = pre.Sequence(
            [
                pre.Split(hf.Regex(PATTERNS.get(pattern, pattern)), behavior="isolated"),  # a name or a regex
                pre.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    trainer = hf.trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def hf_merges(tokenizer) -> list[tuple[str, str]]:
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]
