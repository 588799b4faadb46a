"""Graph tokenizer, registered as ``"graph"``: one token per node, Laplacian eigenvectors as positions.

A graph's nodes have no order, and the shared Transformer core is permutation-equivariant:
shuffle the tokens and its outputs shuffle the same way. So everything the core can know
about a graph's *shape* has to come from here:

* token features: the node's own attributes (numeric, or one-hot categories), or its
  degree, or a constant when the graph has no attributes;
* positions: the node's coordinates in the ``k`` smallest non-trivial eigenvectors of the
  normalized Laplacian (:mod:`.laplacian`), optionally followed by the ``k`` eigenvalues,
  with random per-eigenvector sign flips while training (an eigenvector's sign is
  arbitrary, and the model should not learn one);
* optionally, an attention bias or mask from the adjacency, so attention can prefer edges
  (or, with ``attention="sparse"``, only the edge list: see :mod:`.graph_layers`);
* optionally, a graph token (CLS) in front of the nodes, for a classification head to read.

Token layout of one graph: ``[graph token?] + nodes in graph.nodes order``. Feature
columns: ``[is_graph_token?] + node features``. Position columns: ``k`` eigenvector
coordinates, then ``k`` eigenvalues when ``eigenvalues=True``; the graph token's are 0.
When the model reads edges (SignNet positions, learned attention biases, sparse
attention: :attr:`GraphTokenizer.needs_edges`), batches also carry the edge list
(``extras["edges"]``); otherwise not, so every extras tensor keeps a fixed width, which
exported programs need (their extras dims beyond the batch are static).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from numbers import Real
from typing import Any, Literal

import networkx as nx
import numpy as np
import torch
from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.config import MAX_WIDTH
from tokformer.embedding import Embedder
from tokformer.errors import DataError
from tokformer.positional import PositionFeatures
from tokformer.tokenizers.base import Tokenizer, TokenizerError
from tokformer.tokenizers.graph_layers import Attention, GraphAttention, GraphEmbedder, SignNetPositions
from tokformer.tokenizers.laplacian import laplacian_spectrum, undirected_edges
from tokformer.tokenizers.registry import register_tokenizer

NodeFeatures = Literal["degree", "constant", "attributes"]
PositionReader = Literal["linear", "signnet"]
Solver = Literal["auto", "dense", "sparse"]
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: The most nodes a graph may have: each is a token, and full attention costs N² per layer. A path
#: graph's edge list of 2.5 MB (200,000 nodes) ran past 5 minutes in ``predict``; at this size a
#: tiny model takes seconds. Real graph datasets fit (TU's largest graphs have about 5,700 nodes,
#: ogbg-code2's 36,000 at most, a few of them above it).
MAX_GRAPH_NODES = 1 << 15


def check_graph_size(graph: nx.Graph, where: str = "a graph") -> None:
    """A DataError naming ``where`` when ``graph`` has no node or more than :data:`MAX_GRAPH_NODES`."""
    n = graph.number_of_nodes()
    if n == 0:
        raise DataError(f"{where}: the graph has 0 nodes")
    if n > MAX_GRAPH_NODES:
        raise DataError(f"{where}: the graph has {n} nodes, more than the {MAX_GRAPH_NODES} a graph may have "
                        "(each node is a token, and attention costs the square of their number)")


@dataclass(frozen=True)
class GraphEncoding:
    """One graph, tokenized but not yet batched; cheap to batch again every epoch.

    Computing eigenvectors is the expensive part of tokenizing a graph, and it does not
    depend on the training step, so a task encodes each graph once and batches the
    encodings.

    Attributes:
        features: ``[n, F]`` node features (without the graph-token column).
        vectors: ``[n, k]`` eigenvector coordinates (0 in padded columns).
        values: ``[k]`` eigenvalues (0 where padded).
        valid: ``[k]`` bool, False for padded eigenvectors.
        edges: ``[2, 2E]`` node index pairs, both directions, no self-loops.
    """

    features: Tensor
    vectors: Tensor
    values: Tensor
    valid: Tensor
    edges: Tensor

    @property
    def num_nodes(self) -> int:
        return self.features.shape[0]


@register_tokenizer("graph")
class GraphTokenizer(Tokenizer):
    """networkx graphs -> a :class:`TokenBatch` of node tokens with Laplacian positions.

    Args:
        k: number of Laplacian eigenvectors per node (position width, before eigenvalues).
        positions: ``"laplacian"``, or ``"none"`` for no positions (the core then sees a set
            of nodes and cannot tell apart graphs whose nodes look alike, e.g. regular ones).
        eigenvalues: append the ``k`` eigenvalues to every node's positions, so the model
            knows which frequency each coordinate belongs to.
        sign_flip: while augmenting (:meth:`augment`), multiply each graph's eigenvectors by random signs.
        seed: seed of the sign-flip generator (flips are reproducible run to run).
        node_features: ``"degree"`` (log(1 + degree)), ``"constant"`` (1.0), or
            ``"attributes"`` (the node attributes named in ``node_attributes``).
        node_attributes: attribute names read from every node, in this column order.
        categories: attribute name -> its known values (as strings), for categorical
            attributes; each becomes a one-hot block with an extra "unseen value" slot.
            Attributes not listed are numeric. :meth:`fit` fills this from data.
        attention: ``"full"`` (every node attends to every node), ``"bias"`` (add
            ``edge_bias`` to the attention logit of each edge), ``"mask"`` (a node
            attends only to itself, its neighbours and the graph token), or ``"sparse"``
            (the pairs of ``mask``, computed from the edge list by the model's
            :meth:`build_attention` module: no ``[B, N, N]`` tensor anywhere; ``attn_bias`` is None).
        edge_bias: the additive bias of an edge under ``attention="bias"``.
        position_reader: how the model reads positions: ``"linear"`` (a projection) or
            ``"signnet"`` (sign-invariant, :class:`~.graph_layers.SignNetPositions`).
        signnet_width / signnet_layers: channels per eigenvector and GIN layers of SignNet's ``phi``.
        learn_bias: the model (:meth:`build_attention`) learns one attention bias per head for
            self, edge and graph-token pairs, instead of using ``attn_bias`` as it is.
        graph_token: put a graph token (CLS) before the nodes; it attends and is attended
            by every node.
        solver: eigensolver: ``"dense"``, ``"sparse"``, or ``"auto"`` (by graph size).
    """

    def __init__(
        self,
        *,
        k: int = 8,
        positions: Literal["laplacian", "none"] = "laplacian",
        eigenvalues: bool = False,
        sign_flip: bool = True,
        seed: int = 0,
        node_features: NodeFeatures = "degree",
        node_attributes: Sequence[str] = (),
        categories: dict[str, list[str]] | None = None,
        attention: Attention = "full",
        edge_bias: float = 1.0,
        graph_token: bool = True,
        solver: Solver = "auto",
        position_reader: PositionReader = "linear",
        signnet_width: int = 16,
        signnet_layers: int = 2,
        learn_bias: bool = False,
    ) -> None:
        _check_choice("positions", positions, ("laplacian", "none"))
        _check_choice("node_features", node_features, ("degree", "constant", "attributes"))
        _check_choice("attention", attention, ("full", "bias", "mask", "sparse"))
        _check_choice("position_reader", position_reader, ("linear", "signnet"))
        _check_choice("solver", solver, ("auto", "dense", "sparse"))
        for name, value in (("k", k), ("signnet_width", signnet_width), ("signnet_layers", signnet_layers)):
            if not 0 < value <= MAX_WIDTH:  # a node's k floats in every batch: a typo's 10**8 asks for terabytes
                raise TokenizerError(f"{name} must be in 1..{MAX_WIDTH}, got {value}")
        if node_features == "attributes" and not node_attributes:
            raise TokenizerError("node_features='attributes' needs node_attributes (the attribute names to read)")
        categories = {name: [str(v) for v in values] for name, values in (categories or {}).items()}
        unknown = sorted(set(categories) - set(node_attributes))
        if unknown:
            raise TokenizerError(f"categories given for {unknown}, which are not in node_attributes")
        self.k = k
        self.positions = positions
        self.eigenvalues = eigenvalues
        self.sign_flip = sign_flip
        self.seed = seed
        self.node_features = node_features
        self.node_attributes = list(node_attributes)
        self.categories = categories
        self.attention = attention
        self.edge_bias = float(edge_bias)
        self.graph_token = graph_token
        self.solver = solver
        self.position_reader = position_reader
        self.signnet_width = signnet_width
        self.signnet_layers = signnet_layers
        self.learn_bias = learn_bias
        self.augmenting = False
        self._generator = torch.Generator().manual_seed(seed)

    # ---- modes -------------------------------------------------------------------------

    def augment(self, on: bool = True) -> GraphTokenizer:
        """With ``on``, :meth:`batch` flips eigenvector signs at random (if ``sign_flip``), as for
        training; off (the default state), the same graph always gives the same tokens. Returns self.
        (Not ``train``/``eval``: ``BPETokenizer.train`` learns a vocabulary.)"""
        self.augmenting = on
        return self

    # ---- fitting categorical attributes ------------------------------------------------------

    def fit(self, graphs: Iterable[nx.Graph], categorical: Sequence[str] | None = None) -> GraphTokenizer:
        """Learn each node attribute's type and, for categorical ones, its values. Returns self.

        Args:
            graphs: training graphs (values seen only at test time map to "unseen").
            categorical: attributes to treat as categorical even if their values are
                numbers (e.g. atom type codes). Others are categorical iff their values
                are strings; an attribute whose values mix numbers and strings is an error.
        """
        forced = set(categorical or ())
        unknown = sorted(forced - set(self.node_attributes))
        if unknown:
            raise TokenizerError(f"categorical attributes {unknown} are not in node_attributes")
        kinds: dict[str, set[str]] = {name: set() for name in self.node_attributes}
        values: dict[str, set[str]] = {name: set() for name in self.node_attributes}
        for g_index, graph in enumerate(graphs):
            for node, data in graph.nodes(data=True):
                for name in self.node_attributes:
                    value = _attribute(data, name, node, g_index)
                    kinds[name].add(_kind(value, name, node))
                    values[name].add(str(value))
        self.categories = {}
        for name in self.node_attributes:
            if len(kinds[name]) > 1:
                raise DataError(f"node attribute {name!r} mixes numbers and strings; make it one type")
            if name in forced or kinds[name] == {"string"}:
                self.categories[name] = sorted(values[name])
        return self

    @property
    def num_features(self) -> int:
        """Width ``F`` of a node token's features, the graph-token column included."""
        if self.node_features != "attributes":
            width = 1
        else:
            width = sum(len(self.categories[n]) + 1 if n in self.categories else 1 for n in self.node_attributes)
        return width + int(self.graph_token)

    @property
    def num_positions(self) -> int:
        """Width ``P`` of a token's position features (0 without positions)."""
        if self.positions == "none":
            return 0
        return 2 * self.k if self.eigenvalues else self.k

    @property
    def needs_edges(self) -> bool:
        """Whether batches carry ``extras["edges"]``: the model reads them (SignNet, learned biases, sparse)."""
        reads_positions = self.positions == "laplacian" and self.position_reader == "signnet"
        return reads_positions or self.attention == "sparse" or (self.learn_bias and self.attention != "full")

    # ---- tokenizing ----------------------------------------------------------------------

    def encode(self, graph: nx.Graph) -> GraphEncoding:
        """Node features, eigenpairs and edges of one graph (no sign flips: those happen per batch)."""
        if not isinstance(graph, nx.Graph):
            raise DataError(f"expected a networkx graph, got {type(graph).__name__}")
        check_graph_size(graph)
        edges = torch.from_numpy(undirected_edges(graph))  # [2, 2E] both directions, no loops
        if self.positions == "laplacian":
            spectrum = laplacian_spectrum(graph, self.k, self.solver)
            vectors = torch.from_numpy(spectrum.vectors).float()
            values = torch.from_numpy(spectrum.values).float()
            valid = torch.from_numpy(spectrum.valid)
        else:
            n = graph.number_of_nodes()
            vectors, values, valid = torch.zeros(n, 0), torch.zeros(0), torch.zeros(0, dtype=torch.bool)
        return GraphEncoding(
            features=self._node_features(graph, edges), vectors=vectors, values=values, valid=valid, edges=edges
        )

    def collate(self, encodings: Sequence[GraphEncoding]) -> TokenBatch:
        """Pad encoded graphs into one batch (no sign flips; see :meth:`flip_signs`).

        Returns a TokenBatch with ``features`` ``[B, N, F]``, ``positions`` ``[B, N, P]``
        (or None), ``attn_bias`` ``[B, N, N]`` (or None), and extras ``eig_valid``
        ``[B, k]``, ``num_nodes`` ``[B]`` and, if :attr:`needs_edges`, ``edges`` ``[B, E, 2]``
        (token indices of every edge in both directions, padded) and ``edge_valid`` ``[B, E]``.
        ``N`` counts the graph token.
        """
        if not encodings:
            raise DataError("cannot make a batch of zero graphs")
        offset = int(self.graph_token)
        b, width = len(encodings), max(e.num_nodes for e in encodings) + offset
        f_nodes = encodings[0].features.shape[1]
        features = torch.zeros(b, width, f_nodes + offset)  # [B, N, F]
        mask = torch.zeros(b, width, dtype=torch.bool)  # [B, N]
        positions = torch.zeros(b, width, self.num_positions) if self.positions == "laplacian" else None
        eig_valid = torch.zeros(b, self.k if positions is not None else 0, dtype=torch.bool)  # [B, k]
        for row, enc in enumerate(encodings):
            nodes = slice(offset, offset + enc.num_nodes)
            features[row, nodes, offset:] = enc.features
            mask[row, : offset + enc.num_nodes] = True
            if positions is not None:
                positions[row, nodes, : self.k] = enc.vectors
                if self.eigenvalues:
                    positions[row, nodes, self.k :] = enc.values
                eig_valid[row] = enc.valid
        if self.graph_token:
            features[:, 0, 0] = 1.0  # the graph token's indicator column; its other features are 0
        extras = {"eig_valid": eig_valid, "num_nodes": torch.tensor([e.num_nodes for e in encodings])}
        if self.needs_edges:
            extras.update(_edge_list(encodings, offset))
        return TokenBatch(mask=mask, features=features, positions=positions,
                          attn_bias=self._attention(encodings, width), extras=extras)

    def batch(self, samples: Sequence[nx.Graph]) -> TokenBatch:
        """Tokenize graphs into one padded batch; while augmenting, with random sign flips."""
        tokens = self.collate([self.encode(graph) for graph in samples])
        return self.flip_signs(tokens) if self.augmenting else tokens

    def flip_signs(self, tokens: TokenBatch, generator: torch.Generator | None = None) -> TokenBatch:
        """A copy of ``tokens`` with each graph's eigenvectors multiplied by independent random ±1.

        Does nothing when ``sign_flip`` is off or there are no positions. Draws from the
        tokenizer's seeded generator unless ``generator`` is given, so a run's flips are
        reproducible. Eigenvalue columns are left alone (they have no sign ambiguity).
        """
        if not self.sign_flip or tokens.positions is None:
            return tokens
        gen = generator if generator is not None else self._generator
        signs = torch.randint(0, 2, (tokens.batch_size, 1, self.k), generator=gen).float() * 2 - 1  # [B, 1, k]
        positions = tokens.positions.clone()
        positions[..., : self.k] *= signs.to(positions.device, positions.dtype)
        return replace(tokens, positions=positions)

    # ---- model side ------------------------------------------------------------------------

    def build_embedder(self, d_model: int, *, dropout: float = 0.0) -> nn.Module:
        """Linear projection of node features, plus the positions read by ``position_reader``."""
        if self.positions == "laplacian" and self.position_reader == "signnet":
            signnet = SignNetPositions(self.k, d_model, eigenvalues=self.eigenvalues, width=self.signnet_width,
                                       layers=self.signnet_layers)
            return GraphEmbedder(d_model, self.num_features, signnet, graph_token=self.graph_token, dropout=dropout)
        position = PositionFeatures(self.num_positions, d_model) if self.positions == "laplacian" else None
        return Embedder(d_model, in_features=self.num_features, position=position, dropout=dropout)

    def build_attention(self, n_heads: int) -> GraphAttention:
        """The module that makes every layer's attention mask from a batch (dense, or a sparse
        pattern), with a per-head bias per kind of pair if ``learn_bias``."""
        return GraphAttention(self.attention, n_heads, graph_token=self.graph_token, edge_bias=self.edge_bias,
                              learned=self.learn_bias)

    def get_config(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "positions": self.positions,
            "eigenvalues": self.eigenvalues,
            "sign_flip": self.sign_flip,
            "seed": self.seed,
            "node_features": self.node_features,
            "node_attributes": self.node_attributes,
            "categories": self.categories,
            "attention": self.attention,
            "edge_bias": self.edge_bias,
            "graph_token": self.graph_token,
            "solver": self.solver,
            "position_reader": self.position_reader,
            "signnet_width": self.signnet_width,
            "signnet_layers": self.signnet_layers,
            "learn_bias": self.learn_bias,
        }

    # ---- internals -------------------------------------------------------------------------

    def _node_features(self, graph: nx.Graph, edges: Tensor) -> Tensor:  # -> [n, F - graph_token]
        n = graph.number_of_nodes()
        if self.node_features == "constant":
            return torch.ones(n, 1)
        if self.node_features == "degree":
            degree = torch.bincount(edges[0], minlength=n).float()  # [n], simple undirected degree
            return torch.log1p(degree)[:, None]
        columns = []
        for name in self.node_attributes:
            raw = [(node, _attribute(data, name, node)) for node, data in graph.nodes(data=True)]
            if name in self.categories:
                slots = {value: i for i, value in enumerate(self.categories[name])}
                unseen = len(slots)
                onehot = torch.zeros(n, unseen + 1)
                onehot[torch.arange(n), torch.tensor([slots.get(str(v), unseen) for _, v in raw])] = 1.0
                columns.append(onehot)
            else:
                columns.append(torch.tensor([_number(v, name, node) for node, v in raw])[:, None])
        return torch.cat(columns, dim=1).float()

    def _attention(self, encodings: Sequence[GraphEncoding], width: int) -> Tensor | None:
        """``[B, N, N]`` edge bias (float) or neighbourhood mask (bool, True = may attend), or None
        (``full``; ``sparse``, whose point is to never build this)."""
        if self.attention in ("full", "sparse"):
            return None
        offset = int(self.graph_token)
        adjacency = torch.zeros(len(encodings), width, width, dtype=torch.bool)  # [B, N, N]
        for row, enc in enumerate(encodings):
            adjacency[row, enc.edges[0] + offset, enc.edges[1] + offset] = True
        if self.attention == "bias":
            return adjacency.float() * self.edge_bias
        allowed = adjacency | torch.eye(width, dtype=torch.bool)  # itself and its neighbours
        if self.graph_token:
            allowed[:, 0, :] = True
            allowed[:, :, 0] = True
        return allowed


def _edge_list(encodings: Sequence[GraphEncoding], offset: int) -> dict[str, Tensor]:
    """``edges`` ``[B, E, 2]`` token indices (nodes shifted by ``offset``, the graph token) of every
    edge in both directions, zero-padded to the largest graph's, and ``edge_valid`` ``[B, E]``."""
    width = max(e.edges.shape[1] for e in encodings)
    edges = torch.zeros(len(encodings), width, 2, dtype=torch.long)  # [B, E, 2]
    valid = torch.zeros(len(encodings), width, dtype=torch.bool)  # [B, E]
    for row, enc in enumerate(encodings):
        edges[row, : enc.edges.shape[1]] = enc.edges.T + offset
        valid[row, : enc.edges.shape[1]] = True
    return {"edges": edges, "edge_valid": valid}


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise TokenizerError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def _attribute(data: dict[str, Any], name: str, node: Any, graph_index: int | None = None) -> Any:
    if name not in data:
        where = f" of graph {graph_index}" if graph_index is not None else ""
        raise DataError(f"node {node!r}{where} has no attribute {name!r}")
    return data[name]


def _kind(value: Any, name: str, node: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, (Real, np.number)) and not isinstance(value, np.complexfloating):
        return "number"
    raise DataError(f"node {node!r}: attribute {name!r} is a {type(value).__name__}; use a number or a string")


def _number(value: Any, name: str, node: Any) -> float:
    if _kind(value, name, node) != "number":
        raise DataError(
            f"node {node!r}: attribute {name!r} is {value!r}, expected a number;"
            " call fit(graphs) to learn categorical attributes, or list it in categories"
        )
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        number = math.inf
    if not math.isfinite(number) or abs(number) > FLOAT32_MAX:  # features are float32: no inf from a finite value
        raise DataError(f"node {node!r}: attribute {name!r} is {value!r}, not a finite float32 number")
    return number
