"""Run Python code the way a Windows or C-locale machine would: its default encoding ASCII."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tokformer

ASSERT_ASCII = ('import locale; assert locale.getencoding().lower() in ("ascii", "ansi_x3.4-1968"), '
                'locale.getencoding()\n')


def run_under_ascii_locale(script: str) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter whose locale encoding is ASCII, importing the code under test
    (a mutation run's copy included: its folder goes first on the path and is the working directory)."""
    code = Path(tokformer.__file__).parents[1]
    env = os.environ | {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0",
                        "PYTHONPATH": str(code)}
    return subprocess.run([sys.executable, "-c", ASSERT_ASCII + script], env=env, capture_output=True, text=True,
                          cwd=code)
