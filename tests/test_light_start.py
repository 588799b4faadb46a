"""A light start: `import tokformer` and `tokformer --help` load neither the engine nor torch.

Importing torch alone takes over a second, several on a loaded machine; a command line that
only asks for help, or a script that only wants `tokformer.__version__`, must not pay it.
Checked in fresh interpreters through ``sys.modules`` rather than with a clock, so the
tests hold on a slow machine and fail for the right reason.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import tokformer


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_tokformer_does_not_import_the_engine():
    result = _run("import tokformer, sys; assert 'tokformer.engine' not in sys.modules, 'engine'; "
                  "assert 'torch' not in sys.modules, 'torch'")
    assert result.returncode == 0, result.stderr


def test_tokformer_help_does_not_import_torch():
    """What the `tokformer` console script runs (tokformer.cli:main), with --help."""
    code = ("import sys\nfrom tokformer.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "loaded = [m for m in ('torch', 'tokformer.engine') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert "Commands:" in result.stdout and "train" in result.stdout


def test_all_lists_exactly_the_lazy_names():
    assert sorted(tokformer.__all__) == sorted(tokformer._LAZY)


@pytest.mark.parametrize("name", tokformer.__all__)
def test_every_public_name_loads_on_first_use(name):
    assert getattr(tokformer, name) is not None
    assert name in dir(tokformer)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Trainer'"):
        tokformer.Trainer  # noqa: B018
