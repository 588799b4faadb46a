"""What the graph tokenizer promises that its tests left unchecked (mutation testing,
benchmarks/results/mutation.md): GIN's and SignNet's formulas written out, positions kept off the graph
token, the attention bias table per mode, the options reaching the model, the eigensolver chosen by size,
shapes without positions, the tensors' device, the defaults, and what each refusal and error says."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tokformer.errors import DataError
from tokformer.tokenizers import graph as graph_module
from tokformer.tokenizers import laplacian
from tokformer.tokenizers.base import TokenizerError
from tokformer.tokenizers.graph import FLOAT32_MAX, GraphTokenizer
from tokformer.tokenizers.graph_layers import EDGE, GIN, GraphAttention, GraphEmbedder, SignNetPositions, flat_edges


def randomised(module: nn.Module) -> nn.Module:
    torch.manual_seed(7)
    for p in module.parameters():
        nn.init.normal_(p, std=0.4)
    return module


def linears(module: nn.Sequential) -> list[nn.Linear]:
    return [m for m in module if isinstance(m, nn.Linear)]


def graphs() -> list[nx.Graph]:
    return [nx.petersen_graph(), nx.path_graph(5), nx.star_graph(3)]


def attributed(**values) -> nx.Graph:
    graph = nx.path_graph(3)
    for node, value in values.items():
        graph.nodes[int(node[1:])]["w"] = value
    return graph


# -- the model-side formulas -----------------------------------------------------------


def test_gin_adds_the_neighbours_sum_to_1_plus_eps_times_the_node() -> None:
    """``mlp((1 + eps) h_u + sum of h_w over u's neighbours)``, the mlp Linear, GELU, Linear (Xu et al. 2019)."""
    batch = GraphTokenizer(k=2, position_reader="signnet").batch(graphs())
    layer = randomised(GIN(3, 5))
    h = torch.randn(batch.batch_size * batch.seq_len, 3)
    query, key, valid = flat_edges(batch)
    adjacency = torch.zeros(len(h), len(h))
    adjacency[query[valid], key[valid]] = 1.0
    first, second = linears(layer.mlp)
    expected = second(F.gelu(first((1 + layer.eps) * h + adjacency @ h)))
    torch.testing.assert_close(layer(h, query, key, valid), expected)


def test_signnet_is_rho_of_the_sum_of_phi_of_each_eigenvector_and_its_negation() -> None:
    k, width = 3, 4
    batch = GraphTokenizer(k=k, eigenvalues=True, position_reader="signnet").batch(graphs())
    net = randomised(SignNetPositions(k, 8, eigenvalues=True, width=width, layers=2))
    edges = flat_edges(batch)

    def phi(x: torch.Tensor) -> torch.Tensor:  # [B * N, k, 2] -> [B * N, k, width]: GELU between the GIN layers
        return net.phi[1](F.gelu(net.phi[0](x, *edges)), *edges)

    v = batch.positions[..., :k].reshape(-1, k, 1)  # [B * N, k, 1]
    eigenvalues = batch.positions[..., k:].reshape(-1, k, 1)
    summed = phi(torch.cat((v, eigenvalues), -1)) + phi(torch.cat((-v, eigenvalues), -1))
    summed = summed.view(batch.batch_size, batch.seq_len, k, width) * batch.extras["eig_valid"][:, None, :, None]
    first, second = linears(net.rho)
    torch.testing.assert_close(net(batch), second(F.gelu(first(summed.flatten(-2)))))


def test_the_graph_embedder_adds_positions_to_nodes_only() -> None:
    tokenizer = GraphTokenizer(k=3, position_reader="signnet")
    batch = tokenizer.batch(graphs())
    embedder = randomised(tokenizer.build_embedder(8))
    nodes = batch.mask.clone()
    nodes[:, 0] = False  # the graph token
    expected = embedder.tokens(batch.features) + embedder.position(batch) * nodes[..., None]
    torch.testing.assert_close(embedder(batch), expected)


# -- attention ---------------------------------------------------------------------------


def test_the_bias_table_per_mode() -> None:
    """One learned row per kind of pair under bias, mask and sparse; an edge starts at edge_bias (1 by default)
    under bias only, where the others start at 0; full attention has nothing to learn."""
    assert list(GraphAttention("full", 2, graph_token=True).parameters()) == []
    assert GraphAttention("bias", 2, graph_token=True).bias[EDGE].tolist() == [1.0, 1.0]
    for attention in ("mask", "sparse"):
        assert GraphAttention(attention, 2, graph_token=True, edge_bias=2.5).bias.abs().sum() == 0
    table = GraphAttention("bias", 2, graph_token=True, edge_bias=2.5).bias
    assert table[EDGE].tolist() == [2.5, 2.5] and table.abs().sum() == 5.0


def test_full_attention_returns_no_mask_whatever_the_batch_carries() -> None:
    batch = GraphTokenizer(attention="bias").batch(graphs())
    assert batch.attn_bias is not None and GraphAttention("full", 2, graph_token=True)(batch) is None


def test_a_sparse_pattern_without_learned_biases_carries_none() -> None:
    batch = GraphTokenizer(attention="sparse").batch(graphs())
    pattern = GraphAttention("sparse", 2, graph_token=True, learned=False)(batch)
    assert pattern.bias is None


def test_the_tokenizers_edge_bias_reaches_the_learned_table() -> None:
    attention = GraphTokenizer(attention="bias", learn_bias=True, edge_bias=2.5).build_attention(2)
    assert attention.bias[EDGE].tolist() == [2.5, 2.5]


def test_the_graph_modules_run_on_the_batchs_device() -> None:
    tokenizer = GraphTokenizer(k=3, attention="mask", learn_bias=True, position_reader="signnet")
    batch = tokenizer.batch(graphs()).to("meta")
    assert {t.device.type for t in flat_edges(batch)} == {"meta"}
    assert GraphAttention("mask", 2, graph_token=True).to("meta")(batch).device.type == "meta"
    assert tokenizer.build_embedder(8).to("meta")(batch).device.type == "meta"
    assert tokenizer.flip_signs(batch).positions.device.type == "meta"


# -- options reaching the model ------------------------------------------------------------


def test_the_tokenizers_options_reach_its_embedder() -> None:
    signnet = GraphTokenizer(k=3, position_reader="signnet", signnet_width=5, signnet_layers=3)
    embedder = signnet.build_embedder(8, dropout=0.25)
    assert len(embedder.position.phi) == 3 and embedder.position.rho[0].in_features == 3 * 5
    assert embedder.drop.p == 0.25 and signnet.build_embedder(8).drop.p == 0.0
    linear = GraphTokenizer(k=3)
    assert linear.build_embedder(8, dropout=0.25).drop.p == 0.25 and linear.build_embedder(8).drop.p == 0.0


def test_the_tokenizers_defaults() -> None:
    tokenizer = GraphTokenizer()
    assert tokenizer.get_config() == {
        "k": 8, "positions": "laplacian", "eigenvalues": False, "sign_flip": True, "seed": 0,
        "node_features": "degree", "node_attributes": [], "categories": {}, "attention": "full", "edge_bias": 1.0,
        "graph_token": True, "solver": "auto", "position_reader": "linear", "signnet_width": 16,
        "signnet_layers": 2, "learn_bias": False}
    assert tokenizer.augmenting is False
    net = SignNetPositions(3, 8, eigenvalues=False)
    assert len(net.phi) == 2 and net.rho[0].in_features == 3 * 16
    assert GraphEmbedder(8, 2, net, graph_token=True).drop.p == 0.0


# -- tokenizing ----------------------------------------------------------------------------


def test_without_positions_the_encoding_and_batch_have_zero_position_columns() -> None:
    tokenizer = GraphTokenizer(positions="none")
    encoding = tokenizer.encode(nx.path_graph(4))
    assert encoding.vectors.shape == (4, 0) and encoding.values.shape == (0,)
    assert encoding.valid.shape == (0,) and encoding.valid.dtype == torch.bool
    assert tokenizer.batch(graphs()).extras["eig_valid"].shape == (3, 0)


def test_eig_valid_is_a_bool_mask() -> None:
    assert GraphTokenizer(k=3).batch(graphs()).extras["eig_valid"].dtype == torch.bool


def test_the_solver_option_reaches_the_eigensolver(monkeypatch: pytest.MonkeyPatch) -> None:
    solvers = []
    original = graph_module.laplacian_spectrum
    monkeypatch.setattr(graph_module, "laplacian_spectrum",
                        lambda graph, k, solver="auto": solvers.append(solver) or original(graph, k, solver))
    GraphTokenizer(k=3, solver="sparse").encode(nx.path_graph(10))
    assert solvers == ["sparse"]


def test_a_given_generator_draws_the_flips() -> None:
    batch = GraphTokenizer(k=8).batch(graphs())
    flips = [GraphTokenizer(k=8, seed=seed).flip_signs(batch, torch.Generator().manual_seed(5)).positions
             for seed in (0, 1)]
    torch.testing.assert_close(flips[0], flips[1])
    assert not torch.equal(flips[0], batch.positions)


def test_the_largest_float32_attribute_is_kept() -> None:
    tokenizer = GraphTokenizer(node_features="attributes", node_attributes=["w"], graph_token=False)
    assert tokenizer.batch([attributed(n0=FLOAT32_MAX, n1=1.0, n2=2.0)]).features[0, 0, 0].item() == FLOAT32_MAX


def test_the_eigensolver_is_chosen_by_size_and_kept_below_the_graph_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dense up to DENSE_MAX_NODES nodes on auto; sparse only while it is asked for fewer pairs than nodes."""
    dense, sparse = "_dense_eigenpairs", "_sparse_eigenpairs"
    used: list[str] = []

    def spy(name: str):
        original = getattr(laplacian, name)

        def solve(matrix, m: int):
            used.append(name)
            return original(matrix, m)
        return solve

    for name in (dense, sparse):
        monkeypatch.setattr(laplacian, name, spy(name))
    cases = [("auto", 200, dense), ("auto", 201, sparse), ("dense", 300, dense), ("sparse", 5, sparse),
             ("sparse", 4, dense)]  # 4 nodes and 3 + 1 pairs asked for: eigsh needs fewer pairs than nodes
    for solver, n, expected in cases:
        used.clear()
        laplacian.laplacian_spectrum(nx.path_graph(n), 3, solver)
        assert used == [expected], (solver, n)


# -- refusals and errors ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["positions", "node_features", "attention", "position_reader", "solver"])
def test_a_bad_choice_is_refused_by_its_name(name: str) -> None:
    with pytest.raises(TokenizerError, match=rf"^{name} must be one of .*, got 'bogus'$"):
        GraphTokenizer(**{name: "bogus"})


@pytest.mark.parametrize("name", ["k", "signnet_width", "signnet_layers"])
@pytest.mark.parametrize("size", [0, 65537])
def test_a_size_out_of_range_is_refused_by_its_name(name: str, size: int) -> None:
    """65536 at most, the widest model: a node's k floats are in every batch, and 10**8 asks for terabytes."""
    with pytest.raises(TokenizerError, match=rf"^{name} must be in 1\.\.65536, got {size}$"):
        GraphTokenizer(**{name: size})
    assert GraphTokenizer(**{name: 1 if size == 0 else 65536}).get_config()[name] == (1 if size == 0 else 65536)


def test_categories_of_attributes_not_read_are_refused() -> None:
    with pytest.raises(TokenizerError, match=r"categories given for \['y'\]"):
        GraphTokenizer(node_features="attributes", node_attributes=["w"], categories={"y": ["a"]})
    tokenizer = GraphTokenizer(node_features="attributes", node_attributes=["w"])
    with pytest.raises(TokenizerError, match=r"categorical attributes \['y'\] are not in node_attributes"):
        tokenizer.fit([attributed(n0=1, n1=2, n2=3)], categorical=["y"])


def test_a_missing_attribute_names_the_node_and_while_fitting_the_graph() -> None:
    tokenizer = GraphTokenizer(node_features="attributes", node_attributes=["w"])
    incomplete = attributed(n0=1.0, n1=2.0)  # node 2 has no "w"
    with pytest.raises(DataError, match=r"^node 2 of graph 1 has no attribute 'w'$"):
        tokenizer.fit([attributed(n0=1, n1=2, n2=3), incomplete])
    with pytest.raises(DataError, match=r"^node 2 has no attribute 'w'$"):
        tokenizer.batch([incomplete])


def test_an_attribute_of_the_wrong_type_names_the_node_and_the_attribute() -> None:
    tokenizer = GraphTokenizer(node_features="attributes", node_attributes=["w"])
    wrong = attributed(n0=1.0, n1=[1, 2], n2=2.0)
    for action in (lambda: tokenizer.fit([wrong]), lambda: tokenizer.batch([wrong])):
        with pytest.raises(DataError, match=r"^node 1: attribute 'w' is a list; use a number or a string$"):
            action()
    with pytest.raises(DataError, match=r"^node 1: attribute 'w' is 'x', expected a number"):
        tokenizer.batch([attributed(n0=1.0, n1="x", n2=2.0)])
