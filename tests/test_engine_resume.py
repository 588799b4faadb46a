"""Crash and Ctrl-C against real processes: SIGKILL mid-run + --resume is bitwise exact;
SIGINT/SIGTERM save a checkpoint and exit 130/143, and the requeued command resumes exactly."""

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tokformer.engine import train
from tokformer.store.steps import list_checkpoints, step_dir

pytestmark = pytest.mark.usefixtures("one_thread")


TASK = dict(seq_len=8, train_size=512, eval_size=32, d_model=32, n_heads=2, n_layers=1, dropout=0.1)
ENGINE = dict(batch_size=32, warmup_steps=10, log_every=1, eval_every=10, device="cpu", deterministic=True)


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def cli_args(steps: int, run_dir: Path) -> list[str]:
    args = ["train", "sort", "--quiet", "--steps", str(steps), "--run-dir", str(run_dir)]
    for key, value in TASK.items():
        args += ["-o", f"{key}={value}"]
    for key, value in ENGINE.items():
        args += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return args


def start(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "tokformer.cli", *args], stdout=out, stderr=subprocess.STDOUT,
                                env=ENV)


def last_logged_step(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0
    steps = [0]
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a line being written right now
            steps.append(json.loads(line)["step"])
    return max(steps)


def wait_until_step(proc: subprocess.Popen, run_dir: Path, step: int, timeout: float = 180) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reached = last_logged_step(run_dir)
        if reached >= step and list_checkpoints(run_dir):
            return reached
        assert proc.poll() is None, f"training exited early with {proc.returncode}"
        time.sleep(0.005)
    raise AssertionError(f"step {step} not reached in {timeout}s")


@pytest.mark.slow
def test_ten_sigkills_at_random_steps_each_resumed_equal_an_uninterrupted_run(tmp_path):
    """Kill the same run ten times at seeded random steps (sometimes before its first
    checkpoint, sometimes mid-save), resuming after each kill: the final weights are
    bitwise those of a run that was never interrupted."""
    steps, kills = 300, 10
    reference = train("sort", quiet=True, steps=steps, run_dir=str(tmp_path / "ref"), **TASK, **ENGINE).run_dir

    rng = random.Random(0)
    run = tmp_path / "killed"
    for i in range(kills):
        # a few steps past everything logged so far, so the resumed process has really trained
        target = last_logged_step(run) + rng.randint(3, 15)
        args = cli_args(steps, run) if i == 0 else ["train", "--quiet", "--resume", str(run)]
        proc = start(args, tmp_path / f"attempt-{i}.log")
        wait_until_logged(proc, run, target)
        time.sleep(rng.uniform(0, 0.05))  # land anywhere in a step, a checkpoint write included
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not list_checkpoints(run) or max(list_checkpoints(run)) < steps, f"kill {i} came after the end"

    resumed = subprocess.run([sys.executable, "-m", "tokformer.cli", "train", "--quiet", "--resume", str(run)],
                             capture_output=True, text=True, timeout=300, env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    final, expected = load_file(step_dir(run, steps) / "model.safetensors"), load_file(
        step_dir(reference, steps) / "model.safetensors")
    assert final.keys() == expected.keys()
    for key in final:
        assert torch.equal(final[key], expected[key]), key


def wait_until_logged(proc: subprocess.Popen, run_dir: Path, step: int, timeout: float = 180) -> None:
    """Block until ``run_dir``'s metrics log reaches ``step`` (no checkpoint needed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if last_logged_step(run_dir) >= step:
            return
        assert proc.poll() is None, f"training exited early with {proc.returncode}"
        time.sleep(0.005)
    raise AssertionError(f"step {step} not reached in {timeout}s")


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_exits_128_plus_it_and_the_requeued_command_resumes_exactly(tmp_path, signum, status):
    """SIGINT (Ctrl-C) and SIGTERM (preemption) save a checkpoint, print how to resume and exit
    with 128 + the signal; the same command rerun (as a scheduler requeues it) resumes, and ends
    bitwise where a run never interrupted ends."""
    steps = 150
    reference = train("sort", quiet=True, steps=steps, run_dir=str(tmp_path / "ref"), **TASK, **ENGINE).run_dir
    run = tmp_path / "run"
    log = tmp_path / "run.log"
    proc = start(cli_args(steps, run), log)
    wait_until_step(proc, run, 3)
    proc.send_signal(signum)
    assert proc.wait(timeout=120) == status
    output = log.read_text()
    assert "Traceback" not in output
    assert "interrupted at step" in output and f"--resume {run}" in output
    stopped = int(output.split("interrupted at step ")[1].split(";")[0])
    assert stopped < steps and stopped in list_checkpoints(run)
    state = json.loads((step_dir(run, stopped) / "state.json").read_text())
    assert state["step"] == stopped and state["data"]["micro_batch"] == stopped

    requeued = subprocess.run([sys.executable, "-m", "tokformer.cli", *cli_args(steps, run)], capture_output=True,
                              text=True, timeout=300, env=ENV)
    assert requeued.returncode == 0, requeued.stderr
    final, expected = (load_file(step_dir(r, steps) / "model.safetensors") for r in (run, reference))
    assert final.keys() == expected.keys() and all(torch.equal(final[k], expected[k]) for k in final)
