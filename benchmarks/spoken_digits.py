"""Spoken digits nobody recorded: a formant synthesiser that writes a folder in the shape of the public
spoken-digit set (8 kHz mono 16-bit WAV, 0.2-1 s clips, 10 digits x 6 speakers x 50 takes, takes 0-4 of
each held out), so the audio task's defaults can be checked on speech-like data before the real set.

Each digit is its English phonemes (``zero`` = z ɪ r oʊ, ``six`` = s ɪ k s, ...): vowels and approximants
as three formants over a glottal pulse train, fricatives and stop bursts as band-limited noise, with
formant transitions smoothed between segments. A speaker fixes a pitch, a vocal-tract scale (all formants)
and a speaking rate; every take varies them again, jitters each segment's length, formants and loudness,
adds a random silence before and after, a microphone's tilt, a small room's echo, a loudness and background
noise. It is a proxy: what it shares with real speech is the task's shape (which phonemes, in which order,
said by whom), not the voice.

    python benchmarks/spoken_digits.py OUT_DIR            # writes OUT_DIR/train|val/DIGIT/*.wav
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from tokformer.tokenizers.audio_io import write_wav

RATE = 8000
N_FFT, HOP = 256, 64
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# phoneme: (voicing, noise, formants (F1, F2, F3) or a start and end triple, noise band (Hz))
PHONEMES: dict[str, tuple[float, float, tuple, tuple[int, int]]] = {
    "i": (1.0, 0.0, (270, 2290, 3010), (0, 0)),
    "ɪ": (1.0, 0.0, (400, 1900, 2550), (0, 0)),
    "ɛ": (1.0, 0.0, (530, 1840, 2480), (0, 0)),
    "ə": (0.9, 0.0, (500, 1500, 2500), (0, 0)),
    "ʌ": (1.0, 0.0, (640, 1190, 2390), (0, 0)),
    "u": (1.0, 0.0, (300, 870, 2240), (0, 0)),
    "ɔ": (1.0, 0.0, (570, 840, 2410), (0, 0)),
    "oʊ": (1.0, 0.0, ((500, 900, 2400), (420, 1000, 2300)), (0, 0)),
    "aɪ": (1.0, 0.0, ((750, 1300, 2500), (400, 1950, 2600)), (0, 0)),
    "eɪ": (1.0, 0.0, ((480, 2000, 2600), (380, 2200, 2800)), (0, 0)),
    "r": (0.7, 0.0, (350, 1250, 1650), (0, 0)),
    "w": (0.6, 0.0, (300, 700, 2200), (0, 0)),
    "n": (0.45, 0.0, (250, 1700, 2600), (0, 0)),
    "z": (0.35, 0.5, (300, 1500, 2500), (3000, 3950)),
    "v": (0.35, 0.2, (300, 1200, 2400), (900, 3900)),
    "s": (0.0, 1.0, (0, 0, 0), (2800, 3950)),
    "f": (0.0, 0.3, (0, 0, 0), (900, 3900)),
    "θ": (0.0, 0.25, (0, 0, 0), (1200, 3900)),
    "t": (0.0, 0.9, (0, 0, 0), (2000, 3950)),
    "k": (0.0, 0.8, (0, 0, 0), (1200, 2600)),
}
WORDS = {
    "zero": (("z", 90), ("ɪ", 80), ("r", 70), ("oʊ", 190)),
    "one": (("w", 80), ("ʌ", 160), ("n", 120)),
    "two": (("t", 80), ("u", 230)),
    "three": (("θ", 110), ("r", 60), ("i", 210)),
    "four": (("f", 120), ("ɔ", 170), ("r", 110)),
    "five": (("f", 110), ("aɪ", 230), ("v", 90)),
    "six": (("s", 130), ("ɪ", 90), ("k", 80), ("s", 150)),
    "seven": (("s", 120), ("ɛ", 100), ("v", 60), ("ə", 70), ("n", 110)),
    "eight": (("eɪ", 230), ("t", 90)),
    "nine": (("n", 80), ("aɪ", 220), ("n", 120)),
}
STOPS = ("t", "k")  # a closure (silence), then the burst in the last quarter


def _tracks(word: str, scale: float, rate_factor: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per-hop voicing, noise, formants and noise band of one take of ``word``."""
    voicing, noise, formants, bands = [], [], [], []
    for name, ms in WORDS[word]:
        v, a, f, band = PHONEMES[name]
        hops = max(2, round(ms * rng.uniform(0.7, 1.3) / rate_factor / 1000 * RATE / HOP))
        start, end = (f, f) if isinstance(f[0], int) else f
        jitter = rng.uniform(0.88, 1.12, 3)  # a take's own vowel: real formant targets scatter this much
        path = np.linspace(np.array(start) * jitter, np.array(end) * jitter, hops) * scale  # [hops, 3]
        stress = rng.uniform(0.5, 1.5)  # each segment's own loudness
        v, a = v * stress, a * stress
        amp_noise = np.full(hops, a)
        if name in STOPS:
            amp_noise[: 3 * hops // 4] = 0.0
        voicing.append(np.full(hops, v))
        noise.append(amp_noise)
        formants.append(path)
        bands.append(np.tile(band, (hops, 1)))
    tracks = {"voicing": np.concatenate(voicing), "noise": np.concatenate(noise),
              "formants": np.concatenate(formants), "bands": np.concatenate(bands).astype(float)}
    kernel = np.hanning(5) / np.hanning(5).sum()  # ~30 ms transitions
    for key in ("voicing", "formants"):
        values = tracks[key].reshape(len(tracks[key]), -1)
        padded = np.pad(values, ((2, 2), (0, 0)), mode="edge")
        tracks[key] = np.stack([np.convolve(padded[:, j], kernel, mode="valid") for j in range(values.shape[1])], 1)
    tracks["voicing"] = tracks["voicing"][:, 0]
    return tracks


def _envelopes(tracks: dict[str, np.ndarray], freqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[bins, hops]`` spectral envelopes of the voiced and the noise source."""
    formants = tracks["formants"]  # [hops, 3]
    widths = np.array([90.0, 110.0, 160.0])
    gains = np.array([1.0, 0.55, 0.3])
    voiced = sum(gains[k] / (1 + ((freqs[:, None] - formants[None, :, k]) / (widths[k] / 2)) ** 2) for k in range(3))
    bands = tracks["bands"]
    inside = (freqs[:, None] >= bands[None, :, 0]) & (freqs[:, None] <= bands[None, :, 1])
    return voiced * tracks["voicing"][None, :], inside * tracks["noise"][None, :]


def _channel(freqs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random gain curve over frequency: a tilt of up to 6 dB an octave and two broad bumps of up to 8 dB."""
    octaves = np.log2(np.maximum(freqs, 100.0) / 1000.0)
    decibels = rng.uniform(-6, 6) * octaves
    for _ in range(2):
        centre, width = rng.uniform(-2, 2), rng.uniform(0.5, 1.5)
        decibels += rng.uniform(-8, 8) * np.exp(-0.5 * ((octaves - centre) / width) ** 2)
    return 10 ** (decibels / 20)


def _reverberate(wave: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A small room: the take convolved with decaying noise (RT60 0.1-0.4 s), mixed in at random strength."""
    rt60 = rng.uniform(0.1, 0.4)
    t = np.arange(round(rt60 * RATE)) / RATE
    response = rng.standard_normal(len(t)) * 10 ** (-3 * t / rt60)
    wet = np.convolve(wave, response)[: len(wave)]
    wet = wet / max(np.abs(wet).max(), 1e-9) * np.abs(wave).max()
    return wave + rng.uniform(0.0, 0.5) * wet


def synthesise(word: str, speaker: dict[str, float], rng: np.random.Generator) -> np.ndarray:
    """One take of ``word`` by ``speaker`` (its pitch, tract scale, rate), float32 at :data:`RATE`."""
    scale = speaker["scale"] * rng.uniform(0.97, 1.03)
    tracks = _tracks(word, scale, speaker["rate"] * rng.uniform(0.88, 1.12), rng)
    hops = len(tracks["voicing"])
    n = hops * HOP
    f0 = speaker["pitch"] * rng.uniform(0.92, 1.08) * np.linspace(1.08, 0.9, n)  # a falling contour
    phase = np.cumsum(f0 / RATE)
    pulses = np.diff(np.floor(phase), prepend=0.0)
    glottal = np.convolve(pulses, np.exp(-np.arange(24) / 4.0), mode="same")  # a decaying pulse: spectral tilt
    window = torch.hann_window(N_FFT)
    spectra = [torch.stft(torch.from_numpy(x).float(), N_FFT, HOP, window=window, return_complex=True)[:, :hops]
               for x in (glottal, rng.standard_normal(n) * 0.3)]
    freqs = np.fft.rfftfreq(N_FFT, 1 / RATE)
    envelopes = _envelopes(tracks, freqs)
    shaped = sum(s * torch.from_numpy(e).float() for s, e in zip(spectra, envelopes, strict=True))
    channel = _channel(freqs, rng)  # the microphone and room: a smooth random tilt of the whole take
    shaped = torch.nn.functional.pad(shaped * torch.from_numpy(channel).float()[:, None], (0, 1))
    wave = torch.istft(shaped, N_FFT, HOP, window=window, length=n).numpy()
    wave = _reverberate(wave, rng)
    wave = wave / max(np.abs(wave).max(), 1e-9) * rng.uniform(0.3, 0.9)
    before, after = (np.zeros(round(rng.uniform(0.02, 0.15) * RATE)) for _ in range(2))
    clip = np.concatenate((before, wave, after))
    clip = clip + rng.normal(0, 10 ** (-rng.uniform(12, 35) / 20) * np.abs(wave).max(), len(clip))
    return np.clip(clip, -1, 1).astype(np.float32)


def speakers(rng: np.random.Generator, count: int = 6) -> list[dict[str, float]]:
    """Voices: pitch (Hz), vocal-tract scale (formant multiplier) and speaking rate, deep to high."""
    pitches = np.linspace(95, 240, count) * rng.uniform(0.95, 1.05, count)
    scales = np.linspace(0.88, 1.22, count) * rng.uniform(0.98, 1.02, count)
    return [{"pitch": float(p), "scale": float(s), "rate": float(rng.uniform(0.85, 1.2))}
            for p, s in zip(pitches, scales, strict=True)]


def write_folder(root: Path, *, takes: int = 50, held_out: int = 5, seed: int = 0) -> Path:
    """``root/train|val/DIGIT/DIGIT_SPEAKER_TAKE.wav``: takes ``0..held_out-1`` of every speaker and digit in
    ``val`` (the public set's official split), the rest in ``train``."""
    rng = np.random.default_rng(seed)
    voices = speakers(rng)
    for who, voice in enumerate(voices):
        for digit, word in enumerate(DIGITS):
            for take in range(takes):
                split = "val" if take < held_out else "train"
                folder = root / split / str(digit)
                folder.mkdir(parents=True, exist_ok=True)
                write_wav(folder / f"{digit}_s{who}_{take}.wav", synthesise(word, voice, rng), RATE)
    return root


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.rsplit("\n\n", 1)[-1])
    print(write_folder(Path(sys.argv[1])))
