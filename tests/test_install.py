"""The installed package exposes only `tokformer`: our tokenizers never shadow Hugging Face's."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_python(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_our_tokenizers_live_inside_tokformer(tmp_path):
    location = run_python("import tokformer.tokenizers as t; print(t.__file__)", cwd=tmp_path)
    assert Path(location).resolve().parent == REPO / "tokenizers"


def test_import_tokenizers_outside_the_repo_does_not_find_ours(tmp_path):
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.find_spec('tokenizers')\n"
        "print(spec.origin if spec else 'absent')\n"
    )
    origin = run_python(code, cwd=tmp_path)
    assert origin == "absent" or Path(origin).resolve().parent != REPO / "tokenizers"


def test_hugging_face_tokenizers_imports_beside_tokformer(tmp_path):
    pytest.importorskip("tokenizers")  # a test-only dependency; the [test] extra installs it
    out = run_python(
        "import tokformer, tokformer.tokenizers, tokenizers\n"
        "from tokenizers import Tokenizer\n"
        "print(tokenizers.__name__, Tokenizer.__module__.split('.')[0])",
        cwd=tmp_path,
    )
    assert out == "tokenizers tokenizers"


def test_console_script_is_installed_and_has_help(tmp_path):
    script = shutil.which("tokformer") or str(Path(sys.executable).parent / "tokformer")
    done = subprocess.run([script, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Usage: tokformer" in done.stdout


def test_every_subpackage_is_listed_for_a_wheel():
    """`pip install .` (not -e) ships only the packages pyproject lists: a forgotten one would
    work in the editable checkout and be missing from the wheel."""
    import tomllib

    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {name: REPO / path for name, path in setup["package-dir"].items()}
    found = set()
    for name, root in roots.items():
        for init in root.rglob("__init__.py"):
            parts = init.parent.relative_to(root).parts
            if "__pycache__" not in parts:
                found.add(".".join((name, *parts)))
    assert found == set(setup["packages"])
