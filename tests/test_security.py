"""Loading never runs code, and a run writes only inside its run directory
(docs/reliability.md, "Security"). Special tokens in user text: tests/test_bpe.py and
tests/test_fuzz_tokenizers.py."""

import ast
import pickle
import tempfile
from pathlib import Path

import pytest

import tokformer
from tokformer.engine import train
from tokformer.errors import DataError
from tokformer.interop.timm import read_weights

pytestmark = pytest.mark.usefixtures("one_thread")

PACKAGE = Path(tokformer.__file__).resolve().parent.parent  # the repository: tokformer/, tokenizers/, tasks/
SOURCES = [p for top in ("tokformer", "tokenizers", "tasks") for p in (PACKAGE / top).rglob("*.py")]


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):  # a bare call: eval(...)
                owner, name = None, func.id
            elif isinstance(func, ast.Attribute):  # module.function(...) or obj.method(...)
                owner = func.value.id if isinstance(func.value, ast.Name) else "<expression>"
                name = func.attr
            else:
                continue
            yield owner, name, {k.arg: k.value for k in node.keywords}


def _true(node) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def test_no_source_file_can_unpickle_or_evaluate():
    """No pickle/marshal/shelve imports; torch.load only with weights_only=True; no eval/exec;
    YAML only through safe_load; numpy loads without allow_pickle."""
    assert len(SOURCES) > 30
    problems = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
                problems += [f"{path.name}: imports {n}" for n in names if n and n.split(".")[0] in
                             ("pickle", "cPickle", "dill", "marshal", "shelve", "joblib")]
        for owner, name, kwargs in _calls(tree):
            if owner == "torch" and name == "load" and not _true(kwargs.get("weights_only")):
                problems.append(f"{path.name}: torch.load without weights_only=True")
            if owner is None and name in ("eval", "exec", "__import__"):
                problems.append(f"{path.name}: {name}()")
            if owner == "yaml" and name in ("load", "unsafe_load", "full_load"):
                problems.append(f"{path.name}: yaml.{name}")
            if owner == "np" and _true(kwargs.get("allow_pickle")):
                problems.append(f"{path.name}: np.{name}(allow_pickle=True)")
    assert not problems, problems


class _Payload:
    """Unpickling this calls Path.touch(marker): code execution, if the loader allowed it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_malicious_pickle_checkpoint_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    weights = tmp_path / "vit.pth"
    weights.write_bytes(pickle.dumps({"state_dict": _Payload(marker)}))
    with pytest.raises(DataError, match="cannot read weights"):
        read_weights(weights)
    assert not marker.exists(), "loading executed code from the file"


def _snapshot(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def test_a_run_writes_only_inside_its_run_directory(tmp_path, monkeypatch):
    """Inputs named in the config (a corpus, a saved tokenizer) are only read; temporary files
    (the LM's staging directory) are removed; everything new lies under the run directory."""
    corpus, run_dir = tmp_path / "corpus", tmp_path / "runs" / "lm"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # temporary files land where we can see them
    monkeypatch.chdir(tmp_path)
    before = _snapshot(tmp_path)
    train("lm", quiet=True, data=str(corpus), run_dir=str(run_dir), steps=2, batch_size=2, context_len=16,
          d_model=16, n_heads=2, n_layers=1, vocab_size=300, eval_every=2, device="cpu")
    created = _snapshot(tmp_path) - before
    outside = sorted(str(p) for p in created if run_dir not in p.parents and p not in (run_dir, run_dir.parent))
    assert not outside, outside
    assert (run_dir / "tokenizer").is_dir() and list((run_dir / "checkpoints").iterdir())


def test_checkpoint_selectors_cannot_name_paths(tmp_path):
    run = train("sort", quiet=True, steps=2, eval_every=2, batch_size=8, seq_len=4, train_size=64, eval_size=16,
                d_model=16, n_heads=2, n_layers=1, device="cpu", run_dir=str(tmp_path / "run")).run_dir
    from tokformer.errors import ConfigError
    from tokformer.store.checkpoints import find_checkpoint

    for selector in ("../../etc", "/tmp", "step-00000002/../../..", "2/.."):
        with pytest.raises(ConfigError, match="not found; use latest, best or one of steps"):
            find_checkpoint(run, selector)
