"""What a path holds, read once: the typed description every loader starts from.

``describe(path)`` looks at a path a user gave (a run directory, a tokformer model folder,
another library's folder or file) and parses its ``config.json`` exactly once; everything
after that (the loader, fine-tuning, ``evaluate``) reads the :class:`Source`, never the file
again. Anything else is refused in one line naming the file or key at fault.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokformer import files
from tokformer.errors import ConfigError
from tokformer.store.formats import formats
from tokformer.store.run_dir import CONFIG_FILE
from tokformer.store.weights import WEIGHTS_FILE

RUN = "run"  # a run directory (tokformer train): config.json with a "task" and "train" section
MODEL = "model"  # a tokformer model folder (tokformer export / save_pretrained)
MODEL_FORMAT = "tokformer-model"  # a model folder's config.json "format"
PICKLED_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl")


@dataclass(frozen=True)
class Source:
    """A path and what it holds.

    Attributes:
        path: the folder (or, for formats that take one, the file).
        kind: ``"run"``, ``"model"``, or the name of a registered foreign :class:`~tokformer.store.formats.Format`.
        config: its ``config.json``, parsed (empty for a lone file).
    """

    path: Path
    kind: str
    config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def is_tokformer(self) -> bool:
        """A run directory or a model folder: built by tokformer, loadable without a converter."""
        return self.kind in (RUN, MODEL)

    def task_section(self) -> dict[str, Any] | None:
        """The ``task`` section (name and options) of a run directory or model folder; None otherwise."""
        if not self.is_tokformer:
            return None
        section = self.config.get("task")
        if isinstance(section, str):
            return {"name": section}
        return section if isinstance(section, dict) else None

    def task_name(self) -> str | None:
        """The task a run directory or model folder was made by, read without loading any weights."""
        section = self.task_section()
        name = section.get("name") if section else None
        return name if isinstance(name, str) else None


def read_json_object(file: Path) -> dict[str, Any]:
    """A JSON object from ``file``, or a one-line error naming it."""
    data = files.read_json(file)
    if not isinstance(data, dict):
        raise ConfigError(f"{file} must hold a JSON object, got {type(data).__name__}")
    return data


def describe(path: str | os.PathLike) -> Source:
    """What ``path`` holds; a one-line error for anything tokformer cannot read."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path} is not a run directory, a model folder or a Hugging Face folder: it does not exist")
    if not path.is_dir():
        for fmt in formats():
            if fmt.claims_file is not None and fmt.claims_file(path):
                return Source(path, fmt.name)
        raise ConfigError(f"{path} is a file; give a run directory, a model folder (tokformer export) "
                          "or a Hugging Face model folder")
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        refuse_pickled_only(path)
        weights = "" if any(path.glob("*.safetensors")) else " and no .safetensors weights"
        raise ConfigError(f"{path} has no {CONFIG_FILE}{weights}: it is not a run directory, a model folder "
                          "(tokformer export) or a Hugging Face model folder")
    config = read_json_object(config_file)
    if config.get("format") == MODEL_FORMAT:
        return Source(path, MODEL, config)
    if "task" in config:
        return Source(path, RUN, config)
    for fmt in formats():
        if fmt.claims_config(config):
            return Source(path, fmt.name, config)
    raise ConfigError(f"{config_file} is neither a tokformer config (no 'format' or 'task' key) "
                      "nor a Hugging Face one (no 'model_type' key)")


def refuse_pickled_only(path: Path) -> None:
    """A folder whose only weights are pickles (``pytorch_model.bin``, ``.pth``) is refused with
    the one-liner that converts them: unpickling a file someone handed you can run their code."""
    if any(path.glob("*.safetensors")):
        return
    pickled = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in PICKLED_SUFFIXES)
    if pickled:
        source, target = pickled[0], path / WEIGHTS_FILE
        raise ConfigError(
            f"{source} is a pickled checkpoint and {path} has no .safetensors weights; tokformer never unpickles "
            "files it is handed. If you trust the file, convert it once: python -c \"import torch; "
            "from safetensors.torch import save_file; "
            f"save_file({{k: v.clone().contiguous() for k, v in torch.load('{source}', weights_only=True).items()}}, "
            f"'{target}')\"")
