"""Model folders: what leaves a run, and the one loader behind every inference command.

A run directory is training state (optimizer moments, RNG states, data position: what an
exact resume needs). A **model folder** is only what rebuilds the model::

    config.json          {"format": "tokformer-model", "format_version": 1,
                          "task": {"name": "sort", <the task's config fields>}, "tokenizer_sha256": ...}
    model.safetensors    the state dict (tied/shared tensors stored once, as in checkpoints)
    tokenizer/, ...      whatever the task's ``save_assets`` writes (tokenizers, class names)

Nothing in it is pickled and nothing is unpickled from it. :func:`load_model` is the
single entry of ``generate``, ``translate``, ``predict`` and ``evaluate`` and of
fine-tuning (``init_from``): it takes a run directory, a model folder or a Hugging Face
causal-LM folder (a ``config.json`` with ``model_type``), and refuses anything else with
one line naming the file or key at fault.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from tokformer import files
from tokformer.engine import checkpoint as ckpt
from tokformer.engine.api import load_run, resolve_config, saved_config
from tokformer.engine.config import TrainConfig
from tokformer.engine.registry import get_task, task_names
from tokformer.engine.task import Task
from tokformer.errors import ConfigError, UsageError

FORMAT = "tokformer-model"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
PICKLED_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl")

FolderKind = Literal["run", "folder", "hf", "timm"]


def task_name(task: Task) -> str:
    """The registered name of ``task``'s class (the registry stores classes by name only)."""
    guess = type(task).__module__.rpartition(".")[2]  # tokformer.tasks.sort -> sort: the usual layout, no search
    for name in (guess, *task_names()):
        with contextlib.suppress(ConfigError):  # the guess may be no task at all
            if get_task(name) is type(task):
                return name
    raise ConfigError(f"task class {type(task).__qualname__} is not registered; decorate it with @register_task")


def save_pretrained(task: Task, model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write ``model`` and what rebuilds it (``task``'s config and assets) as a model folder.

    The folder is assembled under a temporary name and renamed into place, so an
    interrupted save leaves no half folder; an existing non-empty ``directory`` is refused
    rather than mixed with another model's files. Returns the folder.
    """
    out = Path(directory)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} already exists and is not an empty directory; choose another output directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        # save_assets may remember where it wrote (a run directory); the caller's task keeps its own.
        copy.copy(task).save_assets(tmp)
        state = getattr(model, "_orig_mod", model).state_dict()  # torch.compile's wrapper adds a prefix
        ckpt.save_model_state(state, tmp)
        config = {"format": FORMAT, "format_version": FORMAT_VERSION,
                  "task": {"name": task_name(task), **dataclasses.asdict(task.config)},
                  ckpt.TOKENIZER_HASH: ckpt.tokenizer_fingerprint(tmp, task.tokenizer_dirs())}
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        _shareable(tmp)
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _shareable(folder: Path) -> None:
    """Give the folder and its weights the user's usual permissions: mkdtemp and safetensors create
    owner-only ones, and a model folder is meant to be handed on."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    os.chmod(folder / WEIGHTS_FILE, 0o666 & ~umask)


@dataclass
class Predictor:
    """A loaded model with its task: load once, predict as often as needed.

    ``predictor(inputs, **options)`` is ``task.predict(model, inputs, **options)``: one
    prediction per input (digits for sort, an image or its path for classify, a prompt for lm,
    a sentence for translate, a graph or its file for graph); ``options`` are the task's own
    (``top_k``, ``beam_size``, ``max_new_tokens``...).
    """

    task: Task
    model: nn.Module

    def __call__(self, inputs: Sequence[Any], **options: Any) -> list[Any]:
        """One prediction per input; an option the task does not take is a one-line UsageError."""
        accepted = {name: p for name, p in inspect.signature(self.task.predict).parameters.items()
                    if name not in ("model", "inputs")}
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        unknown = sorted(set(options) - set(accepted))
        if unknown and not takes_any:
            raise UsageError(f"task {task_name(self.task)!r} has no predict option {unknown[0]!r}; "
                             f"it takes {', '.join(accepted) or 'none'}")
        return self.task.predict(self.model, list(inputs), **options)

    predict = __call__


def load(path: str | os.PathLike, checkpoint: str = "best", device: str | torch.device = "cpu") -> Predictor:
    """A :class:`Predictor` for a run directory (weights of ``checkpoint``), a model folder or a
    Hugging Face folder: ``tokformer.load(path)(inputs)``, the Python form of ``tokformer predict``."""
    return Predictor(*load_model(path, checkpoint, device))


def from_pretrained(path: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[Task, nn.Module]:
    """The task (tokenizer loaded) and model (eval mode) of a model folder, a Hugging Face
    folder or a run directory (its best checkpoint): the pair :func:`load_run` returns."""
    return load_model(path, device=device)


def folder_kind(path: str | os.PathLike) -> FolderKind:
    """What ``path`` holds: a run directory, a tokformer model folder, a Hugging Face folder
    (``model_type``) or a timm hub folder (``architecture``); a one-line error for anything else."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path} is not a run directory, a model folder or a Hugging Face folder: it does not exist")
    if not path.is_dir():
        raise ConfigError(f"{path} is a file; give a run directory, a model folder (tokformer export) "
                          "or a Hugging Face model folder")
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        refuse_pickled_only(path)
        weights = "" if any(path.glob("*.safetensors")) else " and no .safetensors weights"
        raise ConfigError(f"{path} has no {CONFIG_FILE}{weights}: it is not a run directory, a model folder "
                          "(tokformer export) or a Hugging Face model folder")
    config = read_json(config_file)
    if "model_type" in config:
        return "hf"
    if "architecture" in config:
        return "timm"
    if config.get("format") == FORMAT:
        return "folder"
    if "task" in config:
        return "run"
    raise ConfigError(f"{config_file} is neither a tokformer config (no 'format' or 'task' key) "
                      "nor a Hugging Face one (no 'model_type' key)")


def saved_task_name(path: str | os.PathLike) -> str | None:
    """The task a run directory or model folder was made by, read without loading any weights
    (so a command can refuse the wrong kind of model at once); None for other folders."""
    kind = folder_kind(path)
    if kind not in ("run", "folder"):
        return None
    section = (saved_config(Path(path)) if kind == "run" else read_json(Path(path) / CONFIG_FILE)).get("task")
    return section.get("name") if isinstance(section, dict) else section


def read_json(file: Path) -> dict[str, Any]:
    """A JSON object from ``file``, or a one-line error naming it."""
    data = files.read_json(file)
    if not isinstance(data, dict):
        raise ConfigError(f"{file} must hold a JSON object, got {type(data).__name__}")
    return data


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


def load_model(path: str | os.PathLike, checkpoint: str = "best",
               device: str | torch.device = "cpu") -> tuple[Task, nn.Module]:
    """The task and model (eval mode, on ``device``) of a run directory (weights of
    ``checkpoint``: best, latest or a step), a model folder or a Hugging Face causal-LM folder."""
    path = Path(path)
    kind = folder_kind(path)
    if kind == "run":
        return load_run(path, checkpoint, device)
    if checkpoint != "best":
        raise ConfigError(f"{path} is a model folder with one set of weights; --checkpoint {checkpoint} "
                          "applies to run directories only")
    refuse_pickled_only(path)
    if not any(path.glob("*.safetensors")):
        raise ConfigError(f"{path} has no .safetensors weights (a model folder has {WEIGHTS_FILE})")
    if kind == "timm":
        raise ConfigError(f"{path / CONFIG_FILE} describes a timm image model; fine-tune it with "
                          f"tokformer train classify -o init_from={path}")
    task, model = _load_hf(path) if kind == "hf" else _load_folder(path)
    return task, model.to(device).eval()


def _load_hf(path: Path) -> tuple[Task, nn.Module]:
    """A Hugging Face folder through the interop converter (imported only when one is loaded)."""
    try:
        from tokformer.interop.hf import load_hf_folder
    except ImportError:
        model_type = read_json(path / CONFIG_FILE).get("model_type")
        raise ConfigError(f"{path / CONFIG_FILE} is a Hugging Face folder (model_type {model_type!r}); loading it "
                          "needs tokformer.interop.hf, which this installation lacks") from None
    return load_hf_folder(path)


def _load_folder(path: Path) -> tuple[Task, nn.Module]:
    config_file = path / CONFIG_FILE
    config = read_json(config_file)
    version = config.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ConfigError(f"{config_file}: format_version {version!r} is not one this tokformer reads "
                          f"(up to {FORMAT_VERSION}); upgrade tokformer")
    if not isinstance(config.get("task"), dict):
        raise ConfigError(f"{config_file}: 'task' must be an object with the task's name and options")
    if not (path / WEIGHTS_FILE).is_file():
        raise ConfigError(f"{path} has no {WEIGHTS_FILE} (a model folder's weights)")
    try:
        cfg = resolve_config({"task": config["task"]})
    except ConfigError as e:
        raise ConfigError(f"{config_file}: {e}") from None
    task = get_task(cfg.task)(cfg.task_config)
    saved_hash = config.get(ckpt.TOKENIZER_HASH)
    if saved_hash is not None and saved_hash != ckpt.tokenizer_fingerprint(path, task.tokenizer_dirs()):
        where = ", ".join(str(path / name) for name in task.tokenizer_dirs())
        raise ConfigError(f"{where} is not the tokenizer {path / WEIGHTS_FILE} was saved with "
                          "(its files changed since); restore it or export the model again")
    task.load_assets(path)
    model = task.build_model()
    ckpt.load_fitting(model, ckpt.load_model_state(path), f"{path / WEIGHTS_FILE}", f"{config_file} and its tokenizer")
    return task, model


def train_config(path: str | os.PathLike) -> TrainConfig:
    """The engine settings a run trained with, or the task's defaults for a model folder (a
    Hugging Face folder: the engine's): ``evaluate`` takes its batch size and precision from here."""
    kind = folder_kind(path)
    if kind == "run":
        return resolve_config(saved_config(Path(path))).train
    if kind == "folder":
        return resolve_config({"task": read_json(Path(path) / CONFIG_FILE)["task"]}).train
    return TrainConfig()


def export_run(run_dir: str | os.PathLike, out: str | os.PathLike, *, checkpoint: str = "best",
               format: Literal["folder", "onnx"] = "folder") -> Path:
    """A run's checkpoint as a model folder at ``out``; with ``format="onnx"`` also
    ``out/model.onnx``. The Python form of ``tokformer export``."""
    if folder_kind(run_dir) != "run":
        raise ConfigError(f"{run_dir} is not a run directory (tokformer train makes one); export reads its checkpoints")
    task, model = load_run(run_dir, checkpoint)
    if format == "onnx":
        try:
            from tokformer.interop.export import export_onnx
        except ImportError:
            raise ConfigError("ONNX export needs tokformer.interop.export, which this installation lacks") from None
    folder = save_pretrained(task, model, out)
    if format == "onnx":
        export_onnx(model, task.export_example(), folder / "model.onnx")
    return folder
