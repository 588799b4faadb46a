"""Task ``classify`` end to end: built-in shapes, an image folder, predict, mixup, bad data."""

import io
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from tokformer.cli import main
from tokformer.engine import load_run, train
from tokformer.errors import DataError
from tokformer.runtime.distributed import local
from tokformer.store import steps
from tokformer.tasks.classify import ClassifyConfig, ClassifyTask, predict
from tokformer.tasks.image_data import make_shapes, to_rgb

TINY_MODEL = {"d_model": 16, "n_heads": 2, "n_layers": 1, "patch_size": 8, "image_size": 16}
TINY_TRAIN = {"steps": 3, "batch_size": 8, "eval_every": 3, "warmup_steps": 1, "train.device": "cpu"}


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_shapes_are_deterministic_and_not_separable_by_mean_colour():
    images, labels = make_shapes(400, 16, seed=3)
    again, _ = make_shapes(400, 16, seed=3)
    assert torch.equal(images, again) and images.dtype == torch.uint8 and images.shape == (400, 3, 16, 16)
    assert sorted(labels.unique().tolist()) == list(range(10))
    # nearest class-mean colour is far from separating the classes (chance: 0.1)
    colour = images.float().mean(dim=(2, 3))  # [n, 3]
    centroids = torch.stack([colour[labels == c].mean(0) for c in range(10)])
    predicted = torch.cdist(colour, centroids).argmin(1)
    assert (predicted == labels).float().mean() < 0.3


def test_train_on_shapes_then_predict(tmp_path):
    run = tmp_path / "run"
    train("classify", run_dir=str(run), quiet=True, train_size=32, eval_size=16, **TINY_MODEL, **TINY_TRAIN)
    assert (run / "plots" / "confusion.png").stat().st_size > 0
    assert json.loads((run / "classes.json").read_text())[0] == "disc"
    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((20, 30, 4), np.uint8), "RGBA").save(image)  # odd size, RGBA
    ranked = predict(run, [image], top_k=3)[0]
    # recomputed from the model: the transparent black image is all zeros at any size, RGB or RGBA
    task, model = load_run(run, "best")
    with torch.no_grad():
        probs = model(task.tokenizer.batch(torch.zeros(1, 3, 16, 16, dtype=torch.uint8))).softmax(-1)[0]
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-6)
    top = probs.topk(3)
    expected = [(task.classes[i], p) for i, p in zip(top.indices.tolist(), top.values.tolist(), strict=True)]
    assert [name for name, _ in ranked] == [name for name, _ in expected], (ranked, expected)
    assert [p for _, p in ranked] == pytest.approx([p for _, p in expected], abs=1e-6), (
        f"predict's probabilities {ranked} are not the top 3 of the model's softmax {expected}")
    result = invoke("predict", str(run), str(image), "--top-k", "2")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{image}: ") and result.output.count(" 0.") == 2
    missing = invoke("predict", str(run), str(tmp_path / "nope.png"))
    assert missing.exit_code == 2 and "no such file" in missing.output and "Traceback" not in missing.output


def _write_folder(root, classes=("cat", "dog"), per_class=6):
    rng = np.random.default_rng(0)
    modes = ["RGB", "L", "RGBA", "P"]
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            size = (13 + i, 17) if c == 0 else (24, 20 - i)
            pixels = rng.integers(0, 256, size=(*size, 3), dtype=np.uint8)
            Image.fromarray(pixels).convert(modes[i % 4]).save(root / name / f"{i}.png")


def test_train_on_an_image_folder_skips_corrupt_files(tmp_path):
    data = tmp_path / "data"
    _write_folder(data)
    (data / "dog" / "broken.png").write_bytes(b"\x89PNG garbage")
    run = tmp_path / "run"
    result = invoke(
        "train", "classify", "-o", f"data={data}", "-o", "val_fraction=0.25",
        "-o", "mixup=0.2", "-o", "cutmix=1.0", "-o", "crop_scale=0.5",
        *[f"-o{k}={v}" for k, v in TINY_MODEL.items()],
        "--steps", "2", "--batch-size", "4", "--eval-every", "2", "--warmup-steps", "1", "--device", "cpu",
        "--run-dir", str(run), "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "skipping unreadable image" in result.output and "broken.png" in result.output
    assert json.loads((run / "classes.json").read_text()) == ["cat", "dog"]


def write_broken_pixels(path: Path) -> None:
    """A PNG whose header and checksums are valid over pixel data that is not a zlib stream: it passes
    the scan's cheap check (PIL identifies and verifies it) and fails only when decoded."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), "red").save(buffer, "PNG")
    data = bytearray(buffer.getvalue())
    at = data.index(b"IDAT")
    n = int.from_bytes(data[at - 4:at], "big")
    data[at + 4:at + 4 + n] = bytes((j * 37 + 11) % 256 for j in range(n))
    data[at + 4 + n:at + 8 + n] = zlib.crc32(bytes(data[at:at + 4 + n])).to_bytes(4, "big")
    path.write_bytes(bytes(data))


def test_an_image_that_fails_only_when_decoded_is_skipped_for_the_next_one(tmp_path, caplog):
    from tokformer.tasks.image_data import ImageFiles, readable_image

    _write_folder(tmp_path)
    good = sorted((tmp_path / "cat").iterdir())[:2]
    write_broken_pixels(tmp_path / "dog.png")
    assert readable_image(tmp_path / "dog.png") and not readable_image(tmp_path / "dog.png", decode=True)
    files = ImageFiles([(good[0], 0), (tmp_path / "dog.png", 1), (good[1], 0)], ["cat", "dog"])
    image, label = files[1]
    assert label == 0 and image.tobytes() == Image.open(good[1]).convert(image.mode).tobytes()
    assert "dog.png" in caplog.text and "skipping an image that cannot be decoded" in caplog.text
    assert files[0][1] == 0 and len(files) == 3


def test_a_folder_of_images_that_all_fail_when_decoded_is_a_data_error(tmp_path, monkeypatch):
    from tokformer.tasks import image_data

    monkeypatch.setattr(image_data, "MAX_SKIPPED_IN_A_ROW", 2)
    for i in range(4):
        write_broken_pixels(tmp_path / f"{i}.png")
    files = image_data.ImageFiles([(tmp_path / f"{i}.png", 0) for i in range(4)], ["x"])
    with pytest.raises(DataError, match=r"3 image files in a row, from .*1\.png on, cannot be decoded"):
        files[1]
    two = image_data.ImageFiles([(tmp_path / f"{i}.png", 0) for i in range(2)], ["x"])
    with pytest.raises(DataError, match="2 image files in a row"):  # each file tried once
        two[0]


def test_train_on_a_folder_with_an_image_that_fails_only_when_decoded_finishes(tmp_path):
    data = tmp_path / "data"
    _write_folder(data)
    write_broken_pixels(data / "dog" / "broken.png")
    result = invoke("train", "classify", "-o", f"data={data}", "-o", "val_fraction=0.25",
                    *[f"-o{k}={v}" for k, v in TINY_MODEL.items()], "--steps", "4", "--batch-size", "8",
                    "--eval-every", "4", "--warmup-steps", "1", "--device", "cpu", "--run-dir", str(tmp_path / "run"),
                    "--quiet")
    assert result.exit_code == 0, result.output
    assert "broken.png" in result.output and steps.list_checkpoints(tmp_path / "run") == [4]


def test_train_and_val_subfolders(tmp_path):
    _write_folder(tmp_path / "d" / "train")
    _write_folder(tmp_path / "d" / "val", per_class=2)
    task = ClassifyTask(ClassifyConfig(data=str(tmp_path / "d"), **TINY_MODEL))
    assert len(task.train_dataset()) == 12 and len(task.eval_dataset()) == 4
    image, label = task.eval_dataset()[0]
    assert image.dtype == torch.uint8 and image.shape[0] == 3 and label == 0


def test_large_images_are_evaluated_at_the_models_size_as_they_are_read(tmp_path):
    """An evaluation batch (`evaluate --data`, a folder's held-out split) was stacked at the files' size and
    made float before the tokenizer resized it: 32 PNGs of 5700x5700 pixels (3 MB on disk) asked for
    12.5 GB. Each image is now resized as it is read, with the tokenizer's interpolation (timm's eval
    transform does the same), so a batch is batch x image_size^2 whatever the files, and its tokens are
    the ones the tokenizer made of the whole image, to one step of a uint8 pixel (the resize rounds and clips)."""
    rows, cols = np.mgrid[0:600, 0:900]
    for c, name in enumerate(("cat", "dog")):
        for i in range(2):
            (tmp_path / "d" / name).mkdir(parents=True, exist_ok=True)
            smooth = np.stack([(rows * (1 + c + i) + cols) % 256, cols % 256, rows % 256], -1).astype(np.uint8)
            Image.fromarray(smooth).save(tmp_path / "d" / name / f"{i}.png")
    task = ClassifyTask(ClassifyConfig(data=str(tmp_path / "d"), val_fraction=0.5, **TINY_MODEL))
    for dataset in (task.eval_dataset(), task.eval_data(str(tmp_path / "d"), tmp_path, local("cpu"))):
        image, _ = dataset[0]
        assert image.shape == (3, 16, 16) and image.dtype == torch.uint8
    read, _ = task.eval_data(str(tmp_path / "d"), tmp_path, local("cpu"))[0]
    whole = to_rgb(Image.open(tmp_path / "d" / "cat" / "0.png"))  # [3, 600, 900]: the tokenizer resizes it
    torch.testing.assert_close(task.tokenizer.batch([read]).features, task.tokenizer.batch([whole]).features,
                               atol=1 / 255 / min(task.tokenizer.std), rtol=0)  # one uint8 step


def test_mixup_gives_smoothed_soft_targets():
    task = ClassifyTask(ClassifyConfig(train_size=8, eval_size=8, mixup=0.4, label_smoothing=0.1, **TINY_MODEL))
    dataset = task.train_dataset()
    batch = task.collate([dataset[i] for i in range(8)], train=True)
    targets = batch["targets"]  # [8, 10]
    assert targets.shape == (8, 10)
    torch.testing.assert_close(targets.sum(-1), torch.ones(8))
    # smoothing puts s / C = 0.01 on every class; mixing two samples adds mass to at most two classes per row
    floor = torch.isclose(targets, torch.tensor(0.01), atol=1e-6)
    assert floor.sum(-1).min() >= 8 and targets.min() == pytest.approx(0.01, abs=1e-6), targets
    plain = task.collate([task.eval_dataset()[i] for i in range(4)], train=False)
    assert torch.equal(plain["targets"], plain["labels"])  # eval batches are never mixed


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda root: root.mkdir(), "no class folders"),
        (lambda root: (root / "cat").mkdir(parents=True), "has no readable image files"),
        (lambda root: None, "neither a folder nor a known dataset"),
    ],
)
def test_bad_folders_are_one_line_errors(tmp_path, setup, message):
    root = tmp_path / "data"
    setup(root)
    result = invoke("train", "classify", "-o", f"data={root}", "--steps", "1", "--run-dir", str(tmp_path / "r"), "-q")
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_missing_torchvision_dataset_without_download(tmp_path):
    task = ClassifyTask(ClassifyConfig(data="cifar10", data_root=str(tmp_path)))
    with pytest.raises(DataError, match="download=true"):
        task.train_dataset()


@pytest.mark.parametrize(
    ("options", "message"),
    [({"patch_size": 5}, "not a multiple of patch_size"), ({"d_model": 70, "n_heads": 5}, "divisible by 4")],
)
def test_bad_model_options_fail_before_any_data_is_made(tmp_path, options, message):
    flags = [f"-o{k}={v}" for k, v in options.items()]
    result = invoke("train", "classify", *flags, "--run-dir", str(tmp_path / "r"), "-q")
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_train_a_modern_vit_from_task_options(tmp_path):
    """2-D RoPE, registers, attention pooling, layer scale, SwiGLU, RMSNorm, GQA, q/k norm: all task options."""
    from tokformer.layers import GatedFeedForward, LayerScale

    run = tmp_path / "run"
    modern = {"position": "rope", "n_registers": 2, "pool": "map", "layer_scale": 1e-2, "mlp": "swiglu",
              "norm": "rms", "n_kv_heads": 1, "qk_norm": True}
    train("classify", run_dir=str(run), quiet=True, train_size=32, eval_size=16, **TINY_MODEL, **TINY_TRAIN,
          **modern)
    result = invoke("predict", str(run), *map(str, _pngs(tmp_path, 2)), "--top-k", "2")
    assert result.exit_code == 0, result.output
    from tokformer.engine import load_run

    task, model = load_run(run)
    block = model.encoder.blocks[0]
    assert model.encoder.rotary.dims == 2 and model.embedder.sincos is None and model.embedder.pos_embed is None
    assert model.encoder.registers.shape == (1, 2, 16) and model.head.attn_pool is not None
    assert isinstance(block.ls1, LayerScale) and isinstance(block.mlp, GatedFeedForward)
    assert isinstance(block.norm1, torch.nn.RMSNorm) and block.attn.n_kv_heads == 1
    assert isinstance(block.attn.q_norm, torch.nn.RMSNorm)


def _pngs(root, n):
    paths = []
    images, _ = make_shapes(n, 16, seed=0)
    for i, image in enumerate(images):
        path = root / f"img{i}.png"
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(path)
        paths.append(path)
    return paths


@pytest.mark.parametrize("tokenizer", ["local", "linear"])
def test_tokenizer_option_picks_the_patch_embedding_and_survives_reload(tmp_path, tokenizer):
    """`--tokenizer local` (the default) embeds patches with a per-patch CNN, `linear` with one matrix;
    the run directory rebuilds it with the same tokenizer."""
    from tokformer.engine import load_run
    from tokformer.tokenizers.image_local import LocalPatchTokenizer, PatchCNN

    run = tmp_path / "run"
    result = invoke("train", "classify", "--tokenizer", tokenizer, "--cnn-width", "4", "--cnn-depth", "1",
                    *[f"-o{k}={v}" for k, v in {**TINY_MODEL, "train_size": 32, "eval_size": 16}.items()],
                    "--steps", "2", "--batch-size", "8", "--eval-every", "2", "--device", "cpu",
                    "--run-dir", str(run), "-q")
    assert result.exit_code == 0, result.output
    task, model = load_run(run)
    local = tokenizer == "local"
    assert isinstance(task.tokenizer, LocalPatchTokenizer) == local
    assert isinstance(model.embedder.proj, PatchCNN) == local
    if local:
        assert (task.tokenizer.cnn_width, task.tokenizer.cnn_depth) == (4, 1)
