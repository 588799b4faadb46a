"""Model-side graph modules: SignNet's sign invariance, edge-only attention biases, equivariance,
and CSL: eigenvectors alone learn it, no positions cannot."""

from __future__ import annotations

import tempfile

import networkx as nx
import numpy as np
import pytest
import torch

from tokformer.engine import train
from tokformer.tasks.graph import GraphConfig, GraphTask
from tokformer.tasks.graph_data import csl_dataset
from tokformer.tokenizers.graph import GraphTokenizer
from tokformer.tokenizers.graph_layers import EDGE, GRAPH, SELF, GraphAttention


def _randomise(module: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(0.3 * torch.randn_like(param))
    return module


def _graphs() -> list[nx.Graph]:
    return [nx.petersen_graph(), nx.lollipop_graph(4, 3), nx.path_graph(5)]


@pytest.mark.parametrize("eigenvalues", [False, True])
def test_signnet_is_exactly_sign_invariant(eigenvalues: bool) -> None:
    tok = GraphTokenizer(k=6, eigenvalues=eigenvalues, position_reader="signnet")
    embedder = _randomise(tok.build_embedder(16)).eval()
    batch = tok.batch(_graphs())
    flipped = tok.flip_signs(batch, torch.Generator().manual_seed(1))
    assert not torch.equal(flipped.positions, batch.positions)  # some eigenvector did flip
    with torch.no_grad():
        torch.testing.assert_close(embedder(flipped), embedder(batch), atol=1e-6, rtol=0)
        linear = _randomise(GraphTokenizer(k=6, eigenvalues=eigenvalues).build_embedder(16)).eval()
        assert not torch.allclose(linear(flipped), linear(batch), atol=1e-3)  # a linear reader is not


def test_signnet_tells_csl_classes_apart_where_sums_cannot() -> None:
    """Two CSL classes: same degrees, same pooled first and second moments of eigenvectors."""
    data = csl_dataset(per_class=1, seed=0)
    tok = GraphTokenizer(k=20, position_reader="signnet")
    embedder = _randomise(tok.build_embedder(16)).eval()
    with torch.no_grad():
        x = embedder(tok.batch(data.graphs[:2]))[:, 1:].mean(1)  # [2, d] mean over nodes
    assert (x[0] - x[1]).abs().max() > 1e-3


def _kinds(graph: nx.Graph) -> torch.Tensor:
    """``[N, N]`` expected pair kind (3 = none) with a graph token at 0, from networkx directly."""
    n = graph.number_of_nodes() + 1
    kinds = torch.full((n, n), 3)
    kinds[0, :] = kinds[:, 0] = GRAPH
    for u, v in graph.edges:
        kinds[u + 1, v + 1] = kinds[v + 1, u + 1] = EDGE
    kinds[torch.arange(n), torch.arange(n)] = SELF
    return kinds


@pytest.mark.parametrize("attention", ["bias", "mask"])
def test_attention_bias_only_touches_listed_pairs(attention: str) -> None:
    graph = nx.lollipop_graph(4, 3)
    tok = GraphTokenizer(k=3, attention=attention, learn_bias=True)
    module = tok.build_attention(2)
    with torch.no_grad():
        module.bias.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))  # [kind, H]: all distinct
    dense = module(tok.batch([graph, nx.path_graph(2)]))  # [B, H, N, N], graph 1 padded
    kinds = _kinds(graph)
    off = float("-inf") if attention == "mask" else 0.0
    expected = torch.cat((module.bias.detach(), torch.full((1, 2), off)))[kinds].permute(2, 0, 1)
    torch.testing.assert_close(dense[0], expected)
    assert dense[1, :, 3:].eq(off).all() and dense[1, :, :, 3:].eq(off).all()  # padding: nothing listed


def test_sparse_pattern_lists_exactly_the_mask_pairs() -> None:
    tok = GraphTokenizer(k=3, attention="sparse")
    batch = tok.batch([nx.lollipop_graph(4, 3), nx.path_graph(2)])
    assert "edges" not in GraphTokenizer(k=3, attention="mask").batch([nx.path_graph(2)]).extras  # exportable
    assert batch.attn_bias is None  # sparse: no [B, N, N] tensor
    torch.manual_seed(0)
    sparse, mask = GraphAttention("sparse", 2, graph_token=True), GraphAttention("mask", 2, graph_token=True)
    mask.bias.data = sparse.bias.data = torch.randn(3, 2)
    torch.testing.assert_close(sparse(batch).to_dense(2), mask(batch))


@pytest.mark.parametrize("attention", ["mask", "sparse", "bias"])
def test_signnet_and_learned_bias_keep_nodes_permutation_equivariant(attention: str) -> None:
    graph = nx.gnp_random_graph(10, 0.4, seed=1)  # distinct eigenvalues: eigenvectors unique up to sign
    perm = np.random.default_rng(0).permutation(graph.number_of_nodes())
    permuted = nx.empty_graph(10)  # node i becomes node perm[i]
    permuted.add_edges_from((int(perm[u]), int(perm[v])) for u, v in graph.edges)
    task = GraphTask(GraphConfig(d_model=16, n_heads=2, n_layers=2, k=5, eigenvalues=False, attention=attention,
                                 position_reader="signnet", signnet_width=4, learn_bias=True))
    task.classes = ["a", "b"]
    model = _randomise(task.build_model()).eval()
    with torch.no_grad():
        nodes = model.features(task.tokenizer.batch([graph, permuted]))[:, 1:]  # [2, n, d]
        logits = model(task.tokenizer.batch([graph, permuted]))
    torch.testing.assert_close(nodes[1][torch.from_numpy(perm)], nodes[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(logits[1], logits[0], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(nodes[0][0], nodes[0][-1])  # nodes do differ: the test can fail


def test_without_positions_every_csl_graph_looks_the_same() -> None:
    """4-regular graphs, 1-hop attention: no positions means one output for all ten classes (chance)."""
    data = csl_dataset(per_class=1, seed=0)
    task = GraphTask(GraphConfig(d_model=16, n_heads=2, n_layers=2, positions="none", attention="mask",
                                 learn_bias=True))
    task.classes = data.classes
    model = _randomise(task.build_model()).eval()
    with torch.no_grad():
        logits = model(task.tokenizer.batch(data.graphs))  # [10, 10]
    torch.testing.assert_close(logits, logits[:1].expand_as(logits), atol=1e-5, rtol=0)


@pytest.mark.slow  # 100 training steps: ~9 s alone, ~35 s on the loaded shared machine
def test_csl_eigenvectors_alone_beat_chance() -> None:
    with tempfile.TemporaryDirectory() as run_dir:
        result = train("graph", quiet=True, run_dir=run_dir, data="csl", folds=5, fold=1, d_model=32, n_heads=4,
                       n_layers=2, k=20, eigenvalues=False, position_reader="signnet", attention="mask",
                       learn_bias=True, steps=100,
                       batch_size=30, lr=3e-3, warmup_steps=10, weight_decay=0.0, eval_every=100, log_every=100,
                       device="cpu", seed=0)
    assert result.metrics["accuracy"] >= 0.5  # chance is 0.1


@pytest.mark.parametrize("options", [{"position_reader": "signnet"}, {"learn_bias": True, "attention": "mask"},
                                     {"attention": "sparse"}])
def test_models_that_read_edges_refuse_traced_export_in_one_line(options) -> None:
    """Their edge count would be a traced constant: an ONNX file that fails on the next graph."""
    from tokformer.errors import ConfigError
    from tokformer.tasks.graph import GraphConfig, GraphTask

    with pytest.raises(ConfigError, match="do not export to ONNX"):
        GraphTask(GraphConfig(**options)).export_example()
