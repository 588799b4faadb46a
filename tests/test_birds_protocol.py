"""The sweep's protocol: fresh training images, one readout for every whole-image model, and an
oracle that shows the comparison needs the compared pair."""

from __future__ import annotations

import gc
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from tokformer.cli import main
from tokformer.errors import DataError, UsageError
from tokformer.tasks.birds import experiment, run_experiment
from tokformer.tasks.birds.data import generate
from tokformer.tasks.birds.design import oracle_accuracies
from tokformer.tasks.birds.experiment import BirdsConfig
from tokformer.tasks.birds.models import READOUT_HIDDEN, build_model
from tokformer.tasks.birds.stream import TrainStream, make_split

CFG = BirdsConfig(image_size=32, batch_size=24)


def test_training_batches_never_repeat_an_image_and_cross_chunk_boundaries() -> None:
    stream = TrainStream(CFG, "compare", seed=0)
    stream.chunk_size = 40  # 24-image batches straddle chunks 0/1, 1/2, ...
    batches = [stream.batch(step, CFG.batch_size)[0] for step in range(5)]  # 120 images, chunks 0-2
    assert all(b.shape == (24, 3, 32, 32) for b in batches)
    images = torch.cat(batches).flatten(1)
    assert len(torch.unique(images, dim=0)) == len(images), "an image came back in a later batch"
    chunk1 = generate("compare", 40, 0, size=32, split="train", scene=CFG.scene, chunk=1).images
    assert torch.equal(batches[1][16:], torch.from_numpy(chunk1[:8]).permute(0, 3, 1, 2)), "batch 1 = images 24..47"


def test_every_model_of_a_task_and_seed_sees_the_same_batches() -> None:
    first, again = TrainStream(CFG, "count", seed=3), TrainStream(CFG, "count", seed=3)
    other_seed = TrainStream(CFG, "count", seed=4)
    for step in (0, 7):
        for a, b in zip(first.batch(step, 24), again.batch(step, 24), strict=True):
            assert torch.equal(a, b)
    assert not torch.equal(first.batch(0, 24)[0], other_seed.batch(0, 24)[0])


def _resident_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads the resident size from Linux's /proc")
def test_a_long_training_stream_holds_two_chunks_in_memory_not_every_image_it_drew() -> None:
    """A 3,000-step run draws 375 chunks; kept in memory they were 2.3 GB of the sweep's process (an 8.4 GB
    peak with the rest). Before the drawing returned its freed scratch memory each chunk grew the process
    by about 50 MB (an out-of-memory kill at 17 GB): neither may come back."""
    stream = TrainStream(BirdsConfig(per_family={}), "compare", seed=0)
    stream.batch(0, 64)  # the first chunk, and whatever one-off allocations drawing makes
    before = _resident_mb()
    for step in range(8, 8 * 17, 8):
        images = stream.batch(step, 64)[0]  # chunks 1-16
    chunk_mb = images.numel() * images.element_size() * 8 / 1e6  # 6.3 MB at 64 px; 16 of them: 100 MB
    assert _resident_mb() - before < 4 * chunk_mb + 30, f"grew {_resident_mb() - before:.0f} MB for 16 chunks"


def test_a_chunk_read_back_from_disk_is_the_chunk_drawn_and_is_not_drawn_twice() -> None:
    stream = TrainStream(CFG, "count", seed=2)
    stream.chunk_size = 16
    first = [t.clone() for t in stream.batch(0, 16)]
    for step in range(1, 4):
        stream.batch(step, 16)  # chunks 1-3 push chunk 0 out of memory
    drawn = stream.drawing_seconds
    again = stream.batch(0, 16)
    assert stream.drawing_seconds == drawn, "chunk 0 was drawn again instead of read back"
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    fresh = TrainStream(CFG, "count", seed=2)
    fresh.chunk_size = 16
    assert all(torch.equal(a, b) for a, b in zip(first, fresh.batch(0, 16), strict=True))


def test_a_training_streams_scratch_folder_goes_with_it() -> None:
    stream = TrainStream(CFG, "compare", seed=0)
    stream.batch(0, 8)
    scratch = stream.chunks.folder
    assert [p.name for p in scratch.iterdir()] == ["000000.pt"]
    del stream
    gc.collect()
    assert not scratch.exists()


def test_chunk_zero_is_the_split_as_it_always_was() -> None:
    plain = generate("count", 4, 5, size=32, split="train")
    assert torch.equal(torch.from_numpy(plain.images),
                       torch.from_numpy(generate("count", 4, 5, size=32, split="train", chunk=0).images))
    assert not (plain.images == generate("count", 4, 5, size=32, split="train", chunk=1).images).all()


def test_fixed_splits_are_for_validation_and_test_only() -> None:
    with pytest.raises(ValueError, match="TrainStream"):
        make_split(CFG, "count", 0, "train", 8)
    assert len(make_split(BirdsConfig(image_size=32), "compare", 0, "val", 6).labels) == 6


@pytest.mark.parametrize("name", ["global", "transformer-l1", "transformer-local-l1", "mixer-l1"])
def test_every_whole_image_model_ends_in_the_same_readout(name: str) -> None:
    head = build_model(name, 5, 32).head
    layers = [type(m) for m in head]
    assert layers == [nn.Linear, nn.ReLU, nn.Linear], name
    assert head[0].out_features == READOUT_HIDDEN and head[2].out_features == 5


def test_the_twins_scene_leaves_presence_and_single_birds_at_chance_and_the_pair_decides() -> None:
    twins = oracle_accuracies("twins", 0.0, seed=0, n_test=1000)
    pair_only = oracle_accuracies("pair", 0.0, seed=0, n_test=1000)
    for name, acc in twins.items():
        if "positive control" in name:
            assert acc == 1.0, f"{name}: the oracle cannot even read the pair ({acc})"
        else:  # chance 0.5; one standard error at 1000 images is 0.016
            assert acc <= 0.55, f"twins, {name}: {acc} — this view answers the comparison"
    assert pair_only["species present (6 bits)"] == 1.0, "the pair-only scene is answered by the species present"


SWEEP = BirdsConfig(image_size=32, n_test=16, second_size=0, steps=2, batch_size=8, models=("mlp", "pool-d1"),
                    seeds=(0, 1))


def test_an_interrupted_sweep_resumes_without_redoing_finished_runs(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "sweep"
    trained: list[tuple[str, str, int]] = []
    real_train, dies = experiment.train_model, [("pool-d1", "count", 1)]

    def train(name, task, cfg, seed, **options):
        if (name, task, seed) in dies:
            raise KeyboardInterrupt  # killed during this run
        trained.append((name, task, seed))
        return real_train(name, task, cfg, seed, **options)

    monkeypatch.setattr(experiment, "train_model", train)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(out, config=SWEEP, quiet=True)
    first = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["model"], r["task"], r["seed"]) for r in first] == trained  # seed 0: both tasks; seed 1: count mlp

    trained.clear()
    dies.clear()
    report = run_experiment(out, config=SWEEP, quiet=True)
    assert trained == [("pool-d1", "count", 1), ("mlp", "compare", 1), ("pool-d1", "compare", 1)], (
        "only the runs that had not finished are trained again")
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert len(runs) == 8 and len({(r["model"], r["task"], r["seed"]) for r in runs}) == 8
    assert runs[:5] == first, "finished runs are read back as they were logged"
    assert "Receptive fields" in report.read_text()  # the analysis ran on the saved first-seed models


def test_a_sweep_removes_its_image_caches_when_it_ends(tmp_path: Path, monkeypatch) -> None:
    """The training streams spill their images to disk (193 MB a task at the full preset); a sweep kept the
    last one until the process exited, so a notebook running sweeps held a folder per sweep."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    one = BirdsConfig(**{**SWEEP.__dict__, "models": ("mlp",), "seeds": (0,)})
    run_experiment(tmp_path / "sweep", config=one, quiet=True)
    gc.collect()
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("tokformer-birds-")]


def test_a_resumed_first_seed_model_is_the_one_that_was_trained(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    one = BirdsConfig(**{**SWEEP.__dict__, "models": ("mlp",), "seeds": (0,)})
    trained = experiment.run_sweep(one, out=out).models[("mlp", "count")]
    resumed = experiment.run_sweep(one, out=out).models[("mlp", "count")]
    for (name, a), b in zip(trained.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


ONE_MODEL = BirdsConfig(**{**SWEEP.__dict__, "models": ("mlp",), "seeds": (0,)})


@pytest.fixture(scope="module")
def one_model_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("birds") / "sweep"
    experiment.run_sweep(ONE_MODEL, out=out)
    return out


def _copy_of(sweep: Path, tmp_path: Path) -> Path:
    shutil.copytree(sweep, tmp_path / "sweep")
    return tmp_path / "sweep"


def _retrained(out: Path, monkeypatch) -> list[tuple[str, str, int]]:
    """The runs a resumed sweep in ``out`` trains again."""
    trained, real_train = [], experiment.train_model

    def train(name, task, cfg, seed, **options):
        trained.append((name, task, seed))
        return real_train(name, task, cfg, seed, **options)

    monkeypatch.setattr(experiment, "train_model", train)
    experiment.run_sweep(ONE_MODEL, out=out)
    return trained


@pytest.mark.parametrize("record, error", [("pipe", "is not a regular file"), ("[" * 100_000, "nested too deeply"),
                                           ("[1]", "not a birds sweep record"), ("\x80", "is not UTF-8 text")])
def test_a_sweep_record_that_is_a_pipe_or_no_json_object_is_refused_in_one_line(
        one_model_sweep: Path, tmp_path: Path, named_pipe, record: str, error: str) -> None:
    """sweep.json was read with Path.read_text and json.loads: a pipe blocked `tokformer birds` for good; JSON
    nested too deeply, a list, or bytes that are not UTF-8 were a RecursionError, AttributeError or
    UnicodeDecodeError traceback."""
    out = _copy_of(one_model_sweep, tmp_path)
    (out / "sweep.json").unlink()
    named_pipe(out / "sweep.json") if record == "pipe" else (out / "sweep.json").write_bytes(record.encode("latin-1"))
    with pytest.raises((DataError, UsageError), match=f"{out / 'sweep.json'}.*{error}"):
        experiment.run_sweep(ONE_MODEL, out=out)


def test_runs_log_lines_that_record_no_run_are_trained_again(one_model_sweep: Path, tmp_path: Path,
                                                              monkeypatch) -> None:
    """A line of bytes that are not UTF-8, JSON nested too deeply, or a run whose fields have the wrong types
    (an accuracy "x" reached the report's mean: a numpy TypeError) records no run: those runs are trained
    again, the others are kept."""
    out = _copy_of(one_model_sweep, tmp_path)
    count, compare = (out / "runs.jsonl").read_text().splitlines()
    assert json.loads(count)["task"] == "count"
    for bad in (b"\x80\xff", b"[" * 100_000, json.dumps({**json.loads(compare), "accuracy": "x"}).encode(),
                json.dumps({**json.loads(compare), "curve": [[1, None]]}).encode(),
                json.dumps({**json.loads(compare), "seed": True}).encode(),
                json.dumps({**json.loads(compare), "accuracy": 10 ** 400}).encode()):  # float() overflows
        (out / "runs.jsonl").write_bytes(count.encode() + b"\n" + bad + b"\n")
        assert _retrained(out, monkeypatch) == [("mlp", "compare", 0)], bad[:40]
        shutil.rmtree(out)
        out = _copy_of(one_model_sweep, tmp_path)


def test_a_run_recorded_after_a_torn_last_line_is_read_back(one_model_sweep: Path, tmp_path: Path,
                                                            monkeypatch) -> None:
    """A crash or a full disk can cut the log's last line short, without its newline: the next record was
    appended onto it, neither line read back, and that run was trained again at every resume."""
    out = _copy_of(one_model_sweep, tmp_path)
    count, compare = (out / "runs.jsonl").read_text().splitlines()
    (out / "runs.jsonl").write_text(count + "\n" + compare[: len(compare) // 2])
    assert _retrained(out, monkeypatch) == [("mlp", "compare", 0)]
    assert _retrained(out, monkeypatch) == [], "the run trained again was recorded on a line of its own"
    assert (out / "runs.jsonl").read_text().splitlines()[:2] == [count, compare[: len(compare) // 2]]


def test_a_machine_record_beyond_a_floats_range_is_no_reading(one_model_sweep: Path, tmp_path: Path) -> None:
    """A run's load or steal of 10**400 (a hand-edited log) reached float() in the report: OverflowError."""
    out = _copy_of(one_model_sweep, tmp_path)
    count, compare = (json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines())
    count["machine"] = {**count["machine"], "load": 10 ** 400}
    compare["machine"] = {**compare["machine"], "load": 1.5, "stolen": 10 ** 400}
    (out / "runs.jsonl").write_text(json.dumps(count) + "\n" + json.dumps(compare) + "\n")
    text = experiment.write_report(experiment.run_sweep(ONE_MODEL, out=out), out, elapsed=1.0,
                                   command="tokformer birds").read_text()
    assert "1 run on " in text and "median 1.50" in text and "CPU time stolen" not in text


@pytest.mark.parametrize("damage", ["garbage", "pipe", "another model's weights"])
def test_a_saved_model_that_cannot_be_read_back_is_trained_again(one_model_sweep: Path, tmp_path: Path, named_pipe,
                                                                 monkeypatch, caplog, damage: str) -> None:
    """A resumed sweep loads its first seed's saved models for the analysis: a damaged one was a SafetensorError
    or a load_state_dict traceback, and a pipe in its place blocked the sweep for good."""
    out = _copy_of(one_model_sweep, tmp_path)
    saved = out / experiment.MODELS_DIR / "mlp-compare.safetensors"
    saved.unlink()
    if damage == "garbage":
        saved.write_bytes(b"not a safetensors file")
    elif damage == "pipe":
        named_pipe(saved)
    else:  # the counting model: another number of outputs
        shutil.copy(out / experiment.MODELS_DIR / "mlp-count.safetensors", saved)
    assert _retrained(out, monkeypatch) == [("mlp", "compare", 0)]
    assert f"{saved}" in caplog.text and "training mlp on compare again" in caplog.text
    assert _retrained(out, monkeypatch) == [], "the model saved in its place is read back"


def test_a_runs_log_or_last_report_that_is_a_pipe_is_not_waited_on(one_model_sweep: Path, tmp_path: Path,
                                                                   named_pipe) -> None:
    out = _copy_of(one_model_sweep, tmp_path)
    (out / "runs.jsonl").unlink()
    named_pipe(out / "runs.jsonl")
    with pytest.raises(DataError, match=f"{out / 'runs.jsonl'} is not a regular file"):
        experiment.run_sweep(ONE_MODEL, out=out)
    named_pipe(out / "results.json")  # the time the sweep took before: unknown, so not counted
    assert experiment._elapsed_before(out) == 0.0


def test_a_sweeps_saved_models_get_the_permissions_a_plain_write_would(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    previous = os.umask(0o022)
    try:
        experiment.run_sweep(BirdsConfig(**{**SWEEP.__dict__, "models": ("mlp",), "seeds": (0,)}), out=out)
    finally:
        os.umask(previous)
    saved = sorted((out / experiment.MODELS_DIR).iterdir())
    assert saved, "the sweep saves its first seed's models"
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in saved} == {oct(0o644)}  # safetensors alone: 0o600


def test_a_sweep_never_writes_into_a_folder_it_did_not_make(tmp_path: Path) -> None:
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "thesis.md").write_text("three years of work")
    with pytest.raises(UsageError, match="not empty and holds no birds sweep"):
        run_experiment(mine, config=SWEEP, quiet=True)
    assert [p.name for p in mine.iterdir()] == ["thesis.md"]
    with pytest.raises(UsageError, match="is a file"):
        run_experiment(mine / "thesis.md", config=SWEEP, quiet=True)


def test_a_sweep_of_another_config_is_refused_not_mixed(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    one = BirdsConfig(**{**SWEEP.__dict__, "models": ("mlp",), "seeds": (0,)})
    run_experiment(out, config=one, quiet=True)
    before = (out / "runs.jsonl").read_text()
    with pytest.raises(UsageError, match=r"another configuration \(steps 2 there, 3 now\)"):
        run_experiment(out, config=BirdsConfig(**{**one.__dict__, "steps": 3}), quiet=True)
    assert (out / "runs.jsonl").read_text() == before


def test_a_sweep_with_models_added_trains_only_theirs_and_one_with_models_dropped_is_refused(
        tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "sweep"
    one = BirdsConfig(**{**SWEEP.__dict__, "models": ("mlp",), "seeds": (0,)})
    run_experiment(out, config=one, quiet=True)
    trained: list[tuple[str, str, int]] = []
    real_train = experiment.train_model

    def train(name, task, cfg, seed, **options):
        trained.append((name, task, seed))
        return real_train(name, task, cfg, seed, **options)

    monkeypatch.setattr(experiment, "train_model", train)
    more = BirdsConfig(**{**one.__dict__, "models": ("mlp", "pool-d1")})
    run_experiment(out, config=more, quiet=True)
    assert trained == [("pool-d1", "count", 0), ("pool-d1", "compare", 0)]
    assert json.loads((out / "sweep.json").read_text())["models"] == ["mlp", "pool-d1"]
    before = (out / "runs.jsonl").read_text()
    with pytest.raises(UsageError, match="another configuration"):
        run_experiment(out, config=BirdsConfig(**{**one.__dict__, "models": ("pool-d1",)}), quiet=True)
    assert (out / "runs.jsonl").read_text() == before


def test_a_sweep_extended_by_a_new_setting_takes_its_rate_and_one_that_changes_a_run_rate_is_refused(
        tmp_path: Path, monkeypatch) -> None:
    """The calibration adds a rate for a new setting (``transformer-lpos``) with the models that use it: the
    sweep extends. A rate that would change how a model already run trains (here the ``mlp`` family's, or
    a family that trained at the common rate gaining one) makes it another sweep."""
    out = tmp_path / "sweep"
    one = BirdsConfig(**{**SWEEP.__dict__, "models": ("mlp", "transformer-l1"), "seeds": (0,),
                         "per_family": {"mlp": (1e-3, 0.05)}})
    run_experiment(out, config=one, quiet=True)
    rates: list[tuple[str, float]] = []
    real_train = experiment.train_model

    def train(name, task, cfg, seed, **options):
        rates.append((name, experiment.run_settings(name, task, cfg, seed)["train"]["lr"]))
        return real_train(name, task, cfg, seed, **options)

    monkeypatch.setattr(experiment, "train_model", train)
    more = BirdsConfig(**{**one.__dict__, "models": ("mlp", "transformer-l1", "transformer-l1-lpos"),
                          "per_family": {"mlp": (1e-3, 0.05), "transformer-lpos": (1e-2, 0.05)}})
    run_experiment(out, config=more, quiet=True)
    assert rates == [("transformer-l1-lpos", 1e-2)] * 2
    before = (out / "runs.jsonl").read_text()
    for per_family in ({"mlp": (3e-3, 0.05), "transformer-lpos": (1e-2, 0.05)},
                       {"mlp": (1e-3, 0.05), "transformer-lpos": (1e-2, 0.05), "transformer": (1e-2, 0.05)}):
        with pytest.raises(UsageError, match="another configuration"):
            run_experiment(out, config=BirdsConfig(**{**more.__dict__, "models": (*more.models, "pool-d1"),
                                                      "per_family": per_family}), quiet=True)
    assert (out / "runs.jsonl").read_text() == before
    assert rates == [("transformer-l1-lpos", 1e-2)] * 2


@pytest.mark.parametrize("models", [5, [["mlp"]], "mlp", None])
def test_a_sweep_record_whose_models_are_not_a_list_of_names_is_refused_in_one_line(tmp_path: Path,
                                                                                    models) -> None:
    out = tmp_path / "sweep"
    one = BirdsConfig(**{**SWEEP.__dict__, "models": ("mlp",), "seeds": (0,)})
    run_experiment(out, config=one, quiet=True)
    record = json.loads((out / "sweep.json").read_text())
    (out / "sweep.json").write_text(json.dumps(record | {"models": models}))
    with pytest.raises(UsageError, match="another configuration"):
        run_experiment(out, config=one, quiet=True)


def test_a_sweep_without_the_comparison_is_refused_before_it_trains(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs the comparison task"):
        run_experiment(tmp_path / "sweep", config=BirdsConfig(**{**SWEEP.__dict__, "tasks": ("count",)}), quiet=True)
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("options, refused", [
    (["--seeds", "-1"], "seeds must be integers in [0, 2**32), got [-1]"),
    (["--seeds", "99999999999999999999"], "seeds must be integers in [0, 2**32)"),
    (["--seeds", "0,0"], "seed 0 is given twice"),
    (["--models", "transformer-l100000"], "the depth must be 1..1024"),
    (["--models", "pool-d100000"], "the depth must be 1..1024"),
    (["--models", "pool-d1-x100000"], "the step multiple 1..1000"),
])
def test_seeds_and_models_that_cannot_run_or_repeat_are_refused_before_the_folder_is_made(
        tmp_path: Path, options: list[str], refused: str) -> None:
    """`--seeds -1` (or 2**70, or a 100,000-layer Transformer) was an internal error after sweep.json was
    written, and the folder then refused every other sweep ("holds a birds sweep of another configuration");
    `--seeds 0,0` trained one seed twice and reported a spread of 0.000 over it; a CNN's depth had no cap."""
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["birds", "--quick", "-q", "-o", str(out), *options])
    assert result.exit_code == 2 and refused in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_a_config_that_names_a_model_twice_is_refused_before_the_folder_is_made(tmp_path: Path) -> None:
    """``--models a,a`` is read as ``a`` once; a config given whole (the library) is not rewritten, so it is
    refused: the model's runs would be written twice into one sweep."""
    twice = BirdsConfig(**{**ONE_MODEL.__dict__, "models": ("mlp", "mlp")})
    with pytest.raises(UsageError, match="model mlp is given twice"):
        run_experiment(tmp_path / "report", config=twice, quiet=True)
    assert not (tmp_path / "report").exists()


def test_the_cli_says_a_refused_folder_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("mine")
    result = CliRunner().invoke(main, ["birds", "--quick", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "holds no birds sweep" in result.output
    assert "Traceback" not in result.output
