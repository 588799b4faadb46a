"""Task ``audio``: sound classification with the shared encoder.

Audio tokenizer (log-mel frames or time-frequency patches) -> encoder -> mean-pooled
:class:`~tokformer.heads.ClassificationHead`. Data (``data``): ``events`` (built in, generated, offline: the
class is the order of three sound events, see :mod:`.audio_data`), or a folder ``DIR/CLASS/*.wav`` or
``DIR/train|val/CLASS/*.wav`` (FLAC, OGG... with soundfile). Loss: cross-entropy with label smoothing.
Metrics: top-1 ``accuracy`` and ``top5``; every evaluation pass writes ``plots/confusion.png``. Baselines: the
majority class and a logistic regression on each clip's mean log-mel. ``tokformer predict RUN clip.wav``
prints the top classes. Export: the model takes the tokenizer's TokenBatch, so the log-mel is computed
outside the exported graph, by the saved tokenizer (docs/audio.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset

from tokformer import files
from tokformer.batch import TokenBatch
from tokformer.classifier import EncoderClassifier
from tokformer.config import BlockOptions, TransformerConfig
from tokformer.engine import (
    TOKENIZER_DIR,
    Dist,
    Predictor,
    help_text,
    load,
    register_task,
)
from tokformer.errors import ConfigError, DataError
from tokformer.heads import ClassificationHead
from tokformer.tasks import audio_data, image_baselines
from tokformer.tasks.classes import CLASSES_FILE, ClassesTask
from tokformer.tokenizers.audio import AudioFrameTokenizer, AudioPatchTokenizer, AudioTokenizer, is_one_clip
from tokformer.tokenizers.base import TokenizerError
from tokformer.tokenizers.registry import load_tokenizer

MEAN_LOG_MEL = "logistic regression on each clip's mean log-mel (<= 2000 training clips, 100 L-BFGS iterations)"


@dataclass
class AudioConfig(BlockOptions):
    data: str = field(default="events", metadata=help_text(
        "events (built in: the class is the order of three sounds), or a folder DIR/CLASS/*.wav or "
        "DIR/train|val/CLASS/*.wav", path=("events",)))
    val_fraction: float = field(default=0.1, metadata=help_text("held-out share of a folder without train/ and val/"))
    train_size: int = field(default=3000, metadata=help_text("built-in events: training clips"))
    eval_size: int = field(default=600, metadata=help_text("built-in events: evaluation clips"))
    data_seed: int = field(default=1234, metadata=help_text("seed of the built-in data and of folder splits"))
    tokens: Literal["frames", "patches"] = field(default="frames", metadata=help_text(
        "frames (a token per frame_hops log-mel frames, 1-D positions) or patches (time-frequency patches, "
        "2-D positions)", architecture=True))
    sample_rate: int = field(default=16000, metadata=help_text("rate every clip is resampled to (Hz)",
                                                               architecture=True))
    features: Literal["whisper", "log"] = field(default="whisper", metadata=help_text(
        "log-mel recipe: whisper (Hugging Face's WhisperFeatureExtractor) or log (natural log of the mel power)",
        architecture=True))
    n_mels: int = field(default=80, metadata=help_text("mel bins", architecture=True))
    n_fft: int = field(default=400, metadata=help_text("STFT window in samples", architecture=True))
    hop_length: int = field(default=160, metadata=help_text("STFT hop in samples", architecture=True))
    f_max: float = field(default=8000.0, metadata=help_text("top of the mel bank (Hz)", architecture=True))
    max_seconds: float = field(default=1.0, metadata=help_text("clips are cut to their first max_seconds",
                                                               architecture=True))
    frame_hops: int = field(default=2, metadata=help_text("frames: log-mel frames per token", architecture=True))
    patch_mels: int = field(default=16, metadata=help_text("patches: mel bins per patch", architecture=True))
    patch_frames: int = field(default=8, metadata=help_text("patches: frames per patch", architecture=True))
    position: Literal["sincos", "learned"] = field(default="sincos", metadata=help_text(
        "positions: sincos (fixed) or learned tables", architecture=True))
    d_model: int = field(default=96, metadata=help_text("token width", architecture=True))
    n_heads: int = field(default=4, metadata=help_text("attention heads", architecture=True))
    n_layers: int = field(default=4, metadata=help_text("encoder blocks", architecture=True))
    dropout: float = field(default=0.1, metadata=help_text("dropout in blocks and before the head"))
    label_smoothing: float = field(default=0.1, metadata=help_text("label smoothing of the cross-entropy"))
    shift: float = field(default=0.1, metadata=help_text("augmentation: random time shift, up to this many seconds"))
    noise: float = field(default=0.1, metadata=help_text("augmentation: white noise up to this fraction of the RMS"))
    gain: float = field(default=6.0, metadata=help_text("augmentation: random loudness change, up to this many dB"))
    freq_masks: int = field(default=2, metadata=help_text("SpecAugment: frequency masks per clip"))
    freq_mask_width: int = field(default=8, metadata=help_text("SpecAugment: widest frequency mask (mel bins)"))
    time_masks: int = field(default=2, metadata=help_text("SpecAugment: time masks per clip"))
    time_mask_width: int = field(default=10, metadata=help_text("SpecAugment: widest time mask (frames)"))

    def __post_init__(self) -> None:
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        for name in ("train_size", "eval_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("shift", "noise", "gain", "freq_masks", "freq_mask_width", "time_masks", "time_mask_width"):
            if not 0 <= getattr(self, name) <= 1000:
                raise ValueError(f"{name} must be in [0, 1000], got {getattr(self, name)}")
        if self.position == "sincos" and self.d_model % (4 if self.tokens == "patches" else 2):
            raise ValueError(f"sin/cos positions need d_model divisible by {4 if self.tokens == 'patches' else 2}, "
                             f"got {self.d_model}")
        self.build_tokenizer()  # validate sizes now, not halfway into a run
        self.transformer()

    def build_tokenizer(self) -> AudioTokenizer:
        try:
            options = dict(sample_rate=self.sample_rate, features=self.features, n_mels=self.n_mels,
                           n_fft=self.n_fft, hop_length=self.hop_length, f_max=self.f_max,
                           max_seconds=self.max_seconds, position=self.position)
            if self.tokens == "frames":
                return AudioFrameTokenizer(frame_hops=self.frame_hops, **options)
            return AudioPatchTokenizer(patch_mels=self.patch_mels, patch_frames=self.patch_frames, **options)
        except TokenizerError as err:
            raise ValueError(str(err).removeprefix("audio tokenizer: ")) from None

    def transformer(self) -> TransformerConfig:
        return TransformerConfig(d_model=self.d_model, n_heads=self.n_heads, n_layers=self.n_layers,
                                 dropout=self.dropout, activation="gelu", norm_eps=1e-6, **self.block_options())

    def augmentation(self) -> audio_data.Augmentation:
        return audio_data.Augmentation(shift=self.shift, noise=self.noise, gain=self.gain,
                                       freq_masks=self.freq_masks, freq_mask_width=self.freq_mask_width,
                                       time_masks=self.time_masks, time_mask_width=self.time_mask_width)


@register_task("audio")
class AudioTask(ClassesTask):
    """Sound classification: built-in events (order decides the class) or a folder of class folders."""

    Config = AudioConfig
    run_files = (CLASSES_FILE,)
    train_defaults: ClassVar[dict[str, Any]] = {"steps": 3000, "batch_size": 32, "lr": 1e-3, "warmup_steps": 100,
                                                "weight_decay": 0.05, "eval_every": 500}

    def __init__(self, config: AudioConfig) -> None:
        super().__init__(config)
        self.tokenizer = config.build_tokenizer()
        self._sets: tuple[Dataset, Dataset] | None = None

    # -- data --------------------------------------------------------------------------

    def _datasets(self) -> tuple[Dataset, Dataset]:
        if self._sets is None:
            c = self.config
            if c.data.lower() == "events":
                self._sets = audio_data.events_datasets(c.train_size, c.eval_size, c.data_seed)
            elif Path(c.data).exists():
                self._sets = audio_data.audio_folder_datasets(Path(c.data), c.val_fraction, c.data_seed,
                                                              self.tokenizer.max_seconds)
            else:
                raise DataError(f"data {files.where(c.data)} is neither a folder nor the built-in events")
            self.classes = list(self._sets[0].classes)
        return self._sets

    def train_dataset(self) -> Dataset:
        return self._datasets()[0]

    def eval_dataset(self) -> Dataset:
        return self._datasets()[1]

    @property
    def user_data(self) -> bool:
        return self.config.data.lower() != "events"

    def eval_data(self, data: str, workdir: Path, dist: Dist) -> Dataset:
        """Every sound file of the folder ``data`` (``CLASS/clip.wav``; its classes must be the run's)."""
        return audio_data.audio_folder_files(Path(data), self.classes, self.tokenizer.max_seconds)

    def baselines(self, eval_set: Dataset) -> dict[str, dict[str, float]]:
        """The majority class of the training split, and a logistic regression on each clip's mean log-mel
        (the bag of features that the built-in data are designed to defeat)."""
        train = self._datasets()[0]
        n = len(self.classes)
        picked = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))
        x, y = self._mean_features(train, sorted(picked[: image_baselines.MAX_TRAIN].tolist()))
        mean, std = image_baselines.standardiser(x)
        weight, bias = image_baselines.fit_softmax((x - mean) / std, y, n)
        ex, ey = self._mean_features(eval_set, range(len(eval_set)))
        return {image_baselines.MAJORITY: image_baselines.majority(audio_data.dataset_labels(train),
                                                                   audio_data.dataset_labels(eval_set), n),
                MEAN_LOG_MEL: image_baselines.top1_top5(((ex - mean) / std) @ weight + bias, ey)}

    def _mean_features(self, dataset: Dataset, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        """``[n, n_mels]`` float64 mean log-mel over time of each clip, and ``[n]`` labels."""
        rows, labels = [], []
        for i in indices:
            clip, label = dataset[i]
            rows.append(self.tokenizer.features(self.tokenizer.waveform(clip)).mean(dim=1).double())
            labels.append(int(label))
        return torch.stack(rows), torch.tensor(labels)

    def collate(self, samples: list[tuple[Any, int]], train: bool) -> dict[str, Any]:
        """``(clip, label)`` items -> tokens and labels; training batches are augmented (waveform, then
        spectrogram)."""
        labels = torch.tensor([s[1] for s in samples], dtype=torch.long)
        waves = [self.tokenizer.waveform(s[0]) for s in samples]
        if train:
            augment, rate = self.config.augmentation(), self.tokenizer.sample_rate
            spectrograms = [augment.spectrogram(self.tokenizer.features(augment.waveform(w, rate))) for w in waves]
        else:
            spectrograms = [self.tokenizer.features(w) for w in waves]
        return {"tokens": self.tokenizer.tokens(spectrograms), "labels": labels}

    # -- model and loss ----------------------------------------------------------------

    def build_model(self) -> EncoderClassifier:
        if not self.classes:
            raise ConfigError("the audio task needs its classes: build datasets or load assets first")
        c = self.config
        head = ClassificationHead(c.d_model, len(self.classes), pool="mean", dropout=c.dropout)
        return EncoderClassifier(self.tokenizer.build_embedder(c.d_model), c.transformer(), head)

    # -- assets and inference ----------------------------------------------------------

    def save_assets(self, run_dir: Path) -> None:
        self.tokenizer.save(run_dir / TOKENIZER_DIR)
        self.save_classes(run_dir)

    def load_assets(self, run_dir: Path) -> None:
        tokenizer = load_tokenizer(run_dir / TOKENIZER_DIR)
        if not isinstance(tokenizer, AudioTokenizer):
            raise DataError(f"{run_dir / TOKENIZER_DIR} is not an audio tokenizer")
        self.tokenizer = tokenizer
        self.load_classes(run_dir)

    def predict(self, model: nn.Module, inputs: Sequence[Any], top_k: int = 5) -> list[list[tuple[str, float]]]:
        """Top ``top_k`` (class, probability) pairs per clip (file paths, ``(waveform, rate)`` pairs, or
        waveforms at the tokenizer's rate)."""
        return self.ranked(model, self.tokenizer.batch(list(inputs)), top_k)

    def is_one_input(self, value: Any) -> bool:
        return super().is_one_input(value) or is_one_clip(value)

    def export_example(self) -> tuple[TokenBatch]:
        """Two random clips of ``max_seconds``, tokenized as ``predict`` does: the exported model reads
        tokens; the saved tokenizer computes them (docs/audio.md)."""
        noise = torch.randn(2, self.tokenizer.max_samples, generator=torch.Generator().manual_seed(0)) * 0.1
        return (self.tokenizer.batch(list(noise)),)


def predict(source: str | os.PathLike | Predictor, clips: Sequence[Any] | Any, *, top_k: int = 5,
            checkpoint: str = "best", device: str = "cpu") -> Any:
    """Top ``top_k`` (class, probability) per clip: the Python form of ``tokformer predict`` on an audio run.
    ``clips`` are paths, ``(waveform, rate)`` pairs or waveforms at the tokenizer's rate; one clip gives its
    pairs alone. ``source`` is an audio run or model folder, or the Predictor of ``tokformer.load(path)``."""
    predictor = source if isinstance(source, Predictor) else load(source, checkpoint, device)
    if not isinstance(predictor.task, AudioTask):
        raise ConfigError(f"{source if not isinstance(source, Predictor) else 'the model'} is not an audio model")
    return predictor(clips, top_k=top_k)
