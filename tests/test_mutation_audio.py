"""The audio readers' and features' exact behaviour, where a parity test within a tolerance cannot see a change: the
resampler against its own formula evaluated directly, the Fourier path's bins and shapes, the mel scale at
its breakpoint, the bank's defaults, the limits of the settings, and Whisper's padding of short clips
(benchmarks/mutation.py, audio_features)."""

from __future__ import annotations

import math
import struct
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tokformer.errors import DataError
from tokformer.positional import SinusoidalPositions
from tokformer.tasks import audio_data
from tokformer.tasks.audio_data import AudioFiles, Augmentation
from tokformer.tokenizers import TokenizerError, audio_features, audio_io
from tokformer.tokenizers.audio import (
    MAX_SECONDS_LIMIT,
    AudioEmbedder,
    AudioFrameTokenizer,
    AudioPatchTokenizer,
)
from tokformer.tokenizers.audio_features import LogMelSettings, hz_to_mel, log_mel, mel_filterbank, resample
from tokformer.tokenizers.audio_io import read_audio, write_wav

librosa = pytest.importorskip("librosa")
scipy_signal = pytest.importorskip("scipy.signal")
soundfile = pytest.importorskip("soundfile")


def direct_resample(x: np.ndarray, orig: int, new: int, zeros: int = 6, rolloff: float = 0.99) -> np.ndarray:
    """y[j] = sum_i x[i] w(t) sinc(t) cutoff / orig with t = (i / orig - j / new) cutoff, cutoff = rolloff *
    min(orig, new), w(t) = cos^2(pi t / (2 zeros)) within ``zeros`` crossings: the polyphase kernel, one output
    at a time, in float64 (rates reduced by their gcd first, as the kernel is built)."""
    g = math.gcd(orig, new)
    orig, new = orig // g, new // g
    cutoff = rolloff * min(orig, new)
    n_out = math.ceil(len(x) * new / orig)
    i = np.arange(len(x))[None, :]
    j = np.arange(n_out)[:, None]
    t = (i / orig - j / new) * cutoff
    inside = np.abs(t) <= zeros
    window = np.where(inside, np.cos(np.pi * t / zeros / 2) ** 2, 0.0)
    return (x[None, :] * window * np.sinc(t) * cutoff / orig).sum(axis=1)


@pytest.mark.parametrize("rates", [(3, 2), (2, 3), (8000, 16000), (16000, 8000), (441, 160), (5, 7)])
def test_the_polyphase_resampler_is_its_formula_in_float64(rates: tuple[int, int]) -> None:
    orig, new = rates
    x = np.random.default_rng(orig + new).standard_normal(90)
    ours = resample(torch.from_numpy(x), orig, new)
    assert ours.dtype == torch.float64
    np.testing.assert_allclose(ours.numpy(), direct_resample(x, orig, new), atol=1e-12, rtol=0)
    single = resample(torch.from_numpy(x).float(), orig, new)
    assert single.dtype == torch.float32  # float32 stays float32: the kernel is cast to the input's type


def test_the_fourier_path_is_chosen_exactly_past_the_kernel_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    taps = 2 * (2 * math.ceil(6 * 3 / (0.99 * 2)) + 3)  # new * (2 * width + orig) for 3 -> 2
    x = torch.randn(40, dtype=torch.float64)
    used = []
    real = audio_features._resample_fft
    monkeypatch.setattr(audio_features, "_resample_fft", lambda w, n: used.append(n) or real(w, n))
    monkeypatch.setattr(audio_features, "MAX_KERNEL_TAPS", taps)
    resample(x, 3, 2)
    assert not used, "a kernel of exactly the limit is built"
    monkeypatch.setattr(audio_features, "MAX_KERNEL_TAPS", taps - 1)
    resample(x, 3, 2)
    assert used == [27]


def test_rates_of_one_are_resampled_and_a_rate_of_zero_refused() -> None:
    x = torch.randn(10, dtype=torch.float64)
    assert resample(x, 1, 2).shape == (20,) and resample(x, 2, 1).shape == (5,)
    for orig, new in ((0, 8000), (8000, 0), (-1, 8000), (8000, -5)):
        with pytest.raises(ValueError, match="positive"):
            resample(x, orig, new)


@pytest.mark.parametrize("rates", [(44101, 15999), (15999, 44101)])
def test_the_fourier_path_keeps_every_bin_batch_and_dtype(rates: tuple[int, int]) -> None:
    """Odd lengths both ways, a tone one bin below the lower Nyquist, a batch of two, float32 in and out."""
    orig, new = rates
    low = min(orig, new)
    t = np.arange(orig) / orig  # one second: whole periods of every integer-hertz tone
    tones = ((50, 0.1), (low // 2 - 1, 0.4))
    wave = np.stack([sum(np.sin(2 * np.pi * f * t + p) for f, p in tones), np.cos(2 * np.pi * 300 * t)])
    ours = resample(torch.from_numpy(wave).float(), orig, new)
    assert ours.shape == (2, new) and ours.dtype == torch.float32
    truth = np.stack([sum(np.sin(2 * np.pi * f * np.arange(new) / new + p) for f, p in tones),
                      np.cos(2 * np.pi * 300 * np.arange(new) / new)])
    np.testing.assert_allclose(ours.numpy(), truth, atol=1e-4)


def test_the_mel_scale_is_librosas_on_both_sides_of_its_breakpoint() -> None:
    hz = torch.tensor([0.0, 500.0, 999.0, 1000.0, 1000.5, 1001.0, 4000.0, 8000.0], dtype=torch.float64)
    np.testing.assert_allclose(hz_to_mel(hz).numpy(), librosa.hz_to_mel(hz.numpy()), atol=1e-12)
    mels = torch.tensor([0.0, 14.99, 15.0, 15.004, 15.01, 40.0], dtype=torch.float64)
    np.testing.assert_allclose(audio_features.mel_to_hz(mels).numpy(), librosa.mel_to_hz(mels.numpy()), atol=1e-9)


def test_the_banks_defaults_are_zero_to_nyquist_on_the_references_grid() -> None:
    from transformers.audio_utils import mel_filter_bank

    for rate in (16000, 11025):  # 11025: an odd rate, whose grid ends at rate // 2 as the references' does
        reference = mel_filter_bank(num_frequency_bins=257, num_mel_filters=40, min_frequency=0.0,
                                    max_frequency=rate / 2, sampling_rate=rate, norm="slaney", mel_scale="slaney")
        np.testing.assert_allclose(mel_filterbank(257, 40, rate).numpy(), reference, atol=1e-7)
    with pytest.raises(ValueError, match="f_min < f_max"):
        mel_filterbank(201, 10, 16000, 4000.0, 4000.0)


def test_a_settings_f_max_below_nyquist_reaches_the_bank() -> None:
    wave = np.random.default_rng(0).standard_normal(4000).astype(np.float32)
    settings = LogMelSettings(kind="log", sample_rate=16000, n_mels=32, f_max=3000.0)
    power = librosa.feature.melspectrogram(y=wave, sr=16000, n_fft=400, hop_length=160, n_mels=32, fmax=3000.0)
    np.testing.assert_allclose(log_mel(torch.from_numpy(wave), settings).numpy(),
                               np.log(power + audio_features.LOG_FLOOR), atol=1e-4, rtol=1e-4)


def test_settings_limits_are_where_they_say() -> None:
    LogMelSettings(hop_length=1, n_mels=1, n_fft=1 << 16)
    LogMelSettings(n_mels=512)
    for options in (dict(n_fft=(1 << 16) + 1), dict(n_mels=513), dict(hop_length=0)):
        with pytest.raises(ValueError):
            LogMelSettings(**options)


@pytest.mark.parametrize("length", [161, 180, 200])
def test_a_clip_within_half_a_window_is_zero_padded_just_past_it(length: int) -> None:
    """Reflect padding needs more samples than the 200 it adds: Whisper's recipe pads such a clip with zeros
    to 201 first, and keeps its one frame."""
    x = torch.from_numpy(np.random.default_rng(length).standard_normal(length).astype(np.float32))
    ours = log_mel(x)
    assert ours.shape == (80, 1)
    torch.testing.assert_close(ours, log_mel(F.pad(x, (0, 201 - length)))[:, :1])


# -- reading sound files (benchmarks/mutation.py, audio_io) -----------------------------------------------------



def riff(*chunks: bytes) -> bytes:
    body = b"WAVE" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def chunk(name: bytes, body: bytes) -> bytes:
    return name + struct.pack("<I", len(body)) + body + b"\0" * (len(body) % 2)


def fmt(code: int = 1, channels: int = 1, rate: int = 8000, bits: int = 16, extra: bytes = b"") -> bytes:
    return chunk(b"fmt ", struct.pack("<HHIIHH", code, channels, rate, rate * channels * bits // 8,
                                      channels * bits // 8, bits) + extra)


def extensible(code: int, bits: int, channels: int = 2, size: int = 40) -> bytes:
    """WAVE_FORMAT_EXTENSIBLE: cbSize, valid bits, channel mask, then the sub-format GUID (its first two bytes
    are the plain code); ``size`` cuts or keeps the chunk's 40 bytes."""
    tail = struct.pack("<HHI", 22, bits, 3) + struct.pack("<H", code) + bytes(14)
    return fmt(0xFFFE, channels, 8000, bits, tail[: size - 16])


def read_bytes(tmp_path: Path, content: bytes, name: str = "x.wav"):
    (tmp_path / name).write_bytes(content)
    return read_audio(tmp_path / name)


@pytest.mark.parametrize("size", [26, 40])
def test_an_extensible_header_reads_its_sub_formats_code(tmp_path: Path, size: int) -> None:
    samples = struct.pack("<4f", 0.5, -0.5, 0.25, 0.75)  # two stereo frames of float32
    sound = read_bytes(tmp_path, riff(extensible(3, 32, size=size), chunk(b"data", samples)))
    np.testing.assert_allclose(sound.samples, [0.0, 0.5])
    with pytest.raises(DataError, match="extensible fmt chunk is truncated"):
        read_bytes(tmp_path, riff(extensible(3, 32, size=25), chunk(b"data", samples)))
    with pytest.raises(DataError, match=r": float 16-bit samples are not decoded"):
        read_bytes(tmp_path, riff(extensible(3, 16), chunk(b"data", samples)))


def test_header_limits_are_inclusive(tmp_path: Path) -> None:
    data = chunk(b"data", b"\0\0" * 4)
    for rate in (audio_io.MIN_RATE, audio_io.MAX_RATE):
        assert read_bytes(tmp_path, riff(fmt(rate=rate), data)).rate == rate
    assert len(read_bytes(tmp_path, riff(fmt(channels=64, bits=8), chunk(b"data", bytes(128)))).samples) == 2
    assert read_bytes(tmp_path, riff(fmt(extra=bytes(1024 - 16)), data)).rate == 8000
    with pytest.raises(DataError, match="fmt chunk is 1025 bytes"):
        read_bytes(tmp_path, riff(fmt(extra=bytes(1025 - 16)), data))
    with pytest.raises(DataError, match="sample rate 3000000000 Hz"):  # unsigned, as the format says
        read_bytes(tmp_path, riff(fmt(rate=3_000_000_000, bits=8), data))
    loud = struct.pack("<2f", audio_io.MAX_AMPLITUDE, -audio_io.MAX_AMPLITUDE)
    sound = read_bytes(tmp_path, riff(fmt(code=3, bits=32), chunk(b"data", loud)))
    assert sound.samples.dtype == np.float32 and sound.samples[0] == audio_io.MAX_AMPLITUDE


def test_an_odd_chunk_is_stepped_over_with_its_pad_byte(tmp_path: Path) -> None:
    content = riff(chunk(b"junk", b"abc"), fmt(), chunk(b"data", struct.pack("<2h", 16384, -16384)))
    np.testing.assert_allclose(read_bytes(tmp_path, content).samples, [0.5, -0.5])


def test_a_recorders_size_needs_bytes_after_it(tmp_path: Path) -> None:
    header = riff(fmt()) + b"data" + struct.pack("<I", 0xFFFFFFFF)
    with pytest.raises(DataError, match="truncated"):
        read_bytes(tmp_path, header)
    with pytest.raises(DataError, match="holds no samples"):
        read_bytes(tmp_path, header + b"\1")  # one byte: not one 16-bit sample


def test_the_most_negative_24_bit_sample_is_minus_one(tmp_path: Path) -> None:
    soundfile.write(tmp_path / "x.wav", np.array([-1.0, 0.5, -0.5]), 8000, subtype="PCM_24")
    np.testing.assert_allclose(read_audio(tmp_path / "x.wav").samples, [-1.0, 0.5, -0.5], atol=1e-6)


def test_errors_name_the_file_on_both_readers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audio_io, "MAX_SAMPLES", 10)
    for name in ("long.wav", "long.flac"):
        soundfile.write(tmp_path / name, np.zeros(100), 8000)
        with pytest.raises(DataError, match=rf"{name}: 100 frames of 1 channels"):
            read_audio(tmp_path / name)
    monkeypatch.setattr(audio_io, "MAX_SAMPLES", 100)
    assert len(read_audio(tmp_path / "long.wav").samples) == 100  # exactly the limit: read
    soundfile.write(tmp_path / "slow.flac", np.zeros(100), 1000)
    monkeypatch.setattr(audio_io, "MIN_RATE", 2000)
    with pytest.raises(DataError, match=r"slow\.flac: sample rate 1000 Hz"):
        read_audio(tmp_path / "slow.flac")


def test_a_mono_flac_of_one_frame_reads(tmp_path: Path) -> None:
    soundfile.write(tmp_path / "one.flac", np.array([0.5]), 8000, subtype="PCM_16")
    sound = read_audio(tmp_path / "one.flac")
    assert sound.samples.shape == (1,) and sound.samples.dtype == np.float32
    assert sound.samples[0] == pytest.approx(0.5, abs=1e-4)


@pytest.mark.parametrize("name, content, message", [
    ("empty.wav", b"", r": empty$"),
    ("text.wav", b"not sound at all", r": not a RIFF/WAVE file$"),
    ("video.wav", b"RIFF\0\0\0\0AVI LIST", r": not a RIFF/WAVE file$"),
    ("x.wave", b"RIFX not a wave", r"x\.wave: not a RIFF/WAVE file$"),
])
def test_what_is_not_a_wav_is_said_exactly(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    with pytest.raises(DataError, match=message):
        read_bytes(tmp_path, content, name)


def test_write_wav_clips_to_the_16_bit_range(tmp_path: Path) -> None:
    write_wav(tmp_path / "x.wav", np.array([-2.0, 2.0, 1.0, -1.0, 0.0]), 8000)
    with wave.open(str(tmp_path / "x.wav")) as reader:
        assert np.frombuffer(reader.readframes(5), "<i2").tolist() == [-32768, 32767, 32767, -32767, 0]


# -- the audio tokenizers (benchmarks/mutation.py, audio_tokenizer) ----------------------------------------------


def test_tokenizer_defaults_are_the_documented_ones() -> None:
    frames, patches = AudioFrameTokenizer(), AudioPatchTokenizer()
    assert frames.frame_hops == 1 and (patches.patch_mels, patches.patch_frames) == (16, 16)
    assert frames.max_seconds == 1.0 and frames.position == "sincos" and frames.position_std == 0.02
    assert frames.settings == LogMelSettings()
    custom = AudioFrameTokenizer(n_fft=256, hop_length=80, position="none")
    assert (custom.settings.n_fft, custom.settings.hop_length, custom.position) == (256, 80, "none")


@pytest.mark.parametrize("build", [
    lambda: AudioFrameTokenizer(frame_hops=1000),
    lambda: AudioPatchTokenizer(patch_frames=1000), lambda: AudioPatchTokenizer(patch_frames=1, patch_mels=1),
    lambda: AudioFrameTokenizer(max_seconds=MAX_SECONDS_LIMIT), lambda: AudioFrameTokenizer(position_std=10),
])
def test_the_largest_and_smallest_settings_are_accepted(build) -> None:
    build()


@pytest.mark.parametrize("build, message", [
    (lambda: AudioFrameTokenizer(frame_hops=1001), "frame_hops"),
    (lambda: AudioPatchTokenizer(patch_mels=0), "patch_mels must be"),
    (lambda: AudioPatchTokenizer(patch_frames=1001), "patch_frames must be"),
    (lambda: AudioFrameTokenizer(position_std=0), "position_std"),
    (lambda: AudioFrameTokenizer(position_std=10.5), "position_std"),
    (lambda: AudioFrameTokenizer(position_std="a"), "position_std"),
])
def test_settings_just_past_the_limits_are_refused(build, message: str) -> None:
    with pytest.raises(TokenizerError, match=message):
        build()


@pytest.mark.parametrize("tokenizer", [AudioFrameTokenizer(position="learned", position_std=0.5),
                                       AudioPatchTokenizer(position="learned", position_std=0.5, n_mels=64)])
def test_the_embedder_gets_the_tokenizers_std_and_dropout(tokenizer) -> None:
    embedder = tokenizer.build_embedder(256, dropout=0.3)
    assert embedder.drop.p == 0.3 and tokenizer.build_embedder(8).drop.p == 0.0
    tables = [embedder.position] + ([embedder.row_table] if embedder.row_table is not None else [])
    for table in tables:
        assert 0.4 < float(table.table.weight.detach().std()) < 0.6
    default = AudioEmbedder(4, 256, position="learned", max_positions=50)
    assert 0.015 < float(default.position.table.weight.detach().std()) < 0.025 and default.drop.p == 0.0


@torch.no_grad()
def test_the_embedding_is_the_projection_plus_the_position_code() -> None:
    batch = AudioFrameTokenizer(frame_hops=2).batch([torch.randn(4000) * 0.1])
    embedder = AudioFrameTokenizer(frame_hops=2).build_embedder(16)
    expected = embedder.proj(batch.features) + SinusoidalPositions(16)(batch.positions)
    torch.testing.assert_close(embedder(batch), expected)
    patches = AudioPatchTokenizer(n_mels=32, patch_mels=8, patch_frames=4, position="learned", position_std=0.5)
    batch = patches.batch([torch.randn(4000) * 0.1])
    embedder = patches.build_embedder(16)
    cells = batch.positions.long()
    expected = (embedder.proj(batch.features) + embedder.position.table.weight[cells[..., 1]]
                + embedder.row_table.table.weight[cells[..., 0]])
    torch.testing.assert_close(embedder(batch), expected)


def test_under_autocast_the_embedding_keeps_the_projections_dtype() -> None:
    tokenizer = AudioFrameTokenizer()
    batch = tokenizer.batch([torch.randn(3000) * 0.1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert tokenizer.build_embedder(16)(batch).dtype == torch.bfloat16


def test_a_waveform_is_padded_at_its_end_to_one_hop_and_limited_in_amplitude() -> None:
    tokenizer = AudioFrameTokenizer()
    for length in (20, 159):
        x = torch.rand(length) * 0.5
        out = tokenizer.waveform(x)
        assert len(out) == 160 and torch.equal(out[:length], x) and not out[length:].any()
    tokenizer.waveform(torch.full((200,), audio_io.MAX_AMPLITUDE))  # exactly the limit: taken
    with pytest.raises(TokenizerError, match="magnitude"):
        tokenizer.waveform(torch.full((200,), audio_io.MAX_AMPLITUDE * 1.01))


def test_a_long_file_costs_only_the_seconds_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    soundfile.write(tmp_path / "long.wav", np.zeros(8000), 8000)  # one second at 8 kHz
    monkeypatch.setattr(audio_io, "MAX_SAMPLES", 2000)  # the whole file would be refused
    assert len(AudioFrameTokenizer(max_seconds=0.25).waveform(tmp_path / "long.wav")) == 4000  # 0.25 s at 16 kHz


@torch.no_grad()
def test_no_position_code_is_the_projection_alone() -> None:
    tokenizer = AudioFrameTokenizer(position="none")
    batch = tokenizer.batch([torch.randn(3000) * 0.1])
    embedder = tokenizer.build_embedder(8)
    torch.testing.assert_close(embedder(batch), embedder.proj(batch.features))


# -- the task's data and augmentations (benchmarks/mutation.py, audio_data) -------------------------------------


def replay_waveform(wave: torch.Tensor, rate: int, augment: Augmentation) -> torch.Tensor:
    """What Augmentation.waveform must give, drawn in its order from the same global generator."""
    if augment.shift > 0:
        most = int(augment.shift * rate)
        k = int(torch.randint(-most, most + 1, ()))
        shifted = torch.zeros_like(wave)
        if k >= 0:
            shifted[k:] = wave[: len(wave) - k]
        else:
            shifted[: len(wave) + k] = wave[-k:]
        wave = shifted
    if augment.noise > 0:
        noise = torch.randn_like(wave)
        wave = wave + noise * wave.square().mean().sqrt() * augment.noise * float(torch.rand(()))
    if augment.gain > 0:
        wave = wave * 10 ** (float(torch.empty(()).uniform_(-augment.gain, augment.gain)) / 20)
    return wave


@pytest.mark.parametrize("augment", [Augmentation(shift=0.03), Augmentation(noise=0.4), Augmentation(gain=0.5),
                                     Augmentation(gain=9.0), Augmentation(shift=0.05, noise=0.2, gain=3.0)])
def test_waveform_augmentation_is_its_recipe_draw_for_draw(augment: Augmentation) -> None:
    wave = torch.arange(1, 101, dtype=torch.float32) / 100
    for seed in range(30):
        torch.manual_seed(seed)
        out = augment.waveform(wave, 100)
        torch.manual_seed(seed)
        torch.testing.assert_close(out, replay_waveform(wave, 100, augment))


def test_every_shift_in_range_happens() -> None:
    wave = torch.arange(1, 21, dtype=torch.float32)
    torch.manual_seed(0)
    seen = set()
    for _ in range(300):
        out = Augmentation(shift=0.02).waveform(wave, 100)  # up to 2 samples either way
        assert len(out) == 20
        seen.add(int(out.nonzero()[0]) - int(out[out.nonzero()[0]]) + 1)  # where sample 1 landed
    assert seen == {-2, -1, 0, 1, 2}


def replay_spectrogram(spec: torch.Tensor, augment: Augmentation) -> torch.Tensor:
    spec = spec.clone()
    fill = spec.mean()
    for axis, count, width in ((0, augment.freq_masks, augment.freq_mask_width),
                               (1, augment.time_masks, augment.time_mask_width)):
        if width <= 0:
            continue
        for _ in range(count):
            w = int(torch.randint(0, min(width, spec.shape[axis]) + 1, ()))
            start = int(torch.randint(0, spec.shape[axis] - w + 1, ()))
            spec.narrow(axis, start, w).fill_(fill)
    return spec


@pytest.mark.parametrize("augment", [Augmentation(freq_masks=2, freq_mask_width=0, time_masks=3, time_mask_width=4),
                                     Augmentation(freq_masks=3, freq_mask_width=1, time_masks=0, time_mask_width=9),
                                     Augmentation(freq_masks=2, freq_mask_width=30, time_masks=2, time_mask_width=30)])
def test_spec_augment_is_its_recipe_draw_for_draw(augment: Augmentation) -> None:
    spec = torch.randn(20, 12)
    for seed in range(30):
        torch.manual_seed(seed)
        out = augment.spectrogram(spec)
        torch.manual_seed(seed)
        torch.testing.assert_close(out, replay_spectrogram(spec, augment))


def write_clips(folder: Path, names: list[str]) -> list[tuple[Path, int]]:
    samples = []
    for label, name in enumerate(names):
        path = folder / name
        if name.startswith("bad"):
            path.write_bytes(b"RIFF")
        else:
            write_wav(path, np.full(8000, 0.1), 8000)
        samples.append((path, label))
    return samples


def test_a_file_that_fails_to_decode_gives_way_to_the_next_within_the_limit(tmp_path: Path, caplog) -> None:
    samples = write_clips(tmp_path, ["bad0.wav", "good1.wav", "good2.wav"])
    files = AudioFiles(samples, ["a", "b", "c"], max_seconds=0.01)
    assert AudioFiles(samples, ["a", "b", "c"]).max_seconds == 60.0
    with caplog.at_level("WARNING"):
        (waveform, rate), label = files[0]
    assert label == 1 and len(waveform) == 80  # the next one, cut to 0.01 s at 8 kHz
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("skipping a sound file that cannot be decoded, for the next one: cannot read audio ")
               and m.endswith("bad0.wav: not a RIFF/WAVE file") for m in messages), messages
    limit = audio_data.MAX_SKIPPED_IN_A_ROW
    within = write_clips(tmp_path, [f"bad{i}.wav" for i in range(limit)] + ["good.wav"])
    assert AudioFiles(within, ["x"] * len(within))[0][1] == limit
    past = write_clips(tmp_path, [f"bad{i}.wav" for i in range(limit + 1)] + ["good.wav"])
    with pytest.raises(DataError, match=f"{limit + 1} sound files in a row"):
        AudioFiles(past, ["x"] * len(past))[0]


def test_a_scan_keeps_readable_files_only_and_reads_one_frame_of_each(tmp_path: Path, caplog,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for split in ("train", "val"):
        (tmp_path / split / "a").mkdir(parents=True)
        write_wav(tmp_path / split / "a" / "long.wav", np.full(8000, 0.1), 8000)
    (tmp_path / "train" / "a" / "bad.wav").write_bytes(b"RIFF")
    monkeypatch.setattr(audio_io, "MAX_SAMPLES", 100)  # a whole-file read would refuse long.wav
    with caplog.at_level("WARNING"):
        train, _ = audio_data.audio_folder_datasets(tmp_path, 0.1, 0, max_seconds=0.01)
    assert [p.name for p, _ in train.samples] == ["long.wav"]
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("skipping unreadable sound file: cannot read audio ")
               and m.endswith("bad.wav: not a RIFF/WAVE file") for m in messages), messages


def test_a_float_aiff_too_loud_is_named_and_a_high_sub_format_code_is_unsigned(tmp_path: Path) -> None:
    soundfile.write(tmp_path / "loud.aiff", np.array([0.1, 2e4, 0.2]), 8000, subtype="FLOAT")
    with pytest.raises(DataError, match=r"loud\.aiff: a sample of magnitude 2e\+04"):
        read_audio(tmp_path / "loud.aiff")
    samples = chunk(b"data", bytes(8))
    with pytest.raises(DataError, match="format code 65534 32-bit samples"):
        read_bytes(tmp_path, riff(extensible(0xFFFE, 32), samples))


def test_the_fourier_path_keeps_float64() -> None:
    out = resample(torch.randn(44101, dtype=torch.float64), 44101, 15999)
    assert out.dtype == torch.float64 and out.shape == (15999,)
