"""The audio tokenizers: how a spectrogram is cut, where each token sits, that padding never changes a real
token's output, that every input form gives the same tokens, and that a saved tokenizer loads back the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import randomised

from tokformer.classifier import EncoderClassifier
from tokformer.config import TransformerConfig
from tokformer.heads import ClassificationHead
from tokformer.tokenizers import TokenizerError, load_tokenizer
from tokformer.tokenizers.audio import AudioFrameTokenizer, AudioPatchTokenizer, is_one_clip
from tokformer.tokenizers.audio_features import LogMelSettings, log_mel, resample
from tokformer.tokenizers.audio_io import write_wav


def clip(seconds: float, rate: int = 16000, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(round(seconds * rate)) / rate
    return (0.3 * torch.sin(2 * torch.pi * 440 * t) + 0.05 * torch.randn(len(t), generator=g)).float()


def test_frames_are_groups_of_consecutive_frames_padded_with_the_clips_floor() -> None:
    tokenizer = AudioFrameTokenizer(frame_hops=2)
    spectrogram = torch.randn(80, 7)
    tokens, positions = tokenizer.cut(spectrogram)
    assert tokens.shape == (4, 160) and positions.tolist() == [0, 1, 2, 3]
    for i in range(3):
        assert torch.equal(tokens[i], torch.cat((spectrogram[:, 2 * i], spectrogram[:, 2 * i + 1])))
    assert torch.equal(tokens[3, :80], spectrogram[:, 6]) and bool((tokens[3, 80:] == spectrogram.min()).all())


def test_patches_are_mel_by_time_cells_in_row_major_order() -> None:
    tokenizer = AudioPatchTokenizer(n_mels=32, patch_mels=16, patch_frames=4)
    spectrogram = torch.randn(32, 10)
    tokens, cells = tokenizer.cut(spectrogram)
    assert tokens.shape == (6, 64) and cells.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    padded = torch.cat((spectrogram, spectrogram.min().expand(32, 2)), dim=1)
    for k, (row, col) in enumerate(cells.tolist()):
        assert torch.equal(tokens[k], padded[16 * row: 16 * row + 16, 4 * col: 4 * col + 4].flatten())


def model_for(tokenizer, d_model: int = 16) -> EncoderClassifier:
    config = TransformerConfig(d_model=d_model, n_heads=2, n_layers=2, activation="gelu")
    model = EncoderClassifier(tokenizer.build_embedder(d_model), config, ClassificationHead(d_model, 3, pool="mean"))
    return randomised(model)


TOKENIZERS = {
    "frames-sincos": lambda: AudioFrameTokenizer(frame_hops=3),
    "frames-learned": lambda: AudioFrameTokenizer(frame_hops=2, position="learned", position_std=0.5),
    "patches-sincos": lambda: AudioPatchTokenizer(patch_frames=4, n_mels=32, patch_mels=8),
    "patches-learned": lambda: AudioPatchTokenizer(patch_frames=4, n_mels=32, patch_mels=8, position="learned",
                                                   position_std=0.5),
}


@pytest.mark.parametrize("name", list(TOKENIZERS))
@torch.no_grad()
def test_padding_never_changes_a_clips_output(name: str) -> None:
    tokenizer = TOKENIZERS[name]()
    model = model_for(tokenizer)
    short, long = clip(0.23), clip(0.9, seed=1)
    alone = model(tokenizer.batch([short]))
    batch = tokenizer.batch([short, long])
    assert bool((~batch.mask[0]).any()), "the short clip is padded in the batch"
    torch.testing.assert_close(model(batch)[0], alone[0], atol=1e-5, rtol=1e-5)
    embedded = model.embedder(batch)  # positions differ between tokens: no two real tokens get the same code
    assert embedded.shape[:2] == batch.mask.shape


@pytest.mark.parametrize("name", list(TOKENIZERS))
@torch.no_grad()
def test_positions_tell_every_token_apart_and_change_the_output(name: str) -> None:
    tokenizer = TOKENIZERS[name]()
    model = model_for(tokenizer)
    batch = tokenizer.batch([clip(0.5)])
    codes = model.embedder(batch) - model.embedder.proj(batch.features)  # [1, N, d]: the positions' share
    distances = torch.cdist(codes[0], codes[0]) + torch.eye(codes.shape[1]) * 1e9
    assert float(distances.min()) > 1e-3
    shuffled = batch.features.flip(1)
    swapped = type(batch)(mask=batch.mask, features=shuffled, positions=batch.positions)
    assert not torch.allclose(model(batch), model(swapped), atol=1e-4), "order in time must matter"


def test_every_input_form_gives_the_same_tokens(tmp_path: Path) -> None:
    tokenizer = AudioFrameTokenizer(frame_hops=2)
    at_8k = clip(0.5, rate=8000)
    write_wav(tmp_path / "a.wav", at_8k.numpy(), 8000)
    from_file = tokenizer.batch([tmp_path / "a.wav"])
    from_pair = tokenizer.batch([(at_8k.numpy(), 8000)])
    expected = log_mel(resample(at_8k, 8000, 16000), LogMelSettings())
    assert torch.allclose(from_file.features, from_pair.features, atol=2e-3)  # the file holds 16-bit samples
    assert torch.allclose(from_pair.features[0], tokenizer.cut(expected)[0], atol=1e-6)
    at_16k = resample(at_8k, 8000, 16000)
    assert torch.equal(tokenizer.batch([at_16k]).features, tokenizer.batch([(at_16k, 16000)]).features)


def test_clips_are_cut_to_max_seconds_and_a_clip_shorter_than_a_hop_still_makes_a_token() -> None:
    tokenizer = AudioFrameTokenizer(frame_hops=2, max_seconds=0.5)
    batch = tokenizer.batch([clip(3.0), torch.full((20,), 0.1)])
    assert batch.features.shape[1] == tokenizer.max_tokens == 25
    assert batch.mask.sum(1).tolist() == [25, 1]
    assert bool(torch.isfinite(batch.features).all())


def test_a_saved_tokenizer_loads_back_the_same(tmp_path: Path) -> None:
    for tokenizer in (AudioFrameTokenizer(frame_hops=3, features="log", n_mels=40, max_seconds=2.0, sample_rate=8000,
                                          f_max=4000.0, n_fft=256, hop_length=80),
                      AudioPatchTokenizer(patch_mels=8, patch_frames=5, position="learned", position_std=0.3)):
        folder = tokenizer.save(tmp_path / tokenizer.type_name)
        loaded = load_tokenizer(folder)
        assert type(loaded) is type(tokenizer) and loaded.get_config() == tokenizer.get_config()
        assert torch.equal(loaded.batch([clip(0.4)]).features, tokenizer.batch([clip(0.4)]).features)


@pytest.mark.parametrize("build, message", [
    (lambda: AudioPatchTokenizer(n_mels=80, patch_mels=12), "not a multiple of patch_mels"),
    (lambda: AudioFrameTokenizer(frame_hops=0), "frame_hops"),
    (lambda: AudioFrameTokenizer(max_seconds=0), "max_seconds"),
    (lambda: AudioFrameTokenizer(max_seconds=1e9), "max_seconds"),
    (lambda: AudioFrameTokenizer(position="rope"), "sincos, learned or none"),
    (lambda: AudioFrameTokenizer(features="mfcc"), "whisper or log"),
    (lambda: AudioFrameTokenizer(sample_rate=8000), "above Nyquist"),  # f_max 8000 needs 16 kHz
    (lambda: AudioPatchTokenizer(patch_frames=10**6), "patch_frames"),
])
def test_bad_settings_are_one_line_errors(build, message: str) -> None:
    with pytest.raises(TokenizerError, match=message):
        build()


@pytest.mark.parametrize("value, message", [
    (torch.zeros(2, 100), "1-D waveform"), (torch.zeros(0), "1-D waveform"),
    (torch.tensor([0.1, float("nan")] * 100), "NaN or infinite"),
])
def test_bad_waveforms_are_refused(value, message: str) -> None:
    with pytest.raises(TokenizerError, match=message):
        AudioFrameTokenizer().batch([value])


def test_one_clip_is_told_from_a_list_of_clips(tmp_path: Path) -> None:
    assert is_one_clip(tmp_path / "a.wav") and is_one_clip("a.wav") and is_one_clip(np.zeros(10))
    assert is_one_clip((torch.zeros(10), 8000)) and is_one_clip(torch.zeros(10))
    assert not is_one_clip([torch.zeros(10)]) and not is_one_clip(torch.zeros(2, 10))
    assert not is_one_clip((torch.zeros(10), torch.zeros(10)))
