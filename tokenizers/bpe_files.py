"""Reading and writing byte-level BPE files: HF ``tokenizer.json`` and GPT-2 ``vocab.json`` + ``merges.txt``.

Both formats store tokens as byte-level strings (see :mod:`.byte_level`); in memory a
token is its bytes. Everything here is plain JSON or text: nothing is ever unpickled.
A file we cannot interpret raises :class:`~tokformer.tokenizers.base.TokenizerError`
with the file name and the problem, never a bare KeyError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokformer import files
from tokformer.atomic import write_text_atomic
from tokformer.tokenizers.base import TokenizerError, read_file_text
from tokformer.tokenizers.byte_level import str_to_token, token_to_str
from tokformer.tokenizers.pretokenize import PATTERNS


@dataclass
class BPEFiles:
    """The content of a byte-level BPE file: everything a :class:`BPETokenizer` needs."""

    vocab: dict[bytes, int]
    merges: list[tuple[bytes, bytes]]
    special_tokens: dict[str, int]
    pattern: str
    ignore_merges: bool = False


def to_hf_json(files: BPEFiles) -> dict[str, Any]:
    """A Hugging Face ``tokenizer.json`` document for a byte-level BPE."""
    if files.pattern == PATTERNS["gpt2"]:
        pre_tokenizer: dict[str, Any] = _byte_level(use_regex=True)
    else:
        pre_tokenizer = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": files.pattern}, "behavior": "Isolated", "invert": False},
                _byte_level(use_regex=False),
            ],
        }
    added = [
        {
            "id": i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for s, i in sorted(files.special_tokens.items(), key=lambda item: item[1])
    ]
    vocab = {token_to_str(tok): i for tok, i in files.vocab.items()}
    vocab.update(files.special_tokens)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": _byte_level(use_regex=True),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": files.ignore_merges,
            "vocab": dict(sorted(vocab.items(), key=lambda item: item[1])),
            "merges": [[token_to_str(a), token_to_str(b)] for a, b in files.merges],
        },
    }


def _byte_level(use_regex: bool) -> dict[str, Any]:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def write_hf_json(files: BPEFiles, path: Path) -> None:
    write_text_atomic(path, json.dumps(to_hf_json(files), ensure_ascii=False, indent=1) + "\n")


def read_hf_json(path: Path) -> BPEFiles:
    """Parse a byte-level BPE ``tokenizer.json``; anything else is a clear error."""
    document = _read_json(path)
    try:
        model = document["model"]
        if model.get("type", "BPE") != "BPE":
            raise TokenizerError(f"{path}: model type {model['type']!r} is not BPE")
        for option in ("continuing_subword_prefix", "end_of_word_suffix", "dropout"):
            if model.get(option):
                raise TokenizerError(f"{path}: BPE option {option}={model[option]!r} is not supported")
        if document.get("normalizer"):
            raise TokenizerError(f"{path}: normalizers are not supported")
        pattern = _pattern_of(document.get("pre_tokenizer"), path)
        specials = {t["content"]: _token_id(t["id"], path) for t in document.get("added_tokens") or []}
        vocab = {str_to_token(s): _token_id(i, path) for s, i in model["vocab"].items() if s not in specials}
        ids = [*vocab.values(), *specials.values()]
        if len(set(ids)) != len(ids):
            raise TokenizerError(f"corrupt tokenizer file {path}: two tokens share an id")
        merges = [_merge_pair(m) for m in model["merges"]]
        merges_bytes = [(str_to_token(a), str_to_token(b)) for a, b in merges]
        ignore = bool(model.get("ignore_merges", False))
    except TokenizerError:
        raise
    except KeyError as err:
        raise TokenizerError(f"corrupt tokenizer file {path}: missing or non-byte-level entry {err}") from None
    except (TypeError, ValueError, AttributeError) as err:
        raise TokenizerError(f"corrupt tokenizer file {path}: {err}") from None
    return BPEFiles(vocab=vocab, merges=merges_bytes, special_tokens=specials, pattern=pattern, ignore_merges=ignore)


def _token_id(value: Any, path: Path) -> int:
    """A token id as a file gives it: a non-negative integer (not ``"7"``, ``1.5`` or ``true``)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TokenizerError(f"corrupt tokenizer file {path}: token id {value!r} is not a non-negative integer")
    return value


def _merge_pair(entry: Any) -> tuple[str, str]:
    """A merge is ``["a", "b"]`` in recent HF files and ``"a b"`` in older ones."""
    parts = entry.split(" ") if isinstance(entry, str) else entry
    if len(parts) != 2 or not all(isinstance(p, str) for p in parts):
        raise ValueError(f"bad merge entry {entry!r}")
    return parts[0], parts[1]


def _pattern_of(pre_tokenizer: Any, path: Path) -> str:
    """The split regex of a ByteLevel(use_regex) or Sequence[Split(regex), ByteLevel] pre-tokenizer."""
    if isinstance(pre_tokenizer, dict):
        kind = pre_tokenizer.get("type")
        if kind == "ByteLevel" and not pre_tokenizer.get("add_prefix_space") and pre_tokenizer.get("use_regex", True):
            return PATTERNS["gpt2"]
        steps = pre_tokenizer.get("pretokenizers") or []
        if (
            kind == "Sequence"
            and len(steps) == 2
            and steps[0].get("type") == "Split"
            and steps[0].get("behavior") == "Isolated"
            and not steps[0].get("invert")
            and "Regex" in steps[0].get("pattern", {})
            and steps[1].get("type") == "ByteLevel"
            and not steps[1].get("add_prefix_space")
            and not steps[1].get("use_regex", True)
        ):
            return steps[0]["pattern"]["Regex"]
    raise TokenizerError(
        f"{path}: unsupported pre_tokenizer {json.dumps(pre_tokenizer)[:200]};"
        " expected ByteLevel(add_prefix_space=false) or Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)]"
    )


def write_vocab_merges(files: BPEFiles, directory: Path) -> tuple[Path, Path]:
    """GPT-2 style ``vocab.json`` (special tokens included) and ``merges.txt``."""
    vocab = {token_to_str(tok): i for tok, i in files.vocab.items()}
    vocab.update(files.special_tokens)
    vocab_path, merges_path = directory / "vocab.json", directory / "merges.txt"
    write_text_atomic(vocab_path, json.dumps(dict(sorted(vocab.items(), key=lambda item: item[1])),
                                             ensure_ascii=False) + "\n")
    lines = ["#version: 0.2", *(f"{token_to_str(a)} {token_to_str(b)}" for a, b in files.merges)]
    write_text_atomic(merges_path, "\n".join(lines) + "\n")
    return vocab_path, merges_path


def read_vocab_merges(
    vocab_path: Path,
    merges_path: Path,
    special_tokens: list[str] | tuple[str, ...] = (),
    pattern: str = PATTERNS["gpt2"],
) -> BPEFiles:
    """Parse GPT-2 style files. The format cannot mark special tokens, so the caller names them."""
    raw_vocab = _read_json(vocab_path)
    if not isinstance(raw_vocab, dict):
        raise TokenizerError(f"corrupt vocab file {vocab_path}: expected a JSON object of token -> id")
    missing = [s for s in special_tokens if s not in raw_vocab]
    if missing:
        raise TokenizerError(f"special tokens {missing} are not in {vocab_path}")
    lines = read_file_text(merges_path).splitlines()
    try:
        specials = {s: int(raw_vocab[s]) for s in special_tokens}
        vocab = {str_to_token(s): int(i) for s, i in raw_vocab.items() if s not in specials}
        merges = [_merge_pair(line) for line in lines if line and not line.startswith("#version")]
        merges_bytes = [(str_to_token(a), str_to_token(b)) for a, b in merges]
    except KeyError as err:
        raise TokenizerError(f"{vocab_path} / {merges_path}: token {err} is not byte-level") from None
    except (TypeError, ValueError) as err:
        raise TokenizerError(f"corrupt merges file {merges_path}: {err}") from None
    return BPEFiles(vocab=vocab, merges=merges_bytes, special_tokens=specials, pattern=pattern)


def _read_json(path: Path) -> Any:
    text = read_file_text(path)
    try:
        return files.loads(text)
    except ValueError as err:  # not JSON, or nested too deeply to parse
        raise TokenizerError(f"corrupt JSON file {path}: {err}") from None
