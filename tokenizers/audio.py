"""Sound pieces are tokens: a clip becomes log-mel frames or time-frequency patches, each with its place.

Every audio tokenizer does the same first three steps (:class:`AudioTokenizer`): read the clip (a file,
or a waveform with or without its rate), resample it to the tokenizer's rate, crop it to ``max_seconds``,
and compute its log-mel spectrogram ``[n_mels, F]`` (:mod:`.audio_features`). Then a subclass cuts the
spectrogram into tokens:

* ``audio_frames`` (:class:`AudioFrameTokenizer`, the Keyword Transformer's tokens): one token per
  ``frame_hops`` consecutive frames, all mel bins of them, at a 1-D position (its index in time);
* ``audio_patches`` (:class:`AudioPatchTokenizer`, the Audio Spectrogram Transformer's): non-overlapping
  ``patch_mels x patch_frames`` patches at 2-D positions (mel row, time column).

Each clip is featurised on its own (Whisper's floor is per clip) and its last, partial token padded with
the clip's own floor, so a clip's tokens never depend on the clips batched with it; the batch pads clips
to the longest with masked slots. Write your own audio tokenizer by subclassing :class:`AudioTokenizer`
and overriding :meth:`~AudioTokenizer.cut` and :meth:`~AudioTokenizer.build_embedder` (docs/audio.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.positional import LearnedPositions, SinCos2DPositions, SinusoidalPositions
from tokformer.tokenizers.audio_features import LogMelSettings, log_mel, resample
from tokformer.tokenizers.audio_io import MAX_AMPLITUDE, read_audio
from tokformer.tokenizers.base import Tokenizer, TokenizerError, pad_features
from tokformer.tokenizers.registry import register_tokenizer

AudioPosition = Literal["sincos", "learned", "none"]
#: A clip is a file path, a ``(waveform, sample_rate)`` pair, or a 1-D waveform at the tokenizer's rate.
Clip = Any
MAX_SECONDS_LIMIT = 3600.0


def is_one_clip(value: Any) -> bool:
    """One clip rather than a sequence of them: a path, a 1-D array, or a ``(waveform, rate)`` pair."""
    if isinstance(value, str | Path):
        return True
    if isinstance(value, Tensor | np.ndarray):
        return value.ndim == 1
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int)
            and isinstance(value[0], Tensor | np.ndarray))


class AudioEmbedder(nn.Module):
    """Audio TokenBatch -> ``[B, N, d]``: a linear projection of each token's features plus its position.

    ``grid`` says what the positions are: ``None`` for 1-D indices ``[B, N]`` (frames), ``(rows, cols)``
    for 2-D cells ``[B, N, 2]`` (patches: ``rows`` mel rows, up to ``cols`` time columns). ``sincos`` codes
    are fixed and take any length; ``learned`` tables (one per axis for patches, summed) are drawn at
    ``position_std`` and hold ``max_positions`` time steps."""

    def __init__(self, in_features: int, d_model: int, *, position: AudioPosition, max_positions: int,
                 rows: int | None = None, position_std: float = 0.02, dropout: float = 0.0) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, d_model)
        self.drop = nn.Dropout(dropout)
        self.two_d = rows is not None
        self.position: nn.Module | None = None
        self.row_table: LearnedPositions | None = None
        if position == "sincos":
            self.position = SinCos2DPositions(d_model) if self.two_d else SinusoidalPositions(d_model)
        elif position == "learned":
            self.position = LearnedPositions(d_model, max_positions, std=position_std)
            if self.two_d:
                self.row_table = LearnedPositions(d_model, rows, std=position_std)

    def forward(self, batch: TokenBatch) -> Tensor:  # -> [B, N, d]
        x = self.proj(batch.features)
        if self.position is not None:
            positions = batch.positions
            if isinstance(self.position, LearnedPositions) and self.two_d:
                cells = positions.long()  # [B, N, 2]
                code = self.position(cells[..., 1]) + self.row_table(cells[..., 0])
            elif isinstance(self.position, LearnedPositions):
                code = self.position(positions.long())
            else:
                code = self.position(positions)
            x = x + code.to(x.dtype)
        return self.drop(x)


class AudioTokenizer(Tokenizer):
    """The steps every audio tokenizer shares: read, resample, crop, log-mel. Subclasses cut tokens.

    Args:
        sample_rate: the rate every clip is resampled to, in Hz.
        features: ``whisper`` (Hugging Face's ``WhisperFeatureExtractor``, bit for bit) or ``log``
            (natural log of a Slaney mel power spectrum, librosa's).
        n_mels: mel bins (Whisper: 80, or 128 for large-v3).
        n_fft, hop_length: STFT window and hop in samples.
        f_max: top of the mel bank in Hz (Whisper's: 8000).
        max_seconds: clips are cut to this length (their first ``max_seconds``).
        position: ``sincos`` (fixed), ``learned`` (tables drawn at ``position_std``) or ``none``.
    """

    def __init__(self, *, sample_rate: int = 16000, features: str = "whisper", n_mels: int = 80, n_fft: int = 400,
                 hop_length: int = 160, f_max: float | None = 8000.0, max_seconds: float = 1.0,
                 position: str = "sincos", position_std: float = 0.02) -> None:
        try:
            self.settings = LogMelSettings(kind=features, sample_rate=sample_rate, n_fft=n_fft,  # type: ignore[arg-type]
                                           hop_length=hop_length, n_mels=n_mels, f_max=f_max)
        except ValueError as err:
            raise TokenizerError(f"audio tokenizer: {err}") from None
        if not (isinstance(max_seconds, int | float) and 0 < max_seconds <= MAX_SECONDS_LIMIT):
            raise TokenizerError(f"audio tokenizer: max_seconds must be in (0, {MAX_SECONDS_LIMIT:g}], "
                                 f"got {max_seconds!r}")
        if position not in ("sincos", "learned", "none"):
            raise TokenizerError(f"audio tokenizer: position must be sincos, learned or none, got {position!r}")
        if not (isinstance(position_std, int | float) and 0 < position_std <= 10):
            raise TokenizerError(f"audio tokenizer: position_std must be in (0, 10], got {position_std!r}")
        self.max_seconds = float(max_seconds)
        self.position = position
        self.position_std = float(position_std)

    # -- the shared steps -------------------------------------------------------------------

    @property
    def sample_rate(self) -> int:
        return self.settings.sample_rate

    @property
    def max_samples(self) -> int:
        return max(1, round(self.max_seconds * self.sample_rate))

    @property
    def max_frames(self) -> int:
        return self.settings.frames(self.max_samples)

    def waveform(self, clip: Clip) -> Tensor:
        """One clip as a ``[T]`` float32 waveform at :attr:`sample_rate`, cut to ``max_seconds``."""
        if isinstance(clip, str | Path):
            sound = read_audio(clip, max_seconds=self.max_seconds)  # only what is kept is decoded
            samples, rate = torch.from_numpy(sound.samples), sound.rate
        elif isinstance(clip, tuple):
            samples, rate = torch.as_tensor(clip[0], dtype=torch.float32), int(clip[1])
        else:
            samples, rate = torch.as_tensor(clip, dtype=torch.float32), self.sample_rate
        if samples.dim() != 1 or samples.numel() == 0:
            raise TokenizerError(f"an audio clip must be a non-empty 1-D waveform, got shape {tuple(samples.shape)}")
        if not bool(torch.isfinite(samples).all()):
            raise TokenizerError("an audio clip holds NaN or infinite samples")
        if float(samples.abs().max()) > MAX_AMPLITUDE:
            raise TokenizerError(f"an audio clip has a sample of magnitude {float(samples.abs().max()):.3g}: "
                                 "waveforms are floats in [-1, 1]")
        samples = resample(samples.float(), rate, self.sample_rate)[: self.max_samples]
        short = self.settings.hop_length - len(samples)
        return torch.nn.functional.pad(samples, (0, short)) if short > 0 else samples  # one frame at least

    def features(self, waveform: Tensor) -> Tensor:
        """``[T]`` waveform -> ``[n_mels, F]`` log-mel (:func:`~.audio_features.log_mel`)."""
        return log_mel(waveform, self.settings)

    def batch(self, samples: Sequence[Clip]) -> TokenBatch:
        """Clips -> one padded TokenBatch."""
        return self.tokens([self.features(self.waveform(clip)) for clip in samples])

    def tokens(self, spectrograms: Sequence[Tensor]) -> TokenBatch:
        """Per-clip ``[n_mels, F]`` spectrograms (augmented or not) -> one padded TokenBatch."""
        if not spectrograms:
            raise TokenizerError("cannot make a batch of zero clips")
        cut = [self.cut(s) for s in spectrograms]
        features = [c[0] for c in cut]
        positions = [c[1].reshape(len(c[1]), -1).float() for c in cut]  # [n, P]
        batch = pad_features(features, positions)
        if positions[0].shape[1] == 1:  # 1-D: integer indices [B, N]
            batch.positions = batch.positions[..., 0].long()
        return batch

    def cut(self, spectrogram: Tensor) -> tuple[Tensor, Tensor]:
        """``[n_mels, F]`` -> tokens ``[n, token_features]`` and their positions (``[n]`` or ``[n, 2]``)."""
        raise NotImplementedError

    def _pad_time(self, spectrogram: Tensor, multiple: int) -> Tensor:
        """``spectrogram`` padded along time to a multiple of ``multiple`` frames with its own floor."""
        extra = -spectrogram.shape[1] % multiple
        if extra == 0:
            return spectrogram
        floor = spectrogram.amin().expand(spectrogram.shape[0], extra)
        return torch.cat((spectrogram, floor), dim=1)

    def get_config(self) -> dict[str, Any]:
        s = self.settings
        return {"sample_rate": s.sample_rate, "features": s.kind, "n_mels": s.n_mels, "n_fft": s.n_fft,
                "hop_length": s.hop_length, "f_max": s.f_max, "max_seconds": self.max_seconds,
                "position": self.position, "position_std": self.position_std}


@register_tokenizer("audio_frames")
class AudioFrameTokenizer(AudioTokenizer):
    """One token per ``frame_hops`` log-mel frames (``n_mels * frame_hops`` features), 1-D positions."""

    def __init__(self, *, frame_hops: int = 1, **options: Any) -> None:
        super().__init__(**options)
        if not (isinstance(frame_hops, int) and 1 <= frame_hops <= 1000):
            raise TokenizerError(f"audio tokenizer: frame_hops must be an integer in 1..1000, got {frame_hops!r}")
        self.frame_hops = frame_hops

    @property
    def token_features(self) -> int:
        return self.settings.n_mels * self.frame_hops

    @property
    def max_tokens(self) -> int:
        return math.ceil(self.max_frames / self.frame_hops)

    def cut(self, spectrogram: Tensor) -> tuple[Tensor, Tensor]:
        padded = self._pad_time(spectrogram, self.frame_hops)  # [n_mels, F']
        tokens = padded.T.reshape(-1, self.token_features)  # [F' / k, k * n_mels]: k frames, time-major
        return tokens, torch.arange(len(tokens))

    def build_embedder(self, d_model: int, *, dropout: float = 0.0) -> AudioEmbedder:
        return AudioEmbedder(self.token_features, d_model, position=self.position,  # type: ignore[arg-type]
                             max_positions=self.max_tokens, position_std=self.position_std, dropout=dropout)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "frame_hops": self.frame_hops}


@register_tokenizer("audio_patches")
class AudioPatchTokenizer(AudioTokenizer):
    """Non-overlapping ``patch_mels x patch_frames`` time-frequency patches (AST), 2-D positions (mel row,
    time column). ``n_mels`` must be a multiple of ``patch_mels``."""

    def __init__(self, *, patch_mels: int = 16, patch_frames: int = 16, **options: Any) -> None:
        super().__init__(**options)
        for name, value in (("patch_mels", patch_mels), ("patch_frames", patch_frames)):
            if not (isinstance(value, int) and 1 <= value <= 1000):
                raise TokenizerError(f"audio tokenizer: {name} must be an integer in 1..1000, got {value!r}")
        if self.settings.n_mels % patch_mels:
            raise TokenizerError(f"audio tokenizer: n_mels {self.settings.n_mels} is not a multiple of "
                                 f"patch_mels {patch_mels}")
        self.patch_mels, self.patch_frames = patch_mels, patch_frames

    @property
    def token_features(self) -> int:
        return self.patch_mels * self.patch_frames

    @property
    def rows(self) -> int:
        return self.settings.n_mels // self.patch_mels

    @property
    def max_columns(self) -> int:
        return math.ceil(self.max_frames / self.patch_frames)

    def cut(self, spectrogram: Tensor) -> tuple[Tensor, Tensor]:
        padded = self._pad_time(spectrogram, self.patch_frames)  # [n_mels, F']
        rows, cols = self.rows, padded.shape[1] // self.patch_frames
        patches = padded.reshape(rows, self.patch_mels, cols, self.patch_frames).permute(0, 2, 1, 3)
        cells = torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"), dim=-1)
        return patches.reshape(rows * cols, self.token_features), cells.reshape(-1, 2)  # row-major cells

    def build_embedder(self, d_model: int, *, dropout: float = 0.0) -> AudioEmbedder:
        return AudioEmbedder(self.token_features, d_model, position=self.position,  # type: ignore[arg-type]
                             max_positions=self.max_columns, rows=self.rows, position_std=self.position_std,
                             dropout=dropout)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "patch_mels": self.patch_mels, "patch_frames": self.patch_frames}
