"""Export and compile: every task's model through torch.export and ONNX with dynamic batch and
sequence length, compiled whole (no graph breaks), and the eager-only fast paths and checks kept."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import fields

import networkx as nx
import onnxruntime
import pytest
import torch
from torch import Tensor, nn
from torch.utils import _pytree as pytree

from tokformer.batch import TokenBatch
from tokformer.engine import Task
from tokformer.errors import UsageError
from tokformer.interop.export import export_onnx, export_program, graph_breaks, run_onnx
from tokformer.masks import padding_or_none
from tokformer.positional import LearnedPositions
from tokformer.tasks.audio import AudioConfig, AudioTask
from tokformer.tasks.classify import ClassifyConfig, ClassifyTask
from tokformer.tasks.graph import GraphConfig, GraphTask
from tokformer.tasks.lm import EOT, LMConfig, LMTask
from tokformer.tasks.sort import SortConfig, SortTask, make_sequences
from tokformer.tasks.translate import BOS, EOS, PAD, TranslateConfig, TranslateTask
from tokformer.tasks.vqa import Example, VQAConfig, VQATask
from tokformer.tokenizers.bpe import BPETokenizer
from tokformer.tokenizers.image import ImagePatchTokenizer

CODE = "def add(a, b):\n    return a + b\n\nclass Point:\n    x = [1, 2]\n" * 4
SMALL = {"d_model": 16, "n_heads": 2}


def _sort() -> tuple[Task, Callable[[Task], tuple]]:
    task = SortTask(SortConfig(n_layers=1, seq_len=8, **SMALL))
    digits = make_sequences(3, 5, task.config.vocab, 7)  # fewer samples and digits than the example
    return task, lambda t: (t.collate([(row, row) for row in digits], train=False)["tokens"],)


def _classify(position: str) -> tuple[Task, Callable[[Task], tuple]]:
    task = ClassifyTask(ClassifyConfig(n_layers=1, image_size=16, patch_size=4, position=position, **SMALL))
    task.classes = ["circle", "square", "triangle"]
    if position == "learned":  # a learned table traces at its training grid only: vary the batch alone
        return task, lambda t: (t.tokenizer.batch(torch.rand(3, 3, 16, 16)),)
    # The task resizes every image to image_size; the same model takes native sizes without resizing.
    native = type(task.tokenizer)(**{**task.tokenizer.get_config(), "resize": False})
    return task, lambda t: (native.batch(torch.rand(3, 3, 8, 12)),)


def _lm() -> tuple[Task, Callable[[Task], tuple]]:
    task = LMTask(LMConfig(n_layers=1, context_len=16, **SMALL))
    task.tokenizer = BPETokenizer.train([CODE], 280, special_tokens=[EOT], max_length=16)
    return task, lambda t: (t.tokenizer.batch(["x = 1", "class P:", "return a"]),)


def _translate() -> tuple[Task, Callable[[Task], tuple]]:
    task = TranslateTask(TranslateConfig(encoder_layers=1, decoder_layers=2, max_len=16, **SMALL))
    texts = ["three hundred twenty-four", "dreihundertvierundzwanzig", "seven", "sieben", "one", "eins"]
    task.src_tok = task.tgt_tok = BPETokenizer.train(texts, 270, special_tokens=[PAD, BOS, EOS], pad_token=PAD,
                                                     max_length=17)

    def other(t: TranslateTask) -> tuple:
        tok = t.tgt_tok
        batch = t.collate([(tok.encode(s), tok.encode(g)) for s, g in [("one", "eins"), ("seven one", "sieben"),
                                                                       ("one seven", "einssieben")]], train=False)
        return batch.src, batch.tgt_in

    return task, other


def _graph(attention: str) -> tuple[Task, Callable[[Task], tuple]]:
    attributes = {"node_features": "attributes", "node_attributes": ["atom"]} if attention == "mask" else {}
    task = GraphTask(GraphConfig(n_layers=1, k=4, attention=attention, **attributes, **SMALL))
    task.classes = ["chain", "ring"]
    if attention == "mask":
        task.tokenizer.categories = {"atom": ["C", "N"]}  # what fit() learns from data with string attributes
    task._fitted = True

    def other(t: GraphTask) -> tuple:
        graphs = [nx.path_graph(3), nx.star_graph(8), nx.cycle_graph(4)]
        for i, graph in enumerate(graphs):
            nx.set_node_attributes(graph, "CNO"[i], "atom")  # "O" was never seen: the unseen slot
        return (t.tokenizer.collate([t.tokenizer.encode(g) for g in graphs]),)

    return task, other


def _vqa() -> tuple[Task, Callable[[Task], tuple]]:
    import tokformer.tasks.vqa as vqa

    task = VQATask(VQAConfig(n_layers=1, image_size=16, patch_size=4, vocab_size=270, tokenizer="linear", **SMALL))
    task.text = BPETokenizer.train(["how many birds are there?", "two birds", "yes"], 270,
                                   special_tokens=[vqa.BOS, vqa.EOS, vqa.PAD], pad_token=vqa.PAD,
                                   max_length=32)

    def other(t: VQATask) -> tuple:
        images = torch.randint(0, 256, (3, 3, 16, 16), dtype=torch.uint8)
        batch = t.collate([Example(images[0], "how many?", "two birds there"), Example(images[1], "", "yes"),
                           Example(images[2], "are there birds, are there?", "no")], train=False)
        native = type(t.image_tokenizer)(**{**t.image_tokenizer.get_config(), "resize": False})  # as classify's
        return native.batch(torch.rand(3, 3, 8, 12)), batch["prompt"], batch["answer"]

    return task, other


def _audio(tokens: str, position: str) -> tuple[Task, Callable[[Task], tuple]]:
    task = AudioTask(AudioConfig(n_layers=1, tokens=tokens, position=position, max_seconds=0.5, **SMALL))
    task.classes = ["hum-chirp-hiss", "hiss-hum-chirp", "chirp-hiss-hum"]
    clips = [torch.randn(n, generator=torch.Generator().manual_seed(n)) * 0.1 for n in (1600, 5000, 7000)]
    return task, lambda t: (t.tokenizer.batch(clips),)


BUILDERS: dict[str, Callable[[], tuple[Task, Callable[[Task], tuple]]]] = {
    "audio-frames": lambda: _audio("frames", "sincos"),
    "audio-patches-learned": lambda: _audio("patches", "learned"),
    "vqa": _vqa,
    "sort": _sort,
    "classify": lambda: _classify("sincos"),
    "classify-learned": lambda: _classify("learned"),
    "lm": _lm,
    "translate": _translate,
    "graph": lambda: _graph("bias"),
    "graph-mask": lambda: _graph("mask"),
}


def _randomise(model: nn.Module) -> nn.Module:
    """Noise on every parameter (norm gains and biases too), so no weight sits at an exact 1 or 0."""
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.3 * torch.randn_like(param))
    return model


@pytest.fixture(scope="module", params=list(BUILDERS))
def case(request: pytest.FixtureRequest) -> tuple[Task, nn.Module, tuple, tuple]:
    """(task, model with random weights, the task's export example, inputs of other batch and sequence sizes)."""
    torch.manual_seed(0)
    task, other = BUILDERS[request.param]()
    model = _randomise(task.build_model())
    example, inputs = task.export_example(), other(task)
    return task, model, example, inputs


def _batches(args: tuple) -> list[TokenBatch]:
    return [a for a in args if isinstance(a, TokenBatch)]


def _input_names(model: nn.Module, args: tuple) -> list[str]:
    """``src_mask``, ``src_ids``, ...: the forward's argument name, then the field (and extras key)."""
    names = []
    for param, tokens in zip(inspect.signature(model.forward).parameters, args, strict=False):
        names += [f"{param}_{f.name}" for f in fields(tokens) if isinstance(getattr(tokens, f.name), Tensor)]
        names += [f"{param}_extras_{key}" for key, value in tokens.extras.items() if isinstance(value, Tensor)]
    return names


def test_inputs_differ_from_the_example_in_batch_and_length(case):
    task, _, example, inputs = case
    assert all(b.batch_size != a.batch_size for a, b in zip(_batches(example), _batches(inputs), strict=True))
    learned = getattr(task.config, "position", None) == "learned"
    assert learned or all(b.seq_len != a.seq_len for a, b in zip(_batches(example), _batches(inputs), strict=True))


@torch.no_grad()
def test_exported_program_matches_eager_at_other_sizes(case):
    _, model, example, inputs = case
    program = export_program(model.eval(), example)
    torch.testing.assert_close(program.module()(*inputs), model(*inputs), atol=1e-5, rtol=0)


@pytest.mark.slow  # ~30 s for the seven models; test_export_cli's ONNX test keeps one in the quick tier
@torch.no_grad()
def test_onnx_file_matches_eager_at_other_sizes(case, tmp_path):
    _, model, example, inputs = case
    path = export_onnx(model.eval(), example, tmp_path / "model.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # weights embedded: one file
    names = [i.name for i in onnxruntime.InferenceSession(str(path)).get_inputs()]
    assert names == _input_names(model, example)
    (logits,) = run_onnx(path, inputs)
    torch.testing.assert_close(torch.from_numpy(logits), model(*inputs), atol=1e-4, rtol=0)


@pytest.mark.slow  # ~20 s of dynamo tracing; torch.export (also one whole graph) stays in the quick tier
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_forward_compiles_without_graph_breaks(case, mode):
    _, model, example, _ = case
    assert graph_breaks(model.train(mode == "train"), example) == 0


def test_missing_onnxruntime_is_a_one_line_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what an uninstalled package looks like to import
    with pytest.raises(UsageError, match=r"pip install 'tokformer\[onnx\]'"):
        run_onnx(tmp_path / "model.onnx", ())


def test_token_batch_is_a_pytree_with_its_extras():
    tokens = TokenBatch(mask=torch.ones(2, 3, dtype=torch.bool), features=torch.rand(2, 3, 4),
                        extras={"grid": torch.tensor([[1, 3], [1, 3]])})
    leaves, spec = pytree.tree_flatten(tokens)
    assert len(leaves) == 3  # mask, features, grid: None fields are no leaves
    rebuilt = pytree.tree_unflatten([leaf if leaf.dtype == torch.bool else leaf + 1 for leaf in leaves], spec)
    assert rebuilt.ids is None and torch.equal(rebuilt.mask, tokens.mask)
    assert torch.equal(rebuilt.features, tokens.features + 1)
    assert torch.equal(rebuilt.extras["grid"], tokens.extras["grid"] + 1)


# -- eager behaviour is kept --------------------------------------------------------------


def test_eager_learned_positions_still_refuse_positions_past_the_table():
    with pytest.raises(ValueError, match="beyond the learned table's max_len=4"):
        LearnedPositions(8, max_len=4)(torch.tensor([[0, 4]]))


def test_eager_all_real_mask_still_skips_the_mask_tensor():
    assert padding_or_none(torch.ones(2, 3, dtype=torch.bool)) is None  # SDPA's unmasked (fused) kernel
    mask = torch.tensor([[True, False]])
    assert padding_or_none(mask) is mask


@torch.no_grad()
def test_eager_learned_grid_still_mixes_image_sizes_and_traced_refuses_other_grids():
    tok = ImagePatchTokenizer(patch_size=4, image_size=8, position="learned", resize=False)
    embedder = _randomise(tok.build_embedder(16)).eval()
    small, large = torch.rand(3, 8, 8), torch.rand(3, 12, 16)
    mixed = embedder(tok.batch([small, large]))  # [2, 1 + 12, d]: grids 2x2 (padded) and 3x4
    assert torch.allclose(mixed[0, :5], embedder(tok.batch([small]))[0], atol=1e-6)
    assert torch.allclose(mixed[1], embedder(tok.batch([large]))[0], atol=1e-6)
    program = export_program(embedder, (tok.batch([small, small]),))
    assert torch.allclose(program.module()(tok.batch([small] * 3)), embedder(tok.batch([small] * 3)), atol=1e-6)
    with pytest.raises(RuntimeError, match="training size only"):
        program.module()(tok.batch([large, large]))
