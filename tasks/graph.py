"""Task ``graph``: classify whole graphs with the shared encoder (``tokformer train graph``).

Wiring: :class:`~tokformer.tokenizers.graph.GraphTokenizer` (nodes as tokens, Laplacian
eigenvector positions, read by SignNet or linearly) -> the shared
:class:`~tokformer.transformer.Encoder`, with every layer's attention mask made from the
batch's edge list by the tokenizer's attention module (a learned per-head bias, a dense
mask, or a sparse pattern for large graphs) -> the modality-agnostic
:class:`~tokformer.heads.ClassificationHead` (graph token or mean pooling). Data is a
built-in generated dataset (``csl``, ``cycles``), the user's graph files (a class
directory or a manifest CSV, see :mod:`.graph_data`), or graphs handed over in Python
with :func:`register_graphs`. The data is split into stratified folds; the task trains
on all folds but ``fold`` and evaluates on ``fold``.

Eigenvector signs are flipped at random in :meth:`GraphTask.step` whenever the model is
in training mode, not in ``collate``: the step draws from torch's global RNG, which the
engine seeds and checkpoints, so runs stay reproducible and resume exactly even with
DataLoader workers (whose generators are not checkpointed).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset

from tokformer import files
from tokformer.batch import TokenBatch
from tokformer.classifier import EncoderClassifier
from tokformer.config import BlockOptions, TransformerConfig
from tokformer.engine import (
    TOKENIZER_DIR,
    Dist,
    StepOutput,
    Task,
    check_data_fits,
    help_text,
    register_task,
    write_text_atomic,
)
from tokformer.errors import ConfigError, DataError
from tokformer.heads import ClassificationHead
from tokformer.masks import padding_or_none
from tokformer.tasks.display import show_ranked
from tokformer.tasks.graph_data import BUILTIN, LabeledGraphs, labeled_graphs, load_graphs, read_graph, stratified_folds
from tokformer.tokenizers.graph import GraphEncoding, GraphTokenizer
from tokformer.tokenizers.graph_layers import GraphAttention

CLASSES_FILE = "classes.json"
_REGISTERED: dict[str, LabeledGraphs] = {}


def register_graphs(name: str, graphs: Sequence[nx.Graph], labels: Sequence[int | str],
                    classes: Sequence[str] | None = None) -> None:
    """Make in-memory graphs trainable as ``data=name`` (the library form of a dataset directory).

    Example::

        register_graphs("mine", graphs, ["a", "b", ...])
        tokformer.engine.train("graph", data="mine", steps=500)
    """
    _REGISTERED[name] = labeled_graphs(graphs, labels, classes)



@dataclass
class GraphConfig(BlockOptions):
    data: str = field(default="csl", metadata=help_text(
        "csl, cycles, a directory DIR/<class>/<graph files>, a manifest .csv (path,label), or a register_graphs name",
        path=lambda name: name in BUILTIN or name in _REGISTERED))
    classes: list[str] | None = field(default=None, metadata=help_text("class set in label order (default: from data)"))
    per_class: int = field(default=15, metadata=help_text("graphs per class of a built-in dataset"))
    data_seed: int = field(default=0, metadata=help_text("seed of the built-in generators and of the fold split"))
    folds: int = field(default=5, metadata=help_text("stratified folds the data is cut into"))
    fold: int = field(default=0, metadata=help_text("the fold held out for evaluation"))
    k: int = field(default=20, metadata=help_text("Laplacian eigenvectors per node", architecture=True))
    positions: Literal["laplacian", "none"] = field(default="laplacian",
        metadata=help_text("node positions", architecture=True))
    eigenvalues: bool = field(default=True, metadata=help_text(
        "append the eigenvalues to the positions (CSL needs them: see docs/graphs.md)", architecture=True))
    sign_flip: bool = field(default=True, metadata=help_text("random eigenvector sign flips while training"))
    node_features: Literal["degree", "constant", "attributes"] = field(
        default="degree", metadata=help_text("what a node token carries", architecture=True))
    node_attributes: list[str] = field(default_factory=list,
        metadata=help_text("node attributes read as features", architecture=True))
    categorical: list[str] = field(default_factory=list,
        metadata=help_text("attributes one-hot encoded even if numeric", architecture=True))
    attention: Literal["full", "bias", "mask", "sparse"] = field(default="full", metadata=help_text(
        "full; bias: edge_bias on edges; mask: neighbours only; sparse: as mask, computed per edge"
        " (O(edges) memory, for large graphs)", architecture=True))
    edge_bias: float = field(default=1.0, metadata=help_text("initial attention bias of an edge (attention=bias)"))
    learn_bias: bool = field(default=False, metadata=help_text(
        "learn one attention bias per head for self, edge and graph-token pairs (attention=bias/mask/sparse)",
        architecture=True))
    position_reader: Literal["linear", "signnet"] = field(default="linear", metadata=help_text(
        "linear: a projection; signnet: sign-invariant, reads eigenvectors along edges (needed for CSL"
        " without eigenvalues: docs/graphs.md)", architecture=True))
    signnet_width: int = field(default=16, metadata=help_text("SignNet channels per eigenvector", architecture=True))
    signnet_layers: int = field(default=2, metadata=help_text("SignNet GIN layers", architecture=True))
    pool: Literal["cls", "mean"] = field(default="cls",
        metadata=help_text("graph token (cls) or mean of nodes", architecture=True))
    d_model: int = field(default=64, metadata=help_text("token width", architecture=True))
    n_heads: int = field(default=4, metadata=help_text("attention heads", architecture=True))
    n_layers: int = field(default=3, metadata=help_text("encoder blocks", architecture=True))
    dropout: float = field(default=0.0, metadata=help_text("dropout"))
    n_registers: int = field(default=0,
        metadata=help_text("register tokens (scratch tokens dropped at the output)", architecture=True))

    def __post_init__(self) -> None:
        for name in ("per_class", "k", "signnet_width", "signnet_layers"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.folds < 2:
            raise ValueError(f"folds must be >= 2 (one fold is held out), got {self.folds}")
        if not 0 <= self.fold < self.folds:
            raise ValueError(f"fold must be in 0..{self.folds - 1}, got {self.fold}")
        self.transformer()  # validate the model shape now, not halfway into a run
        self.tokenizer()  # and the tokenizer's options (k at most MAX_WIDTH...)

    def transformer(self) -> TransformerConfig:
        return TransformerConfig(d_model=self.d_model, n_heads=self.n_heads, n_layers=self.n_layers,
                                 dropout=self.dropout, activation="gelu", n_registers=self.n_registers,
                                 **self.block_options())

    def tokenizer(self) -> GraphTokenizer:
        return GraphTokenizer(
            k=self.k, positions=self.positions, eigenvalues=self.eigenvalues, sign_flip=self.sign_flip,
            seed=self.data_seed, node_features=self.node_features, node_attributes=self.node_attributes,
            attention=self.attention, edge_bias=self.edge_bias, graph_token=self.pool == "cls",
            position_reader=self.position_reader, signnet_width=self.signnet_width, signnet_layers=self.signnet_layers,
            learn_bias=self.learn_bias,
        )


class GraphClassifier(EncoderClassifier):
    """:class:`EncoderClassifier` whose attention mask comes from the tokenizer's attention module
    (:meth:`GraphTokenizer.build_attention`), which reads the batch's edge list: a learned
    per-head bias, or a sparse pattern that never builds an ``[N, N]`` tensor."""

    def __init__(self, embedder: nn.Module, encoder_cfg: TransformerConfig, head: ClassificationHead,
                 attention: GraphAttention) -> None:
        super().__init__(embedder, encoder_cfg, head)
        self.attention = attention

    def features(self, batch: TokenBatch) -> Tensor:  # -> [B, N, d]
        x = self.embedder(batch)
        return self.encoder(x, padding_or_none(batch.mask), attn_mask=self.attention(batch), positions=batch.positions)


class EncodedGraphs(Dataset):
    """Items are ``(GraphEncoding, label)``; graphs are encoded (eigenvectors included) once, up front."""

    def __init__(self, tokenizer: GraphTokenizer, graphs: Sequence[nx.Graph], labels: Sequence[int]) -> None:
        self.encodings = [tokenizer.encode(g) for g in graphs]
        self.labels = list(labels)

    def __len__(self) -> int:
        return len(self.encodings)

    def __getitem__(self, i: int) -> tuple[GraphEncoding, int]:
        return self.encodings[i], self.labels[i]


@register_task("graph")
class GraphTask(Task):
    """Graph classification: cross-entropy on the class logits; metric: accuracy."""

    Config = GraphConfig
    run_files = (CLASSES_FILE,)
    best_metric = "accuracy"
    higher_is_better = True

    def __init__(self, config: GraphConfig) -> None:
        super().__init__(config)
        self.tokenizer = config.tokenizer()
        self.classes: list[str] | None = None  # set from the data, or by load_assets
        self._fitted = config.node_features != "attributes"

    @cached_property
    def data(self) -> LabeledGraphs:
        c = self.config
        if c.data in BUILTIN and c.data not in _REGISTERED:  # at most 10 classes of graphs of ~20 kB (x3 tokenized)
            check_data_fits(10 * c.per_class * 65536, f"per_class = {c.per_class:,} built-in graphs of each class")
        data = _REGISTERED.get(c.data) or load_graphs(c.data, classes=c.classes, per_class=c.per_class,
                                                       seed=c.data_seed)
        if len(data.graphs) < c.folds:
            raise DataError(f"{len(data.graphs)} graphs cannot be cut into {c.folds} folds")
        self.classes = data.classes
        return data

    @cached_property
    def _fold_of(self) -> list[int]:
        return stratified_folds(self.data.labels, self.config.folds, self.config.data_seed)

    def _subset(self, held_out: bool) -> EncodedGraphs:
        self._fit_tokenizer()
        picked = [i for i, f in enumerate(self._fold_of) if (f == self.config.fold) == held_out]
        return EncodedGraphs(self.tokenizer, [self.data.graphs[i] for i in picked],
                             [self.data.labels[i] for i in picked])

    def _fit_tokenizer(self) -> None:
        """Learn categorical attribute values from the training folds only (no test leakage)."""
        if self._fitted:
            return
        train = [g for g, f in zip(self.data.graphs, self._fold_of, strict=True) if f != self.config.fold]
        self.tokenizer.fit(train, categorical=self.config.categorical)
        self._fitted = True

    def train_dataset(self) -> EncodedGraphs:
        return self._subset(held_out=False)

    def eval_dataset(self) -> EncodedGraphs:
        return self._subset(held_out=True)

    @property
    def user_data(self) -> bool:
        return self.config.data not in BUILTIN

    def eval_data(self, data: str, workdir: Path, dist: Dist) -> EncodedGraphs:
        """Every graph of ``data`` (a class directory or a manifest), labelled with the run's classes."""
        graphs = load_graphs(data, classes=self.classes, per_class=self.config.per_class, seed=self.config.data_seed)
        return EncodedGraphs(self.tokenizer, graphs.graphs, graphs.labels)

    def baselines(self, eval_set: EncodedGraphs) -> dict[str, dict[str, float]]:
        """The majority class of the training folds, predicted for every graph."""
        train = [label for label, f in zip(self.data.labels, self._fold_of, strict=True) if f != self.config.fold]
        majority = Counter(train).most_common(1)[0][0]
        hits = sum(label == majority for label in eval_set.labels)
        return {"majority class of the training folds": {"accuracy": hits / max(1, len(eval_set.labels))}}

    def collate(self, samples: list[tuple[GraphEncoding, int]], train: bool) -> dict[str, TokenBatch | Tensor]:
        return {"tokens": self.tokenizer.collate([s[0] for s in samples]),
                "labels": torch.tensor([s[1] for s in samples], dtype=torch.long)}

    def build_model(self) -> GraphClassifier:
        c = self.config
        if self.classes is None:
            _ = self.data  # sets self.classes
        self._fit_tokenizer()
        head = ClassificationHead(c.d_model, len(self.classes), pool=c.pool, n_prefix=int(c.pool == "cls"))
        attention = self.tokenizer.build_attention(c.n_heads)
        return GraphClassifier(self.tokenizer.build_embedder(c.d_model), c.transformer(), head, attention)

    def step(self, model: nn.Module, batch: dict[str, TokenBatch | Tensor]) -> StepOutput:
        tokens, labels = batch["tokens"], batch["labels"]
        if model.training:
            tokens = self.tokenizer.flip_signs(tokens, generator=torch.default_generator)
        logits = model(tokens).float()  # [B, n_classes]
        correct = (logits.argmax(-1) == labels).sum()
        return StepOutput(loss=F.cross_entropy(logits, labels), metrics={"accuracy": (correct, len(labels))},
                          count=len(labels))

    def save_assets(self, run_dir: Path) -> None:
        self._fit_tokenizer()
        self.tokenizer.save(run_dir / TOKENIZER_DIR)
        write_text_atomic(run_dir / CLASSES_FILE, json.dumps(self.classes or self.data.classes) + "\n")

    def load_assets(self, run_dir: Path) -> None:
        self.tokenizer = GraphTokenizer.load(run_dir / TOKENIZER_DIR)
        self._fitted = True
        classes = files.read_json(run_dir / CLASSES_FILE)
        if not (isinstance(classes, list) and all(isinstance(x, str) for x in classes)):
            raise ConfigError(f"{run_dir / CLASSES_FILE}: expected a JSON list of class names")
        self.classes = classes

    @torch.no_grad()
    def predict(self, model: nn.Module, inputs: Sequence[nx.Graph | str | os.PathLike],
                top_k: int = 5) -> list[list[tuple[str, float]]]:
        """The ``top_k`` (class name, probability) pairs of each graph (a networkx graph or a graph
        file), best first; no sign flips."""
        graphs = [g if isinstance(g, nx.Graph) else read_graph(Path(g)) for g in inputs]
        tokens = self.tokenizer.augment(False).batch(graphs).to(next(model.parameters()).device)
        probs = model(tokens).float().softmax(-1)  # [B, n_classes]
        top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
        return [[(self.classes[i], p) for i, p in zip(idx, ps, strict=True)]
                for idx, ps in zip(top.indices.tolist(), top.values.tolist(), strict=True)]

    def is_one_input(self, value: Any) -> bool:
        return super().is_one_input(value) or isinstance(value, nx.Graph)

    def show_prediction(self, source: str, prediction: list[tuple[str, float]]) -> str:
        return show_ranked(source, prediction)

    def export_example(self) -> tuple[TokenBatch]:
        """``model(*args)`` arguments to trace for export: a 5-cycle and a 7-node path, tokenized
        without sign flips (2 graphs of different sizes, so the traced batch and node dimensions
        stay dynamic). Node attributes, if the model reads any, get a known value each."""
        tok = self.tokenizer
        if tok.needs_edges:  # a traced graph would fix the edge count (and the sparse kernel's scatter sizes)
            raise ConfigError("graph models that read edges (position_reader=signnet, learn_bias, attention=sparse) "
                              "do not export to ONNX or torch.export yet; export --format folder keeps them")
        graphs = [nx.cycle_graph(5), nx.path_graph(7)]
        for name in tok.node_attributes:
            known = tok.categories.get(name)  # None: a numeric attribute
            value = 0.0 if known is None else known[0] if known else "unseen"
            for graph in graphs:
                nx.set_node_attributes(graph, value, name)
        return (tok.collate([tok.encode(graph) for graph in graphs]),)
