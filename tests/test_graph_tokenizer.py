"""GraphTokenizer: layout, masks, features, attention bias, sign flips, equivariance, save/load."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch

from tokformer.classifier import EncoderClassifier
from tokformer.config import TransformerConfig
from tokformer.errors import DataError
from tokformer.heads import ClassificationHead
from tokformer.tokenizers import graph as graph_tokenizer
from tokformer.tokenizers import load_tokenizer
from tokformer.tokenizers.base import TokenizerError
from tokformer.tokenizers.graph import GraphTokenizer
from tokformer.tokenizers.laplacian import normalized_laplacian


def _distinct_graph(n: int = 10, seed: int = 1) -> nx.Graph:
    """A graph whose eigenvectors, and their signs, are unique: distinct eigenvalues, and no
    eigenvector that an automorphism maps to its negative (which would zero its third moment)."""
    graph = nx.gnp_random_graph(n, 0.4, seed=seed)
    values, vectors = np.linalg.eigh(normalized_laplacian(graph).toarray())
    assert nx.is_connected(graph) and np.diff(values).min() > 1e-4
    assert np.abs((vectors[:, 1:] ** 3).sum(0)).min() > 1e-3
    return graph


def _permuted(graph: nx.Graph, perm: np.ndarray) -> nx.Graph:
    """Node ``i`` of ``graph`` becomes node ``perm[i]``, with nodes inserted in 0..n-1 order."""
    out = nx.Graph()
    out.add_nodes_from(range(graph.number_of_nodes()))
    out.add_edges_from((int(perm[u]), int(perm[v])) for u, v in graph.edges)
    return out


def test_layout_padding_and_masks() -> None:
    tok = GraphTokenizer(k=4, eigenvalues=True)
    batch = tok.batch([nx.cycle_graph(6), nx.path_graph(3), nx.empty_graph(1)])
    assert batch.features.shape == (3, 7, 2) and batch.positions.shape == (3, 7, 8)
    assert batch.mask.tolist()[1] == [True] * 4 + [False] * 3
    assert batch.extras["num_nodes"].tolist() == [6, 3, 1]
    assert batch.extras["eig_valid"].tolist() == [[True] * 4, [True, True, False, False], [False] * 4]
    assert batch.features[:, 0, 0].tolist() == [1.0, 1.0, 1.0]  # graph token indicator
    assert not batch.features[:, 1:, 0].any() and not batch.positions[:, 0].any()
    assert not batch.features[~batch.mask].any() and not batch.positions[~batch.mask].any()
    # eigenvalue columns repeat the graph's eigenvalues on every node
    values = batch.positions[1, 1:4, 4:]
    assert torch.equal(values, values[:1].expand(3, -1)) and values[0, 2:].eq(0).all()


def test_without_graph_token_or_positions() -> None:
    batch = GraphTokenizer(positions="none", graph_token=False, node_features="constant").batch([nx.path_graph(4)])
    assert batch.positions is None and batch.features.shape == (1, 4, 1) and batch.features.eq(1).all()


def test_degree_features_are_symmetrised_simple_degrees() -> None:
    graph = nx.MultiDiGraph([(0, 1), (1, 0), (0, 1), (1, 2), (2, 2)])
    batch = GraphTokenizer(k=2, graph_token=False).batch([graph])
    torch.testing.assert_close(batch.features[0, :, 0], torch.log1p(torch.tensor([1.0, 2.0, 1.0])))


def test_numeric_and_categorical_attributes() -> None:
    graph = nx.path_graph(3)
    nx.set_node_attributes(graph, {0: 0.5, 1: 1.5, 2: -2.0}, "charge")
    nx.set_node_attributes(graph, {0: "C", 1: "N", 2: "C"}, "atom")
    tok = GraphTokenizer(k=2, node_features="attributes", node_attributes=["charge", "atom"]).fit([graph])
    assert tok.categories == {"atom": ["C", "N"]} and tok.num_features == 1 + 1 + 3
    feats = tok.batch([graph]).features[0, 1:]
    assert feats[:, 1].tolist() == [0.5, 1.5, -2.0]
    assert feats[:, 2:].tolist() == [[1, 0, 0], [0, 1, 0], [1, 0, 0]]
    unseen = graph.copy()
    unseen.nodes[0]["atom"] = "O"
    assert tok.batch([unseen]).features[0, 1, 2:].tolist() == [0, 0, 1]  # the "unseen value" slot


def test_numbers_can_be_declared_categorical() -> None:
    graph = nx.path_graph(2)
    nx.set_node_attributes(graph, {0: 6, 1: 8}, "z")
    tok = GraphTokenizer(node_features="attributes", node_attributes=["z"]).fit([graph], categorical=["z"])
    assert tok.categories == {"z": ["6", "8"]}


@pytest.mark.parametrize(
    ("values", "match"),
    [({0: 1, 1: "a"}, "mixes numbers and strings"), ({0: [1], 1: [2]}, "use a number or a string")],
)
def test_bad_attribute_types(values: dict, match: str) -> None:
    graph = nx.path_graph(2)
    nx.set_node_attributes(graph, values, "x")
    with pytest.raises(DataError, match=match):
        GraphTokenizer(node_features="attributes", node_attributes=["x"]).fit([graph])


def test_string_attribute_without_categories_and_missing_attribute() -> None:
    graph = nx.path_graph(2)
    nx.set_node_attributes(graph, {0: "a", 1: "b"}, "x")
    tok = GraphTokenizer(node_features="attributes", node_attributes=["x"])
    with pytest.raises(DataError, match="call fit"):
        tok.batch([graph])
    with pytest.raises(DataError, match="has no attribute 'y'"):
        GraphTokenizer(node_features="attributes", node_attributes=["y"]).batch([graph])


def test_a_graph_may_have_max_graph_nodes_and_no_more(monkeypatch) -> None:
    """The cap applies to graphs given in Python too, not only to files (checked at a small cap: a graph of
    32,768 nodes takes the Laplacian solver seconds)."""
    monkeypatch.setattr(graph_tokenizer, "MAX_GRAPH_NODES", 6)
    assert GraphTokenizer(k=2).batch([nx.path_graph(6)]).features.shape[1] == 7  # the graph token and 6 nodes
    with pytest.raises(DataError, match="a graph: the graph has 7 nodes, more than the 6 a graph may have"):
        GraphTokenizer(k=2).batch([nx.path_graph(7)])


def test_bad_inputs_and_config() -> None:
    with pytest.raises(DataError, match="0 nodes"):
        GraphTokenizer().batch([nx.Graph()])
    with pytest.raises(DataError, match="networkx graph"):
        GraphTokenizer().batch([[(0, 1)]])
    with pytest.raises(TokenizerError, match="node_attributes"):
        GraphTokenizer(node_features="attributes")
    with pytest.raises(TokenizerError, match="attention"):
        GraphTokenizer(attention="edges")


def test_attention_bias_and_mask_follow_the_edges() -> None:
    graph = nx.DiGraph([(0, 1), (1, 2)])  # directed: symmetrised
    bias = GraphTokenizer(k=2, attention="bias", edge_bias=3.0).batch([graph, nx.empty_graph(1)]).attn_bias
    expected = torch.zeros(4, 4)
    expected[1, 2] = expected[2, 1] = expected[2, 3] = expected[3, 2] = 3.0
    assert torch.equal(bias[0], expected) and not bias[1].any()
    mask = GraphTokenizer(k=2, attention="mask").batch([graph]).attn_bias[0]
    assert mask.dtype == torch.bool
    assert mask[0].all() and mask[:, 0].all()  # the graph token sees and is seen by every node
    assert mask[1].tolist() == [True, True, True, False]  # node 0: token, itself, node 1; not node 2


def test_sign_flips_only_in_training_and_reproducible() -> None:
    graphs = [_distinct_graph()] * 16
    tok = GraphTokenizer(k=4, eigenvalues=True, seed=3)
    reference = tok.batch(graphs).positions
    assert torch.equal(tok.batch(graphs).positions, reference)  # eval mode: never flipped
    flipped = tok.augment().batch(graphs).positions
    signs = (flipped[:, 1:, :4] * reference[:, 1:, :4]).sum(1).sign()  # [B, k] per-graph, per-eigenvector sign
    assert torch.equal(flipped.abs(), reference.abs()) and (signs == -1).any() and (signs == 1).any()
    assert torch.equal(flipped[..., 4:], reference[..., 4:])  # eigenvalues are never flipped
    again = GraphTokenizer(k=4, eigenvalues=True, seed=3).augment().batch(graphs).positions
    assert torch.equal(again, flipped)
    assert torch.equal(tok.augment(False).batch(graphs).positions, reference)
    assert torch.equal(GraphTokenizer(k=4, sign_flip=False).augment().batch(graphs).positions, reference[..., :4])


def test_encodings_identical_across_runs() -> None:
    graphs = [_distinct_graph(seed=s) for s in (1, 2)]
    a, b = GraphTokenizer(k=6).batch(graphs), GraphTokenizer(k=6).batch(graphs)
    assert torch.equal(a.positions, b.positions) and torch.equal(a.features, b.features)


def _model(tok: GraphTokenizer, pool: str) -> EncoderClassifier:
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_heads=4, n_layers=2, dropout=0.0)
    head = ClassificationHead(32, 3, pool=pool, n_prefix=int(tok.graph_token))
    return EncoderClassifier(tok.build_embedder(32), cfg, head).eval()


@pytest.mark.parametrize(("pool", "attention"), [("cls", "full"), ("mean", "bias"), ("cls", "mask")])
def test_permutation_equivariance_and_invariance(pool: str, attention: str) -> None:
    tok = GraphTokenizer(k=5, eigenvalues=True, graph_token=pool == "cls", attention=attention)
    graph = _distinct_graph()
    perm = np.random.default_rng(1).permutation(10)
    batch = tok.batch([graph, _permuted(graph, perm)])
    model = _model(tok, pool)
    with torch.no_grad():
        nodes = model.features(batch)[:, tok.graph_token :]  # [2, n, d]
        logits = model(batch)
    torch.testing.assert_close(nodes[1][torch.from_numpy(perm)], nodes[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(logits[1], logits[0], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(nodes[0][0], nodes[0][1])  # positions make nodes differ: the test can fail


def test_save_and_load(tmp_path) -> None:
    graph = nx.path_graph(4)
    nx.set_node_attributes(graph, {0: "a", 1: "b", 2: "a", 3: "b"}, "kind")
    tok = GraphTokenizer(k=3, eigenvalues=True, node_features="attributes", node_attributes=["kind"],
                         attention="bias", edge_bias=0.5, graph_token=False).fit([graph])
    tok.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, GraphTokenizer) and loaded.get_config() == tok.get_config()
    a, b = tok.batch([graph]), loaded.batch([graph])
    assert torch.equal(a.features, b.features) and torch.equal(a.attn_bias, b.attn_bias)
