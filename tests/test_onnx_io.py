"""docs/interop.md, "Running the ONNX file without tokformer", checked against the exporter.

For every task a tiny run is trained and exported as ``tokformer export --format onnx`` does;
the section's example for that task is read from the document, run in a fresh interpreter next
to the exported folder, and must print what tokformer itself predicts for the same input; the
task's table must list the file's inputs and outputs (names, dtypes, named dims) in order.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import onnxruntime
import pytest
from PIL import Image
from tiny import TINY, TRAIN

from tokformer.engine import load_model, train
from tokformer.interop.export import export_run

pytest.importorskip("onnxscript")  # the optional [onnx] extra
# Slow tier: each task trains, exports (10-25 s on 2 cores) and runs a fresh interpreter; the quick
# tier's tests/test_export.py checks onnxruntime against eager for every task.
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

DOC = Path(__file__).resolve().parents[1] / "docs" / "interop.md"
SECTION = "## Running the ONNX file without tokformer"
MARK = "<!-- docs: tested by tests/test_onnx_io.py -->"
TASKS = ["sort", "classify", "lm", "translate", "graph"]
# Untied output layers: a barely trained model with tied embeddings repeats its last token,
# which would hide a wrong position or prefix; untied, its greedy continuations vary. A context
# of 8 makes the lm example's 20 new tokens slide the window.
OPTIONS = {"lm": {"tie_embeddings": False, "context_len": 8}, "translate": {"share_embeddings": False}}
# The inputs the examples use (keep in step with the document).
DIGITS = "3 1 4 1 5 0"
PROMPT, NEW_TOKENS = "def ", 20
SENTENCE = "twenty-one"
EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 0), (0, 3), (2, 5)]
ONNX_DTYPES = {"tensor(bool)": "bool", "tensor(int64)": "int64", "tensor(float)": "float32"}


def section(task: str) -> str:
    """The document's subsection of ``task`` (``### task`` up to the next heading of its level)."""
    text = DOC.read_text(encoding="utf-8")
    text = text[text.index(SECTION):]
    found = re.search(rf"^### {task}\n(.*?)(?=^##+ |\Z)", text, re.S | re.M)
    assert found, f"{DOC.name} has no '### {task}' under '{SECTION}'"
    return found.group(1)


def example(task: str) -> str:
    """The task's python block, the one marked as tested here."""
    blocks = re.findall(re.escape(MARK) + r"\n```python\n(.*?)```", section(task), re.S)
    assert len(blocks) == 1, f"'### {task}' should hold one python block marked {MARK}"
    return blocks[0]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per task, a directory holding ``TASK-model`` (the exported folder), made on first use."""
    root = tmp_path_factory.mktemp("onnx-io")

    class Exported(dict):
        def __missing__(self, name: str) -> Path:
            work = root / name
            run = train(name, run_dir=str(work / "run"), **{**TINY[name], **OPTIONS.get(name, {})}, **TRAIN).run_dir
            export_run(run, work / f"{name}-model", format="onnx")
            self[name] = work
            return work

    return Exported()


def tokformer_prints(name: str, work: Path) -> str:
    """What the example should print: tokformer's own prediction for the example's input."""
    folder = work / f"{name}-model"
    if name == "lm":
        from tokformer.tasks.lm import generate_text

        return generate_text(folder, PROMPT, max_new_tokens=NEW_TOKENS, temperature=0)[0]
    if name == "translate":
        from tokformer.tasks.translate import translate

        return translate(folder, [SENTENCE], beam_size=1)[0]
    task, model = load_model(folder)
    if name == "sort":
        return task.show_prediction(DIGITS, task.predict(model, [DIGITS])[0])
    if name == "classify":
        (label, prob), *_ = task.predict(model, [str(work / "image.png")])[0]
    else:
        graph = nx.Graph()
        graph.add_nodes_from(range(7))  # node order is token order
        graph.add_edges_from(EDGES)
        (label, prob), *_ = task.predict(model, [graph])[0]
    return f"{label} {prob:.3f}"


def _same(name: str, printed: str, expected: str) -> None:
    if name in ("classify", "graph"):  # "label probability": the probability to the last printed digit
        (label, prob), (want_label, want_prob) = printed.rsplit(" ", 1), expected.rsplit(" ", 1)
        assert label == want_label and float(prob) == pytest.approx(float(want_prob), abs=1.01e-3)
    else:
        assert printed == expected


@pytest.mark.parametrize("name", TASKS)
def test_example_prints_what_tokformer_predicts(name: str, exported: dict[str, Path]) -> None:
    code, work = example(name), exported[name]
    assert f'folder = "{name}-model"' in code
    assert not re.search(r"^\s*(import|from)\s+tokformer", code, re.M)  # the point: no tokformer
    if name == "classify":  # not the training size (16): the example resizes as tokformer does
        pixels = np.random.default_rng(0).integers(0, 256, (20, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(work / "image.png")
    script = work / f"{name}_example.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, script.name], cwd=work, capture_output=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "utf-8"})
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    printed = done.stdout.decode("utf-8").removesuffix("\n")  # bytes: a generated "\r" stays one
    _same(name, printed, tokformer_prints(name, work))


@pytest.mark.parametrize("name", TASKS)
def test_table_lists_the_files_inputs_and_outputs(name: str, exported: dict[str, Path]) -> None:
    rows = re.findall(r"^\| (in|out) \| `(\w+)` \| `\[([^]]*)\]` \| (\w+) \|", section(name), re.M)
    session = onnxruntime.InferenceSession(str(exported[name] / f"{name}-model" / "model.onnx"))
    actual = [("in", i) for i in session.get_inputs()] + [("out", o) for o in session.get_outputs()]
    assert [(kind, value.name) for kind, value in actual] == [(kind, row_name) for kind, row_name, *_ in rows]
    for (_, value), (_, _, shape, dtype) in zip(actual, rows, strict=True):
        assert ONNX_DTYPES[value.type] == dtype, value.name
        dims = [d.strip() for d in shape.split(",")]
        assert len(dims) == len(value.shape), value.name
        for dim, documented in zip(value.shape, dims, strict=True):  # a static dim is documented by its meaning
            assert not isinstance(dim, str) or dim == documented, f"{value.name}: {value.shape} vs [{shape}]"
