"""Hostile folders, careless commands and resource bombs (docs/reliability.md, the H rows).

Each test feeds one class of bad input or fault and checks the contract: a one-line error
with the right exit code (or a correct result), nothing lost that tokformer did not write,
no half-written folder, nothing read outside the folder given, and no allocation that a
few bytes of input could make unbounded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from PIL import Image
from safetensors.torch import save_file
from tiny import TINY, TRAIN

import tokformer
from tokformer import files
from tokformer.cli import main
from tokformer.engine import load_run, train
from tokformer.errors import CheckpointError, ConfigError, DataError
from tokformer.interop.export import export_run
from tokformer.sampling import SamplingConfig, sample_next
from tokformer.store import lock, run_dir, steps
from tokformer.store.weights import check_fits
from tokformer.tokenizers import pretokenize
from tokformer.tokenizers.image import MAX_IMAGE_PIXELS, open_image

pytestmark = pytest.mark.usefixtures("one_thread")
SORT = [f"--{k.replace('_', '-')}={v}" for k, v in TINY["sort"].items()] + ["--steps", "2", "--eval-every", "2",
                                                                              "--warmup-steps", "1", "-q"]


def one_line_error(result, code: int = 2) -> str:
    """The CLI result failed with ``code`` and printed exactly one ``Error:`` line, no traceback."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    return lines[0]


@pytest.fixture(scope="module")
def sort_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train("sort", run_dir=str(tmp_path_factory.mktemp("runs") / "sort"), **TINY["sort"], **TRAIN).run_dir


def fresh_copy(run: Path, tmp_path: Path, name: str = "run") -> Path:
    return shutil.copytree(run, tmp_path / name)


# -- H1-H4: nothing destroyed that tokformer did not write; one run per directory -------------


def test_overwrite_refuses_a_directory_that_is_no_run(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("two years of work")
    line = one_line_error(CliRunner().invoke(main, ["train", "sort", "--run-dir", str(mine), "--overwrite", *SORT]))
    assert "replaces only a tokformer run" in line and "thesis.txt" in line
    assert (mine / "thesis.txt").read_text() == "two years of work"


def test_overwrite_with_bad_input_keeps_the_run_it_would_replace(sort_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(sort_run, tmp_path)
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    result = CliRunner().invoke(main, ["train", "lm", "--data", str(tmp_path / "does-not-exist"), "--run-dir",
                                       str(run), "--overwrite", "-q"])
    assert result.exit_code == 2 and "does-not-exist" in result.output, result.output
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before, "the good run is back, byte for byte"
    assert not list(tmp_path.glob(".run.*")), "nothing set aside is left behind"


def test_overwrite_replaces_a_run_once_the_new_one_stands(sort_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(sort_run, tmp_path)
    old = run / "checkpoints" / "step-00000099" / "state.json"  # a checkpoint the new run does not write
    old.parent.mkdir()
    old.write_text("old")
    result = train("sort", run_dir=str(run), overwrite=True, **{**TINY["sort"], "d_model": 8}, **TRAIN)
    assert not old.parent.exists() and result.step == 2
    assert json.loads((run / "config.json").read_text())["task"]["d_model"] == 8
    assert [p.name for p in tmp_path.iterdir()] == ["run"], "no aside copy and no lock file left"


@pytest.mark.parametrize("new_run_saved", [False, True])
def test_an_overwrite_that_was_killed_leaves_one_whole_run(sort_run: Path, tmp_path: Path,
                                                           new_run_saved: bool) -> None:
    """Killed between setting the old run aside and the new run's first checkpoint: the next start
    restores the old run; killed after it: the new run stands and the old one goes."""
    run = fresh_copy(sort_run, tmp_path)
    aside = run_dir.set_aside(run)
    if new_run_saved:
        shutil.copytree(aside, run)
        (run / "new.txt").write_text("new")
    else:
        run.mkdir()
        (run / "config.json").write_text("{}")  # the half-made new run
    run_dir.recover(run)
    assert not aside.exists()
    assert (run / "new.txt").exists() == new_run_saved and steps.list_checkpoints(run) == [2]


def test_a_run_whose_overwrite_was_killed_names_the_kept_run_until_train_puts_it_back(sort_run: Path,
                                                                                    tmp_path: Path) -> None:
    """Killed before its first checkpoint, a ``train --overwrite`` leaves the old run hidden beside the
    half-made new one: ``evaluate``, ``predict`` and ``export`` said only "has this run saved one yet?"."""
    run = fresh_copy(sort_run, tmp_path)
    aside = run_dir.set_aside(run)
    run.mkdir()
    (run / "config.json").write_text((aside / "config.json").read_text())  # the half-made new run
    for command in (["evaluate", str(run)], ["predict", str(run), "312"],
                    ["export", str(run), "-o", str(tmp_path / "m")]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2, result.output
        assert f"the run it replaces is kept as {aside}" in result.output and len(result.output.splitlines()) == 1
    refused = CliRunner().invoke(main, ["train", "sort", "--run-dir", str(run), "--steps", "2"])
    assert "already exists" in refused.output  # refused as any run there is, after putting the old one back
    assert not aside.exists() and steps.list_checkpoints(run) == [2]
    assert CliRunner().invoke(main, ["evaluate", str(run), "-q"]).exit_code == 0


@pytest.mark.parametrize(("name", "other"), [("exp[12]", "exp1"), ("exp*", "exp-old"), ("a", "a.replaced-x")])
def test_recovering_a_run_never_touches_another_runs_aside_copy(sort_run: Path, tmp_path: Path, name: str,
                                                                 other: str) -> None:
    """Another run's killed --overwrite left its old run aside; a run whose name, as a glob pattern or as a
    prefix, also covers that copy's name must neither take it as its own old run nor delete it."""
    aside = run_dir.set_aside(fresh_copy(sort_run, tmp_path, other))  # the other run's overwrite was killed here
    held = sorted(p.relative_to(aside).as_posix() for p in aside.rglob("*"))
    run = fresh_copy(sort_run, tmp_path, name)  # a run that stands (it has checkpoints): a recovery would discard
    run_dir.recover(run)
    shutil.rmtree(run)
    run_dir.recover(run)  # no run there at all: a recovery would restore
    assert sorted(p.relative_to(aside).as_posix() for p in aside.rglob("*")) == held and not run.exists()


def test_an_export_clears_its_own_killed_staging_folder_and_nothing_else(sort_run: Path, tmp_path: Path) -> None:
    """A killed export leaves .NAME.tmp-XXXXXXXX; the next export to NAME removes it, but not the folder an
    export to m1 is filling (``m[12]`` as a glob covers it) nor a user's folder that only looks alike."""
    own, others = tmp_path / ".m[12].tmp-abcd_123", [tmp_path / ".m1.tmp-abcd_123", tmp_path / ".m[12].tmp-notes"]
    for folder in (own, *others):
        folder.mkdir()
        (folder / "file").write_text("kept?")
    export_run(sort_run, tmp_path / "m[12]")
    assert not own.exists() and all((folder / "file").exists() for folder in others)
    assert (tmp_path / "m[12]" / "model.safetensors").is_file()


def test_a_second_train_on_a_locked_run_directory_exits_naming_the_holder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with lock.hold(run, "tokformer train (the first)"):
        line = one_line_error(CliRunner().invoke(main, ["train", "sort", "--run-dir", str(run), *SORT]))
    assert "in use by tokformer train (the first)" in line and f"pid {os.getpid()}" in line
    assert not run.exists(), "the second command wrote nothing"
    CliRunner().invoke(main, ["train", "sort", "--run-dir", str(run), *SORT])  # released: it runs
    assert steps.list_checkpoints(run) == [2]


def test_a_lock_is_released_when_its_holder_dies(tmp_path: Path) -> None:
    script = ("import sys, time; from tokformer.store import lock\n"
              f"with lock.hold({str(tmp_path / 'run')!r}, 'killed'):\n    print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="in use by killed"), lock.hold(tmp_path / "run", "second"):
            pass
    finally:
        holder.kill()
        holder.wait()
    with lock.hold(tmp_path / "run", "second"):  # the kernel dropped the dead holder's lock: never stale
        pass


@pytest.mark.parametrize("content", [b"my notes\n", b'{"pid": 1}', bytes(range(256))])  # prose, another JSON, binary
def test_a_users_file_by_the_lock_files_name_is_refused_and_kept(tmp_path: Path, content: bytes) -> None:
    (tmp_path / ".run.lock").write_bytes(content)  # the lock's name for run/: it was truncated, then deleted
    line = one_line_error(CliRunner().invoke(main, ["train", "sort", "--run-dir", str(tmp_path / "run"), *SORT]))
    assert f"{tmp_path / '.run.lock'} is not a tokformer lock file" in line
    assert (tmp_path / ".run.lock").read_bytes() == content and not (tmp_path / "run").exists()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_users_fifo_or_folder_by_the_lock_files_name_is_refused_and_kept(tmp_path: Path, kind: str,
                                                                           named_pipe) -> None:
    """A FIFO there was taken for an empty lock file: truncating it failed (`Error: [Errno 22] Invalid
    argument`, exit 1) and the lock's cleanup deleted it. A folder there was `Error: Is a directory`."""
    held = tmp_path / ".run.lock"
    named_pipe(held) if kind == "fifo" else held.mkdir()
    line = one_line_error(CliRunner().invoke(main, ["train", "sort", "--run-dir", str(tmp_path / "run"), *SORT]))
    assert f"{held} is not a tokformer lock file" in line
    assert (held.is_fifo() if kind == "fifo" else held.is_dir()) and not (tmp_path / "run").exists()


def test_a_lock_file_named_by_a_link_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "notes").write_bytes(b"")
    (tmp_path / ".run.lock").symlink_to(tmp_path / "notes")
    with pytest.raises(OSError, match="symbolic links"), lock.hold(tmp_path / "run", "train"):
        pass
    assert (tmp_path / "notes").read_bytes() == b"" and (tmp_path / ".run.lock").is_symlink()


def test_taking_a_lock_clears_the_staging_folders_a_killed_holder_left_and_nothing_else(tmp_path: Path) -> None:
    """While the lock is held no build of the folder runs, so its staging folders are a killed one's."""
    stale, users = tmp_path / ".run.tmp-ab_12cd3", [tmp_path / ".run.tmp-notes", tmp_path / ".run1.tmp-ab_12cd3"]
    for folder in (stale, *users):
        folder.mkdir()
    with lock.hold(tmp_path / "run", "train"):
        assert not stale.exists() and all(folder.is_dir() for folder in users)


def test_taking_a_lock_undoes_a_replacement_killed_between_its_renames(tmp_path: Path) -> None:
    """``data prepare lm --overwrite`` killed after moving the older shards aside and before renaming the
    new ones in: the next command on that folder finds the older shards in place, not under a hidden name."""
    older = tmp_path / ".shards.old-ab_12cd3"
    older.mkdir()
    (older / "index.json").write_text("{}")
    with lock.hold(tmp_path / "shards", "tokformer data prepare lm"):
        assert (tmp_path / "shards" / "index.json").read_text() == "{}" and not older.exists()


def test_the_lock_file_a_killed_holder_left_is_taken_over_and_removed(tmp_path: Path) -> None:
    left = {"pid": 1, "host": "h", "command": "tokformer train", "since": "2026-12-05 09:00:00"}
    (tmp_path / ".run.lock").write_text(json.dumps(left))
    with lock.hold(tmp_path / "run", "second"):
        assert json.loads((tmp_path / ".run.lock").read_text())["command"] == "second"
    assert not (tmp_path / ".run.lock").exists()


def test_a_failure_that_is_no_usage_error_also_leaves_no_half_made_run(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from tokformer.tasks.sort import SortTask

    def broken(self, run_dir, dist):
        raise RuntimeError("a fault inside the task")

    monkeypatch.setattr(SortTask, "setup", broken)
    with pytest.raises(RuntimeError, match="a fault inside the task"):
        train("sort", run_dir=str(tmp_path / "run"), **TINY["sort"], **TRAIN)
    assert not (tmp_path / "run").exists()


# -- H5: folders appear whole or not at all ---------------------------------------------------


def test_an_export_that_fails_half_way_leaves_no_folder_and_can_be_rerun(sort_run: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tokformer.interop import export

    def onnx_dies(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "export_onnx", onnx_dies)
    with pytest.raises(OSError):
        export.export_run(sort_run, tmp_path / "out", format="onnx")
    assert list(tmp_path.iterdir()) == [], "no folder, no temporary sibling, no lock file"
    monkeypatch.undo()
    folder = export.export_run(sort_run, tmp_path / "out")  # the rerun is not refused
    assert len(tokformer.load(folder)([[3, 1, 2, 0, 5, 4]])[0]) == 6


# -- H6-H8: every path read from a file stays inside its folder -------------------------------


@pytest.mark.parametrize("name", ["../other/model.safetensors", "/etc/passwd", "a/../../x", "", 7])
def test_a_file_name_from_an_index_may_not_leave_its_folder(tmp_path: Path, name) -> None:
    with pytest.raises(DataError, match="index.json: weight_map"):
        files.inside(tmp_path, name, "index.json: weight_map")


def test_a_link_that_leads_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "secret").write_text("x")
    (tmp_path / "folder" / "shard.safetensors").symlink_to(tmp_path / "secret")
    with pytest.raises(DataError, match="link that leads outside"):
        files.inside(tmp_path / "folder", "shard.safetensors", "manifest")
    assert files.inside(tmp_path, "folder/x", "manifest") == tmp_path / "folder" / "x"


def test_a_hugging_face_index_naming_another_folder_is_refused(tmp_path: Path) -> None:
    from tokformer.interop.hf import read_state

    (tmp_path / "other").mkdir()
    save_file({"w": torch.zeros(2)}, tmp_path / "other" / "model.safetensors")
    (tmp_path / "hf").mkdir()
    index = {"weight_map": {"w": "../other/model.safetensors"}}
    (tmp_path / "hf" / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(DataError, match="points outside"):
        read_state(tmp_path / "hf")


@pytest.mark.parametrize("edit", ["shard named ../x", "shards a list", "huge tensor", "world a string", "a pipe"])
def test_a_sharded_manifest_with_bad_fields_is_damaged_and_resume_falls_back(tmp_path: Path, named_pipe,
                                                                             edit: str) -> None:
    run = train("sort", run_dir=str(tmp_path / "run"), strategy="fsdp", **TINY["sort"],
                **{**TRAIN, "steps": 4}).run_dir
    manifest_file = steps.step_dir(run, 4) / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    if edit == "shard named ../x":
        manifest["shards"] = {"../x.safetensors": 10}
    elif edit == "shards a list":
        manifest["shards"] = list(manifest["shards"])
    elif edit == "huge tensor":
        manifest["tensors"][next(iter(manifest["tensors"]))]["shape"] = [1 << 40, 1 << 20]
    elif edit == "world a string":
        manifest["world"] = "one"
    manifest_file.unlink()
    if edit == "a pipe":  # read as a file, it blocked load_run and the resume forever
        named_pipe(manifest_file)
    else:
        manifest_file.write_text(json.dumps(manifest))
    named = "is not a regular file" if edit == "a pipe" else "is damaged"
    with pytest.raises(CheckpointError, match=f"^checkpoint file {re.escape(str(manifest_file))} {named}"):
        load_run(run, checkpoint="latest")
    result = train(resume=str(run), steps=6, quiet=True)  # falls back to step 2 and trains on
    assert result.step == 6


def _two_shard_checkpoint(folder: Path, rank1_offset: list[int], manifest_dtype: str = "float32",
                          rank1_step: int = 4) -> torch.Tensor:
    """A sharded checkpoint of two processes written by hand in the format ``save_checkpoint`` writes:
    rows 0-2 of a 5 x 3 weight (and a 0-dim AdamW step) in rank 0's shard, rows 3-4 in rank 1's at
    ``rank1_offset``. Returns the weight."""
    from tokformer.store import sharded

    folder.mkdir()
    weight, step = torch.randn(5, 3, generator=torch.Generator().manual_seed(0)), torch.tensor(7.0)
    held = [{"model.w": (weight[:3], [0, 0]), "optimizer.state.w.step": (step, [])},
            {"model.w": (weight[3:], rank1_offset)}]
    for rank, pieces in enumerate(held):
        described = {key: {"shape": list(value.shape), "offset": offset} for key, (value, offset) in pieces.items()}
        meta = {"format": sharded.FORMAT, "step": rank1_step if rank else 4, "rank": rank, "world": 2,
                "pieces": described}
        save_file({key: value.contiguous() for key, (value, _) in pieces.items()}, folder / sharded.shard_name(rank, 2),
                  metadata={sharded.SHARD_META: json.dumps(meta)})
    names = [sharded.shard_name(rank, 2) for rank in (0, 1)]
    manifest = {"format": sharded.FORMAT, "format_version": 1, "step": 4, "world": 2,
                "shards": {name: (folder / name).stat().st_size for name in names},
                "tensors": {"model.w": {"shape": [5, 3], "dtype": manifest_dtype},
                            "optimizer.state.w.step": {"shape": [], "dtype": "float32"}},
                "aliases": {}, "optimizer": {}}
    (folder / sharded.MANIFEST).write_text(json.dumps(manifest))
    return weight


def test_a_hand_written_two_process_checkpoint_reassembles_its_tensors(tmp_path: Path) -> None:
    from tokformer.store import sharded

    weight = _two_shard_checkpoint(tmp_path / "step", [3, 0])
    manifest = sharded.read_manifest(tmp_path / "step")
    assert torch.equal(sharded.load_model_state(tmp_path / "step")["w"], weight)
    assert sharded.load_tensors(tmp_path / "step", "optimizer", manifest)["optimizer.state.w.step"].item() == 7.0


def test_a_shard_of_another_step_among_two_is_named_with_both_steps(tmp_path: Path) -> None:
    from tokformer.store import sharded

    _two_shard_checkpoint(tmp_path / "step", [3, 0], rank1_step=3)
    expected = r"shard-00001-of-00002.safetensors is a shard of step 3 \(2 processes\), not of step 4 \(2 processes\)"
    with pytest.raises(CheckpointError, match=expected):
        sharded.load_model_state(tmp_path / "step")


@pytest.mark.parametrize(("rank1_offset", "manifest_dtype", "error"), [
    ([0, 0], "float32", "its shards do not cover model.w once each"),  # rows 0-1 twice, rows 3-4 never
    ([-2, 0], "float32", "does not fit a torch.float32 tensor of shape"),
    ([3, 1], "float32", "does not fit"),  # not whole rows
    ([3, 0], "float16", "a torch.float32 piece of shape"),  # the manifest and the shard disagree on the dtype
])
def test_shard_pieces_that_do_not_tile_their_tensor_once_are_damaged(tmp_path: Path, rank1_offset: list[int],
                                                                      manifest_dtype: str, error: str) -> None:
    """A gap would load as the uninitialised memory the tensor was allocated with, and an overlap
    hides a gap from a count of elements (two shards at offset 0 filled as many elements as the tensor
    holds, and loaded): every piece must be whole rows, in bounds, of the manifest's dtype, each row once."""
    from tokformer.store import sharded

    _two_shard_checkpoint(tmp_path / "step", rank1_offset, manifest_dtype)
    with pytest.raises(CheckpointError, match=error):
        sharded.load_model_state(tmp_path / "step")


# -- H9-H16: a few bytes never buy unbounded memory or time -----------------------------------


def test_a_config_asking_for_a_model_far_bigger_than_its_weights_is_refused_unbuilt(sort_run: Path,
                                                                                     tmp_path: Path) -> None:
    folder = tokformer.save_pretrained(*load_run(sort_run), tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    config["task"].update(d_model=8192, n_layers=64, n_heads=64)  # 51 billion parameters, in a few bytes
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="describes a model of .* but its weights hold only"):
        tokformer.load_model(folder)


def test_training_a_model_that_cannot_fit_in_memory_is_refused_before_building_it(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    monkeypatch.setenv("TOKFORMER_MEMORY_LIMIT", "1000")  # bytes: the tiny sort model's AdamW state is more
    with pytest.raises(ConfigError, match="more than the 0.0 GiB of memory available"):
        train("sort", run_dir=str(tmp_path / "run"), **TINY["sort"], **TRAIN)
    assert not (tmp_path / "run").exists()


def test_a_model_too_large_even_to_size_is_refused_not_built() -> None:
    """Found by a hostile probe: `--cnn-depth 26` (channels doubling per stage) asks for a conv weight past 2^63
    bytes; sizing it on the meta device overflowed, the size came back unknown, the memory checks were skipped
    and the real build allocated until the OOM killer came (17 GB in a minute)."""
    from tokformer.store.budget import planned_size
    from tokformer.tokenizers.image_local import LocalPatchTokenizer

    tokenizer = LocalPatchTokenizer(patch_size=32, image_size=64, cnn_depth=40)
    with pytest.raises(ConfigError, match="too large to allocate"):
        planned_size(lambda: tokenizer.build_embedder(64))
    assert planned_size(lambda: LocalPatchTokenizer(patch_size=32, image_size=64).build_embedder(64)) > 0


def test_a_yaml_config_with_aliases_is_refused_before_it_expands(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                    "c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\ntask: {name: sort}\n")
    line = one_line_error(CliRunner().invoke(main, ["train", "-c", str(bomb)]))
    assert "YAML aliases (*a) are not accepted" in line and "line 2" in line


def test_deeply_nested_json_is_a_named_error_not_a_recursion_error(tmp_path: Path) -> None:
    config = tmp_path / "deep.json"
    config.write_text("[" * 100_000 + "]" * 100_000)
    line = one_line_error(CliRunner().invoke(main, ["train", "-c", str(config)]))
    assert "deep.json is malformed: JSON nested too deeply" in line


def test_a_huge_value_is_shown_cut_in_the_error(tmp_path: Path) -> None:
    config = tmp_path / "big.json"
    config.write_text(json.dumps({"task": {"name": "sort", "d_model": "x" * 5_000_000}}))
    line = one_line_error(CliRunner().invoke(main, ["train", "-c", str(config)]))
    assert "(5000002 characters)" in line and len(line) < 400


def test_a_catastrophic_foreign_regex_is_stopped_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pretokenize, "FOREIGN_REGEX_SECONDS", (1e-6, 0.0))
    split = pretokenize.pretokenizer(r"(?:\w+\s?)+\S")
    with pytest.raises(pretokenize.PatternError, match="took too long on a text of 200000 characters"):
        split("word " * 40_000)


def test_an_image_that_would_decode_past_the_pixel_limit_is_refused_from_its_header(tmp_path: Path) -> None:
    side = int(MAX_IMAGE_PIXELS**0.5) + 8
    Image.new("1", (side, side)).save(tmp_path / "bomb.png")  # a few KB of PNG
    assert (tmp_path / "bomb.png").stat().st_size < 200_000
    with pytest.raises(DataError, match=f"{side} x {side} pixels, more than"):
        open_image(tmp_path / "bomb.png")


def test_token_ids_past_the_vocabulary_are_a_data_error(tmp_path: Path) -> None:
    from tokformer.tasks.lm import LMConfig, LMTask
    from tokformer.tokenizers.bpe import BPETokenizer

    task = LMTask(LMConfig())
    task.tokenizer = BPETokenizer.train(["some text " * 20], 270, special_tokens=["<|endoftext|>"])
    ok = torch.tensor([1, 2, 3])
    assert task.collate([ok, ok], train=True).shape == (2, 3)
    with pytest.raises(DataError, match="holds token id 60000, past the tokenizer's vocabulary"):
        task.collate([ok, torch.tensor([1, 60000, 2])], train=True)


def test_weights_of_another_dtype_kind_do_not_load_as_garbage() -> None:
    model = torch.nn.Linear(2, 2)
    state = {"weight": torch.zeros(2, 2, dtype=torch.int32), "bias": torch.zeros(2)}
    with pytest.raises(CheckpointError, match="dtype: weight int32 vs float32"):
        check_fits(model, state, "file", "config")
    check_fits(model, {"weight": torch.zeros(2, 2, dtype=torch.bfloat16), "bias": torch.zeros(2)}, "file", "cfg")


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_or_infinite_weights_are_a_named_error_at_any_temperature(temperature: float, bad: float) -> None:
    logits = torch.tensor([[0.1, bad, 0.3]])
    with pytest.raises(CheckpointError, match="NaN or infinite logits"):
        sample_next(logits, SamplingConfig(temperature=temperature))


def test_a_pipe_or_device_given_as_a_file_is_refused_not_read_forever(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", Path("/dev/zero")):
        with pytest.raises(DataError, match="is not a regular file"):
            files.read_bytes(path)
    line = one_line_error(CliRunner().invoke(main, ["tokenizer", "train", "--data", "/dev/zero", "--vocab-size",
                                                    "300", "--out", str(tmp_path / "tok")]))
    assert "/dev/zero is not a regular file" in line


@pytest.mark.parametrize(("name", "commands", "code"), [("best.json", ["predict"], 1),
                                                        ("state.json", ["predict", "resume"], 1),
                                                        ("model.safetensors", ["predict", "resume"], 1),
                                                        ("state.safetensors", ["resume"], 1),
                                                        ("metrics.jsonl", ["resume"], 2)])
def test_a_pipe_in_place_of_a_run_s_file_is_one_line_not_waited_on(sort_run: Path, tmp_path: Path, named_pipe,
                                                                   name: str, commands: list[str], code: int) -> None:
    """They were read with Path.read_text / read_bytes, or opened by safetensors: a FIFO there blocked predict
    or a resume forever (a resume reads no best.json: it writes a new one). The run's checkpoint files keep
    their CheckpointError (exit 1); metrics.jsonl, unreadable, is refused rather than rewritten."""
    run = fresh_copy(sort_run, tmp_path)
    in_checkpoint = name not in ("best.json", "metrics.jsonl")
    file = (steps.step_dir(run, steps.list_checkpoints(run)[-1]) if in_checkpoint else run) / name
    file.unlink()
    named_pipe(file)
    args = {"predict": ["predict", str(run), "3 1 2"], "resume": ["train", "--resume", str(run), "--steps", "3", "-q"]}
    for command in commands:
        line = one_line_error(CliRunner().invoke(main, args[command]), code)
        assert f"{file} is not a regular file" in line, command
        assert line.count(str(file)) == 1, f"{command}: the path is said once ({line})"
        assert line.startswith("Error: checkpoint file ") == (code == 1), command  # a CheckpointError


def test_a_pipe_in_place_of_the_best_checkpoint_s_state_is_named_when_training_reports(tmp_path: Path,
                                                                                      named_pipe) -> None:
    """The closing report reads the best checkpoint's held-out metrics from its state.json; best (step 2)
    is not the checkpoint a resume loads (step 4), and a pipe in its place blocked the report forever."""
    run = train("sort", run_dir=str(tmp_path / "run"), **TINY["sort"], **{**TRAIN, "steps": 4}).run_dir
    latest = steps.step_dir(run, 4) / "state.json"
    latest.write_text(json.dumps(json.loads(latest.read_text()) | {"best": {"step": 2, "metric": "accuracy",
                                                                            "value": 1.0}}))
    (steps.step_dir(run, 2) / "state.json").unlink()
    pipe = named_pipe(steps.step_dir(run, 2) / "state.json")
    line = one_line_error(CliRunner().invoke(main, ["train", "--resume", str(run), "--steps", "4", "-q"]))
    assert line == f"Error: {pipe} is not a regular file (a pipe, socket or device); give a file"


def test_a_damaged_metrics_log_does_not_stop_a_resume(sort_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(sort_run, tmp_path)
    with (run / "metrics.jsonl").open("ab") as log:
        log.write(b"\x9f\xff not json\n[1, 2]\n{\"step\": \"x\"}\n")
    result = train(resume=str(run), steps=4, quiet=True)
    assert result.step == 4


def test_a_sampling_seed_out_of_range_is_a_usage_error(sort_run: Path) -> None:
    line = one_line_error(CliRunner().invoke(main, ["generate", str(sort_run), "--seed", str(2**70)]))
    assert "--seed" in line


# -- H17-H20: no internal error reaches the user for bad input --------------------------------


@pytest.mark.parametrize("seed", ["-1", str(2**70)])
def test_a_seed_out_of_range_is_a_usage_error(seed: str, tmp_path: Path) -> None:
    line = one_line_error(CliRunner().invoke(main, ["train", "sort", "--seed", seed, "--run-dir",
                                                    str(tmp_path / "r"), *SORT]))
    assert "seed must be in [0, 2**32)" in line


@pytest.mark.parametrize("command", ["predict", "generate", "evaluate"])
@pytest.mark.parametrize("device", ["bogus", "cuda:7"])
def test_a_bad_device_is_one_line_in_every_command(sort_run: Path, command: str, device: str) -> None:
    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    extra = {"predict": ["3 1 2"], "generate": ["-p", "x"], "evaluate": []}[command]
    result = CliRunner().invoke(main, [command, str(sort_run), *extra, "--device", device])
    line = one_line_error(result)
    assert ("is not a device" in line or "not available" in line) and "--device" in line, line


def test_a_damaged_best_json_is_named(sort_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(sort_run, tmp_path)
    (run / "best.json").write_text('{"step": "two"}')
    with pytest.raises(CheckpointError, match="best.json is damaged"):
        load_run(run)
    (run / "best.json").write_text('{"step": 40}')
    with pytest.raises(CheckpointError, match="names step 40, which has no checkpoint"):
        load_run(run)


def test_stopping_data_prepare_with_workers_leaves_nothing_and_prints_no_traceback(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    words = [f"w{i:x}q" for i in range(5000)]
    for i in range(300):  # distinct words: the encoder's chunk cache cannot make it quick
        (corpus / f"{i}.txt").write_text(" ".join(words[(i * 7 + j * 13) % 5000] for j in range(6000)))
    out = tmp_path / "shards"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [str(Path(sys.executable).parent / "tokformer"), "data", "prepare", "lm", "--data", str(corpus),
               "--out", str(out), "--workers", "2", "--vocab-size", "300", "--quiet"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".shards.tmp-*")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGTERM)  # as a scheduler or `timeout` stops a job: the whole group
    _, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert process.returncode == 128 + signal.SIGTERM and stderr.strip().splitlines()[-1] == "stopped by SIGTERM"
    assert not out.exists() and not list(tmp_path.glob(".shards*")), list(tmp_path.iterdir())


def test_ctrl_c_ends_any_command_with_one_line_and_the_status_of_sigint(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    def pressed_ctrl_c(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("tokformer.tasks.lm_shards.prepare_lm", pressed_ctrl_c)
    result = CliRunner().invoke(main, ["data", "prepare", "lm", "--data", "stdlib", "--out", str(tmp_path / "s")])
    assert result.exit_code == 128 + signal.SIGINT and result.output.strip() == "stopped by SIGINT", result.output


def test_a_config_asking_for_100000_layers_is_refused_before_anything_is_built(sort_run: Path, tmp_path: Path) -> None:
    folder = tokformer.save_pretrained(*load_run(sort_run), tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    config["task"]["n_layers"] = 100_000
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="n_layers must be at most 1024"):
        tokformer.load_model(folder)


def test_weights_holding_nan_are_refused_when_loaded(sort_run: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    run = fresh_copy(sort_run, tmp_path)
    weights_file = steps.step_dir(run, 2) / "model.safetensors"
    state = load_file(weights_file)
    name = next(k for k, v in state.items() if v.is_floating_point())
    state[name][0] = float("nan")
    save_file(state, weights_file)
    line = one_line_error(CliRunner().invoke(main, ["predict", str(run), "3 1 2 0 5 4"]), code=1)
    assert "NaN or infinite values" in line and name in line


def test_a_temperature_so_small_the_logits_overflow_decodes_greedily() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    assert sample_next(logits, SamplingConfig(temperature=1e-40)).tolist() == [1]


def test_an_overwrite_whose_new_run_fails_before_its_first_checkpoint_gives_the_old_run_back(
        sort_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(sort_run, tmp_path)
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(Exception, match="loss became"):
        train("sort", run_dir=str(run), overwrite=True, **TINY["sort"],
              **{**TRAIN, "lr": 1e30, "warmup_steps": 0, "grad_clip": 0.0})
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_options_that_init_from_replaces_are_named(sort_run: Path, tmp_path: Path, caplog) -> None:
    with caplog.at_level("WARNING", logger="tokformer"):
        train("sort", init_from=str(sort_run), run_dir=str(tmp_path / "ft"), **{**TINY["sort"], "d_model": 32},
              **TRAIN)
    assert "ignoring d_model=32 (the source has 16)" in caplog.text


@pytest.mark.parametrize("bad_id", [-3, "7", 1.5, True])
def test_a_tokenizer_json_with_an_id_that_is_no_token_id_is_refused(tmp_path: Path, bad_id) -> None:
    from tokformer.tokenizers.base import TokenizerError
    from tokformer.tokenizers.bpe import BPETokenizer

    BPETokenizer.train(["some text " * 20], 270, special_tokens=["<|endoftext|>"]).save_hf_json(tmp_path / "t.json")
    document = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    document["model"]["vocab"]["%"] = bad_id
    (tmp_path / "t.json").write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(TokenizerError, match="is not a non-negative integer"):
        BPETokenizer.from_hf_json(tmp_path / "t.json")


def test_overwrite_refuses_a_run_directory_that_also_holds_the_users_files(sort_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(sort_run, tmp_path)
    (run / "my_notes.txt").write_text("mine")
    (run / "analysis").mkdir()
    line = one_line_error(CliRunner().invoke(main, ["train", "sort", "--run-dir", str(run), "--overwrite", *SORT]))
    assert "would delete analysis/, my_notes.txt" in line and "did not write" in line
    assert (run / "my_notes.txt").read_text() == "mine" and steps.list_checkpoints(run) == [2]


def test_shards_overwrite_refuses_a_folder_that_also_holds_the_users_files(tmp_path: Path) -> None:
    from tokformer.tasks.lm_shards import prepare_lm

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("some text to tokenize " * 200)
    out = tmp_path / "shards"
    prepare_lm(str(corpus), out, vocab_size=280, workers=1, show_progress=False)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="also holds notes.txt, which tokformer did not write"):
        prepare_lm(str(corpus), out, vocab_size=280, workers=1, overwrite=True, show_progress=False)
    assert (out / "notes.txt").read_text() == "mine"


def test_writing_shards_leaves_the_users_folders_beside_them_alone(tmp_path: Path) -> None:
    """The staging and the replaced folders had fixed names, ``.NAME.partial`` and ``.NAME.old``,
    which a write deleted on sight: a user's folder by either name went with them."""
    from tokformer.tasks.lm_shards import ShardedCorpus, write_shards
    from tokformer.tokenizers.bpe import BPETokenizer

    bpe = BPETokenizer.train(["some text to tokenize " * 50], 270, special_tokens=["<|endoftext|>"])
    users = (".s.old", ".s.partial", ".s.tmp-notes")
    for name in users:
        (tmp_path / name).mkdir()
        (tmp_path / name / "mine.txt").write_text("keep")
    write_shards([[1, 2]], tmp_path / "s", bpe)
    write_shards([[3, 4]], tmp_path / "s", bpe, overwrite=True)
    assert ShardedCorpus(tmp_path / "s", 0.5).ids[:2].tolist() == [3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == [*users, "s"]
    assert all((tmp_path / name / "mine.txt").read_text() == "keep" for name in users)


def test_a_file_put_into_the_shards_folder_while_they_are_rewritten_is_kept(tmp_path: Path) -> None:
    """--overwrite checks that the folder holds only older shards before it starts and again before it
    replaces them, so a file the user puts there meanwhile is never deleted with the older shards."""
    from tokformer.tasks.lm_shards import ShardedCorpus, write_shards
    from tokformer.tokenizers.bpe import BPETokenizer

    bpe = BPETokenizer.train(["some text to tokenize " * 50], 270, special_tokens=["<|endoftext|>"])
    write_shards([[1, 2]], tmp_path / "s", bpe)

    def documents():
        yield [3, 4]
        (tmp_path / "s" / "notes.txt").write_text("mine")

    with pytest.raises(DataError, match="also holds notes.txt, which tokformer did not write"):
        write_shards(documents(), tmp_path / "s", bpe, overwrite=True)
    assert (tmp_path / "s" / "notes.txt").read_text() == "mine"
    assert ShardedCorpus(tmp_path / "s", 0.5).ids[:2].tolist() == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no staging folder, no lock file left


@pytest.mark.parametrize("field", ["vocab_size", "eot_id"])
def test_a_shard_index_whose_vocabulary_is_not_its_tokenizers_is_refused(tmp_path: Path, field: str) -> None:
    from tokformer.tasks.lm_shards import INDEX_FILE, ShardedCorpus, prepare_lm

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("some text to tokenize " * 200)
    out = tmp_path / "shards"
    prepare_lm(str(corpus), out, vocab_size=280, workers=1, show_progress=False)
    index = json.loads((out / INDEX_FILE).read_text())
    index[field] = 10 if field == "vocab_size" else 99_999
    (out / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(DataError, match="records vocab_size .* and eot_id .*, but its tokenizer has"):
        ShardedCorpus(out, 0.1).tokenizer()


def test_a_built_in_data_size_that_cannot_fit_in_memory_is_refused_before_drawing(monkeypatch) -> None:
    """Found by a hostile probe: `tokformer train vqa --train-size 100000000` drew scenes for 9 minutes and 6.7 GB
    before it was killed, on its way to about 1.2 TB. The config itself stays valid (a model trained with it
    must still load on a smaller machine): the data refuse to be made."""
    from tokformer.tasks.vqa import VQAConfig, VQATask, builtin_example_bytes

    monkeypatch.setenv("TOKFORMER_MEMORY_LIMIT", str(10**9))
    task = VQATask(VQAConfig(train_size=100_000_000))
    too_many = r"100,002,000 built-in examples take about \d+\.\d GiB, more than the 0\.9 GiB"
    with pytest.raises(ConfigError, match=too_many):
        task.train_dataset()
    assert 20_000 * builtin_example_bytes(64) < 10**9, "the defaults stay well inside a small machine's memory"
