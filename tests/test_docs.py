"""Every code block of README.md and docs/*.md runs, as a new user would run it.

The rules (which blocks run, what a block may say about itself, the training budget) are in
``tests/docs_blocks.py``; the files the snippets name (images, corpora, a Hugging Face
folder, timm weights) are made offline by ``tests/docs_sandbox.py``. A snippet that crashes
fails here with its document, line and output.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from docs_blocks import DOCUMENTS, ROOT, RUNNABLE, Block, budgeted, commands, read_blocks
from docs_sandbox import build_shared, populate

BLOCKS = [block for document in DOCUMENTS for block in read_blocks(document) if block.language in RUNNABLE]
TIMEOUT = 900  # seconds per block: a budgeted block takes seconds; a hang must not stall CI
SENTINEL = "\x1edocs-block-done"

SERVER = f"""
import sys, json, traceback
namespace = {{"__name__": "__main__"}}
exec(sys.argv[1], namespace)
for request in sys.stdin:
    block = json.loads(request)
    status = "ok"
    try:
        exec(compile(block["code"], block["id"], "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        status = "error"
    sys.stdout.flush(); sys.stderr.flush()
    print("\\n{SENTINEL} " + status, flush=True)
"""

# train() and tokformer.train() under the documents' budget; everything else as published
PRELUDE = """
import tokformer, tokformer.engine
from docs_blocks import small_train_overrides
_train = tokformer.engine.train
def _budgeted_train(config=None, **overrides):
    return _train(config, **small_train_overrides(config, overrides))
tokformer.train = tokformer.engine.train = _budgeted_train
"""


def environment() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT / "tests"), "TQDM_DISABLE": "1", "COLUMNS": "120"}


class PythonSession:
    """An interpreter that runs blocks one after another: a block marked ``continues`` sees the
    names of the block above it."""

    def __init__(self, cwd: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-u", "-c", SERVER, PRELUDE], cwd=cwd, env=environment(),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, block: Block) -> tuple[bool, str]:
        self.process.stdin.write(json.dumps({"code": block.code, "id": block.id}) + "\n")
        self.process.stdin.flush()
        output = []
        while True:
            line = self.lines.get(timeout=TIMEOUT)
            if line is None:
                return False, "".join(output) + "\n(the interpreter exited)"
            if line.startswith(SENTINEL):
                return line.split()[-1] == "ok", "".join(output)
            output.append(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def run_shell(lines: list[str], cwd: Path) -> tuple[bool, str]:
    script = "set -euo pipefail\n" + "\n".join(budgeted(line) for line in lines) + "\n"
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=environment(), capture_output=True, text=True,
                          timeout=TIMEOUT)
    return done.returncode == 0, f"$ {script}\n{done.stdout}{done.stderr}"


def executed(block: Block) -> bool:
    """Whether the runner executes ``block`` (rather than skipping it, leaving it to another test or parsing it)."""
    return not (block.not_run or block.tested_by) and (block.language in ("bash", "python") or block.file is not None)


def run_document(document: Path, cwd: Path, shared: Path) -> dict[str, tuple[bool, str]]:
    """Run ``document``'s blocks in order in ``cwd``: ``{block id: (passed, output)}``."""
    populate(cwd, shared)
    outcomes: dict[str, tuple[bool, str]] = {}
    session: PythonSession | None = None
    try:
        for block in (b for b in BLOCKS if b.document == document and executed(b)):
            if block.file is not None:
                (cwd / block.file).write_text(block.code, encoding="utf-8")
                outcomes[block.id] = (True, "")
                continue
            if block.setup and not (setup := run_shell(block.setup, cwd))[0]:
                outcomes[block.id] = (False, "its setup failed:\n" + setup[1])
                continue
            if block.language == "bash":
                outcomes[block.id] = run_shell(commands(block.code), cwd)
                continue
            if session is None or not block.continues:  # a fresh interpreter, as a reader pasting the block
                if session is not None:
                    session.close()
                session = PythonSession(cwd)
            outcomes[block.id] = session.run(block)
    finally:
        if session is not None:
            session.close()
    return outcomes


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bool, str]]:
    """Every document run at once, one per worker (each command single-threaded), so the docs cost
    CI the time of the longest documents rather than of all of them."""
    root = tmp_path_factory.mktemp("docs")
    build_shared(root / "shared")
    documents = sorted({block.document for block in BLOCKS if executed(block)})
    workers = max(1, min(4, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        runs = pool.map(lambda doc: run_document(doc, root / doc.stem, root / "shared"), documents)
        return {block_id: outcome for run in runs for block_id, outcome in run.items()}


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.id)
def test_documented_code_runs(block: Block, outcomes: dict[str, tuple[bool, str]]) -> None:
    if block.not_run:
        pytest.skip(f"not run here: {block.not_run}")
    if block.tested_by:
        tester = ROOT / block.tested_by
        assert tester.is_file() and block.document.name in tester.read_text(encoding="utf-8"), \
            f"{block.id} says it is tested by {block.tested_by}, which does not read {block.document.name}"
        return
    if not executed(block):  # toml and json that are no file: they must parse
        import tomllib  # Python 3.11+

        (tomllib.loads if block.language == "toml" else json.loads)(block.code)
        return
    ok, output = outcomes[block.id]
    assert ok, f"{block.id} failed:\n{output[-6000:]}"


def test_every_block_that_does_not_run_says_why() -> None:
    """A block is run, run elsewhere, a file, or marked not run with a reason: nothing is silently left out."""
    for block in BLOCKS:
        assert block.not_run is None or len(block.not_run) >= 10, f"{block.id}: 'not run' needs a real reason"
        for number, reason in block.skip_lines.items():
            assert 1 <= number <= len(block.lines) and len(reason) >= 10, f"{block.id}: bad skip line {number}"


def test_training_commands_get_the_budget_and_keep_their_own_flags() -> None:
    line = "tokformer train lm -o vocab_size=4096 --steps 5000   # comment # with hash"
    command, _, comment = budgeted(line).partition("  #")
    assert command.startswith("tokformer train lm -o vocab_size=4096 --steps 5000 --steps 2 ")
    assert command.endswith("--vocab-size 300 --val-fraction 0.2 --context-len 32")
    assert comment == " comment # with hash"
    assert budgeted("tokformer train sort --help") == "tokformer train sort --help"
    assert "--vocab" not in budgeted("tokformer train --resume runs/lm"), "a resumed run keeps its task options"
    assert budgeted("tokformer generate RUN -p '# not a comment'") == "tokformer generate RUN -p '# not a comment'"
    chained = budgeted("tokformer train sort --run-dir r && tokformer export r --out m")
    assert chained.startswith("tokformer train sort --run-dir r --steps 2 ")
    assert chained.endswith(" && tokformer export r --out m"), "each command of a chain is budgeted on its own"


def catalogued_tests(catalogue: str) -> list[tuple[str | None, str]]:
    """(test file or None, test function) for every test a row of docs/reliability.md names in its last
    cell: ``file.py::test_name[params]``, or a bare ``test_name`` (of the file named before it in the cell,
    if any). ``...`` shorthands (``test_cli.py::...[case]``) name no function."""
    named = []
    for row in catalogue.splitlines():
        if not row.startswith("| "):
            continue
        current = None
        for file, function, bare in re.findall(r"`(?:([\w/]+\.py)::(\w+)|(test_\w+))(?:\[[^\]`]*\])?`",
                                               row.split("|")[-2]):
            current = file or current
            named.append((current, function or bare))
    return named


def test_the_reliability_catalogue_counts_its_entries_and_groups() -> None:
    """The headline count was written once (93) and stood while rows were added (146 by session 58)."""
    catalogue = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| [A-Z]\d+ \|", catalogue, re.M)
    groups = re.findall(r"^## ", catalogue, re.M)
    assert f"**{len(rows)} entries** in {len(groups)} groups." in catalogue


def test_every_test_the_reliability_catalogue_names_exists() -> None:
    """A renamed test must not leave the catalogue pointing at nothing: a row then claims a check no one runs."""
    named = catalogued_tests((ROOT / "docs" / "reliability.md").read_text(encoding="utf-8"))
    assert len(named) > 100
    assert ("test_engine_train.py", "test_a_failed_run_leaves_the_empty_folder_the_user_made_for_it") in named
    sources = {path.name: path.read_text(encoding="utf-8") for path in (ROOT / "tests").glob("test_*.py")}
    missing = [f"{file or '?'}::{function}" for file, function in named
               if not any(re.search(rf"^(?:async )?def {function}\(", text, re.M)
                          for name, text in sources.items() if file is None or name == Path(file).name)]
    assert not missing, missing
