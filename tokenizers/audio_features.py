"""Sound as numbers, in torch: resampling, mel filterbanks and log-mel spectrograms.

``torchaudio`` is not a dependency (it pins its own torch), so the three steps every audio model
starts with are written here over ``torch.stft`` and ``conv1d``. Two log-mel recipes:

* ``whisper``: the features of Hugging Face's ``WhisperFeatureExtractor`` (and of OpenAI's Whisper):
  a periodic Hann window, a reflect-padded centred STFT, the power spectrum through a Slaney mel bank
  from 0 to 8 kHz, ``log10`` clamped at ``1e-10``, the last frame dropped, values floored at 8 below
  the clip's maximum and mapped by ``(x + 4) / 4``. The tests hold it to the reference at 1e-4.
* ``log``: librosa's ``melspectrogram`` (zero-padded centred STFT, Slaney mel bank up to ``f_max``)
  and a natural log of the power plus ``1e-6``: the plain features of keyword spotters (KWT).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

FeatureKind = Literal["whisper", "log"]

#: The largest polyphase kernel (``new * (2 * width + orig)`` taps, after dividing both rates by their gcd)
#: that :func:`resample` builds; coprime rates past it (44101 -> 16000) are resampled through the FFT instead.
MAX_KERNEL_TAPS = 1 << 22
LOG_FLOOR = 1e-6  # the ``log`` recipe: log(power + floor), so silence is a finite number


def hz_to_mel(hz: Tensor) -> Tensor:
    """Slaney's mel scale (librosa's default, Whisper's): linear below 1 kHz, logarithmic above."""
    linear = 3.0 * hz / 200.0
    log = 15.0 + torch.log(hz.clamp(min=1e-10) / 1000.0) * (27.0 / math.log(6.4))
    return torch.where(hz >= 1000.0, log, linear)


def mel_to_hz(mel: Tensor) -> Tensor:
    """The inverse of :func:`hz_to_mel`."""
    linear = 200.0 * mel / 3.0
    log = 1000.0 * torch.exp((mel - 15.0) * (math.log(6.4) / 27.0))
    return torch.where(mel >= 15.0, log, linear)


def mel_filterbank(n_freqs: int, n_mels: int, sample_rate: int, f_min: float = 0.0,
                   f_max: float | None = None) -> Tensor:
    """``[n_freqs, n_mels]`` triangular filters, Slaney-normalised (equal area per filter), as
    ``transformers.audio_utils.mel_filter_bank(norm="slaney", mel_scale="slaney")`` and librosa build them:
    built in float64, returned float32. ``n_freqs`` is ``n_fft // 2 + 1``; ``f_max`` defaults to Nyquist."""
    f_max = sample_rate / 2 if f_max is None else f_max
    if not 0.0 <= f_min < f_max:
        raise ValueError(f"mel filterbank needs 0 <= f_min < f_max, got f_min={f_min}, f_max={f_max}")
    mels = torch.linspace(float(hz_to_mel(torch.tensor(f_min, dtype=torch.float64))),
                          float(hz_to_mel(torch.tensor(f_max, dtype=torch.float64))), n_mels + 2,
                          dtype=torch.float64)
    edges = mel_to_hz(mels)  # [n_mels + 2] Hz: each filter rises from edges[i] to edges[i+1], falls to edges[i+2]
    freqs = torch.linspace(0, sample_rate // 2, n_freqs, dtype=torch.float64)  # [n_freqs] (the references' grid)
    gaps = edges.diff()  # [n_mels + 1]
    slopes = edges[None, :] - freqs[:, None]  # [n_freqs, n_mels + 2]
    rising = -slopes[:, :-2] / gaps[:-1]
    falling = slopes[:, 2:] / gaps[1:]
    filters = torch.minimum(rising, falling).clamp(min=0)  # [n_freqs, n_mels]
    filters = filters * (2.0 / (edges[2:] - edges[:-2]))  # Slaney: each filter's area is the same
    return filters.float()


@dataclass(frozen=True)
class LogMelSettings:
    """One log-mel recipe: ``kind`` (see the module doc), STFT size and hop, mel bins and their range."""

    kind: FeatureKind = "whisper"
    sample_rate: int = 16000
    n_fft: int = 400
    hop_length: int = 160
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float | None = 8000.0

    def __post_init__(self) -> None:
        if self.kind not in ("whisper", "log"):
            raise ValueError(f"log-mel kind must be whisper or log, got {self.kind!r}")
        for name in ("sample_rate", "n_fft", "hop_length", "n_mels"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ValueError(f"log-mel {name} must be a positive integer, got {getattr(self, name)!r}")
        if self.n_fft > 1 << 16 or self.n_mels > 512:
            raise ValueError(f"log-mel n_fft {self.n_fft} (<= 65536) or n_mels {self.n_mels} (<= 512) is too large")
        if self.f_max is not None and self.f_max > self.sample_rate / 2:
            raise ValueError(f"log-mel f_max {self.f_max} Hz is above Nyquist ({self.sample_rate / 2} Hz)")

    def frames(self, n_samples: int) -> int:
        """Feature frames of a clip of ``n_samples``: Whisper drops the centred STFT's last one."""
        return n_samples // self.hop_length + (self.kind == "log")


_FILTERS: dict[tuple[int, int, int, float, float | None], Tensor] = {}


def filters_of(settings: LogMelSettings) -> Tensor:
    """The ``[n_fft // 2 + 1, n_mels]`` mel bank of ``settings``, built once per process."""
    key = (settings.n_fft, settings.n_mels, settings.sample_rate, settings.f_min, settings.f_max)
    if key not in _FILTERS:
        _FILTERS[key] = mel_filterbank(settings.n_fft // 2 + 1, settings.n_mels, settings.sample_rate,
                                       settings.f_min, settings.f_max)
    return _FILTERS[key]


def log_mel(waveform: Tensor, settings: LogMelSettings = LogMelSettings()) -> Tensor:
    """``[T]`` or ``[B, T]`` float waveform at ``settings.sample_rate`` -> ``[n_mels, F]`` or ``[B, n_mels, F]``.

    Whisper's floor (8 below the maximum) is taken per clip, so a clip's features never depend on the
    clips batched beside it. A clip shorter than half the STFT window is zero-padded to it first (a reflect
    pad needs that many samples); a clip of no samples is an error."""
    if waveform.shape[-1] == 0:
        raise ValueError("cannot compute features of a clip with no samples")
    single = waveform.dim() == 1
    x = waveform.float().reshape(-1, waveform.shape[-1])  # [B, T]
    half = settings.n_fft // 2
    if settings.kind == "whisper" and x.shape[-1] <= half:
        x = F.pad(x, (0, half + 1 - x.shape[-1]))  # reflect padding needs more samples than it adds
    n_frames = settings.frames(waveform.shape[-1])
    window = torch.hann_window(settings.n_fft, periodic=True, device=x.device)
    spectrum = torch.stft(x, settings.n_fft, settings.hop_length, window=window, center=True,
                          pad_mode="reflect" if settings.kind == "whisper" else "constant",
                          return_complex=True)  # [B, n_fft/2 + 1, frames]
    power = spectrum.abs().square()[..., :n_frames]
    mel = filters_of(settings).to(x.device).T @ power  # [B, n_mels, F]
    if settings.kind == "whisper" and n_frames:
        out = mel.clamp(min=1e-10).log10()
        out = torch.maximum(out, out.amax(dim=(1, 2), keepdim=True) - 8.0)
        out = (out + 4.0) / 4.0
    elif settings.kind == "whisper":
        out = mel  # a clip shorter than one hop: no frames
    else:
        out = torch.log(mel + LOG_FLOOR)
    return out[0] if single else out


def resample(waveform: Tensor, orig_rate: int, new_rate: int, *, lowpass_width: int = 6,
             rolloff: float = 0.99) -> Tensor:
    """``[..., T]`` at ``orig_rate`` -> ``[..., ceil(T * new / orig)]`` at ``new_rate``.

    Band-limited polyphase resampling with a Hann-windowed sinc, ``lowpass_width`` zero crossings a side,
    cut off at ``rolloff`` of the lower Nyquist: torchaudio's default ``sinc_interp_hann`` algorithm, one
    ``conv1d``. Rates whose reduced ratio would need a kernel of more than :data:`MAX_KERNEL_TAPS` taps
    (coprime rates) are resampled through the FFT (periodic band-limited interpolation, scipy's
    ``resample``), whose memory is the clip's."""
    if orig_rate <= 0 or new_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {orig_rate} and {new_rate}")
    if orig_rate == new_rate:
        return waveform
    gcd = math.gcd(orig_rate, new_rate)
    orig, new = orig_rate // gcd, new_rate // gcd
    cutoff = min(orig, new) * rolloff
    width = math.ceil(lowpass_width * orig / cutoff)
    length = waveform.shape[-1]
    target = math.ceil(new * length / orig)
    if new * (2 * width + orig) > MAX_KERNEL_TAPS:
        return _resample_fft(waveform, target)
    shape = waveform.shape
    x = waveform.reshape(-1, 1, length).to(torch.float64 if waveform.dtype == torch.float64 else torch.float32)
    kernel = _sinc_kernel(orig, new, width, cutoff, lowpass_width, x.dtype, x.device)  # [new, 1, 2*width + orig]
    x = F.pad(x, (width, width + orig))
    out = F.conv1d(x, kernel, stride=orig)  # [B, new, frames]: phase p of output block k is out[:, p, k]
    out = out.transpose(1, 2).reshape(x.shape[0], -1)[:, :target]
    return out.reshape(*shape[:-1], target)


def _sinc_kernel(orig: int, new: int, width: int, cutoff: float, zeros: int, dtype: torch.dtype,
                 device: torch.device) -> Tensor:
    """The ``new`` phases of the windowed-sinc low-pass, each ``2 * width + orig`` input taps long."""
    taps = torch.arange(-width, width + orig, dtype=torch.float64, device=device) / orig  # [K] input offsets
    t = (torch.arange(0, -new, -1, dtype=torch.float64, device=device)[:, None] / new + taps) * cutoff  # [new, K]
    t = t.clamp(-zeros, zeros)
    window = torch.cos(t * math.pi / zeros / 2) ** 2
    t = t * math.pi
    sinc = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / torch.where(t == 0, torch.ones_like(t), t))
    return (sinc * window * (cutoff / orig)).to(dtype)[:, None, :]


def _resample_fft(waveform: Tensor, target: int) -> Tensor:
    """Fourier resampling of ``[..., T]`` to ``target`` samples (the spectrum cut or zero-extended)."""
    length = waveform.shape[-1]
    spectrum = torch.fft.rfft(waveform.double(), dim=-1)
    keep = min(spectrum.shape[-1], target // 2 + 1)
    resized = torch.zeros(*spectrum.shape[:-1], target // 2 + 1, dtype=spectrum.dtype, device=spectrum.device)
    resized[..., :keep] = spectrum[..., :keep]
    out = torch.fft.irfft(resized, n=target, dim=-1) * (target / length)
    return out.to(waveform.dtype if waveform.is_floating_point() else torch.float32)
