"""Reading sound files: WAV by the standard library's rules, in numpy; FLAC, OGG and the rest through
``soundfile`` when it is installed (``pip install tokformer[audio]``).

Every file is checked from its header before a sample is read: a regular file, a sample rate in
[:data:`MIN_RATE`, :data:`MAX_RATE`], 1 to :data:`MAX_CHANNELS` channels, a sample format we decode, and
a data chunk the file really holds (a truncated file is refused, not read short). Only the frames asked
for are read (``max_frames``), and never more than :data:`MAX_SAMPLES` in all, so a few bytes of header
claiming hours of 64-channel sound cost nothing. Every refusal is one :class:`~tokformer.errors.DataError`
naming the file (docs/reliability.md, "Audio files").
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from tokformer import files
from tokformer.errors import DataError

MIN_RATE, MAX_RATE = 1000, 384_000
MAX_CHANNELS = 64
MAX_SAMPLES = 1 << 28  # frames x channels decoded at most by one read: 1 GiB of float32
MAX_AMPLITUDE = 1e4  # float samples beyond this are not sound (float audio lies in [-1, 1], a little over at most)
MAX_HEADER_CHUNKS = 256  # chunks skipped looking for "fmt " and "data" before the file is refused
AUDIO_EXTENSIONS = (".wav", ".wave", ".flac", ".ogg", ".oga", ".mp3", ".aiff", ".aif")
_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_STREAMING_SIZES = (0, 0xFFFFFFFF)  # a data size a recorder writes before it knows the length


@dataclass(frozen=True)
class Sound:
    """A decoded clip: ``samples`` ``[frames]`` float32 in [-1, 1] (channels averaged) at ``rate`` Hz."""

    samples: np.ndarray
    rate: int


def read_audio(path: str | Path, max_frames: int | None = None, max_seconds: float | None = None) -> Sound:
    """The clip in ``path``, down-mixed to mono: its first ``max_frames`` frames, or first ``max_seconds``, at
    most (only those are decoded: an hour-long file given for a one-second clip costs one second).

    WAV is read here; any other file through ``soundfile``. Raises DataError naming the file."""
    file = Path(path)
    limit = Limit(max_frames, max_seconds)
    with files.reading(file):
        files.regular(file)
        with file.open("rb") as stream:
            head = stream.read(12)
            if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
                return _read_wav(file, stream, limit)
    if file.suffix.lower() in (".wav", ".wave") or not head:
        what = "empty" if not head else "not a RIFF/WAVE file"
        raise DataError(f"cannot read audio {file}: {what}")
    return _read_with_soundfile(file, limit)


@dataclass(frozen=True)
class Limit:
    """How much of a clip to decode: at most ``frames``, and at most ``seconds`` at the file's own rate."""

    frames: int | None = None
    seconds: float | None = None

    def at(self, rate: int) -> int | None:
        limits = [n for n in (self.frames, None if self.seconds is None else math.ceil(self.seconds * rate))
                  if n is not None]
        return min(limits) if limits else None


def _check_shape(file: Path, rate: int, channels: int) -> None:
    if not MIN_RATE <= rate <= MAX_RATE:
        raise DataError(f"cannot read audio {file}: sample rate {rate} Hz is outside {MIN_RATE}..{MAX_RATE}")
    if not 1 <= channels <= MAX_CHANNELS:
        raise DataError(f"cannot read audio {file}: {channels} channels (1 to {MAX_CHANNELS} are read)")


def _frames_to_read(file: Path, frames: int, channels: int, max_frames: int | None) -> int:
    wanted = frames if max_frames is None else max(1, min(frames, max_frames))
    if wanted * channels > MAX_SAMPLES:
        raise DataError(f"cannot read audio {file}: {wanted:,} frames of {channels} channels is more than the "
                        f"{MAX_SAMPLES:,} samples tokformer decodes at once; cut the file or read less of it")
    return wanted


def _read_wav(file: Path, stream: BinaryIO, limit: Limit) -> Sound:
    """A RIFF/WAVE file: PCM 8 (unsigned), 16, 24, 32 bit or IEEE float 32/64, plain or extensible."""
    size = file.stat().st_size
    fmt: tuple[int, int, int, int] | None = None
    for _ in range(MAX_HEADER_CHUNKS):
        header = stream.read(8)
        if len(header) < 8:
            break
        name, length = header[:4], struct.unpack("<I", header[4:])[0]
        if name == b"fmt ":
            if not 16 <= length <= 1024:
                raise DataError(f"cannot read audio {file}: its fmt chunk is {length} bytes (16 to 1024 expected)")
            fmt = _parse_fmt(file, stream.read(length))
            stream.seek(length % 2, 1)
        elif name == b"data":
            if fmt is None:
                raise DataError(f"cannot read audio {file}: its data chunk comes before the fmt chunk")
            return _decode_wav(file, stream, fmt, length, size - stream.tell(), limit.at(fmt[2]))
        else:
            stream.seek(length + length % 2, 1)
    raise DataError(f"cannot read audio {file}: no data chunk" + ("" if fmt else " and no fmt chunk")
                    + (" (truncated?)" if stream.tell() >= size else ""))


def _parse_fmt(file: Path, body: bytes) -> tuple[int, int, int, int]:
    """``(format, channels, rate, bits)`` of a fmt chunk; an extensible one gives its sub-format's code."""
    if len(body) < 16:
        raise DataError(f"cannot read audio {file}: its fmt chunk is truncated")
    code, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
    if code == _EXTENSIBLE:
        if len(body) < 26:
            raise DataError(f"cannot read audio {file}: its extensible fmt chunk is truncated")
        code = struct.unpack("<H", body[24:26])[0]  # the sub-format GUID starts with the plain code
    _check_shape(file, rate, channels)
    if (code, bits) not in ((_PCM, 8), (_PCM, 16), (_PCM, 24), (_PCM, 32), (_FLOAT, 32), (_FLOAT, 64)):
        kind = {_PCM: "PCM", _FLOAT: "float"}.get(code, f"format code {code}")
        raise DataError(f"cannot read audio {file}: {kind} {bits}-bit samples are not decoded (PCM 8/16/24/32-bit "
                        "and float 32/64-bit are); convert it, or install soundfile for compressed formats")
    return code, channels, rate, bits


def _decode_wav(file: Path, stream: BinaryIO, fmt: tuple[int, int, int, int], declared: int, left: int,
                max_frames: int | None) -> Sound:
    code, channels, rate, bits = fmt
    width = bits // 8
    if declared in _STREAMING_SIZES and left > 0:
        declared = left  # written while recording, its length never filled in: the rest of the file
    if declared > left:
        raise DataError(f"cannot read audio {file}: truncated (its data chunk declares {declared:,} bytes, "
                        f"the file holds {left:,})")
    frames = declared // (width * channels)
    if frames == 0:
        raise DataError(f"cannot read audio {file}: it holds no samples")
    wanted = _frames_to_read(file, frames, channels, max_frames)
    raw = stream.read(wanted * width * channels)
    if code == _FLOAT:
        samples = _checked_floats(file, np.frombuffer(raw, dtype=f"<f{width}"))
    elif width == 1:
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 3:
        triples = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        values = triples[:, 0] | (triples[:, 1] << 8) | (triples[:, 2] << 16)
        samples = (np.where(values >= 1 << 23, values - (1 << 24), values) / float(1 << 23)).astype(np.float32)
    else:
        samples = (np.frombuffer(raw, dtype=f"<i{width}") / float(1 << (bits - 1))).astype(np.float32)
    return Sound(samples.reshape(wanted, channels).mean(axis=1, dtype=np.float32), rate)


def _read_with_soundfile(file: Path, limit: Limit) -> Sound:
    try:
        import soundfile
    except ImportError:
        raise DataError(f"cannot read audio {file}: only WAV is read without soundfile; "
                        "pip install 'tokformer[audio]' for FLAC, OGG and others") from None
    try:
        info = soundfile.info(str(file))
        _check_shape(file, int(info.samplerate), int(info.channels))
        if info.frames <= 0:
            raise DataError(f"cannot read audio {file}: it holds no samples")
        wanted = _frames_to_read(file, int(info.frames), int(info.channels), limit.at(int(info.samplerate)))
        data, rate = soundfile.read(str(file), frames=wanted, dtype="float32", always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError, TypeError, ValueError) as err:
        raise DataError(f"cannot read audio {file}: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
                        ) from None
    if data.shape[0] == 0:
        raise DataError(f"cannot read audio {file}: it holds no samples")
    return Sound(_checked_floats(file, data).mean(axis=1, dtype=np.float32), int(rate))


def _checked_floats(file: Path, samples: np.ndarray) -> np.ndarray:
    """Float samples as float32, refused when not finite or far outside [-1, 1]: such a file is not sound
    scaled as float audio is (a value of 1e30 overflows every power spectrum after it)."""
    if not np.isfinite(samples).all():
        raise DataError(f"cannot read audio {file}: it holds NaN or infinite samples")
    peak = float(np.abs(samples).max(initial=0.0))
    if peak > MAX_AMPLITUDE:
        raise DataError(f"cannot read audio {file}: a sample of magnitude {peak:.3g} is far outside the [-1, 1] "
                        "of float audio")
    return samples.astype(np.float32)


def write_wav(path: str | Path, samples: np.ndarray, rate: int) -> None:
    """``samples`` (``[frames]`` or ``[frames, channels]``, float in [-1, 1]) as 16-bit PCM WAV, whole or not
    at all: what the built-in data and the tests write."""
    import wave

    from tokformer.atomic import write_atomic

    data = np.asarray(samples, dtype=np.float64)
    data = data[:, None] if data.ndim == 1 else data
    pcm = np.clip(np.round(data * 32767), -32768, 32767).astype("<i2")

    def write(target: Path) -> None:
        with wave.open(str(target), "wb") as out:
            out.setnchannels(pcm.shape[1])
            out.setsampwidth(2)
            out.setframerate(rate)
            out.writeframes(pcm.tobytes())

    write_atomic(Path(path), write)
