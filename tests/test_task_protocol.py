"""Task protocol v2: setup on rank 0 only, collate told train from eval, eval-pass hooks,
every declared tokenizer directory fingerprinted, and one inference entry (predict / load)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch
import torch.distributed as dist
from click.testing import CliRunner
from PIL import Image
from torch.utils.data import Dataset

import tokformer
from tokformer.cli import main
from tokformer.engine import StepOutput, Task, load_run, register_task, train
from tokformer.engine.trainer import evaluate_model
from tokformer.errors import CheckpointError, UsageError
from tokformer.runtime.distributed import local
from tokformer.store import loader
from tokformer.store.checkpoints import tokenizer_fingerprint
from tokformer.tasks.classify import ClassifyConfig, ClassifyTask
from tokformer.tasks.numbers_de import english, german
from tokformer.tokenizers.audio_io import write_wav

pytestmark = pytest.mark.usefixtures("one_thread")
ENGINE = dict(steps=2, batch_size=8, eval_every=2, device="cpu", quiet=True)


@dataclass
class RecordingConfig:
    n: int = 16


@register_task("test-recording")
class RecordingTask(Task):
    """Records the train flag of every collate call."""

    Config = RecordingConfig
    calls: list[bool] = []

    def train_dataset(self) -> Dataset:
        return [torch.ones(1)] * self.config.n

    def eval_dataset(self) -> Dataset:
        return [torch.ones(1)] * 4

    def collate(self, samples, train):
        RecordingTask.calls.append(train)
        return torch.stack(samples)

    def build_model(self) -> torch.nn.Module:
        return torch.nn.Linear(1, 1)

    def step(self, model, batch) -> StepOutput:
        return StepOutput(loss=model(batch).pow(2).mean(), count=len(batch))


BUILTIN_TASKS = ("audio", "classify", "graph", "lm", "sort", "translate", "vqa")


def test_every_builtin_task_registers_and_reads_its_default_data_as_builtin() -> None:
    """A module that fails to import only logs a warning, and a ``user_data`` written as a method
    is truthy: vqa's was, and its built-in runs stopped early (patience 3) at 1,800-2,500 of 3,000
    steps. Every built-in task registers, and with its defaults says its data are not the user's."""
    from tokformer.runtime.registry import get_task, task_names

    assert set(BUILTIN_TASKS) <= set(task_names())
    for name in BUILTIN_TASKS:
        cls = get_task(name)
        assert cls(cls.Config()).user_data is False, name


def test_a_task_whose_user_data_is_a_method_is_refused_at_registration() -> None:
    class MethodTask(Task):
        Config = RecordingConfig

        def user_data(self) -> bool:  # the bug: no @property
            return False

    with pytest.raises(TypeError, match=r"task 'test-method' \(.*MethodTask\) must define user_data as a @property"):
        register_task("test-method")(MethodTask)


def test_collate_is_told_train_from_eval(tmp_path: Path) -> None:
    RecordingTask.calls.clear()
    train("test-recording", run_dir=str(tmp_path / "r"), **{**ENGINE, "batch_size": 4})
    assert RecordingTask.calls.count(True) == 2 and RecordingTask.calls.count(False) == 1  # 2 steps, 1 eval batch


def test_fingerprint_covers_every_declared_tokenizer_dir(tmp_path: Path) -> None:
    for name in ("tok_a", "tok_b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "vocab.json").write_text("{}")
    both = tokenizer_fingerprint(tmp_path, ("tok_a", "tok_b"))
    assert both != tokenizer_fingerprint(tmp_path, ("tok_a",))
    (tmp_path / "tok_b" / "vocab.json").write_text('{"x": 1}')
    assert tokenizer_fingerprint(tmp_path, ("tok_a", "tok_b")) != both


def test_swapped_target_tokenizer_is_refused(tmp_path: Path) -> None:
    """K5 for translate with shared_vocab=false: tokenizer_tgt is fingerprinted too."""
    data = tmp_path / "d.tsv"
    data.write_text("".join(f"{english(n)}\t{german(n)}\n" for n in range(1, 40)), encoding="utf-8")
    run = tmp_path / "run"
    train("translate", run_dir=str(run), data=str(data), shared_vocab=False, share_embeddings=False, vocab_size=280,
          d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1, **ENGINE)
    load_run(run)  # loads as trained
    src, tgt = run / "tokenizer_src", run / "tokenizer_tgt"
    for name in ("vocab.json", "merges.txt"):  # same-size swap: the source side's files as the target's
        if (src / name).exists():
            (tgt / name).write_bytes((src / name).read_bytes())
    (tgt / "tokenizer_config.json").write_text((tgt / "tokenizer_config.json").read_text() + " ")
    with pytest.raises(CheckpointError, match="another tokenizer"):
        load_run(run)


def test_confusion_matrix_is_computed_by_the_eval_pass(tmp_path: Path) -> None:
    task = ClassifyTask(ClassifyConfig(train_size=8, eval_size=13, d_model=16, n_heads=2, n_layers=1))
    task.train_dataset()
    model = task.build_model().eval()
    task.setup(tmp_path, local())
    evaluate_model(task, model, task.eval_dataset(), local(), 5, "fp32", show=False)  # 3 batches: 5 + 5 + 3
    n = len(task.classes)
    direct = torch.zeros(n, n, dtype=torch.long)
    with torch.no_grad():
        for image, label in task.eval_dataset():
            direct[label, int(model(task.tokenizer.batch([image])).argmax())] += 1
    assert torch.equal(task.confusion, direct) and int(direct.sum()) == 13
    assert (tmp_path / "plots" / "confusion.png").stat().st_size > 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """One tiny run per built-in task, with command-line inputs for its predict."""
    root = tmp_path_factory.mktemp("runs")
    text = root / "corpus.txt"
    text.write_text("def add(a, b):\n    return a + b\n" * 40, encoding="utf-8")
    pairs = root / "pairs.tsv"
    pairs.write_text("".join(f"{english(n)}\t{german(n)}\n" for n in range(1, 40)), encoding="utf-8")
    image = root / "x.png"
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(image)
    sound = root / "x.wav"
    write_wav(sound, np.sin(np.arange(4000) / 3.0) * 0.3, 8000)
    graph = root / "g.edgelist"
    nx.write_edgelist(nx.cycle_graph(6), graph, data=False)
    small = dict(d_model=16, n_heads=2)
    specs = {
        "sort": (dict(seq_len=4, train_size=64, eval_size=8, n_layers=1), ["3 1 2 0"]),
        "classify": (dict(train_size=16, eval_size=8, n_layers=1), [str(image)]),
        "audio": (dict(train_size=16, eval_size=8, n_layers=1, max_seconds=0.5), [str(sound)]),
        "graph": (dict(per_class=4, folds=2, n_layers=1, k=4), [str(graph)]),
        "lm": (dict(data=str(text), vocab_size=270, context_len=8, n_layers=1), ["def "]),
        "translate": (dict(data=str(pairs), vocab_size=280, encoder_layers=1, decoder_layers=1), ["seven"]),
        "vqa": (dict(image_size=32, patch_size=16, train_size=16, eval_size=8, n_layers=1, vocab_size=270,
                     tokenizer="linear"), [str(image), "--prompt", "how many birds?"]),
    }
    for name, (options, _) in specs.items():
        train(name, run_dir=str(root / name), **small, **options, **ENGINE)
    return {name: (root / name, inputs) for name, (_, inputs) in specs.items()}


@pytest.mark.parametrize("task", ["sort", "classify", "audio", "graph", "lm", "translate", "vqa"])
def test_cli_predict_works_for_every_task(task: str, runs) -> None:
    run, inputs = runs[task]
    result = CliRunner().invoke(main, ["predict", str(run), *inputs])
    assert result.exit_code == 0, result.output
    expected = {"sort": r"^\d \d \d \d\n$", "classify": r"x\.png: \S+ [01]\.\d{3}.*\n$",
                "audio": r"x\.wav: \S+ [01]\.\d{3}.*\n$",
                "graph": r"g\.edgelist: \S+ [01]\.\d{3}.*\n$", "lm": r"^def ", "translate": r"^.*\n$",
                "vqa": r"^.*\n$"}
    assert re.search(expected[task], result.output), result.output  # one line each (lm: the prompt continued)


@pytest.mark.parametrize("task", ["sort", "classify", "audio", "graph", "lm", "translate", "vqa"])
def test_a_full_disk_while_a_task_saves_its_assets_leaves_the_saved_ones_whole(task: str, runs, tmp_path: Path,
                                                                            fill_disk) -> None:
    """Tokenizers, class names, vocabularies: a save that fails half-way (into a run directory, a model
    folder's staging folder) leaves every file as it was, none cut short and no temporary one beside them."""
    loaded, _ = load_run(runs[task][0])
    copy = tmp_path / "run"
    copy.mkdir()  # a run directory is made before its assets are saved
    loaded.save_assets(copy)
    before = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    fill_disk()
    with pytest.raises(OSError, match="No space left"):
        loaded.save_assets(copy)
    assert {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before


def test_load_loads_once_and_predicts_repeatedly(runs, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = loader.load_model
    monkeypatch.setattr(loader, "load_model", lambda *a, **k: calls.append(a) or real(*a, **k))
    predictor = tokformer.load(runs["sort"][0])
    first = predictor([[3, 1, 2, 0], "2 2 1 0"])
    assert predictor.predict([[3, 1, 2, 0]])[0] == first[0] and len(first[1]) == 4
    assert len(calls) == 1
    with pytest.raises(UsageError, match="no predict option 'beam_size'"):
        predictor(["3 1 2 0"], beam_size=2)


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_gloo_available(), reason="needs the gloo backend")
def test_setup_prepares_lm_data_once_on_rank_0_under_torchrun(tmp_path: Path) -> None:
    """2 gloo processes: only rank 0 trains the BPE and packs the corpus; both train on it."""
    text = tmp_path / "corpus.txt"
    text.write_text("def add(a, b):\n    return a + b\n" * 200, encoding="utf-8")
    script = tmp_path / "run_lm.py"
    script.write_text(textwrap.dedent(f"""
        import os
        from pathlib import Path
        from tokformer.engine import train
        from tokformer.tasks import lm_data
        from tokformer.tokenizers.bpe import BPETokenizer

        log = Path({str(tmp_path)!r}) / f"calls-{{os.environ['RANK']}}.txt"
        real_train, real_pack = BPETokenizer.train.__func__, lm_data.pack_corpus

        def counting_train(cls, *args, **kwargs):
            log.open("a").write("bpe\\n")
            return real_train(cls, *args, **kwargs)

        def counting_pack(*args, **kwargs):
            log.open("a").write("pack\\n")
            return real_pack(*args, **kwargs)

        BPETokenizer.train = classmethod(counting_train)
        lm_data.pack_corpus = counting_pack
        train("lm", run_dir={str(tmp_path / "run")!r}, data={str(text)!r}, vocab_size=270, context_len=8,
              d_model=16, n_heads=2, n_layers=1, steps=2, batch_size=4, eval_every=2, device="cpu", quiet=True)
    """))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "calls-0.txt").read_text().split() == ["bpe", "pack"]
    assert not (tmp_path / "calls-1.txt").exists(), "rank 1 loaded what rank 0 made"
    assert json.loads((tmp_path / "run" / "best.json").read_text())["step"] == 2


def test_rank_0_rewrites_its_assets_only_after_every_rank_has_read_them_in_setup(tmp_path: Path) -> None:
    """2 gloo processes: rank 0 writes an asset in setup, the others read it there after the barrier;
    then the engine has rank 0 save the assets again. A rewrite truncates the file first, so a rank
    still reading saw it empty: vqa's DDP test failed so under a loaded machine. Here the rewrite
    is slow and rank 1 reads late, so without the engine's barrier rank 1 reads an empty file."""
    script = tmp_path / "run_assets.py"
    script.write_text(textwrap.dedent(f"""
        import time
        from dataclasses import dataclass
        from pathlib import Path
        import torch
        from tokformer.engine import StepOutput, Task, barrier, register_task, train

        @dataclass
        class Config:
            n: int = 16

        @register_task("test-slow-assets")
        class SlowAssets(Task):
            Config = Config

            def train_dataset(self):
                return [torch.ones(1)] * self.config.n

            def save_assets(self, run_dir):
                with (Path(run_dir) / "asset.txt").open("w") as out:  # truncated now, written a second later
                    out.flush()
                    time.sleep(1.0)
                    out.write("ready")

            def setup(self, run_dir, dist):
                if dist.is_main:
                    self.save_assets(run_dir)
                barrier(dist)
                if not dist.is_main:
                    time.sleep(0.5)  # rank 0 is in the engine's rewrite by now, unless it waits for us
                    seen = (Path(run_dir) / "asset.txt").read_text()
                    Path({str(tmp_path)!r}, "seen-by-rank-1.txt").write_text(seen)

            def collate(self, samples, train):
                return torch.stack(samples)

            def build_model(self):
                return torch.nn.Linear(1, 1)

            def step(self, model, batch):
                return StepOutput(loss=model(batch).pow(2).mean(), count=len(batch))

        train("test-slow-assets", run_dir={str(tmp_path / "run")!r}, steps=1, batch_size=4, device="cpu", quiet=True)
    """))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "seen-by-rank-1.txt").read_text() == "ready"
