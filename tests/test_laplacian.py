"""Laplacian eigenpairs: the eigen-equation, edge cases, padding, dense vs sparse, determinism."""

from __future__ import annotations

import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

from tokformer.tokenizers import laplacian
from tokformer.tokenizers.laplacian import laplacian_spectrum, normalized_laplacian


def _graphs() -> dict[str, nx.Graph]:
    with_loops = nx.cycle_graph(7)
    with_loops.add_edge(2, 2)
    isolated = nx.path_graph(5)
    isolated.add_nodes_from([5, 6])
    return {
        "random": nx.gnp_random_graph(30, 0.2, seed=1),
        "disconnected": nx.disjoint_union(nx.cycle_graph(6), nx.star_graph(4)),
        "isolated": isolated,
        "self_loops": with_loops,
        "directed": nx.gnp_random_graph(15, 0.2, seed=2, directed=True),
        "tree": nx.balanced_tree(2, 3),
    }


@pytest.mark.parametrize("solver", ["dense", "sparse"])
@pytest.mark.parametrize("name", list(_graphs()))
def test_every_eigenvector_satisfies_the_eigen_equation(name: str, solver: str) -> None:
    graph = _graphs()[name]
    spectrum = laplacian_spectrum(graph, 4, solver=solver)
    lap = normalized_laplacian(graph).toarray()
    for j in range(4):
        v, lam = spectrum.vectors[:, j], spectrum.values[j]
        np.testing.assert_allclose(lap @ v, lam * v, atol=1e-8)
        assert np.linalg.norm(v) == pytest.approx(1.0)
    assert np.all(np.diff(spectrum.values) >= -1e-10)  # ascending


def test_first_eigenvector_only_is_dropped() -> None:
    connected = laplacian_spectrum(nx.gnp_random_graph(20, 0.3, seed=0), 3)
    assert connected.values.min() > 1e-6  # the single zero eigenvalue was the dropped one
    two_parts = laplacian_spectrum(nx.disjoint_union(nx.path_graph(4), nx.path_graph(5)), 3)
    assert two_parts.values[0] == pytest.approx(0.0, abs=1e-10)  # the second zero is kept: it marks components
    assert two_parts.values[1] > 1e-6


def test_isolated_node_has_inverse_sqrt_degree_zero() -> None:
    graph = nx.path_graph(3)
    graph.add_node(3)
    lap = normalized_laplacian(graph).toarray()
    np.testing.assert_array_equal(lap[3], [0, 0, 0, 1])
    assert np.isfinite(laplacian_spectrum(graph, 2).vectors).all()


def test_self_loops_and_directions_do_not_change_the_laplacian() -> None:
    plain = nx.cycle_graph(6)
    looped = plain.copy()
    looped.add_edges_from([(0, 0), (3, 3)])
    directed = nx.DiGraph([(i, (i + 1) % 6) for i in range(6)])
    for other in (looped, directed):
        np.testing.assert_allclose(normalized_laplacian(other).toarray(), normalized_laplacian(plain).toarray())


def test_padding_when_the_graph_is_too_small() -> None:
    spectrum = laplacian_spectrum(nx.path_graph(3), 5)
    np.testing.assert_array_equal(spectrum.valid, [True, True, False, False, False])
    assert spectrum.vectors.shape == (3, 5)
    assert not spectrum.vectors[:, 2:].any() and not spectrum.values[2:].any()
    single = laplacian_spectrum(nx.empty_graph(1), 4)
    assert not single.valid.any() and not single.vectors.any()


def test_zero_nodes_is_an_error() -> None:
    with pytest.raises(ValueError, match="0 nodes"):
        laplacian_spectrum(nx.Graph(), 2)


def test_dense_and_sparse_agree_on_distinct_eigenvalues() -> None:
    graph = nx.connected_watts_strogatz_graph(120, 4, 0.3, seed=3)
    dense = laplacian_spectrum(graph, 6, solver="dense")
    assert np.diff(dense.values).min() > 1e-6  # precondition: eigenvectors are unique up to sign
    sparse = laplacian_spectrum(graph, 6, solver="sparse")
    np.testing.assert_allclose(sparse.values, dense.values, atol=1e-9)
    np.testing.assert_allclose(sparse.vectors, dense.vectors, atol=1e-7)  # the sign rule fixes the sign too


def test_dense_and_sparse_span_the_same_repeated_eigenspaces() -> None:
    graph = nx.cycle_graph(60)  # every non-trivial eigenvalue but the last has multiplicity 2
    dense = laplacian_spectrum(graph, 6, solver="dense")
    sparse = laplacian_spectrum(graph, 6, solver="sparse")
    np.testing.assert_allclose(sparse.values, dense.values, atol=1e-9)
    for cols in (slice(0, 2), slice(2, 4), slice(4, 6)):  # compare orthogonal projectors, basis-free
        p_dense = dense.vectors[:, cols] @ dense.vectors[:, cols].T
        p_sparse = sparse.vectors[:, cols] @ sparse.vectors[:, cols].T
        np.testing.assert_allclose(p_sparse, p_dense, atol=1e-7)


def test_sign_rule_commutes_with_relabelling() -> None:
    graph = nx.gnp_random_graph(16, 0.35, seed=4)
    perm = np.random.default_rng(0).permutation(16)
    relabelled = nx.Graph()
    relabelled.add_nodes_from(range(16))
    relabelled.add_edges_from((perm[u], perm[v]) for u, v in graph.edges)
    a, b = laplacian_spectrum(graph, 5), laplacian_spectrum(relabelled, 5)
    np.testing.assert_allclose(b.vectors[perm], a.vectors, atol=1e-8)


def test_identical_across_processes() -> None:
    """A fresh interpreter computes bit-identical eigenvectors (fixed eigsh start vector).

    The module is loaded from its file, so the child process does not import torch.
    """
    code = (
        "import importlib.util, sys, networkx as nx;"
        f"spec = importlib.util.spec_from_file_location('laplacian', {laplacian.__file__!r});"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m);"
        "g = nx.connected_watts_strogatz_graph(500, 4, 0.2, seed=5);"
        "sys.stdout.write(m.laplacian_spectrum(g, 4, 'sparse').vectors.tobytes().hex())"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    graph = nx.connected_watts_strogatz_graph(500, 4, 0.2, seed=5)
    assert other == laplacian_spectrum(graph, 4, "sparse").vectors.tobytes().hex()
