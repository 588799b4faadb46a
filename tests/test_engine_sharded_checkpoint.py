"""Sharded checkpoints (tokformer.store.sharded): the layout, exact resume and export.

One process with ``--strategy fsdp`` writes a sharded checkpoint of one shard; the files and
their checks are the same for any number (2 processes, and resuming across world sizes, are
in test_engine_fsdp.py; faults in test_checkpoint_faults.py).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open

import tokformer
from tokformer.engine import train
from tokformer.interop.export import export_run
from tokformer.store import checkpoints, sharded, steps

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(seq_len=6, train_size=256, eval_size=32, d_model=16, n_heads=2, n_layers=1, batch_size=16,
            warmup_steps=2, log_every=1, eval_every=4, device="cpu", deterministic=True, strategy="fsdp")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the resume tests run: the summation order decides bits
    try:
        return train("sort", quiet=True, steps=8, run_dir=str(tmp_path_factory.mktemp("runs") / "run"),
                     **TINY).run_dir
    finally:
        torch.set_num_threads(threads)


def losses(run) -> list[tuple[int, float, float]]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"], r["grad_norm"]) for r in records if r["split"] == "train"]


def test_a_sharded_checkpoint_is_safetensors_and_json_with_the_manifest_listing_every_shard(run):
    path = steps.step_dir(run, 8)
    assert sorted(p.name for p in path.iterdir()) == [
        "manifest.json", "shard-00000-of-00001.safetensors", "state.json", "state.safetensors"]
    manifest = json.loads((path / "manifest.json").read_text())
    assert (manifest["format"], manifest["step"], manifest["world"]) == (sharded.FORMAT, 8, 1)
    assert manifest["shards"] == {"shard-00000-of-00001.safetensors": (path / "shard-00000-of-00001.safetensors")
                                  .stat().st_size}
    with safe_open(path / "shard-00000-of-00001.safetensors", framework="pt") as f:
        meta = json.loads(f.metadata()[sharded.SHARD_META])
        keys = set(f.keys())
    assert (meta["step"], meta["rank"], meta["world"]) == (8, 0, 1)
    assert "model.encoder.blocks.0.attn.qkv.weight" in keys
    assert "optimizer.state.encoder.blocks.0.attn.qkv.weight.exp_avg_sq" in keys, "AdamW moments are in the shards"
    assert meta["pieces"]["model.head.weight"] == {"shape": manifest["tensors"]["model.head.weight"]["shape"],
                                                   "offset": [0, 0]}
    state = json.loads((path / "state.json").read_text())
    assert "optimizer" not in state and state["step"] == 8 and len(state["rng"]) == 1


def test_resuming_a_sharded_run_is_bitwise_exact(run, tmp_path):
    resumed = shutil.copytree(run, tmp_path / "run")
    shutil.rmtree(steps.step_dir(resumed, 8))
    assert train(resume=resumed, quiet=True).step == 8
    assert losses(resumed) == losses(run), "the same losses and gradient norms, bit for bit, logged once"
    one, two = (checkpoints.load_model_state(steps.step_dir(r, 8)) for r in (run, resumed))
    assert all(torch.equal(one[k], two[k]) for k in one)
    moments = [sharded.load_optimizer_state(steps.step_dir(r, 8))["state"] for r in (run, resumed)]
    assert all(torch.equal(moments[0][name]["exp_avg"], moments[1][name]["exp_avg"]) for name in moments[0])


def test_resume_may_change_the_strategy_and_the_checkpoint_format_follows(tmp_path):
    """The strategy is a training option: --resume may change it, the next checkpoint takes its format
    (one process; the 2-process DDP -> FSDP resume, with sharded optimizer state, is in test_engine_fsdp)."""
    run = train("sort", quiet=True, steps=4, run_dir=str(tmp_path / "run"), **{**TINY, "strategy": "ddp"}).run_dir
    assert (steps.step_dir(run, 4) / "model.safetensors").exists()
    train(resume=run, quiet=True, steps=8, strategy="fsdp")
    assert sharded.is_sharded(steps.step_dir(run, 8))
    train(resume=run, quiet=True, steps=12, strategy="ddp")
    assert (steps.step_dir(run, 12) / "model.safetensors").exists()


def test_export_of_a_sharded_run_writes_one_consolidated_model_file(run, tmp_path):
    folder = export_run(run, tmp_path / "model", checkpoint="latest")
    assert not list(folder.glob("shard-*"))
    exported = checkpoints.load_model_state(folder)
    whole = sharded.load_model_state(steps.step_dir(run, 8))
    assert exported.keys() == whole.keys() and all(torch.equal(exported[k], whole[k]) for k in whole)
    inputs = ["3 1 4 1 5 9", "2 7 1 8 2 8"]
    assert tokformer.load(folder)(inputs) == tokformer.load(run, checkpoint="latest")(inputs)


def test_a_sharded_checkpoint_reads_back_with_its_path_and_a_by_name_optimizer_state(run):
    """What the trainer's resume reads (mutation testing, benchmarks/results/mutation.md): a sharded
    checkpoint's optimizer state is keyed by parameter name, and says so."""
    path = steps.step_dir(run, 8)
    saved = checkpoints.read_checkpoint(path)
    assert saved.path == path and saved.by_name is True
    assert set(saved.optimizer["state"]) <= set(saved.weights), "a sharded optimizer state is keyed by name"
