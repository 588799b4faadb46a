"""Task ``classify``: image classification with a Vision Transformer.

Image patch tokenizer -> shared encoder -> :class:`~tokformer.heads.ClassificationHead`.
Data (``data``): ``shapes`` (built in, generated, offline), a directory of class folders
(torchvision ImageFolder layout), or a torchvision dataset name (cifar10, mnist, ...).
Loss: cross-entropy with label smoothing, or against mixup/cutmix soft targets. Metrics:
top-1 ``accuracy`` and ``top5``; every full evaluation pass also writes
``plots/confusion.png``. ``tokformer predict RUN_DIR image.png`` prints the top classes.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset

from tokformer import files
from tokformer.batch import TokenBatch
from tokformer.classifier import EncoderClassifier
from tokformer.config import MAX_LAYERS, BlockOptions, TransformerConfig
from tokformer.engine import (
    TOKENIZER_DIR,
    Dist,
    Predictor,
    Task,
    check_against_weights,
    help_text,
    load,
    planned_size,
    read_json_object,
    register_task,
    write_text_atomic,
)
from tokformer.errors import ConfigError, DataError
from tokformer.heads import ClassificationHead
from tokformer.interop.timm import (
    EvaSpec,
    ViTSpec,
    build_vit,
    from_timm,
    from_timm_state_dict,
    read_weights,
    spec_from_state_dict,
    spec_from_timm_model,
)
from tokformer.tasks import image_baselines, image_data
from tokformer.tasks.classes import CLASSES_FILE, ClassesTask
from tokformer.tokenizers.image import ImagePatchTokenizer, is_one_image
from tokformer.tokenizers.image_local import LocalPatchTokenizer
from tokformer.tokenizers.registry import load_tokenizer

# A model in timm's ViT layout (fine-tuned from a timm model: final norm, fc_norm, d_ff... that
# the config's options do not express) is rebuilt from this asset, never from the timm source.
VIT_SPEC_FILE = "vit_spec.json"



@dataclass
class ClassifyConfig(BlockOptions):
    data: str = field(default="shapes",
        metadata=help_text("shapes (built in), a class-folder dir, or cifar10, mnist, ...",
                           path=("shapes", *image_data.TORCHVISION_DATASETS)))
    data_root: str = field(default="data", metadata=help_text("where torchvision datasets live or are downloaded to",
                                                              path=()))
    download: bool = field(default=False, metadata=help_text("download a torchvision dataset (needs network)"))
    val_fraction: float = field(default=0.1, metadata=help_text("held-out share of a folder without train/ and val/"))
    train_size: int = field(default=8000, metadata=help_text("built-in shapes: training images"))
    eval_size: int = field(default=1000, metadata=help_text("built-in shapes: evaluation images"))
    data_seed: int = field(default=1234, metadata=help_text("seed of the built-in data and of folder splits"))
    image_size: int = field(default=32, metadata=help_text("training image side in pixels", architecture=True))
    patch_size: int = field(default=16, metadata=help_text("patch side in pixels", architecture=True))
    tokenizer: Literal["local", "linear"] = field(default="local", metadata=help_text(
        "patch embedding: local (a small CNN per patch, seeing that patch only) or linear (a plain ViT)",
        architecture=True))
    cnn_width: int = field(default=32,
        metadata=help_text("local tokenizer: channels of its first conv", architecture=True))
    cnn_depth: int = field(default=2, metadata=help_text("local tokenizer: conv stages", architecture=True))
    position: Literal["sincos", "learned", "rope"] = field(default="sincos", metadata=help_text(
        "2-D positions: sincos or learned codes added to patches, or rope (rotary, in attention)", architecture=True))
    rope_theta: float = field(default=100.0,
        metadata=help_text("rotary frequency base (position=rope)", architecture=True))
    pool: Literal["cls", "mean", "map"] = field(default="mean", metadata=help_text(
        "mean of patch tokens (learns fastest on small data), class token, or map (attention pooling)",
        architecture=True))
    n_registers: int = field(default=0,
        metadata=help_text("register tokens (scratch tokens dropped at the output)", architecture=True))
    d_model: int = field(default=64, metadata=help_text("token width", architecture=True))
    n_heads: int = field(default=4, metadata=help_text("attention heads", architecture=True))
    n_layers: int = field(default=4, metadata=help_text("encoder blocks", architecture=True))
    dropout: float = field(default=0.0, metadata=help_text("dropout in blocks and before the head"))
    label_smoothing: float = field(default=0.1, metadata=help_text("label smoothing of the cross-entropy"))
    crop_scale: float = field(default=1.0, metadata=help_text("random resized crop: smallest area kept (1 = no crop)"))
    flip: bool = field(default=False, metadata=help_text(
        "random horizontal flips (off by default: they break digits, text and other chiral classes)"))
    mixup: float = field(default=0.0, metadata=help_text("mixup alpha (0 = off)"))
    cutmix: float = field(default=0.0, metadata=help_text("cutmix alpha (0 = off)"))

    def __post_init__(self) -> None:
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if not 0.0 < self.crop_scale <= 1.0:
            raise ValueError(f"crop_scale must be in (0, 1], got {self.crop_scale}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.mixup < 0 or self.cutmix < 0:
            raise ValueError("mixup and cutmix alphas must be >= 0")
        for name in ("train_size", "eval_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        self.build_tokenizer()  # validate sizes now, not halfway into a run
        self.transformer()
        if self.position == "sincos" and self.d_model % 4:
            raise ValueError(f"2-D sin/cos positions need d_model divisible by 4, got {self.d_model}")

    def build_tokenizer(self) -> ImagePatchTokenizer:
        options = dict(position="none" if self.position == "rope" else self.position, class_token=self.pool == "cls")
        if self.tokenizer == "local":
            return LocalPatchTokenizer(self.patch_size, self.image_size, cnn_width=self.cnn_width,
                                       cnn_depth=self.cnn_depth, **options)
        return ImagePatchTokenizer(self.patch_size, self.image_size, **options)

    def transformer(self) -> TransformerConfig:
        return TransformerConfig(
            d_model=self.d_model, n_heads=self.n_heads, n_layers=self.n_layers, dropout=self.dropout,
            activation="gelu", norm_eps=1e-6, rope="2d" if self.position == "rope" else "none",
            rope_theta=self.rope_theta, n_registers=self.n_registers, **self.block_options(),
        )


@register_task("classify")
class ClassifyTask(ClassesTask):
    """Image classification with a ViT (built-in shapes, an image folder, or a torchvision dataset)."""

    Config = ClassifyConfig
    run_files = (CLASSES_FILE, VIT_SPEC_FILE)

    def __init__(self, config: ClassifyConfig) -> None:
        super().__init__(config)
        self.tokenizer = config.build_tokenizer()
        self._eval_set: Dataset | None = None
        self._vit_spec: ViTSpec | EvaSpec | None = None  # the shape of a timm init_from model (its head: ours)

    # -- data --------------------------------------------------------------------------

    def _datasets(self) -> tuple[Dataset, Dataset]:
        c = self.config
        name = c.data.lower()
        if name == "shapes":
            train, evals = image_data.shapes_datasets(c.train_size, c.eval_size, c.image_size, c.data_seed)
        elif name in image_data.TORCHVISION_DATASETS:
            train, evals = image_data.torchvision_datasets(name, Path(c.data_root), c.download)
        elif Path(c.data).exists():
            train, evals = image_data.folder_datasets(Path(c.data), c.val_fraction, c.data_seed)
        else:
            known = ", ".join(["shapes", *image_data.TORCHVISION_DATASETS])
            raise DataError(f"data {files.where(c.data)} is neither a folder nor a known dataset ({known})")
        self.classes = image_data.dataset_classes(train)
        return train, evals

    def train_dataset(self) -> Dataset:
        train, self._eval_set = self._datasets()
        c = self.config
        return image_data.Augmented(train, image_data.train_transform(c.image_size, c.crop_scale, c.flip))

    def eval_dataset(self) -> Dataset:
        if self._eval_set is None:
            _, self._eval_set = self._datasets()
        return image_data.Augmented(self._eval_set, self._eval_transform())

    @property
    def user_data(self) -> bool:
        return self.config.data.lower() != "shapes"

    def eval_data(self, data: str, workdir: Path, dist: Dist) -> Dataset:
        """Every image of the folder ``data`` (``CLASS/image.png``; its classes must be the run's)."""
        samples, _ = image_data.scan_folder(Path(data), self.classes)
        if not samples:
            raise DataError(f"{data} holds no images of the classes {', '.join(self.classes[:5])}...")
        return image_data.Augmented(image_data.ImageFiles(samples, self.classes), self._eval_transform())

    def _eval_transform(self) -> Any:
        """Each image resized to the tokenizer's size as it is read (it would be, batched: in full first)."""
        tokenizer = self.tokenizer
        return image_data.eval_transform(tokenizer.image_size if tokenizer.resize else None, tokenizer.interpolation)

    def baselines(self, eval_set: Dataset) -> dict[str, dict[str, float]]:
        """The majority class and a logistic regression on raw pixels, both of the training split
        (see :mod:`.image_baselines`)."""
        train, _ = self._datasets()
        n = len(self.classes)
        return {image_baselines.MAJORITY: image_baselines.majority(image_data.dataset_labels(train),
                                                                   image_data.dataset_labels(eval_set), n),
                image_baselines.LINEAR: image_baselines.logistic_regression(train, eval_set, n)}

    def collate(self, samples: list[tuple[Any, int]], train: bool) -> dict[str, Any]:
        """``(image, label)`` items -> tokens, labels, targets.

        ``targets`` are the labels, or ``[B, C]`` soft targets when mixup/cutmix mixed a training batch.
        """
        labels = torch.tensor([s[1] for s in samples], dtype=torch.long)  # [B]
        images: Any = [s[0] for s in samples]
        targets: Tensor = labels
        if train and (self.config.mixup > 0 or self.config.cutmix > 0):
            images, targets = self._mix(torch.stack(images), labels)
        return {"tokens": self.tokenizer.batch(images), "labels": labels, "targets": targets}

    def _mix(self, images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """Mixup or cutmix (one, at random, if both are on) of a ``[B, 3, H, W]`` uint8 batch.

        Returns float images in [0, 1] and soft targets ``[B, C]`` with label smoothing applied.
        """
        from torchvision.transforms import v2

        c, n = self.config, len(self.classes)
        choices = [mix(alpha=alpha, num_classes=n) for mix, alpha in ((v2.MixUp, c.mixup), (v2.CutMix, c.cutmix))
                   if alpha > 0]
        images = v2.functional.to_dtype(images, torch.float32, scale=True)
        images, soft = v2.RandomChoice(choices)(images, labels)
        return images, soft * (1 - c.label_smoothing) + c.label_smoothing / n

    # -- model and loss ----------------------------------------------------------------

    def build_model(self) -> EncoderClassifier:
        if not self.classes:
            raise ConfigError("the classify task needs its classes: build datasets or load assets first")
        c = self.config
        if self._vit_spec is not None:  # timm's block layout (final norm, fc_norm, d_ff...): build_vit knows it
            model = build_vit(dataclasses.replace(self._vit_spec, n_classes=len(self.classes)))[1]
        else:
            head = ClassificationHead(
                c.d_model, len(self.classes), pool=c.pool, n_prefix=int(c.pool == "cls"), dropout=c.dropout,
                pool_heads=c.n_heads,
            )
            model = EncoderClassifier(self.tokenizer.build_embedder(c.d_model), c.transformer(), head)
        return model

    # -- fine-tuning (init_from) -------------------------------------------------------

    def adopt(self, source: Task) -> dict[str, Any]:
        """Fine-tuning from a classify model: its architecture options and the tokenizer kind its saved
        tokenizer has (a run made before the ``tokenizer`` option has a linear one); its timm layout,
        if any, came with its assets; its head is retrained if our class count differs."""
        local = isinstance(self.tokenizer, LocalPatchTokenizer)  # the source's, loaded with its assets
        return {**super().adopt(source), "tokenizer": "local" if local else "linear"}

    def adopt_foreign(self, path: Path, config: dict[str, Any]) -> dict[str, Tensor]:
        """A timm ViT file or hub folder (``config``: its ``config.json``) -> spec, tokenizer (with the
        model's own normalisation), and its weights under our names.

        A hub folder whose ``architecture`` timm knows is built by timm itself (no download) and
        converted by :func:`from_timm`, so every family it converts comes in, RoPE ViTs (``Eva``)
        included; a lone weights file carries no architecture, so its shapes are read from the
        tensors, which only the classic ViT family allows."""
        state = read_weights(path if path.is_file() else _timm_weights_file(path))
        pretrained = config.get("pretrained_cfg") or {}
        norm = {key: pretrained[key] for key in ("mean", "std") if key in pretrained}
        timm_model = _timm_model(path, config, state)
        if timm_model is not None:
            self._vit_spec = spec_from_timm_model(timm_model)
            self.tokenizer, model = from_timm(timm_model, **norm)
            return model.state_dict()
        overrides: dict[str, Any] = {}
        if "input_size" in pretrained:
            overrides["image_size"] = tuple(pretrained["input_size"][1:])
        if config.get("global_pool") in ("token", "avg"):
            overrides["pool"] = {"token": "cls", "avg": "mean"}[config["global_pool"]]
        if "num_heads" in (config.get("model_args") or {}):
            overrides["n_heads"] = config["model_args"]["num_heads"]
        if "head.weight" not in state:  # a headless (feature) checkpoint: the head is ours anyway
            overrides["n_classes"] = 1
        spec = spec_from_state_dict(state, **overrides)
        with torch.device("meta"):  # only the tokenizer is wanted now: skip allocating and initialising weights
            self.tokenizer = build_vit(spec, **norm)[0]
        self._vit_spec = spec
        return from_timm_state_dict(state, spec)

    # -- assets and inference ----------------------------------------------------------

    def save_assets(self, run_dir: Path) -> None:
        self.tokenizer.save(run_dir / TOKENIZER_DIR)
        self.save_classes(run_dir)
        if self._vit_spec is not None:
            family = "eva" if isinstance(self._vit_spec, EvaSpec) else "vit"
            spec = {"family": family, **dataclasses.asdict(self._vit_spec)}  # tuples become JSON lists
            write_text_atomic(run_dir / VIT_SPEC_FILE, json.dumps(spec, indent=1) + "\n")

    def load_assets(self, run_dir: Path) -> None:
        tokenizer = load_tokenizer(run_dir / TOKENIZER_DIR)
        if not isinstance(tokenizer, ImagePatchTokenizer):
            raise DataError(f"{run_dir / TOKENIZER_DIR} is not an image tokenizer")
        self.tokenizer = tokenizer
        self.load_classes(run_dir)
        self._vit_spec = _read_vit_spec(run_dir / VIT_SPEC_FILE) if (run_dir / VIT_SPEC_FILE).is_file() else None

    def predict(self, model: nn.Module, inputs: Sequence[Any], top_k: int = 5) -> list[list[tuple[str, float]]]:
        """Top ``top_k`` (class, probability) pairs per image (PIL images, tensors or file paths)."""
        return self.ranked(model, self.tokenizer.batch(list(inputs)), top_k)

    def is_one_input(self, value: Any) -> bool:
        return super().is_one_input(value) or is_one_image(value)

    def export_example(self) -> tuple[TokenBatch]:
        """``model(*args)`` arguments to trace for export: two random images of the training size,
        tokenized as ``predict`` does (2 samples, so the traced batch dimension stays dynamic).
        A learned position table traces at its training grid only (see ``PatchEmbedder``)."""
        images = torch.rand(2, self.tokenizer.channels, *self.tokenizer.image_size,
                            generator=torch.Generator().manual_seed(0))  # [2, C, H, W] in [0, 1]
        return (self.tokenizer.batch(images),)


def predict(source: str | os.PathLike | Predictor, images: Sequence[Any], *, top_k: int = 5,
            checkpoint: str = "best", device: str = "cpu") -> list[list[tuple[str, float]]] | list[tuple[str, float]]:
    """Top ``top_k`` (class, probability) per image: the Python form of ``tokformer predict``.
    ``images`` are paths, PIL images or ``[C, H, W]`` tensors, or a ``[B, C, H, W]`` batch; a single
    image (a path, a PIL image, a ``[C, H, W]`` tensor) gives its pairs alone, not a list of them.

    ``source`` is a classify run directory (weights of ``checkpoint``), a model folder, or the
    :class:`~tokformer.engine.Predictor` of ``tokformer.load(path)``: load once and
    pass that when predicting many times, since loading a path rebuilds the model.
    """
    predictor = source if isinstance(source, Predictor) else load(source, checkpoint, device)
    if not isinstance(predictor.task, ClassifyTask):
        raise ConfigError(f"{source if not isinstance(source, Predictor) else 'the model'} is not a classify model")
    return predictor(images, top_k=top_k)


def _read_vit_spec(file: Path) -> ViTSpec | EvaSpec:
    """The timm-layout architecture a run or model folder was built with (:data:`VIT_SPEC_FILE`)."""
    record = read_json_object(file)
    family = record.pop("family", "vit")  # records made before RoPE ViTs came in have none: classic
    spec_cls = {"vit": ViTSpec, "eva": EvaSpec}.get(family)
    try:
        if spec_cls is None:
            raise ValueError(f"unknown family {family!r}")
        return spec_cls(**{key: tuple(value) if isinstance(value, list) else value for key, value in record.items()})
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"{file}: not a ViT architecture record ({err})") from None


def _timm_model(path: Path, config: dict[str, Any], state: dict[str, Tensor]) -> nn.Module | None:
    """The timm model a hub folder's ``config.json`` names, built by timm offline (random weights, then
    ``state``); None for a lone file or an architecture name timm does not know."""
    import timm

    name = config.get("architecture")
    if not isinstance(name, str) or not timm.is_model(name):
        return None
    headless = "head.weight" not in state  # a feature checkpoint: our head is trained anyway
    build = partial(timm.create_model, name, pretrained=False,
                    num_classes=1 if headless else state["head.weight"].shape[0], **_model_args(path, config))
    try:
        # sized on the meta device first: a few bytes of model_args (img_size 100000, depth 100000) ask for
        # tens of GB, which the weights beside them cannot hold
        weights = path if path.is_file() else _timm_weights_file(path)
        check_against_weights(planned_size(build), [weights], f"init_from {path}: config.json")
        model = build()
        missing, unexpected = model.load_state_dict(state, strict=False)
    except (RuntimeError, TypeError, ValueError) as err:
        raise ConfigError(f"init_from {path}: its weights do not fit timm's {name} "
                          f"({str(err).splitlines()[0]})") from None
    if unexpected or set(missing) - ({"head.weight", "head.bias"} if headless else set()):
        raise ConfigError(f"init_from {path}: its weights do not fit timm's {name} (missing {sorted(missing)[:3]}, "
                          f"unexpected {sorted(unexpected)[:3]})")
    return model.eval()


def _model_args(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """A hub folder's ``model_args``: architecture options, passed to ``timm.create_model``. Never its own
    options (``checkpoint_path``, ``pretrained_cfg``, ``cache_dir``, ...): those name files to read or a
    download, and a file in a folder never names what else on the machine is read (timm read
    ``checkpoint_path: /etc/passwd``)."""
    import timm

    args = config.get("model_args") or {}
    if not isinstance(args, dict):
        raise ConfigError(f"init_from {path}: config.json's model_args must be an object, got {files.shown(args)}")
    own = set(inspect.signature(timm.create_model).parameters) - {"model_name", "kwargs"}
    if own & set(args):
        raise ConfigError(f"init_from {path}: config.json's model_args.{sorted(own & set(args))[0]} is not an "
                          f"architecture option but one of timm.create_model's own ({', '.join(sorted(own))}); "
                          "remove it")
    # even on the meta device each block is Python objects: depth 100000 took gigabytes before any check
    if not isinstance(args.get("depth", 0), int) or args.get("depth", 0) > MAX_LAYERS:
        raise ConfigError(f"init_from {path}: config.json's model_args.depth must be a number of blocks up to "
                          f"{MAX_LAYERS}, got {files.shown(args['depth'])}")
    return args


def _timm_weights_file(folder: Path) -> Path:
    """The weights of a timm hub folder: safetensors preferred, else the pickle read with weights_only."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return folder / name
    raise ConfigError(f"timm folder {folder} has neither model.safetensors nor pytorch_model.bin")
