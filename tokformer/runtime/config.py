"""Configs: dataclasses filled from defaults, then a config file, then overrides.

A run's config has two sections: ``train`` (the engine's :class:`TrainConfig`, the same
for every task) and ``task`` (``name`` plus the fields of the task's own config
dataclass). Every value passes through :func:`build_dataclass`, which rejects unknown
keys (suggesting the closest valid one) and coerces strings from the command line or
from YAML (where ``1e-3`` is a string) to the declared type, so a typo is an error
naming the key instead of a silently ignored setting.
"""

from __future__ import annotations

import dataclasses
import difflib
import glob
import math
import os
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tokformer.config import ARCHITECTURE
from tokformer.errors import ConfigError, DataError
from tokformer.files import loads, read_text, shown
from tokformer.machine import MAX_WORKERS
from tokformer.numbers import finite_float
from tokformer.runtime.registry import get_task

Precision = Literal["fp32", "bf16"]
Strategy = Literal["ddp", "fsdp"]


#: Field metadata: the option names files or folders (see :func:`help_text`'s ``path``).
PATH = "path"
#: Field metadata: the option is a comma-separated list of paths.
PATH_LIST = "path_list"


def help_text(text: str, *, architecture: bool = False,
              path: Collection[str] | Callable[[str], bool] | None = None,
              path_list: bool = False) -> dict[str, Any]:
    """Field metadata documenting a config option; `--help` and `tokformer tasks NAME` show it.

    ``architecture``: the option fixes the model's shape (widths, depths, positions, the
    tokenizer's layout), so fine-tuning (``init_from``) takes it from the source model and a
    run keeps it. Every other option (data, regularisation, decoding defaults) stays the user's.

    ``path``: the option names a file or folder, which a run records as an absolute path
    (:func:`absolute_paths`) so that it evaluates, resumes and exports from any directory.
    Its value is the option's names that are no path (built-in datasets: ``("shapes",)``),
    or a predicate telling them; ``()`` for an option that is always a path.
    ``path_list``: the value is a comma-separated list of such paths.
    """
    metadata: dict[str, Any] = {"help": text}
    if architecture:
        metadata[ARCHITECTURE] = True
    if path is not None:
        metadata[PATH] = path
        metadata[PATH_LIST] = path_list
    return metadata


MAX_STEPS = 10**12
MAX_EPOCHS = 10**6


@dataclass
class TrainConfig:
    """Engine settings shared by every task. Field help texts become the CLI's ``--help``."""

    steps: int = field(default=1000, metadata=help_text("optimizer steps to train for (ignored when epochs is set)"))
    epochs: float | None = field(default=None, metadata=help_text(
        "passes over the training set instead of steps: steps = ceil(epochs * samples / batch_size)"))
    batch_size: int = field(default=32, metadata=help_text("global samples per optimizer step (all processes)"))
    grad_accum: int = field(default=1, metadata=help_text("micro-batches accumulated per optimizer step"))
    lr: float = field(default=1e-3, metadata=help_text("peak learning rate"))
    min_lr_ratio: float = field(default=0.1, metadata=help_text("cosine decay floor, as a fraction of lr"))
    warmup_steps: int = field(default=100, metadata=help_text("linear warmup steps before cosine decay"))
    weight_decay: float = field(default=0.1, metadata=help_text("AdamW decay, on weight matrices only"))
    beta1: float = field(default=0.9, metadata=help_text("AdamW beta1"))
    beta2: float = field(default=0.95, metadata=help_text("AdamW beta2"))
    grad_clip: float = field(default=1.0, metadata=help_text("max global gradient norm; 0 disables clipping"))
    precision: Precision = field(default="fp32", metadata=help_text("fp32, or bf16 autocast (CPU and CUDA)"))
    compile: bool = field(default=False, metadata=help_text("torch.compile the model"))
    strategy: Strategy = field(default="ddp", metadata=help_text(
        "with several processes: ddp (a whole model per process) or fsdp (weights, gradients and optimizer "
        "state sharded per Transformer block; sharded checkpoints)"))
    activation_checkpointing: bool = field(default=False, metadata=help_text(
        "recompute each Transformer block's activations in backward: less memory, ~1/3 more compute, same losses"))
    device: str = field(default="auto", metadata=help_text("auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps"))
    seed: int = field(default=0, metadata=help_text("seed for weights, data order and every RNG"))
    init_from: str = field(default="", metadata=help_text(
        "fine-tune from: a model folder or run of the same task, a Hugging Face folder (lm), or a timm ViT file or "
        "hub folder (classify); the model's shape, tokenizer and weights come from it", path=()))
    deterministic: bool = field(
        default=False, metadata=help_text("torch.use_deterministic_algorithms: bitwise-reproducible runs")
    )
    log_every: int = field(default=10, metadata=help_text("log training metrics every N steps"))
    eval_every: int = field(default=100, metadata=help_text("evaluate and save a checkpoint every N steps"))
    keep_last: int = field(default=3, metadata=help_text("checkpoints kept besides the best one"))
    early_stop: int | None = field(default=None, metadata=help_text(
        "stop after N evaluations without a better best_metric, keeping the best checkpoint; 0: off; "
        "none: 3 when the data are your own, off on a task's built-in data"))
    num_workers: int = field(default=0, metadata=help_text("DataLoader worker processes"))
    run_dir: str | None = field(default=None, metadata=help_text("run directory; default runs/TASK-TIMESTAMP"))

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "grad_accum", "log_every", "eval_every", "keep_last"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("warmup_steps", "weight_decay", "grad_clip", "num_workers"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.num_workers > MAX_WORKERS:  # each is a process: thousands would exhaust the machine, not help
            raise ValueError(f"num_workers must be at most {MAX_WORKERS}, got {self.num_workers}")
        if self.epochs is not None and not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise ValueError(f"epochs must be positive, got {self.epochs}")
        # a budget no machine could finish is a typo (1e300), not a plan: refused before it sizes anything
        if self.steps > MAX_STEPS or (self.epochs is not None and self.epochs > MAX_EPOCHS):
            raise ValueError(f"steps must be at most 10**12 and epochs at most 10**6, got steps={self.steps:.3g}, "
                             f"epochs={self.epochs}")
        if self.early_stop is not None and self.early_stop < 0:
            raise ValueError(f"early_stop must be >= 0 (0: off), got {self.early_stop}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be in [0, 2**32), got {self.seed}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")


@dataclass
class RunConfig:
    """Everything that defines a run: the task's name and config, and the engine's."""

    task: str
    task_config: Any
    train: TrainConfig = field(default_factory=TrainConfig)
    #: path options as the user gave them, where :func:`absolute_paths` made them absolute
    #: (``{"task.data": "digits"}``): kept for display, never read back as settings
    given: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The nested form saved as ``config.json``; :func:`resolve` reads it back."""
        saved = {"task": {"name": self.task, **dataclasses.asdict(self.task_config)},
                 "train": dataclasses.asdict(self.train)}
        return {**saved, "given": dict(self.given)} if self.given else saved


def absolute_paths(cfg: RunConfig) -> dict[str, str]:
    """Make every path option of ``cfg`` that names a file or folder absolute, in place, record
    the values as given for those it changed in ``cfg.given`` (``{"task.data": "digits"}``) and
    return them.

    A run directory outlives the working directory it was started in: ``tokformer evaluate
    /abs/runs/x`` from elsewhere must still find ``--data digits``. A value that is one of the
    option's built-in names, or a relative path that does not exist (an error later, which names
    the working directory), is left as given.
    """
    given: dict[str, str] = {}
    for section, values in (("task", cfg.task_config), ("train", cfg.train)):
        for f in dataclasses.fields(values):
            value = getattr(values, f.name)
            if PATH not in f.metadata or not isinstance(value, str) or not value.strip():
                continue
            parts = value.split(",") if f.metadata[PATH_LIST] else [value]
            resolved = ",".join(_absolute(part.strip(), f.metadata[PATH]) for part in parts if part.strip())
            if resolved != value:
                given[f"{section}.{f.name}"] = value
                setattr(values, f.name, resolved)
    cfg.given.update(given)
    return given


def _absolute(part: str, names: Collection[str] | Callable[[str], bool]) -> str:
    is_name = names if callable(names) else (lambda v: v in names or v.lower() in names)
    if is_name(part):
        return part
    path = Path(part).expanduser()
    if path.is_absolute():
        return str(path)
    if not names or path.exists() or (glob.has_magic(part) and glob.glob(part, recursive=True)):
        return os.path.abspath(path)
    return part


def config_fields(cls: type) -> dict[str, dataclasses.Field]:
    """The init fields of a config dataclass, by name."""
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def unknown_key_message(key: str, valid: list[str], section: str) -> str:
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"unknown {section} option '{key}'.{hint} Valid options: {', '.join(sorted(valid))}"


def build_dataclass(cls: type, values: Mapping[str, Any], section: str) -> Any:
    """``cls(**values)`` with unknown keys rejected and values coerced to the field types.

    ``__post_init__`` validation errors (ValueError) become ConfigErrors naming the section.
    """
    fields_ = config_fields(cls)
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in fields_:
            raise ConfigError(unknown_key_message(key, list(fields_), section))
        kwargs[key] = coerce(value, hints[key], f"{section}.{key}")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"invalid {section} config: {e}") from e


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def is_none(value: Any) -> bool:
    """Whether a value means "no value": None, or the string none/null (a flag, -o or YAML)."""
    return value is None or (isinstance(value, str) and value.lower() in ("none", "null"))


def coerce(value: Any, tp: Any, key: str) -> Any:
    """``value`` as type ``tp``; strings are parsed, since flags and YAML deliver them."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if is_none(value) and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{key}: {shown(value)} matches none of {tp}")
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{key}: expected one of {', '.join(map(str, args))}, got {shown(value)}")
    if origin in (tuple, list):
        items = [s.strip() for s in value.split(",")] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {shown(value)}")
        inner = args[0] if args else Any
        return origin(coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(items))
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ConfigError(f"{key}: expected true or false, got {shown(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected an integer, got {shown(value)}")
    if tp is float:
        try:
            return finite_float(value)
        except ValueError as e:
            raise ConfigError(f"{key}: {e}") from None
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {shown(value)}")
    if tp is Path:
        return Path(value)
    raise ConfigError(f"{key}: unsupported config type {tp}")


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML, YAML or JSON config file into a dict."""
    path = Path(path)
    try:
        text = read_text(path)
    except DataError as e:
        raise ConfigError(f"cannot read config file: {e}") from None
    if not text.strip():
        raise ConfigError(f"config file {path} is empty")
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            data = _load_yaml(text, path) or {}
        elif suffix == ".json":
            data = loads(text)
        else:
            raise ConfigError(f"config file {path}: unknown format '{suffix}'; use .toml, .yaml, .yml or .json")
    except ConfigError:
        raise
    except Exception as e:  # each parser has its own error type; all mean "malformed file"
        raise ConfigError(f"config file {path} is malformed: {str(e).splitlines()[0]}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table/mapping at the top level")
    return data


def _load_yaml(text: str, path: Path) -> Any:
    """YAML without anchors and aliases: a config holds plain values, and a few nested aliases
    expand to gigabytes (the "billion laughs"), so the text's events are read first (a stream that
    expands nothing) and the first alias is refused before ``safe_load`` builds anything."""
    import yaml

    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise ConfigError(f"config file {path}, line {event.start_mark.line + 1}: YAML aliases "
                              f"(*{event.anchor}) are not accepted in config files; write the values out")
    return yaml.safe_load(text)


def parse_override(text: str) -> tuple[str, str]:
    """``"key=value"`` -> ``("key", "value")``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override '{text}' is not KEY=VALUE (e.g. -o lr=3e-4 or -o task.seq_len=8)")
    return key.strip(), value.strip()


def route_override(key: str, task_cls: type) -> tuple[str, str]:
    """Which section a key belongs to: ``train.lr`` and ``task.x`` are explicit; a bare key
    goes to the one section that has it."""
    section, dot, name = key.partition(".")
    if dot:
        if section not in ("train", "task"):
            raise ConfigError(f"override '{key}': section must be 'train' or 'task'")
        return section, name
    in_train, in_task = key in config_fields(TrainConfig), key in config_fields(task_cls)
    if in_train and in_task:
        raise ConfigError(f"option '{key}' exists in both train and task configs; write train.{key} or task.{key}")
    if in_train:
        return "train", key
    if in_task:
        return "task", key
    valid = list(config_fields(TrainConfig)) + list(config_fields(task_cls))
    raise ConfigError(unknown_key_message(key, valid, "train or task"))


def split_sections(data: Mapping[str, Any], source: str) -> tuple[str | None, dict, dict]:
    """A nested config mapping -> (task name or None, task values, train values). A saved run's
    ``given`` section (paths as the user typed them) is display only and not returned."""
    unknown = set(data) - {"task", "train", "given"}
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(f"{source}: unknown top-level key '{key}'; a config has a [task] and a [train] section")
    task = data.get("task", {})
    if isinstance(task, str):
        task = {"name": task}
    train = data.get("train", {})
    if not isinstance(task, Mapping) or not isinstance(train, Mapping):
        raise ConfigError(f"{source}: 'task' and 'train' must be tables/mappings")
    task = dict(task)
    return task.pop("name", None), task, dict(train)


def _given(values: Mapping[str, Any], key: str) -> bool:
    return not is_none(values.get(key))


def merge_budget(lower: Mapping[str, Any], upper: Mapping[str, Any]) -> dict[str, Any]:
    """``{**lower, **upper}`` for train values, where ``steps`` and ``epochs`` are two spellings of
    one budget: ``upper`` (the overrides) may give only one of them, and the one it gives replaces
    the other from ``lower`` (``--steps 5000`` on resuming a run that was given epochs means steps)."""
    if _given(upper, "steps") and _given(upper, "epochs"):
        raise ConfigError("give --steps or --epochs, not both")
    merged = {**lower, **upper}
    if _given(upper, "steps"):
        merged["epochs"] = None
    return merged


def resolve(
    task_name: str | None,
    base: Mapping[str, Any] | None,
    overrides: Mapping[str, Any],
    task_config_cls: typing.Callable[[str], type],
    train_defaults: typing.Callable[[str], Mapping[str, Any]] = lambda name: {},
) -> RunConfig:
    """Merge config layers, lowest priority first: dataclass defaults, ``base`` (a nested
    mapping from a file or a saved run), then ``overrides`` (flat ``key`` or ``section.key``).

    ``epochs``, when set, is the budget and ``steps`` is ignored (see :func:`merge_budget`).
    ``task_config_cls`` maps a task name to its config dataclass (the registry lookup), and
    ``train_defaults`` to the train values that suit it (``Task.train_defaults``), which sit
    between TrainConfig's defaults and ``base``.
    """
    base_name, task_values, train_values = split_sections(base or {}, "config")
    name = task_name or base_name
    if name is None:
        raise ConfigError("no task given: name one (tokformer train sort) or set task.name in the config file")
    cls = task_config_cls(name)
    train_overrides: dict[str, Any] = {}
    for key, value in overrides.items():
        section, field_name = route_override(key, cls)
        (train_overrides if section == "train" else task_values)[field_name] = value
    train_values = merge_budget(train_values, train_overrides)
    given = (base or {}).get("given")
    return RunConfig(
        task=name,
        task_config=build_dataclass(cls, task_values, f"task '{name}'"),
        train=build_dataclass(TrainConfig, {**train_defaults(name), **train_values}, "train"),
        given={str(k): str(v) for k, v in given.items()} if isinstance(given, Mapping) else {},
    )


def resolve_config(
    config: RunConfig | Mapping[str, Any] | str | os.PathLike | None = None, **overrides: Any
) -> RunConfig:
    """A full :class:`RunConfig` from a task name, a nested mapping, a config file path or a
    RunConfig, plus overrides (``lr=1e-3``, ``seq_len=8``, or ``{"train.lr": 1e-3}``)."""
    if isinstance(config, RunConfig):
        config = config.to_dict()
    if isinstance(config, (os.PathLike, Path)) or (isinstance(config, str) and Path(config).suffix):
        config = load_config_file(config)
    if isinstance(config, str):  # a bare task name
        return resolve(config, None, overrides, _task_config_cls, _train_defaults)
    return resolve(None, config, overrides, _task_config_cls, _train_defaults)


def _task_config_cls(name: str) -> type:
    return get_task(name).Config


def _train_defaults(name: str) -> dict[str, Any]:
    return get_task(name).train_defaults
