"""`tokformer train` under torchrun: 2 CPU processes (gloo) train like 1 process on the same global batch;
a signal to the workers saves, exits 143, and the requeued command resumes exactly."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file
from tiny import torchrun_sort

from tokformer.engine import train
from tokformer.store.steps import list_checkpoints, step_dir

TASK = dict(seq_len=6, train_size=256, eval_size=30, d_model=16, n_heads=2, n_layers=1)
ENGINE = dict(batch_size=16, grad_accum=2, warmup_steps=2, log_every=2, eval_every=3, device="cpu")
STEPS = 6


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_gloo_available(), reason="needs the gloo backend")
def test_two_processes_match_one(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = train("sort", quiet=True, steps=STEPS, run_dir=str(tmp_path / "one"), **TASK, **ENGINE)
    finally:
        torch.set_num_threads(before)

    run = tmp_path / "two"
    done = torchrun_sort(run, TASK, ENGINE, steps=STEPS)
    assert done.stdout.count("done: 6 steps") == 1, "only rank 0 reports"

    one, two = (load_file(step_dir(r, STEPS) / "model.safetensors") for r in (single.run_dir, run))
    for key in one:
        torch.testing.assert_close(two[key], one[key], atol=1e-5, rtol=1e-4)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "eval"] == [3, 6], "rank 0 alone writes metrics"
    evals = [r for r in records if r["split"] == "eval"]
    assert evals[-1]["loss"] == pytest.approx(single.metrics["loss"], rel=1e-4)  # all 30 samples, split 15 + 15
    assert list_checkpoints(run) == [3, 6]
    state = json.loads((step_dir(run, 6) / "state.json").read_text())
    assert state["data"]["world"] == 2 and len(state["rng"]) == 2, "every rank's RNG streams are saved"


def torchrun_command(run: Path, steps: int) -> list[str]:
    args = ["train", "sort", "--quiet", "--steps", str(steps), "--run-dir", str(run), "--deterministic",
            "--eval-every", "20"]
    args += [a for k, v in TASK.items() for a in ("-o", f"{k}={v}")]
    args += [a for k, v in ENGINE.items() if k != "eval_every" for a in (f"--{k.replace('_', '-')}", str(v))]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "tokformer.cli", *args]


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_gloo_available(), reason="needs the gloo backend")
def test_sigterm_under_torchrun_saves_exits_143_and_the_requeued_command_resumes_exactly(tmp_path):
    steps, env = 600, {**os.environ, "OMP_NUM_THREADS": "1"}
    reference = subprocess.run(torchrun_command(tmp_path / "ref", steps), capture_output=True, text=True,
                               timeout=300, env=env)
    assert reference.returncode == 0, reference.stderr[-3000:]

    run = tmp_path / "run"
    with (tmp_path / "run.log").open("w") as log:
        proc = subprocess.Popen(torchrun_command(run, steps), stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 180
    while not list_checkpoints(run):  # the first checkpoint, at step 20
        assert proc.poll() is None and time.monotonic() < deadline, "torchrun ended before its first checkpoint"
        time.sleep(0.005)
    workers = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert len(workers) == 2
    for pid in workers:  # as a cluster preempting the job signals each of its processes
        os.kill(int(pid), signal.SIGTERM)
    assert proc.wait(timeout=120) != 0  # torchrun reports its workers' status as a failure
    output = (tmp_path / "run.log").read_text()
    assert "exitcode: 143" in output, output[-3000:]
    assert output.count("interrupted at step") == 1, "rank 0 alone reports"
    stopped = int(output.split("interrupted at step ")[1].split(";")[0])
    assert stopped < steps and stopped in list_checkpoints(run)

    requeued = subprocess.run(torchrun_command(run, steps), capture_output=True, text=True, timeout=300, env=env)
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    final, expected = (load_file(step_dir(r, steps) / "model.safetensors") for r in (run, tmp_path / "ref"))
    assert final.keys() == expected.keys() and all(torch.equal(final[k], expected[k]) for k in final)


def test_device_auto_selection_and_bad_devices():
    from tokformer.errors import ConfigError
    from tokformer.runtime.distributed import select_device

    expected = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert select_device("auto").type == expected
    assert select_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="not a device"):
        select_device("toaster")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            select_device("cuda")


WORKER_ABORTS = """
import os
from tokformer.runtime.distributed import process_group

def abort_in_rank_one():
    os.abort()  # as a C++ library's failed check does

with process_group("cpu") as d:
    if d.rank == 1:
        abort_in_rank_one()
"""


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_gloo_available(), reason="needs the gloo backend")
def test_a_rank_killed_by_a_signal_prints_where_it_was(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER_ABORTS)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=tmp_path)
    assert done.returncode != 0
    assert "Fatal Python error: Aborted" in done.stderr, done.stderr[-3000:]
    assert 'in abort_in_rank_one' in done.stderr, "the dying rank's stack names the function it died in"
