"""The library's entry points check their arguments as the CLI checks its flags: a checkpoint given as
an int, counts below 1, a single string or path given to a Predictor, a vqa answer budget past what
the model can write, a task and a model of two runs given to ``save_pretrained``, a figure file
without a format. Each was a traceback from deep inside, or a silent wrong answer
(docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image
from tiny import TINY, TRAIN

import tokformer
from tokformer.cli import main
from tokformer.errors import DataError, UsageError
from tokformer.store.loader import Predictor
from tokformer.tasks.sort import SortConfig, SortTask

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny runs of sort, classify, graph and translate (one set for the module: tests only read them)."""
    root = tmp_path_factory.mktemp("runs")
    return {name: tokformer.train(name, run_dir=str(root / name), **TINY[name], **TRAIN).run_dir
            for name in ("sort", "classify", "graph", "translate")}


@pytest.fixture(scope="module")
def picture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("picture") / "img.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(path)
    return path


def test_a_checkpoint_step_given_as_an_int_is_that_step_and_other_types_are_refused_by_name(runs) -> None:
    """``checkpoint=2`` was ``AttributeError: 'int' object has no attribute 'isdigit'`` (load_model,
    load, evaluate); None, a bool or a float now name the argument instead of failing inside the store."""
    run = runs["sort"]
    task, model = tokformer.load_model(run, checkpoint=2)
    _, by_name = tokformer.load_model(run, checkpoint="2")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), by_name.state_dict().values(),
                                                 strict=True))
    assert tokformer.load(run, checkpoint=np.int64(2))([[3, 1, 2]]) == tokformer.load(run, "2")([[3, 1, 2]])
    assert tokformer.evaluate(run, checkpoint=2, device="cpu", quiet=True).metrics
    for bad in (None, True, 2.0, Path("checkpoints/step-00000002")):
        with pytest.raises(UsageError, match=r"checkpoint must be 'best', 'latest' or a step number, got"):
            tokformer.load_model(run, checkpoint=bad)
        with pytest.raises(UsageError, match="checkpoint must be"):
            tokformer.evaluate(run, checkpoint=bad, device="cpu", quiet=True)
    with pytest.raises(UsageError, match="checkpoint '7' not found; use latest, best or one of steps"):
        tokformer.load_model(run, checkpoint=7)


def test_counts_below_one_are_refused_by_name_as_the_cli_refuses_them(runs, picture) -> None:
    """evaluate's ``batch_size=-3`` returned no metrics and 0 meant the default; translate's ``batch_size=-1``
    returned ``['']`` and 0 was ``range() arg 3 must not be zero``; ``top_k=-1`` was torch's ``selected index
    k out of range``. A top_k above the number of classes shows them all, as ``predict --top-k`` does."""
    for bad in (-3, 0, True, 1.5):
        with pytest.raises(UsageError, match=f"batch_size must be a whole number of at least 1, got {bad!r}"):
            tokformer.evaluate(runs["sort"], batch_size=bad, device="cpu", quiet=True)
    assert tokformer.evaluate(runs["sort"], batch_size=1, device="cpu", quiet=True).metrics
    translator = tokformer.load(runs["translate"])
    for option in ("batch_size", "beam_size"):
        for bad in (-1, 0):
            with pytest.raises(UsageError, match=f"{option} must be a whole number of at least 1, got {bad}"):
                translator(["three"], **{option: bad})
    assert len(translator(["three", "four"], batch_size=1)) == 2
    classifier, graphs = tokformer.load(runs["classify"]), tokformer.load(runs["graph"])
    for predictor, one in ((classifier, picture), (graphs, nx.cycle_graph(5))):
        for bad in (-1, 0, None, 2.5):
            with pytest.raises(UsageError, match=f"top_k must be a whole number of at least 1, got {bad!r}"):
                predictor([one], top_k=bad)
        classes = len(predictor.task.classes)
        assert len(predictor([one], top_k=classes + 10)[0]) == classes
        assert len(predictor([one], top_k=1)[0]) == 1


def test_a_single_string_or_path_is_one_input_and_gives_its_prediction(runs, picture) -> None:
    """As a Hugging Face pipeline takes it: ``sorter("312")`` sorted each character as a sequence
    (``[[0], [1], [2]]``), and ``classifier("img.png")`` opened the file ``i``."""
    sorter = tokformer.load(runs["sort"])
    assert sorter("312") == sorter(["312"])[0] and sorter("3 1 2") == sorter([[3, 1, 2]])[0]
    assert isinstance(sorter("312")[0], int)
    classifier = tokformer.load(runs["classify"])
    assert classifier(str(picture)) == classifier(picture) == classifier([picture])[0]
    assert isinstance(classifier(picture)[0], tuple)


def test_a_single_image_or_graph_is_one_input_and_a_batch_tensor_is_a_batch(runs, picture) -> None:
    """An image given alone was iterated: a ``[3, H, W]`` tensor gave one prediction per channel (three
    grey pictures), a PIL image was ``TypeError: 'Image' object is not iterable``, and a graph was
    taken node by node."""
    classifier = tokformer.load(runs["classify"])
    image = Image.open(picture)
    pixels = torch.from_numpy(np.asarray(image)).permute(2, 0, 1)  # [3, H, W] uint8
    assert classifier(image) == classifier(pixels) == classifier([pixels])[0] == classifier(picture)
    assert classifier(pixels[0]) == classifier([pixels[0]])[0]  # [H, W]: one grey picture
    batch = torch.stack([pixels, pixels.flip(-1)])  # [2, 3, H, W]
    assert classifier(batch) == classifier([pixels, pixels.flip(-1)])
    graphs = tokformer.load(runs["graph"])
    cycle = nx.cycle_graph(5)
    assert graphs(cycle) == graphs([cycle])[0] and isinstance(graphs(cycle)[0], tuple)


def test_sort_refuses_numbers_that_are_not_whole_naming_them(runs) -> None:
    """``[[1.5, 2]]`` was sorted as ``[1, 2]`` (``int()`` truncated it) and ``True`` counted as 1; a flat
    ``[3, 1, 2]`` given as the inputs was ``TypeError: 'int' object is not iterable``."""
    sorter = tokformer.load(runs["sort"])
    for bad, named in (([1.5, 2], "1.5"), ([True, 2], "True"), ([3.0, 1], "3.0"), (torch.tensor([3.0, 1.0]), "3.")):
        with pytest.raises(DataError, match=f"{named}.* is not a whole number"):
            sorter([bad])
    with pytest.raises(DataError, match="3 is no sequence of numbers: each input is a list"):
        sorter([3, 1, 2])
    same = sorter([[3, 1, 2]])
    assert sorter([np.array([3, 1, 2])]) == sorter([torch.tensor([3, 1, 2])]) == sorter([["3", "1", "2"]]) == same


def test_vqa_answers_are_capped_at_what_the_model_can_write_and_a_missing_prompt_describes() -> None:
    """``max_new_tokens`` past the answer table was ``ValueError: position 32 is beyond the learned table's
    max_len=32``, 0 meant the default and -5 answered ''; ``prompt=None`` was an AttributeError."""
    from test_vqa_task import FavouredHead, tiny_task

    task = tiny_task()
    model = task.build_model().eval()
    model.head = FavouredHead(model.head, task.text_tokenizer().encode("a"))  # never ends its answer
    predictor = Predictor(task, model)
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    length = task.config.text_length
    assert len(predictor([image], prompt="how many birds?", max_new_tokens=length + 8)[0]) == length
    assert len(predictor([image], max_new_tokens=10**9)[0]) == length
    assert len(predictor([image], max_new_tokens=3)[0]) == 3
    assert len(predictor([image])[0]) == task.config.max_answer_tokens
    assert predictor([image], prompt=None) == predictor([image], prompt="") == predictor([image])
    for bad in (0, -5, True, 2.0):
        with pytest.raises(UsageError, match=f"max_new_tokens must be a whole number of at least 1, got {bad!r}"):
            predictor([image], max_new_tokens=bad)
        with pytest.raises(UsageError, match="max_new_tokens must be"):
            task.predict(model, [image], max_new_tokens=bad)  # the task's own entry too
    with pytest.raises(UsageError, match="prompt must be a question"):
        predictor([image], prompt=3)


@pytest.mark.parametrize(("out", "said"), [
    ("att3", "--out att3 has no extension, which names no figure format; end it with one of"),
    ("att.txt", "--out att.txt has extension '.txt', which names no figure format"),
    ("userfile.txt/a.png", "--out userfile.txt/a.png: userfile.txt is a file, not a folder to write in"),
    ("userfile.txt/sub/a.png", "userfile.txt is a file, not a folder to write in"),
], ids=["no extension", "no figure extension", "parent a file", "grandparent a file"])
def test_an_attention_figure_path_without_a_format_or_under_a_file_is_refused_before_loading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str, said: str) -> None:
    """``-o att3`` was ``internal error: ValueError: Format 'u24juc3f' is not supported`` (the temporary
    file's random suffix taken for the format, exit 1, after the model ran); a parent that is a file was
    ``File exists: userfile.txt``. The run named does not exist: the path is refused before it is read."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "userfile.txt").write_text("mine")
    result = CliRunner().invoke(main, ["vqa", "attention", str(tmp_path / "no-run"), "img.png", "x", "-o", out])
    assert result.exit_code == 2 and said in result.output, result.output
    assert "userfile" in out or all(f".{ext}" in result.output for ext in ("png", "pdf", "svg"))
    assert (tmp_path / "userfile.txt").read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == [
        "userfile.txt"]


def test_save_pretrained_refuses_a_model_that_is_not_the_tasks_before_writing(tmp_path: Path) -> None:
    """A sort task beside another model (an lm's, a sort model of another width) wrote a folder that
    failed only when loaded; ``model=None`` was an AttributeError."""
    shape = {k: v for k, v in TINY["sort"].items() if k != "batch_size"}
    task, wider = SortTask(SortConfig(**shape)), SortTask(SortConfig(**{**shape, "d_model": 32}))
    for model, said in ((wider.build_model(), r"shape: .*\(32,\) vs \(16,\)"),
                        (torch.nn.Linear(16, 10), "missing: .*unexpected: bias, weight"),
                        (None, "model must be a torch nn.Module .* got NoneType")):
        with pytest.raises(UsageError, match=f"save_pretrained: .*{said}"):
            tokformer.save_pretrained(task, model, tmp_path / "out")
        assert not list(tmp_path.iterdir())
    with pytest.raises(UsageError, match="task must be a tokformer Task"):
        tokformer.save_pretrained(None, task.build_model(), tmp_path / "out")
    tokformer.save_pretrained(task, task.build_model(), tmp_path / "out")  # its own model still saves
    assert (tmp_path / "out" / "model.safetensors").is_file()
