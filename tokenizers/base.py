"""The tokenizer API: raw samples in, a :class:`~tokformer.TokenBatch` out.

A tokenizer is where a modality's knowledge lives. It answers three questions, and the
rest of tokformer asks nothing else:

* how a batch of raw samples becomes tokens and positions (:meth:`Tokenizer.batch`);
* how those tokens become ``d_model`` vectors (:meth:`Tokenizer.build_embedder`), since
  only the tokenizer knows whether its tokens are ids or feature vectors and what its
  positions mean;
* how it is written to and read back from a directory (:meth:`Tokenizer.save` and
  :meth:`Tokenizer.load`), as JSON and text files only, so loading a tokenizer a user
  was handed can never execute code.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor, nn

from tokformer import files
from tokformer.atomic import staged_folder, write_text_atomic
from tokformer.batch import TokenBatch
from tokformer.errors import DataError, UsageError

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

T = TypeVar("T", bound="Tokenizer")


class TokenizerError(UsageError):
    """A tokenizer cannot be built, trained, saved or loaded from what it was given."""


class Tokenizer(ABC):
    """Base class of every tokenizer.

    Subclasses implement :meth:`batch`, :meth:`build_embedder` and :meth:`get_config`;
    a tokenizer that needs more than its config to be rebuilt (a vocabulary, merges)
    also overrides :meth:`save_files` and :meth:`from_config`. Register a subclass with
    ``@register_tokenizer("name")`` so :func:`~tokformer.tokenizers.load_tokenizer` and
    configs can refer to it by name.
    """

    type_name: ClassVar[str] = ""  # set by @register_tokenizer

    @abstractmethod
    def batch(self, samples: Sequence[Any]) -> TokenBatch:
        """Tokenize a batch of raw samples into one padded :class:`TokenBatch`."""

    @abstractmethod
    def build_embedder(self, d_model: int, *, dropout: float = 0.0) -> nn.Module:
        """A module mapping this tokenizer's :class:`TokenBatch` to ``[B, N, d_model]``, with ``dropout``
        on its output: one signature for every tokenizer, so a task can build any of them alike."""

    @abstractmethod
    def get_config(self) -> dict[str, Any]:
        """JSON-serialisable settings that, with :meth:`save_files`' output, rebuild this tokenizer."""

    def save_files(self, directory: Path) -> None:
        """Write any files besides the config (vocabulary, merges, ...). Default: none."""
        return None

    @classmethod
    def from_config(cls: type[T], config: dict[str, Any], directory: Path) -> T:
        """Rebuild from :meth:`get_config`'s output and the files in ``directory``.

        The default passes the config as keyword arguments to the constructor; an
        unknown key is an error (a typo must not be silently ignored).
        """
        try:
            return cls(**config)
        except TypeError as err:
            raise TokenizerError(f"bad {cls.type_name or cls.__name__} tokenizer config: {err}") from None

    def save(self, directory: str | Path) -> Path:
        """Write ``tokenizer_config.json`` (type name + config) and the tokenizer's files.

        A new (or empty) ``directory`` appears whole or not at all: a crash half-way leaves no
        folder that loads as a tokenizer missing its merges. Into a folder that already holds
        files (a model folder, a run's tokenizer saved again) each file is written whole, one
        after another, as Hugging Face's ``save_pretrained`` does: the folder is the user's.
        """
        # Look in the class's own namespace: a subclass of a registered tokenizer must not
        # silently save itself under its parent's name and load back as the parent.
        if not type(self).__dict__.get("type_name"):
            raise TokenizerError(f"{type(self).__name__} is not registered: decorate it with @register_tokenizer")
        path = Path(directory)
        if path.is_dir() and any(path.iterdir()):
            self._write(path)
        else:
            with staged_folder(path) as staging:
                self._write(staging)
        return path

    def _write(self, path: Path) -> None:
        document = {"type": self.type_name, "config": self.get_config()}
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        write_text_atomic(path / TOKENIZER_CONFIG_FILE, text)  # each file whole or not at all
        self.save_files(path)

    @classmethod
    def load(cls: type[T], directory: str | Path) -> T:
        """Load a tokenizer of this class from a directory written by :meth:`save`."""
        path = Path(directory)
        document = read_config(path)
        if cls.type_name and document["type"] != cls.type_name:
            raise TokenizerError(f"{path / TOKENIZER_CONFIG_FILE} holds a {document['type']!r} tokenizer, "
                                 f"not {cls.type_name!r}")
        return cls.from_config(document["config"], path)


def read_config(directory: Path) -> dict[str, Any]:
    """Parse and check ``tokenizer_config.json``: a dict with a string ``type`` and a dict ``config``."""
    file = directory / TOKENIZER_CONFIG_FILE
    if not file.exists():
        raise TokenizerError(f"no {TOKENIZER_CONFIG_FILE} in {directory}: not a saved tokenizer")
    try:
        document = files.loads(read_file_text(file))
    except ValueError as err:  # not JSON, or nested too deeply to parse
        raise TokenizerError(f"corrupt tokenizer config {file}: {err}") from None
    if (
        not isinstance(document, dict)
        or not isinstance(document.get("type"), str)
        or not isinstance(document.get("config"), dict)
    ):
        raise TokenizerError(f"corrupt tokenizer config {file}: expected {{'type': str, 'config': {{...}}}}")
    return document


def read_file_text(path: Path) -> str:
    """The UTF-8 text of a tokenizer's file, read by :func:`tokformer.files.read_text` (a pipe or a device in
    its place is refused, never waited on or read without end), its errors as one-line TokenizerErrors."""
    if not path.exists():
        raise TokenizerError(f"missing file {path}")
    try:
        return files.read_text(path)
    except DataError as err:  # it names the file and the cause
        raise TokenizerError(str(err)) from None


def pad_ids(
    sequences: Sequence[Sequence[int]],
    *,
    pad_id: int = 0,
    max_length: int | None = None,
    truncation: bool = False,
    pad_to_max_length: bool = False,
) -> TokenBatch:
    """Pad id sequences into a TokenBatch with positions 0..N-1 and a True-for-real mask.

    Args:
        sequences: one list of ids per sample.
        pad_id: id written into padding slots (masked out, so its value is irrelevant
            to a correct model; choose a real id to keep embedding lookups in range).
        max_length: longest allowed sample; longer ones raise unless ``truncation``.
        truncation: cut samples to ``max_length`` tokens instead of raising.
        pad_to_max_length: pad to ``max_length`` rather than to the longest sample.
    """
    if max_length is not None:
        too_long = [i for i, seq in enumerate(sequences) if len(seq) > max_length]
        if too_long and not truncation:
            raise TokenizerError(
                f"sample {too_long[0]} has {len(sequences[too_long[0]])} tokens > max_length {max_length};"
                " pass truncation=True to cut it"
            )
        sequences = [seq[:max_length] for seq in sequences]
    lengths = torch.tensor([len(seq) for seq in sequences], dtype=torch.long)
    longest = max((len(seq) for seq in sequences), default=0)
    width = max_length if (pad_to_max_length and max_length is not None) else longest
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    mask = torch.arange(width)[None, :] < lengths[:, None]  # [B, N], True = real token
    positions = torch.arange(width).expand(len(sequences), width)  # [B, N]
    return TokenBatch(mask=mask, ids=ids, positions=positions)


def pad_features(features: Sequence[Tensor], positions: Sequence[Tensor] | None = None) -> TokenBatch:
    """Pad per-sample ``[n_i, F]`` features (and ``[n_i, P]`` position features) into a TokenBatch.

    Padding slots hold zeros and are False in the mask. Without ``positions`` the batch
    carries none, and the core treats its tokens as an unordered set.
    """
    if not features:
        raise TokenizerError("cannot make a batch of zero samples")
    lengths = [f.shape[0] for f in features]
    width = max(lengths)
    padded = torch.zeros(len(features), width, features[0].shape[1], dtype=features[0].dtype)  # [B, N, F]
    for row, f in enumerate(features):
        padded[row, : f.shape[0]] = f
    mask = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]  # [B, N]
    padded_positions = None
    if positions is not None:
        padded_positions = torch.zeros(len(features), width, positions[0].shape[1], dtype=positions[0].dtype)
        for row, p in enumerate(positions):
            padded_positions[row, : p.shape[0]] = p
    return TokenBatch(mask=mask, features=padded, positions=padded_positions)
