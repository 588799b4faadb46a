"""Reading sound files: every WAV encoding against soundfile (the reference reader), compressed formats through
it, and every bad file refused from its header in one line naming it, before its samples cost memory."""

from __future__ import annotations

import os
import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from tokformer.errors import DataError
from tokformer.tokenizers import audio_io
from tokformer.tokenizers.audio_io import read_audio, write_wav

soundfile = pytest.importorskip("soundfile")

SUBTYPES = ["PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"]


def random_sound(frames: int, channels: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.9, 0.9, (frames, channels))


@pytest.mark.parametrize("subtype", SUBTYPES)
@pytest.mark.parametrize("channels", [1, 2, 3])  # 3 channels: soundfile writes the extensible fmt chunk
def test_every_wav_encoding_reads_as_soundfile_reads_it_down_mixed(tmp_path: Path, subtype: str,
                                                                    channels: int) -> None:
    path = tmp_path / "clip.wav"
    soundfile.write(path, random_sound(1001, channels), 11025, subtype=subtype)
    reference, rate = soundfile.read(path, dtype="float32", always_2d=True)
    sound = read_audio(path)
    assert sound.rate == rate == 11025 and sound.samples.dtype == np.float32
    np.testing.assert_allclose(sound.samples, reference.mean(axis=1), atol=1e-6, rtol=0)


@pytest.mark.parametrize("suffix, subtype", [(".flac", "PCM_16"), (".ogg", "VORBIS")])
def test_compressed_formats_go_through_soundfile(tmp_path: Path, suffix: str, subtype: str) -> None:
    path = tmp_path / f"clip{suffix}"
    soundfile.write(path, random_sound(4000, 2) * 0.5, 16000, subtype=subtype)
    reference, _ = soundfile.read(path, dtype="float32", always_2d=True)
    sound = read_audio(path, max_frames=1000)
    assert sound.rate == 16000
    np.testing.assert_allclose(sound.samples, reference[:1000].mean(axis=1), atol=1e-6)


def test_without_soundfile_only_wav_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "clip.flac"
    soundfile.write(path, random_sound(100, 1), 8000)
    monkeypatch.setitem(__import__("sys").modules, "soundfile", None)
    with pytest.raises(DataError, match=r"clip\.flac: only WAV is read without soundfile; pip install"):
        read_audio(path)


def test_write_wav_round_trips_and_max_frames_reads_a_prefix(tmp_path: Path) -> None:
    samples = random_sound(800, 1)[:, 0]
    write_wav(tmp_path / "a.wav", samples, 8000)
    whole, head = read_audio(tmp_path / "a.wav"), read_audio(tmp_path / "a.wav", max_frames=10)
    np.testing.assert_allclose(whole.samples, samples, atol=1e-4)  # 16-bit
    assert len(head.samples) == 10 and np.array_equal(head.samples, whole.samples[:10])
    assert [p.name for p in tmp_path.iterdir()] == ["a.wav"]  # written whole, no temporary left


@pytest.mark.parametrize("name", ["a.wav", "a.flac"])
def test_max_seconds_decodes_only_that_much_at_the_files_own_rate(tmp_path: Path, name: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An hour-long file given for a one-second clip costs one second: the limit reaches the decoder."""
    soundfile.write(tmp_path / name, random_sound(8000, 2), 8000, subtype="PCM_16")
    monkeypatch.setattr(audio_io, "MAX_SAMPLES", 300)  # the whole file (16,000 samples) would be refused
    assert len(read_audio(tmp_path / name, max_seconds=0.01).samples) == 80
    assert len(read_audio(tmp_path / name, max_frames=50, max_seconds=0.01).samples) == 50
    assert len(read_audio(tmp_path / name, max_seconds=1e-9).samples) == 1
    with pytest.raises(DataError, match="more than the 300 samples"):
        read_audio(tmp_path / name)


def wav_bytes(*, code: int = 1, channels: int = 1, rate: int = 8000, bits: int = 16, data: bytes = b"\0\0" * 100,
              declared: int | None = None, fmt_size: int = 16, before: bytes = b"") -> bytes:
    fmt = struct.pack("<HHIIHH", code, channels, rate, rate * channels * bits // 8, channels * bits // 8, bits)
    fmt += b"\0" * (fmt_size - 16)
    body = (b"WAVE" + before + b"fmt " + struct.pack("<I", fmt_size) + fmt + b"data"
            + struct.pack("<I", len(data) if declared is None else declared) + data)
    return b"RIFF" + struct.pack("<I", len(body)) + body


BAD_FILES = {
    "empty": (b"", "empty"),
    "text": (b"hello, this is not a sound\n" * 4, "not a RIFF/WAVE file"),
    "truncated": (wav_bytes(declared=100_000),
                  r"truncated \(its data chunk declares 100,000 bytes, the file holds 200\)"),
    "header only": (wav_bytes()[:30], "fmt chunk is truncated"),
    "no data": (wav_bytes()[:44 - 8], "no data chunk"),
    "zero channels": (wav_bytes(channels=0), "0 channels"),
    "too many channels": (wav_bytes(channels=4000), "4000 channels"),
    "absurd rate": (wav_bytes(rate=400_000_000, bits=8), "sample rate 400000000 Hz is outside"),
    "tiny rate": (wav_bytes(rate=3), "sample rate 3 Hz is outside"),
    "no samples": (wav_bytes(data=b""), "holds no samples"),
    "12-bit": (wav_bytes(bits=12), "PCM 12-bit samples are not decoded"),
    "a-law": (wav_bytes(code=6, bits=8), "format code 6 8-bit samples are not decoded"),
    "huge fmt": (wav_bytes(fmt_size=1 << 20), "fmt chunk is 1048576 bytes"),
    "nan": (wav_bytes(code=3, bits=32, data=struct.pack("<4f", 0.1, float("nan"), 0.2, 0.3)), "NaN or infinite"),
    "many chunks": (b"RIFF\0\0\0\0WAVE" + b"junk\0\0\0\0" * 300, "no data chunk and no fmt chunk"),
    "data first": (b"RIFF\0\0\0\0WAVEdata\x02\0\0\0\0\0", "data chunk comes before the fmt chunk"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, name: str) -> None:
    content, message = BAD_FILES[name]
    path = tmp_path / f"{name.replace(' ', '_')}.wav"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as caught:
        read_audio(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_recorders_unknown_length_reads_the_rest_of_the_file(tmp_path: Path) -> None:
    samples = struct.pack("<4h", 1000, -1000, 2000, -2000)
    (tmp_path / "stream.wav").write_bytes(wav_bytes(data=samples, declared=0xFFFFFFFF))
    np.testing.assert_allclose(read_audio(tmp_path / "stream.wav").samples, [1000 / 32768, -1000 / 32768,
                                                                             2000 / 32768, -2000 / 32768])


def test_a_header_claiming_hours_of_sound_costs_nothing_until_refused(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A real file whose length is past the decode limit is refused before its samples are read; its
    first frames can still be read."""
    monkeypatch.setattr(audio_io, "MAX_SAMPLES", 1000)
    path = tmp_path / "long.wav"
    write_wav(path, np.zeros((600, 2)), 8000)
    reads = []
    real_read = audio_io._decode_wav

    def counting(file, stream, *args):
        reads.append(args)
        return real_read(file, stream, *args)

    monkeypatch.setattr(audio_io, "_decode_wav", counting)
    with pytest.raises(DataError, match=r"600 frames of 2 channels is more than the 1,000 samples"):
        read_audio(path)
    assert len(read_audio(path, max_frames=100).samples) == 100


def test_a_pipe_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        read_audio(fifo)


def test_missing_file_and_folder_are_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file"):
        read_audio(tmp_path / "nope.wav")
    with pytest.raises(DataError, match="is a directory"):
        read_audio(tmp_path)


def test_a_damaged_flac_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.flac"
    soundfile.write(path, random_sound(4000, 1), 8000)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(DataError, match=r"cannot read audio .*bad\.flac") as caught:
        read_audio(path)
    assert "\n" not in str(caught.value)


def test_the_standard_librarys_wave_module_reads_what_we_write(tmp_path: Path) -> None:
    write_wav(tmp_path / "s.wav", random_sound(50, 2), 22050)
    with wave.open(str(tmp_path / "s.wav")) as reader:
        assert (reader.getnchannels(), reader.getframerate(), reader.getsampwidth(), reader.getnframes()) == (
            2, 22050, 2, 50)
