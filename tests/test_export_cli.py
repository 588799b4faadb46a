"""`tokformer export`, then every inference command on the model folder gives what it gives on the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from PIL import Image
from tiny import TINY, TRAIN

from tokformer.cli import main
from tokformer.engine import train

pytestmark = pytest.mark.usefixtures("one_thread")



def invoke(*args: str | Path):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """(run directory, exported model folder) per task, made on first use."""
    root = tmp_path_factory.mktemp("export")

    class Exported(dict):
        def __missing__(self, name: str) -> tuple[Path, Path]:
            run = train(name, run_dir=str(root / name), **TINY[name], **TRAIN).run_dir
            result = invoke("export", run, "--out", root / f"{name}-model")
            assert result.exit_code == 0, result.output
            self[name] = (run, root / f"{name}-model")
            return self[name]

    return Exported()


def _same_output(run: Path, folder: Path, *command: str) -> str:
    on_run, on_folder = invoke(command[0], run, *command[1:]), invoke(command[0], folder, *command[1:])
    assert on_run.exit_code == 0, on_run.output
    assert on_folder.stdout == on_run.stdout  # stdout only: progress and log lines go to stderr
    return on_run.stdout


@pytest.mark.parametrize("name", list(TINY))
def test_evaluate_a_folder_like_its_run(name: str, exported: dict[str, tuple[Path, Path]]) -> None:
    output = _same_output(*exported[name], "evaluate", "--json", "-q", "--device", "cpu", "--batch-size", "8")
    assert "loss" in json.loads(output)["metrics"]


def test_generate_from_a_folder(exported: dict[str, tuple[Path, Path]]) -> None:
    output = _same_output(*exported["lm"], "generate", "-p", "def", "-n", "6", "-t", "0")
    assert output.startswith("def")
    _same_output(*exported["lm"], "generate", "-p", "def", "-p", "class", "-n", "4", "--seed", "3", "--top-k", "5")


def test_translate_from_a_folder(exported: dict[str, tuple[Path, Path]]) -> None:
    _same_output(*exported["translate"], "translate", "twenty-one", "--beam-size", "2")
    _same_output(*exported["translate"], "translate", "--eval", "-q")


def test_predict_from_a_folder(exported: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    image = tmp_path / "red.png"
    Image.new("RGB", (16, 16), (200, 20, 20)).save(image)
    output = _same_output(*exported["classify"], "predict", str(image), "--top-k", "3")
    assert output.startswith(f"{image}: ")


def test_classify_predict_reuses_a_loaded_model(exported: dict[str, tuple[Path, Path]]) -> None:
    import tokformer
    from tokformer.tasks.classify import predict

    loaded = tokformer.load(exported["classify"][1])
    images = [torch.rand(3, 16, 16)]
    assert predict(loaded, images, top_k=2) == predict(exported["classify"][0], images, top_k=2)


def test_export_to_onnx(exported: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    pytest.importorskip("onnx")  # the optional [onnx] extra; our own export module must import regardless
    pytest.importorskip("onnxscript")
    result = invoke("export", exported["sort"][0], "--out", tmp_path / "onnx", "--format", "onnx")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "onnx" / "model.onnx").is_file() and (tmp_path / "onnx" / "model.safetensors").is_file()


def _hf_like(path: Path, model_type: str) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": model_type}))
    (path / "model.safetensors").write_bytes(b"")
    return path


BAD = {
    "export of a folder": (lambda p, e: ["export", e["sort"][1], "--out", p / "x"], 2, "is not a run directory"),
    "export over files": (lambda p, e: ["export", e["sort"][0], "--out", e["sort"][1]], 2, "already exists"),
    "export bad checkpoint": (lambda p, e: ["export", e["sort"][0], "--out", p / "x", "--checkpoint", "7"], 2,
                              "checkpoint '7' not found"),
    "checkpoint of a folder": (lambda p, e: ["evaluate", e["sort"][1], "--checkpoint", "latest"], 2,
                               "applies to run directories only"),
    "generate on a sort folder": (lambda p, e: ["generate", e["sort"][1], "-p", "x"], 2,
                                  "is a run of task 'sort', not of 'lm'"),
    "translate on a sort folder": (lambda p, e: ["translate", e["sort"][1], "eins"], 2, "not a translate model"),
    "unknown model_type": (lambda p, e: ["generate", _hf_like(p / "hf", "bogus-lm"), "-p", "x"], 2, "bogus-lm"),
    "empty folder": (lambda p, e: ["generate", p, "-p", "x"], 2, "has no config.json"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line(case: str, exported: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    make, code, message = BAD[case]
    result = invoke(*make(tmp_path, exported))
    assert result.exit_code == code, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_shape_mismatch_names_the_weights(exported: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    import shutil

    folder = shutil.copytree(exported["sort"][1], tmp_path / "edited")
    config = json.loads((folder / "config.json").read_text())
    config["task"]["d_model"] = 32
    (folder / "config.json").write_text(json.dumps(config))
    result = invoke("evaluate", folder, "-q", "--device", "cpu")
    assert result.exit_code == 1 and "Traceback" not in result.output  # CheckpointError: the weights do not fit
    assert f"{folder / 'model.safetensors'} does not fit the model" in result.output and "shape: " in result.output
