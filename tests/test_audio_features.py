"""Audio features in torch against their references: Hugging Face's Whisper feature extractor and mel bank,
librosa's mel spectrogram, scipy's polyphase and Fourier resamplers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokformer.tokenizers import audio_features
from tokformer.tokenizers.audio_features import LogMelSettings, log_mel, mel_filterbank, resample

librosa = pytest.importorskip("librosa")
scipy_signal = pytest.importorskip("scipy.signal")


def speech_like(n: int, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """A voiced sound: a pulse train at a gliding pitch through two resonances, with a silent gap and noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / rate
    pitch = 120 + 40 * np.sin(2 * np.pi * 1.5 * t)
    pulses = np.diff(np.floor(np.cumsum(pitch / rate)), prepend=0.0)
    wave = sum(np.convolve(pulses, np.exp(-np.arange(200) / (rate / bw)) * np.cos(2 * np.pi * f * np.arange(200)
                                                                                  / rate), "same")
               for f, bw in ((700, 80), (1800, 120)))
    wave[n // 3: n // 2] = 0.0
    return (wave / np.abs(wave).max() * 0.5 + rng.normal(0, 1e-3, n)).astype(np.float32)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_bank_matches_hugging_face_and_librosa(n_mels: int) -> None:
    from transformers.audio_utils import mel_filter_bank

    ours = mel_filterbank(201, n_mels, 16000, 0.0, 8000.0).numpy()
    hf = mel_filter_bank(num_frequency_bins=201, num_mel_filters=n_mels, min_frequency=0.0, max_frequency=8000.0,
                         sampling_rate=16000, norm="slaney", mel_scale="slaney")
    np.testing.assert_allclose(ours, hf, atol=1e-7, rtol=0)
    reference = librosa.filters.mel(sr=22050, n_fft=1024, n_mels=n_mels, fmin=60.0, fmax=9000.0).T
    np.testing.assert_allclose(mel_filterbank(513, n_mels, 22050, 60.0, 9000.0).numpy(), reference, atol=1e-6,
                               rtol=1e-5)


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("signal", ["noise", "speech"])
@pytest.mark.parametrize("length", [16000, 12345, 401, 3000])
def test_whisper_log_mel_matches_the_feature_extractor(n_mels: int, signal: str, length: int) -> None:
    from transformers import WhisperFeatureExtractor

    rng = np.random.default_rng(length)
    wave = rng.standard_normal(length).astype(np.float32) * 0.1 if signal == "noise" else speech_like(length)
    extractor = WhisperFeatureExtractor(feature_size=n_mels)
    reference = extractor(wave, sampling_rate=16000, padding="longest", return_tensors="np").input_features[0]
    ours = log_mel(torch.from_numpy(wave), LogMelSettings(n_mels=n_mels)).numpy()
    assert ours.shape == reference.shape == (n_mels, length // 160)
    np.testing.assert_allclose(ours, reference, atol=1e-4, rtol=0)


def test_whisper_log_mel_of_a_30_second_window_matches_the_extractors_default_padding() -> None:
    from transformers import WhisperFeatureExtractor

    wave = speech_like(24000)
    reference = WhisperFeatureExtractor()(wave, sampling_rate=16000, return_tensors="np").input_features[0]
    padded = torch.zeros(480000)
    padded[: len(wave)] = torch.from_numpy(wave)
    ours = log_mel(padded).numpy()
    assert ours.shape == reference.shape == (80, 3000)
    np.testing.assert_allclose(ours, reference, atol=1e-4, rtol=0)


def test_log_recipe_matches_librosa_melspectrogram() -> None:
    wave = speech_like(8000, rate=8000)
    settings = LogMelSettings(kind="log", sample_rate=8000, n_fft=256, hop_length=80, n_mels=40, f_max=4000.0)
    power = librosa.feature.melspectrogram(y=wave, sr=8000, n_fft=256, hop_length=80, n_mels=40, fmax=4000.0)
    reference = np.log(power + audio_features.LOG_FLOOR)
    ours = log_mel(torch.from_numpy(wave), settings).numpy()
    assert ours.shape == reference.shape == (40, settings.frames(8000))
    np.testing.assert_allclose(ours, reference, atol=1e-4, rtol=1e-4)


def test_whisper_floor_is_per_clip_in_a_batch() -> None:
    loud, quiet = torch.from_numpy(speech_like(4000)), torch.from_numpy(speech_like(4000, seed=1)) * 1e-3
    together = log_mel(torch.stack((loud, quiet)))
    assert torch.equal(together[0], log_mel(loud)) and torch.allclose(together[1], log_mel(quiet), atol=1e-6)
    for clip in together:  # each floored at 8 below its own peak (8 / 4 after the scaling)
        assert float(clip.max() - clip.min()) <= 2.0 + 1e-6


def test_a_clip_shorter_than_the_window_is_padded_and_an_empty_one_refused() -> None:
    assert log_mel(torch.ones(50)).shape == (80, 0)  # 50 // 160 frames: none, and no reflect-padding error
    assert log_mel(torch.randn(160)).shape == (80, 1)
    with pytest.raises(ValueError, match="no samples"):
        log_mel(torch.zeros(0))


@pytest.mark.parametrize("rates", [(8000, 16000), (16000, 8000), (44100, 16000), (8000, 22050), (48000, 44100),
                                   (22050, 16000)])
def test_resample_matches_scipy_resample_poly_on_band_limited_sound(rates: tuple[int, int]) -> None:
    orig, new = rates
    t = np.arange(orig) / orig  # one second
    limit = 0.3 * min(orig, new)  # well inside both Nyquists: both low-pass filters pass it whole
    wave = sum(np.sin(2 * np.pi * f * t + p) / (i + 1) for i, (f, p) in enumerate(((440, 0.3), (0.55 * limit, 1.1),
                                                                                     (limit, 2.0))))
    ours = resample(torch.from_numpy(wave), orig, new).numpy()
    gcd = np.gcd(orig, new)
    reference = scipy_signal.resample_poly(wave, new // gcd, orig // gcd)
    assert len(ours) == len(reference) == new
    inner = slice(new // 20, -new // 20)  # the ends differ by how each pads the clip
    np.testing.assert_allclose(ours[inner], reference[inner], atol=1e-2, rtol=0)
    truth = sum(np.sin(2 * np.pi * f * np.arange(new) / new + p) / (i + 1)
                for i, (f, p) in enumerate(((440, 0.3), (0.55 * limit, 1.1), (limit, 2.0))))
    np.testing.assert_allclose(ours[inner], truth[inner], atol=1e-2, rtol=0)


def test_resample_keeps_batch_shape_dtype_and_the_rate_identity() -> None:
    wave = torch.randn(2, 3, 1000, dtype=torch.float64)
    out = resample(wave, 8000, 16000)
    assert out.shape == (2, 3, 2000) and out.dtype == torch.float64
    torch.testing.assert_close(out[1, 2], resample(wave[1, 2], 8000, 16000))
    assert resample(wave, 16000, 16000) is wave
    assert resample(torch.randn(7), 44100, 16000).shape == (3,)  # ceil(7 * 160 / 441)
    with pytest.raises(ValueError, match="positive"):
        resample(wave, 0, 16000)


def test_coprime_rates_go_through_the_fft_and_match_scipy_resample(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel for 44101 -> 16000 would hold 16000 x 88k taps; the Fourier path needs the clip's memory only."""
    built = []
    monkeypatch.setattr(audio_features, "_sinc_kernel", lambda *a: built.append(a))
    t = np.arange(44101) / 44101  # one second: whole periods of every tone, which the Fourier path keeps exactly
    tones = ((50, 0.1), (1234, 2.0), (7000, 0.7))
    wave = sum(np.sin(2 * np.pi * f * t + p) for f, p in tones)
    ours = resample(torch.from_numpy(wave), 44101, 16000).numpy()
    assert not built, "no polyphase kernel for coprime rates"
    np.testing.assert_allclose(ours, scipy_signal.resample(wave, 16000), atol=1e-8)
    truth = sum(np.sin(2 * np.pi * f * np.arange(16000) / 16000 + p) for f, p in tones)
    np.testing.assert_allclose(ours, truth, atol=1e-8)


@pytest.mark.parametrize("options, message", [
    (dict(kind="mfcc"), "whisper or log"), (dict(n_mels=0), "n_mels"), (dict(hop_length=1.5), "hop_length"),
    (dict(f_max=9000.0), "above Nyquist"), (dict(n_fft=1 << 20), "too large"),
])
def test_bad_settings_are_refused(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LogMelSettings(**options)
