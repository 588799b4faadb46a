"""Sound datasets for the ``audio`` task: the built-in ``events`` clips, a folder of class folders of sound
files, and the training augmentations (time shift, noise, SpecAugment masks).

**The built-in data decide the class by order in time.** Every ``events`` clip holds the same three sound
events (a low harmonic hum, a rising chirp and a high hiss), one in each third of a second, and the class is
the order they come in (6 classes: ``hum-chirp-hiss``, ``hum-hiss-chirp``, ...). Pitch, sweep, loudness,
onsets and background noise are drawn at random and independently of the class. What a clip holds on
average is then the same for every class: a bag of features (a logistic regression on the clip's mean
log-mel, the ``baselines``) is near chance, and a model must tell *when* things happen.

Bad files (docs/audio.md): a file whose header cannot be read (not audio, truncated, empty, zero
channels, an absurd rate or length) is named in one warning and skipped when the folder is scanned, and the
skipped files are counted; one that breaks later, when decoded, is skipped for the next, as images are.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from tokformer.engine import check_data_fits
from tokformer.errors import DataError
from tokformer.tasks.image_data import MAX_SKIPPED_IN_A_ROW, folder_datasets, scan_folder
from tokformer.tokenizers.audio_io import AUDIO_EXTENSIONS, read_audio, write_wav

log = logging.getLogger(__name__)

EVENTS = ("hum", "chirp", "hiss")
EVENT_CLASSES = tuple("-".join(order) for order in itertools.permutations(EVENTS))
EVENTS_RATE = 16000
EVENTS_SECONDS = 1.0


# -- built-in events --------------------------------------------------------------------------


def _event(kind: str, n: int, rate: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of one event at unit peak, with a smooth attack and release."""
    t = np.arange(n) / rate
    if kind == "hum":  # a harmonic tone, 120-250 Hz, five harmonics falling off
        f0 = rng.uniform(120, 250)
        wave = sum(np.sin(2 * np.pi * f0 * h * t + rng.uniform(0, 2 * np.pi)) / h for h in range(1, 6))
    elif kind == "chirp":  # a sweep rising 2-3x from 700-1200 Hz
        start, ratio = rng.uniform(700, 1200), rng.uniform(2, 3)
        wave = np.sin(2 * np.pi * start * (ratio ** (t / t[-1]) - 1) * t[-1] / np.log(ratio))
    else:  # hiss: noise band-limited to 3-6 kHz
        spectrum = np.fft.rfft(rng.standard_normal(n))
        freqs = np.fft.rfftfreq(n, 1 / rate)
        spectrum[(freqs < 3000) | (freqs > 6000)] = 0
        wave = np.fft.irfft(spectrum, n)
    envelope = np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.02)  # 20 ms ramps
    wave = wave * envelope
    return wave / max(np.abs(wave).max(), 1e-9)


def make_events(n: int, seed: int = 0, rate: int = EVENTS_RATE) -> tuple[list[np.ndarray], list[int]]:
    """``n`` one-second clips (float32 at ``rate``) and their class indices into :data:`EVENT_CLASSES`; same
    arguments, same data (see the module doc for the design)."""
    rng = np.random.default_rng(seed)
    orders = list(itertools.permutations(range(len(EVENTS))))
    length = round(EVENTS_SECONDS * rate)
    clips, labels = [], []
    for _ in range(n):
        label = int(rng.integers(len(orders)))
        clip = rng.normal(0, rng.uniform(0.002, 0.02), length)
        for slot, event in enumerate(orders[label]):
            duration = round(rng.uniform(0.18, 0.24) * rate)
            onset = round((0.03 + 0.32 * slot + rng.uniform(0, 0.05)) * rate)  # ends by 0.96 s
            clip[onset: onset + duration] += rng.uniform(0.2, 0.6) * _event(EVENTS[event], duration, rate, rng)
        clips.append(clip.astype(np.float32))
        labels.append(label)
    return clips, labels


class AudioClips(Dataset):
    """Clips held in memory: items ``((waveform [T], rate), label)``."""

    def __init__(self, clips: list[np.ndarray], labels: list[int], rate: int, classes: list[str]) -> None:
        self.clips, self.labels, self.rate, self.classes = clips, labels, rate, classes

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[tuple[Tensor, int], int]:
        return (torch.from_numpy(self.clips[i]), self.rate), self.labels[i]


def events_datasets(train_size: int, eval_size: int, seed: int) -> tuple[AudioClips, AudioClips]:
    """Train and eval sets of the built-in events, from disjoint seeds; refused in one line when they cannot
    fit in memory (each clip is ``EVENTS_RATE`` float32 samples, and drawing one takes about 10 times that)."""
    length = round(EVENTS_SECONDS * EVENTS_RATE)
    check_data_fits((train_size + eval_size) * 4 * length + 80 * length,
                    f"train_size + eval_size = {train_size + eval_size:,} built-in one-second clips")
    classes = list(EVENT_CLASSES)
    return (AudioClips(*make_events(train_size, seed), EVENTS_RATE, classes),
            AudioClips(*make_events(eval_size, seed + 1), EVENTS_RATE, classes))


def save_class_folders(clips: list[np.ndarray], labels: list[Any], rate: int, root: Path) -> Path:
    """Clips as 16-bit WAV files ``root/<label>/<i>.wav``: the layout ``tokformer train audio --data ROOT``
    reads. Returns ``root``."""
    for i, (clip, label) in enumerate(zip(clips, labels, strict=True)):
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        write_wav(folder / f"{i}.wav", clip, rate)
    return root


# -- folders ----------------------------------------------------------------------------------


class AudioFiles(Dataset):
    """``(path, label)`` pairs, decoded lazily (their first ``max_seconds``): items ``((waveform, rate), label)``.

    A file that fails to decode is skipped with a warning naming it, for the next one, as
    :class:`~tokformer.tasks.image_data.ImageFiles` does; more than ``MAX_SKIPPED_IN_A_ROW`` in a row is a
    DataError."""

    def __init__(self, samples: list[tuple[Path, int]], classes: list[str], max_seconds: float = 60.0) -> None:
        self.samples, self.classes, self.max_seconds = samples, classes, max_seconds

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[tuple[Tensor, int], int]:
        tries = min(MAX_SKIPPED_IN_A_ROW + 1, len(self.samples))
        for offset in range(tries):
            path, label = self.samples[(i + offset) % len(self.samples)]
            try:
                sound = read_audio(path, max_seconds=self.max_seconds)
            except DataError as err:
                log.warning("skipping a sound file that cannot be decoded, for the next one: %s", err)
                continue
            return (torch.from_numpy(sound.samples), sound.rate), label
        raise DataError(f"{tries} sound files in a row, from {self.samples[i][0]} on, cannot be decoded")


@dataclass
class Skipped:
    """Counts the files a scan turned away (each is named in its own warning)."""

    count: int = 0

    def readable(self, path: Path) -> bool:
        """Whether ``path``'s header reads as audio we decode (one frame is decoded: cheap)."""
        try:
            read_audio(path, max_frames=1)
            return True
        except DataError as err:
            log.warning("skipping unreadable sound file: %s", err)
            self.count += 1
            return False


def audio_folder_datasets(root: Path, val_fraction: float, seed: int,
                          max_seconds: float) -> tuple[AudioFiles, AudioFiles]:
    """``root/train`` + ``root/val`` (or ``test``), else ``root``'s class folders with a seeded share held out."""
    skipped = Skipped()
    train, evals = folder_datasets(root, val_fraction, seed,
                                   files_dataset=lambda samples, classes: AudioFiles(samples, classes, max_seconds),
                                   extensions=AUDIO_EXTENSIONS, readable=skipped.readable, what="audio")
    if skipped.count:
        log.warning("skipped %d unreadable sound file%s under %s", skipped.count, "s" * (skipped.count > 1), root)
    return train, evals


def audio_folder_files(root: Path, classes: list[str], max_seconds: float) -> AudioFiles:
    """Every readable sound file of ``root/CLASS/...`` for the run's ``classes`` (an evaluation folder)."""
    skipped = Skipped()
    samples, _ = scan_folder(root, classes, extensions=AUDIO_EXTENSIONS, readable=skipped.readable, what="audio")
    if not samples:
        raise DataError(f"{root} holds no readable sound files of the classes {', '.join(classes[:5])}...")
    return AudioFiles(samples, classes, max_seconds)


def dataset_labels(dataset: Dataset) -> list[int]:
    """Every label, without decoding a clip."""
    if isinstance(dataset, AudioClips):
        return list(dataset.labels)
    if isinstance(dataset, AudioFiles):
        return [label for _, label in dataset.samples]
    return [int(dataset[i][1]) for i in range(len(dataset))]


# -- augmentation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Augmentation:
    """Training-time perturbations (all off at zero), drawn from torch's global generator (the engine seeds it,
    so a resumed run draws the same):

    * ``shift``: the clip moves by up to this many seconds either way (zeros fill in);
    * ``gain``: the clip is made louder or quieter by up to this many decibels (a microphone's distance);
    * ``noise``: white noise up to this fraction of the clip's RMS;
    * SpecAugment: ``freq_masks`` bands of up to ``freq_mask_width`` mel bins and ``time_masks`` spans of up
      to ``time_mask_width`` frames set to the spectrogram's mean.
    """

    shift: float = 0.0
    noise: float = 0.0
    gain: float = 0.0
    freq_masks: int = 0
    freq_mask_width: int = 0
    time_masks: int = 0
    time_mask_width: int = 0

    def waveform(self, wave: Tensor, rate: int) -> Tensor:
        if self.shift > 0:
            most = int(self.shift * rate)
            k = int(torch.randint(-most, most + 1, ()))
            if k > 0:
                wave = torch.cat((wave.new_zeros(k), wave[:-k] if k < len(wave) else wave[:0]))[: len(wave)]
            elif k < 0:
                wave = torch.cat((wave[-k:], wave.new_zeros(min(-k, len(wave)))))[: len(wave)]
        if self.noise > 0:
            rms = wave.square().mean().sqrt()
            wave = wave + torch.randn_like(wave) * rms * self.noise * float(torch.rand(()))
        if self.gain > 0:
            wave = wave * 10 ** (float(torch.empty(()).uniform_(-self.gain, self.gain)) / 20)
        return wave

    def spectrogram(self, spec: Tensor) -> Tensor:
        """``[n_mels, F]`` with SpecAugment's masks (a new tensor)."""
        spec = spec.clone()
        fill = spec.mean()
        for axis, count, width in ((0, self.freq_masks, self.freq_mask_width), (1, self.time_masks,
                                                                                 self.time_mask_width)):
            size = spec.shape[axis]
            for _ in range(count if width > 0 else 0):
                w = int(torch.randint(0, min(width, size) + 1, ()))
                start = int(torch.randint(0, size - w + 1, ()))
                spec.narrow(axis, start, w).fill_(fill)
        return spec
