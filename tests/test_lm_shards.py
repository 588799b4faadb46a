"""Sharded corpora: writing fixed-size shards, reading them back as one id space, the split,
the same ids as the lm task's packed corpus, worker-count independence, and refusing bad input."""

import json
import multiprocessing
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tokformer.cli import main
from tokformer.errors import ConfigError, DataError
from tokformer.runtime.distributed import local
from tokformer.tasks import lm_data, lm_shards
from tokformer.tasks.lm import LMConfig, LMTask
from tokformer.tokenizers.bpe import BPETokenizer

TEXT = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 0\n    y = 0\n"


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.train([TEXT * 4], 280, special_tokens=[lm_data.EOT])


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    for i in range(9):
        (root / f"{i}.py").write_text(TEXT.replace("Point", f"Point{i}") * (1 + i % 3), encoding="utf-8")
    (root / "blob.bin").write_bytes(b"\x00\x01binary")  # skipped, as the lm task skips it
    return root


def flat(docs, eot):
    return [i for d in docs for i in [*d, eot]]


def test_documents_are_cut_into_fixed_size_shards_and_read_back_as_one_stream(tmp_path, bpe):
    eot = bpe.token_to_id(lm_data.EOT)
    docs = [[5, 6, 7], [], [8] * 10, list(range(1, 12))]  # the empty document is dropped
    index = lm_shards.write_shards(iter(docs), tmp_path / "s", bpe, shard_tokens=7)
    expected = flat([d for d in docs if d], eot)
    assert index.tokens == len(expected) == 27 and index.documents == 3
    assert [s.tokens for s in index.shards] == [7, 7, 7, 6]
    assert all((tmp_path / "s" / s.file).stat().st_size == 2 * s.tokens for s in index.shards)  # uint16
    ids = lm_shards.ShardedCorpus(tmp_path / "s", 0.2).ids
    assert ids[:].tolist() == expected
    for lo, hi in [(0, 7), (5, 9), (3, 24), (13, 14), (20, 27), (9, 9)]:  # within, across, over several shards
        assert ids[lo:hi].tolist() == expected[lo:hi]


def test_windows_span_shard_boundaries_and_match_a_flat_corpus(tmp_path, bpe):
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, bpe.vocab_size, size=n) for n in (40, 3, 77, 21)]
    lm_shards.write_shards(docs, tmp_path / "s", bpe, shard_tokens=16)
    lm_data.pack_corpus(iter(docs), lambda d: d, bpe.token_to_id(lm_data.EOT), bpe.vocab_size, tmp_path / "p",
                        0.25, [])
    sharded, packed = lm_shards.ShardedCorpus(tmp_path / "s", 0.25), lm_data.TokenCorpus(tmp_path / "p")
    assert sharded.split("train") == packed.split("train") and sharded.split("eval") == packed.split("eval")
    for split in ("train", "eval"):
        a, b = (lm_data.WindowDataset(c, split, context_len=8) for c in (sharded, packed))
        assert len(a) == len(b) > 0
        for i in range(len(a)):
            assert a[i].tolist() == b[i].tolist()
    clone = pickle.loads(pickle.dumps(sharded))  # DataLoader workers: no maps travel, they map again
    assert not clone.ids._maps and clone.ids[10:30].tolist() == sharded.ids[10:30].tolist()


@pytest.mark.parametrize("docs, val_fraction", [([[1] * 10, [2] * 10, [3] * 10], 0.3), ([[1] * 30], 0.2),
                                                ([[1] * 5, [2] * 40], 0.5), ([[1] * 20, [2]], 0.05)])
def test_held_out_split_is_the_one_pack_corpus_makes(tmp_path, bpe, docs, val_fraction):
    lm_shards.write_shards(docs, tmp_path / "s", bpe, shard_tokens=4)
    meta = lm_data.pack_corpus(iter(docs), lambda d: d, bpe.token_to_id(lm_data.EOT), bpe.vocab_size,
                               tmp_path / "p", val_fraction, [])
    assert lm_shards.ShardedCorpus(tmp_path / "s", val_fraction).eval_start == meta.eval_start


def test_prepared_shards_hold_exactly_the_ids_the_lm_task_packs(tmp_path, text_dir):
    index = lm_shards.prepare_lm(str(text_dir), tmp_path / "s", vocab_size=300, shard_tokens=50, workers=1,
                                 show_progress=False)
    task = LMTask(LMConfig(data=str(text_dir), vocab_size=300, context_len=16, d_model=16, n_heads=2, n_layers=1))
    task.setup(tmp_path / "run", local("cpu"))
    packed = (tmp_path / "run" / "corpus" / lm_data.CORPUS_FILE).read_bytes()
    sharded = b"".join((tmp_path / "s" / s.file).read_bytes() for s in index.shards)
    assert len(index.shards) > 3 and sharded == packed
    assert index.documents == 9  # the binary file skipped
    assert BPETokenizer.load(tmp_path / "s" / "tokenizer").files() == task.tokenizer.files()


def test_a_worker_count_past_the_cap_is_refused_and_no_more_workers_start_than_files(tmp_path, text_dir,
                                                                                    monkeypatch):
    """`data prepare lm --workers 100000` forked a process per worker: 1,668 processes and 9 GB for three
    files within 20 s, then the kernel's OOM killer, and two orphaned workers hung on a futex."""
    with pytest.raises(ConfigError, match="workers must be between 1 and 64, got 65"):
        lm_shards.prepare_lm(str(text_dir), tmp_path / "s", vocab_size=300, workers=65, show_progress=False)
    assert not (tmp_path / "s").exists()
    result = CliRunner().invoke(main, ["data", "prepare", "lm", "--data", str(text_dir), "--out",
                                       str(tmp_path / "s"), "--workers", "100000"])
    assert result.exit_code == 2 and "100000 is not in the range 1<=x<=64" in result.output
    started = []
    real_pool = lm_shards.ProcessPoolExecutor
    monkeypatch.setattr(lm_shards, "ProcessPoolExecutor", lambda n, **kw: started.append(n) or real_pool(n, **kw))
    few = tmp_path / "few"
    few.mkdir()
    for name in ("0.py", "1.py", "2.py"):
        (few / name).write_text((text_dir / name).read_text())
    lm_shards.prepare_lm(str(few), tmp_path / "s", vocab_size=300, workers=64, show_progress=False)
    assert started == [3], "a process per file at most"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads signal masks from Linux's /proc")
def test_a_sigterm_reaching_the_workers_leaves_stopping_to_the_parent(text_dir, bpe):
    """A scheduler's SIGTERM reaches the whole process group. A worker it killed could die half-way through
    sending a result, and the pool's thread in the parent would then wait for the rest of it forever (the
    command hung at exit, docs/reliability.md H47): the workers ignore it, and the parent, whose own handler
    records the stop, ends the pool between documents."""
    paths = sorted(text_dir.glob("*.py"))
    earlier = {p.pid for p in multiprocessing.active_children()}  # an earlier test's pool may still be ending
    results = lm_shards._encoded(paths, bpe, 2, lambda: False)
    first = next(results)
    workers = [p for p in multiprocessing.active_children() if p.pid not in earlier]
    assert len(workers) == 2
    deadline = time.monotonic() + 30  # a worker ignores SIGTERM from its initializer on, run just after the fork
    while not all(_ignores_sigterm(w.pid) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    for worker in workers:
        os.kill(worker.pid, signal.SIGTERM)
    time.sleep(0.2)
    assert all(worker.is_alive() for worker in workers)
    encoded = [first, *results]  # the rest of the files, as if nothing had happened
    alone = list(lm_shards._encoded(paths, bpe, 1, lambda: False))
    assert len(encoded) == len(paths) and all(np.array_equal(a, b) for a, b in zip(encoded, alone, strict=True))


def _ignores_sigterm(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGTERM (the SigIgn mask of Linux's /proc; False if it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    ignored = int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
    return bool(ignored & 1 << (signal.SIGTERM - 1))


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie no one reaped yet counts: it runs nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from Linux's /proc")
def test_the_workers_end_when_their_parent_is_killed(text_dir):
    """They ignore SIGTERM (above), so the signal a lost parent sends them is SIGKILL: no orphan encodes on."""
    script = textwrap.dedent(f"""
        import multiprocessing, time
        from pathlib import Path
        from tokformer.tasks import lm_shards
        from tokformer.tokenizers.bpe import BPETokenizer
        bpe = BPETokenizer.train(["def add(a, b): return a + b"] * 4, 270)
        results = lm_shards._encoded(sorted(Path({str(text_dir)!r}).glob("*.py")), bpe, 2, lambda: False)
        next(results)
        print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    workers = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(workers) == 2 and not any(_gone(pid) for pid in workers)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    orphans = [pid for pid in workers if not _gone(pid)]
    for pid in orphans:  # a failing run must not leave them behind
        os.kill(pid, signal.SIGKILL)
    assert not orphans


def test_one_and_two_workers_write_byte_identical_shards(tmp_path, text_dir):
    for workers in (1, 2):
        lm_shards.prepare_lm(str(text_dir), tmp_path / f"w{workers}", vocab_size=300, shard_tokens=64,
                             workers=workers, show_progress=False)
    files = sorted(p.name for p in (tmp_path / "w1").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "w2").iterdir()) and len(files) > 4
    for name in files:
        if name != "tokenizer":
            assert (tmp_path / "w1" / name).read_bytes() == (tmp_path / "w2" / name).read_bytes(), name


def test_a_reused_tokenizer_is_stored_with_the_shards(tmp_path, text_dir, bpe):
    bpe.save(tmp_path / "tok")
    lm_shards.prepare_lm(str(text_dir), tmp_path / "s", tokenizer=tmp_path / "tok", workers=1, show_progress=False)
    corpus = lm_shards.ShardedCorpus(tmp_path / "s", 0.1)
    assert corpus.tokenizer().files() == bpe.files()
    assert corpus.index.tokens == sum(len(bpe.encode(p.read_text())) + 1 for p in text_dir.glob("*.py"))


def test_a_failed_write_leaves_the_older_shards_and_no_partial_output(tmp_path, bpe):
    lm_shards.write_shards([[1, 2, 3]], tmp_path / "s", bpe)

    def crashing():
        yield [4, 5, 6]
        raise RuntimeError("the dataset went away")

    with pytest.raises(RuntimeError, match="went away"):
        lm_shards.write_shards(crashing(), tmp_path / "s", bpe, overwrite=True)
    assert lm_shards.ShardedCorpus(tmp_path / "s", 0.5).ids[:].tolist()[:3] == [1, 2, 3]
    with pytest.raises(RuntimeError):
        lm_shards.write_shards(crashing(), tmp_path / "new", bpe)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no staging directory left behind
    lm_shards.write_shards([[7, 8]], tmp_path / "s", bpe, overwrite=True)
    assert lm_shards.ShardedCorpus(tmp_path / "s", 0.5).ids[:2].tolist() == [7, 8]


def test_overwrite_refuses_shards_holding_the_users_files_among_them(tmp_path, bpe):
    """Not only beside the shards: in their tokenizer folder too, which --overwrite deletes with them."""
    out = tmp_path / "s"
    lm_shards.write_shards([[1, 2, 3]] * 5, out, bpe, shard_tokens=4)
    assert sorted(p.name for p in out.iterdir()) == [*(f"shard-{i:05d}.bin" for i in range(5)), "shards.json",
                                                     "tokenizer"]  # 5 documents of 3 ids and an end of text
    (out / "tokenizer" / "notes.txt").write_text("keep me")
    (out / "shard-1.bin").write_text("not one of ours")
    with pytest.raises(DataError, match=r"also holds shard-1\.bin, tokenizer/notes\.txt, which tokformer did not"):
        lm_shards.write_shards([[1]], out, bpe, overwrite=True)
    assert (out / "tokenizer" / "notes.txt").read_text() == "keep me"
    (out / "tokenizer" / "notes.txt").unlink()
    (out / "shard-1.bin").unlink()
    lm_shards.write_shards([[7, 8]], out, bpe, overwrite=True)  # only what tokformer wrote: replaced
    assert lm_shards.ShardedCorpus(out, 0.5).ids[:2].tolist() == [7, 8]


def test_output_rules_refuse_what_is_not_ours_to_replace(tmp_path, bpe):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(DataError, match="holds no shards"):
        lm_shards.write_shards([[1]], tmp_path / "mine", bpe, overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    lm_shards.write_shards([[1]], tmp_path / "s", bpe)
    with pytest.raises(DataError, match="already holds shards; pass --overwrite"):
        lm_shards.write_shards([[2]], tmp_path / "s", bpe)
    (tmp_path / "empty").mkdir()
    lm_shards.write_shards([[3]], tmp_path / "empty", bpe)  # an empty directory is fine


@pytest.mark.parametrize("docs, message", [([[1, 2, 99999]], "outside the tokenizer's vocabulary"),
                                           ([[-1]], "outside the tokenizer's vocabulary"),
                                           ([[[1, 2]]], "not a flat sequence"), ([[1.5]], "not a flat sequence"),
                                           ([[], []], "no usable text")])
def test_bad_documents_are_refused(tmp_path, bpe, docs, message):
    with pytest.raises(DataError, match=message):
        lm_shards.write_shards(docs, tmp_path / "s", bpe)
    assert list(tmp_path.iterdir()) == []


def test_a_tokenizer_without_end_of_text_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no <\\|endoftext\\|> special token"):
        lm_shards.write_shards([[1]], tmp_path / "s", BPETokenizer.train([TEXT], 270))


def edit_index(directory, **changes):
    path = directory / lm_shards.INDEX_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


CORRUPTIONS = {
    "not JSON": (lambda d: (d / "shards.json").write_text("{oops"), "not valid JSON"),
    "another version": (lambda d: edit_index(d, version=99), "version 99"),
    "another format": (lambda d: edit_index(d, format="npy"), "format 'npy'"),
    "missing field": (lambda d: edit_index(d, shards=[{"file": "shard-00000.bin"}]), "unexpected fields"),
    "bad count": (lambda d: edit_index(d, tokens="many"), "not a non-negative integer"),
    "truncated shard": (lambda d: (d / "shard-00001.bin").write_bytes(b"\0\0"), "found 2 bytes"),
    "missing shard": (lambda d: (d / "shard-00001.bin").unlink(), "found missing"),
    "path escape": (lambda d: edit_index(d, shards=[{"file": "../x.bin", "tokens": 1}], tokens=1), "x.bin"),
    "shard in a subfolder": (lambda d: edit_index(d, shards=[{"file": "tokenizer/vocab.json", "tokens": 1}], tokens=1),
                             "shard file 'tokenizer/vocab.json' is not a file name"),
    "edited tokenizer": (lambda d: (d / "tokenizer" / "tokenizer_config.json").write_text(
        (d / "tokenizer" / "tokenizer_config.json").read_text().replace("1024", "2048")), "not the tokenizer"),
}


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_a_damaged_shards_directory_is_a_clear_error(tmp_path, bpe, name):
    lm_shards.write_shards([list(range(1, 30))], tmp_path / "s", bpe, shard_tokens=8)
    damage, message = CORRUPTIONS[name]
    damage(tmp_path / "s")
    with pytest.raises(DataError, match=message):
        lm_shards.ShardedCorpus(tmp_path / "s", 0.1)


def test_shards_directories_are_recognised_by_their_index(tmp_path, bpe, text_dir):
    lm_shards.write_shards([[1]], tmp_path / "s", bpe)
    assert lm_shards.find_shards(f" {tmp_path / 's'} ") == tmp_path / "s"
    assert lm_shards.find_shards(str(text_dir)) is None and lm_shards.find_shards("stdlib") is None
    shutil.rmtree(tmp_path / "s")
    assert lm_shards.find_shards(str(tmp_path / "s")) is None
