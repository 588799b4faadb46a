"""Task ``audio`` end to end: the built-in data's design, a folder with bad files, predict, evaluate, fine-tuning,
the augmentations, and two processes."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from click.testing import CliRunner
from tiny import TINY, TRAIN, torchrun_cli

from tokformer.cli import main
from tokformer.engine import load_run, train
from tokformer.tasks import audio_data, image_baselines
from tokformer.tasks.audio import MEAN_LOG_MEL, AudioConfig, AudioTask, predict
from tokformer.tasks.audio_data import EVENT_CLASSES, Augmentation, make_events, save_class_folders
from tokformer.tokenizers.audio_io import write_wav

pytestmark = pytest.mark.usefixtures("one_thread")

TINY_AUDIO = TINY["audio"]


def invoke(*args: str | Path):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_events_are_deterministic_and_hold_every_event_in_every_clip() -> None:
    clips, labels = make_events(60, seed=5)
    again, same = make_events(60, seed=5)
    assert labels == same and all(np.array_equal(a, b) for a, b in zip(clips, again, strict=True))
    assert sorted(set(labels)) == list(range(6)) and all(len(c) == 16000 and c.dtype == np.float32 for c in clips)
    assert len(set(EVENT_CLASSES)) == 6 and all(sorted(c.split("-")) == ["chirp", "hiss", "hum"]
                                                for c in EVENT_CLASSES)


def test_the_class_is_in_the_order_not_in_the_bag_of_features() -> None:
    """The design the task states: a logistic regression on each clip's mean log-mel (its baseline) is near
    chance, while the same regression on the mean of each third of the clip, in order, is not."""
    task = AudioTask(AudioConfig(train_size=480, eval_size=240, data_seed=7))
    train_set, eval_set = task.train_dataset(), task.eval_dataset()
    scores = task.baselines(eval_set)
    assert scores[MEAN_LOG_MEL]["accuracy"] < 0.3  # chance: 1/6
    assert scores[image_baselines.MAJORITY]["accuracy"] < 0.3

    def thirds(dataset, n):
        rows, labels = [], []
        for i in range(n):
            clip, label = dataset[i]
            spectrogram = task.tokenizer.features(task.tokenizer.waveform(clip))  # [80, 100]
            rows.append(torch.cat([part.mean(1) for part in spectrogram.chunk(3, dim=1)]).double())
            labels.append(label)
        return torch.stack(rows), torch.tensor(labels)

    x, y = thirds(train_set, 480)
    mean, std = image_baselines.standardiser(x)
    weight, bias = image_baselines.fit_softmax((x - mean) / std, y, 6)
    ex, ey = thirds(eval_set, 240)
    assert image_baselines.top1_top5(((ex - mean) / std) @ weight + bias, ey)["accuracy"] > 0.9


@pytest.fixture(scope="module")
def events_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train("audio", run_dir=str(tmp_path_factory.mktemp("audio") / "run"), **TINY_AUDIO, **TRAIN).run_dir


def test_train_on_events_then_predict_files_and_waveforms(events_run: Path, tmp_path: Path) -> None:
    assert json.loads((events_run / "classes.json").read_text()) == list(EVENT_CLASSES)
    assert (events_run / "plots" / "confusion.png").stat().st_size > 0
    clips, _ = make_events(2, seed=99)
    write_wav(tmp_path / "a.wav", clips[0], 16000)
    ranked = predict(events_run, tmp_path / "a.wav", top_k=3)
    task, model = load_run(events_run, "best")
    with torch.no_grad():
        probs = model(task.tokenizer.batch([torch.from_numpy(clips[0])])).softmax(-1)[0]
    top = probs.topk(3)
    assert [name for name, _ in ranked] == [task.classes[i] for i in top.indices.tolist()]
    assert [p for _, p in ranked] == pytest.approx(top.values.tolist(), abs=1e-3)  # the file is 16-bit
    assert len(predict(events_run, [(clips[1], 16000), torch.from_numpy(clips[0])], top_k=1)) == 2
    result = invoke("predict", events_run, tmp_path / "a.wav", "--top-k", "2")
    assert result.exit_code == 0 and result.output.startswith(f"{tmp_path / 'a.wav'}: "), result.output


def test_evaluate_a_run_on_a_folder_of_its_classes(events_run: Path, tmp_path: Path) -> None:
    clips, labels = make_events(12, seed=3)
    folder = save_class_folders(clips, [EVENT_CLASSES[i] for i in labels], 16000, tmp_path / "eval")
    result = invoke("evaluate", events_run, "--data", folder, "--json", "-q")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["metrics"]["accuracy"] >= 0.0
    (folder / "unknown").mkdir()
    write_wav(folder / "unknown" / "x.wav", clips[0], 16000)
    result = invoke("evaluate", events_run, "--data", folder)
    assert result.exit_code != 0 and "classes the training data lacks: unknown" in result.output


def test_a_folder_with_bad_files_trains_and_names_and_counts_them(tmp_path: Path, caplog) -> None:
    clips, labels = make_events(40, seed=1, rate=8000)
    root = tmp_path / "data"
    save_class_folders(clips[:30], [EVENT_CLASSES[i] for i in labels[:30]], 8000, root / "train")
    save_class_folders(clips[30:], [EVENT_CLASSES[i] for i in labels[30:]], 8000, root / "val")
    bad = root / "train" / EVENT_CLASSES[labels[0]]
    (bad / "empty.wav").write_bytes(b"")
    (bad / "text.wav").write_text("not sound")
    (bad / "notes.txt").write_text("not a sound file by its name: not looked at")
    with caplog.at_level(logging.WARNING):
        result = train("audio", data=str(root), run_dir=str(tmp_path / "run"), **TINY_AUDIO, **TRAIN)
    assert "skipped 2 unreadable sound files under" in caplog.text
    assert "empty.wav" in caplog.text and "text.wav" in caplog.text and "notes.txt" not in caplog.text
    assert result.metrics["accuracy"] >= 0.0
    task, _ = load_run(result.run_dir)
    assert len(task.classes) == len({EVENT_CLASSES[i] for i in labels[:30]})


@pytest.mark.parametrize("setup, message", [
    (lambda root: None, "neither a folder nor the built-in events"),
    (lambda root: root.mkdir(), "has no class folders: expected .*/CLASS_NAME/audio.wav"),
    (lambda root: (root / "dog").mkdir(parents=True), "has no readable audio files"),
])
def test_bad_folders_are_one_line_errors(tmp_path: Path, setup, message: str) -> None:
    root = tmp_path / "sounds"
    setup(root)
    result = invoke("train", "audio", "--data", root, "--run-dir", tmp_path / "run")
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert result.exit_code != 0 and len(errors) == 1 and "Traceback" not in result.output, result.output
    assert re.search(message, errors[0]), result.output


@pytest.mark.parametrize("flags, message", [
    (["--tokens", "patches", "--n-mels", "40", "--patch-mels", "16"], "not a multiple of patch_mels"),
    (["--max-seconds", "0"], "max_seconds"), (["--sample-rate", "8000"], "above Nyquist"),
    (["--time-masks", "-1"], "time_masks"), (["--tokens", "patches", "--d-model", "18"], "divisible by 4"),
])
def test_bad_options_fail_before_any_data_is_made(tmp_path: Path, flags: list[str], message: str) -> None:
    result = invoke("train", "audio", *flags, "--run-dir", tmp_path / "run")
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "run").exists()


def test_fine_tuning_from_a_run_adopts_its_shape_and_tokenizer(events_run: Path, tmp_path: Path) -> None:
    result = train("audio", init_from=str(events_run), run_dir=str(tmp_path / "ft"),
                   **{**TINY_AUDIO, "d_model": 32, "frame_hops": 4}, **TRAIN)
    saved = json.loads((result.run_dir / "config.json").read_text())["task"]
    assert saved["d_model"] == 16 and saved["frame_hops"] == 2, "the source's architecture, not the flags'"


def test_shift_and_noise_keep_the_length_and_are_off_at_zero() -> None:
    wave = torch.arange(1, 101, dtype=torch.float32)
    assert torch.equal(Augmentation().waveform(wave, 100), wave)
    torch.manual_seed(0)
    shifted = [Augmentation(shift=0.2).waveform(wave, 100) for _ in range(20)]
    assert all(len(s) == 100 for s in shifted) and any(not torch.equal(s, wave) for s in shifted)
    for s in shifted:  # a shift: the clip's samples in order, zeros where it moved away
        kept = s[s != 0]
        start = int(kept[0]) - 1
        assert torch.equal(kept, wave[start: start + len(kept)]) and 80 <= len(kept) <= 100
    noisy = Augmentation(noise=0.5).waveform(wave, 100)
    rms = wave.square().mean().sqrt()
    assert 0 < float((noisy - wave).std()) < 0.5 * float(rms)
    for _ in range(20):  # a gain: the same clip scaled, by at most 6 dB either way
        scale = Augmentation(gain=6.0).waveform(wave, 100) / wave
        assert float(scale.max() - scale.min()) < 1e-5 and 10 ** (-6 / 20) - 1e-6 <= float(scale[0]) <= 10 ** (6 / 20)


def test_spec_augment_masks_stay_within_their_widths_and_fill_with_the_mean() -> None:
    torch.manual_seed(1)
    spectrogram = torch.randn(80, 50) + 10
    augment = Augmentation(freq_masks=2, freq_mask_width=8, time_masks=3, time_mask_width=5)
    for _ in range(10):
        masked = augment.spectrogram(spectrogram)
        changed = masked != spectrogram
        assert bool((masked[changed] == spectrogram.mean()).all())
        rows, cols = changed.all(dim=1), changed.all(dim=0)
        assert int(rows.sum()) <= 16 and int(cols.sum()) <= 15
        assert bool((changed == (rows[:, None] | cols[None, :])).all()), "whole bands and whole spans only"
    assert torch.equal(Augmentation().spectrogram(spectrogram), spectrogram)


def test_augmentation_is_reproducible_from_the_seed() -> None:
    task = AudioTask(AudioConfig(train_size=8, eval_size=4, d_model=16, n_heads=2, n_layers=1))
    items = [task.train_dataset()[i] for i in range(4)]
    torch.manual_seed(3)
    first = task.collate(items, train=True)["tokens"].features
    torch.manual_seed(3)
    assert torch.equal(task.collate(items, train=True)["tokens"].features, first)
    plain = task.collate(items, train=False)["tokens"].features
    assert not torch.equal(plain, first) and torch.equal(task.collate(items, train=False)["tokens"].features, plain)


def test_files_that_break_when_decoded_are_skipped_for_the_next(tmp_path: Path, caplog) -> None:
    write_wav(tmp_path / "good.wav", np.zeros(100), 8000)
    (tmp_path / "bad.wav").write_bytes(b"RIFF")
    files = audio_data.AudioFiles([(tmp_path / "bad.wav", 0), (tmp_path / "good.wav", 1)], ["a", "b"])
    with caplog.at_level(logging.WARNING):
        (waveform, rate), label = files[0]
    assert label == 1 and rate == 8000 and len(waveform) == 100 and "bad.wav" in caplog.text


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_gloo_available(), reason="needs the gloo backend")
def test_two_processes_train_audio(tmp_path: Path) -> None:
    run = tmp_path / "ddp"
    args = ["train", "audio", "--quiet", "--run-dir", str(run), "--steps", "2", "--eval-every", "2", "--device", "cpu"]
    args += [a for k, v in TINY_AUDIO.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    done = torchrun_cli(*args)
    assert done.stdout.count("done: 2 steps") == 1
    assert json.loads((run / "best.json").read_text())["step"] == 2
