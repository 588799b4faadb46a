"""`tokformer train` flags: one per TrainConfig field and one per field of the task's config.

The command is run in process with ``api.train`` replaced by a stand-in that resolves the
config exactly as the engine would and records it, so these tests check the flags, their
precedence and their errors without training anything.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tokformer.cli import main
from tokformer.engine import api
from tokformer.engine.trainer import RunResult
from tokformer.runtime import registry
from tokformer.runtime.config import TrainConfig, config_fields, help_text
from tokformer.runtime.task import Task
from tokformer.store.run_dir import saved_config


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every ``api.train`` call's resolved RunConfig (and resume dir), instead of a run."""
    calls: list = []

    def fake_train(config=None, *, resume=None, overwrite=False, quiet=False, **overrides):
        base = saved_config(Path(resume)) if resume is not None else config
        calls.append((api.resolve_config(base, **overrides), resume))
        return RunResult(run_dir=Path("nowhere"), step=0)

    monkeypatch.setattr(api, "train", fake_train)
    return calls


@pytest.fixture
def tasks_sandbox(monkeypatch: pytest.MonkeyPatch) -> dict:
    """The task registry, restored after the test: tasks registered here do not leak. Every built-in task is
    imported first: one first imported inside the sandbox would register there only, and once its module is
    imported nothing registers it again (test_task_protocol then missed vqa when it ran after these tests)."""
    registry.task_names()
    sandbox = dict(registry._TASKS)
    monkeypatch.setattr(registry, "_TASKS", sandbox)
    return sandbox


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_task_help_lists_the_task_options_as_flags_with_defaults_and_help():
    result = invoke("train", "classify", "--help")
    assert result.exit_code == 0, result.output
    out = result.output
    data, model = out.index("Data and task options (classify):"), out.index("Model options (classify;")
    assert data < model < out.index("Train options:") < out.index("\nOptions:")
    for flag in ("--data TEXT", "--d-model INT", "--flip / --no-flip", "--n-kv-heads INT|none",
                 "--qkv-bias [true|false|none]", "--norm [layer|rms]", "--lr FLOAT"):
        assert flag in out, flag
    assert data < out.index("--data TEXT") < out.index("--flip / --no-flip") < model, "data options in their group"
    assert model < out.index("--d-model INT") < out.index("--norm [layer|rms]") < out.index("Train options:"), \
        "the task's own shape options first, then the shared block switches, all in the model group"
    assert "[default: shapes]" in out  # classify's data default, next to its help text


@pytest.mark.parametrize("task", ["classify", "graph", "lm", "sort", "translate"])
def test_every_field_of_every_task_is_a_flag(task):
    out = invoke("train", task, "--help").output
    for name in config_fields(registry.get_task(task).Config):
        assert f"--{name.replace('_', '-')}" in out, name
    for name in config_fields(TrainConfig):
        assert f"--{name.replace('_', '-')}" in out, name


def test_task_train_defaults_are_the_defaults_shown():
    """translate trains 1500 steps unless told otherwise; its --help says so."""
    out = " ".join(invoke("train", "translate", "--help").output.split())
    assert "optimizer steps to train for (ignored when epochs is set) [default: 1500]" in out


def test_flags_set_task_and_train_options(resolved):
    result = invoke("train", "classify", "--data", "DIR", "--d-model", "32", "--no-flip", "--n-kv-heads", "none",
                    "--qkv-bias", "false", "--layer-scale", "0.1", "--steps", "7")
    assert result.exit_code == 0, result.output
    [(cfg, _)] = resolved
    task = cfg.task_config
    assert (task.data, task.d_model, task.flip, task.n_kv_heads, task.qkv_bias) == ("DIR", 32, False, None, False)
    assert task.layer_scale == 0.1 and cfg.train.steps == 7


def test_train_options_may_come_before_the_task_and_win_after_it(resolved):
    result = invoke("train", "--steps", "7", "--lr", "0.01", "-q", "-o", "seq_len=6", "sort", "--d-model", "32",
                    "-o", "n_layers=1", "--lr", "0.002")
    assert result.exit_code == 0, result.output
    [(cfg, _)] = resolved
    assert (cfg.task, cfg.task_config.seq_len, cfg.task_config.d_model, cfg.task_config.n_layers) == ("sort", 6, 32, 1)
    assert (cfg.train.steps, cfg.train.lr) == (7, 0.002)


def test_precedence_defaults_file_set_flags(resolved, tmp_path):
    config = tmp_path / "sort.toml"
    config.write_text('[task]\nname = "sort"\nseq_len = 5\nd_model = 16\nvocab = 7\n[train]\nsteps = 3\nlr = 0.01\n')
    result = invoke("train", "-c", str(config), "-o", "seq_len=6", "-o", "d_model=24", "--d-model", "32",
                    "--lr", "0.002")
    assert result.exit_code == 0, result.output
    [(cfg, _)] = resolved
    task = cfg.task_config
    assert (task.vocab, task.seq_len, task.d_model, task.n_layers) == (7, 6, 32, 2)  # file, -o, flag, default
    assert (cfg.train.steps, cfg.train.lr) == (3, 0.002)


def test_task_named_only_in_the_config_file_still_gets_its_flags(resolved, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("task: sort\n")
    result = invoke("train", "-c", str(config), "--seq-len", "4")
    assert result.exit_code == 0, result.output
    assert resolved[0][0].task_config.seq_len == 4
    result = invoke("train", "-c", str(config), "--steps", "3")  # no task option: the group trains it alone
    assert result.exit_code == 0, result.output
    assert (resolved[1][0].task, resolved[1][0].train.steps) == ("sort", 3)


def test_resume_takes_flags_of_the_runs_task(resolved, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": {"name": "sort", "seq_len": 5}, "train": {"steps": 3}}))
    result = invoke("train", "--resume", str(run), "--steps", "9", "--seq-len", "5")
    assert result.exit_code == 0, result.output
    assert invoke("train", "--resume", str(run), "--steps", "8").exit_code == 0
    [(cfg, resume), (again, _)] = resolved
    assert resume == str(run) and cfg.train.steps == 9 and cfg.task_config.seq_len == 5 and again.train.steps == 8


def test_a_task_option_named_like_a_train_option_is_spelled_task_name(resolved, tasks_sandbox):
    @dataclass
    class Clash:
        seed: int = field(default=3, metadata=help_text("the task's own seed"))
        quiet: bool = field(default=False, metadata=help_text("a task option named like train's --quiet"))
        width: int = field(default=8, metadata=help_text("no clash"))

    class ClashTask(Task):
        Config = Clash

    registry.register_task("flag-clash")(ClashTask)
    out = invoke("train", "flag-clash", "--help").output
    assert "--task-seed INT" in out and "--task-quiet / --no-task-quiet" in out and "--width INT" in out
    result = invoke("train", "flag-clash", "--seed", "1", "--task-seed", "5", "--task-quiet", "--width", "4")
    assert result.exit_code == 0, result.output
    [(cfg, _)] = resolved
    assert (cfg.train.seed, cfg.task_config.seed, cfg.task_config.quiet, cfg.task_config.width) == (1, 5, True, 4)


def test_a_plug_in_task_from_an_entry_point_gets_flags(resolved, tasks_sandbox, monkeypatch):
    @dataclass
    class PluginConfig:
        depth: int = field(default=2, metadata=help_text("plug-in depth"))

    class PluginTask(Task):
        Config = PluginConfig

    entry_point = types.SimpleNamespace(name="flag-plugin", load=lambda: PluginTask)
    monkeypatch.setattr(registry, "entry_points", lambda group: [entry_point] if group == registry.ENTRY_POINT_GROUP
                        else [])
    assert "plug-in depth  [default: 2]" in invoke("train", "flag-plugin", "--help").output
    result = invoke("train", "flag-plugin", "--depth", "5")
    assert result.exit_code == 0, result.output
    assert resolved[0][0].task_config.depth == 5


UNKNOWN_FLAGS = {
    "typo of a task flag": (["train", "sort", "--d_model", "3"], "No such option '--d_model'. Did you mean '--d-mod"),
    "another task's flag": (["train", "sort", "--flip"], "No such option '--flip'"),
    "task on/off flag before the task": (["train", "--no-flip", "classify"], "name the task first"),
    "task flag before the task": (["train", "--d-model", "32", "sort"], "name the task first: tokformer train TASK"),
    "resume and a task": (["train", "sort", "--resume", "runs/x"], "drop TASK and --config"),
    "bad value": (["train", "sort", "--d-model", "wide"], "d_model: expected an integer, got 'wide'"),
    "bad choice": (["train", "classify", "--norm", "batch"], "norm: expected one of layer, rms"),
}


@pytest.mark.parametrize("case", sorted(UNKNOWN_FLAGS))
def test_bad_flags_are_one_line_with_a_hint(resolved, case):
    args, needle = UNKNOWN_FLAGS[case]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not resolved


def test_train_help_without_a_task_says_where_task_options_are():
    result = invoke("train", "--help")
    assert result.exit_code == 0, result.output
    assert "tokformer train TASK --help" in result.output and "task options (" not in result.output


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_out_option_is_also_dash_o():
    """``-o`` writes the same as ``--out`` everywhere (``vqa attention`` had it, ``export`` did not)."""
    outs = {path: param for path, command in _commands(main) for param in command.params if "--out" in param.opts}
    assert {("export",), ("vqa", "attention")} <= set(outs)
    assert [path for path, param in outs.items() if "-o" not in param.opts] == []
