"""Laplacian eigenvectors: where a node sits in its graph, in coordinates a Transformer can read.

A graph has no first or second node, so it has no sequence positions. What it has is a
spectrum: the eigenvectors of the symmetric normalized Laplacian
``L = I - D^-1/2 A D^-1/2`` with the smallest eigenvalues vary slowly along edges (they
are the graph's lowest "frequencies", the analogue of the sines and cosines of a 1-D
sequence position code), so neighbouring nodes get similar coordinates.

Conventions (see docs/graphs.md):

* The graph is made undirected and simple: directions and parallel edges are dropped,
  and self-loops are ignored (a self-loop does not change which nodes are connected).
* An isolated node (degree 0) has ``D^-1/2 = 0``: its row of ``D^-1/2 A D^-1/2`` is 0,
  so ``L`` has a 1 on its diagonal and nothing else in its row.
* "Non-trivial" means: drop the first eigenvector (smallest eigenvalue) only, as Dwivedi
  et al. (Benchmarking GNNs) do. On a disconnected graph the other zero-eigenvalue
  eigenvectors are kept: they say which component a node is in.
* Each eigenvector's sign is fixed by a permutation-invariant rule (its third moment
  ``sum(v^3)`` is made non-negative), so relabelling a graph's nodes permutes its
  coordinates instead of flipping them at random. Eigenvectors of a repeated eigenvalue
  are still only defined up to a rotation of their eigenspace.
* Small graphs use dense ``numpy.linalg.eigh``; large ones ``scipy.sparse.linalg.eigsh``
  in shift-invert mode around a small negative shift, with a fixed start vector, so the
  result is the same on every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh

#: Graphs with more nodes than this use the sparse eigensolver (see benchmarks/bench_graph.py).
DENSE_MAX_NODES = 200
#: eigsh finds the eigenvalues nearest this shift; below 0 so ``L - shift*I`` is never singular.
_SHIFT = -1e-3
_V0_SEED = 0


@dataclass(frozen=True)
class Spectrum:
    """The ``k`` smallest non-trivial eigenpairs of one graph, zero-padded to ``k``.

    Attributes:
        vectors: ``[n, k]`` unit eigenvectors as columns; padded columns are 0.
        values: ``[k]`` eigenvalues in ascending order; padded entries are 0.
        valid: ``[k]`` bool, False for padded columns (the graph had fewer than k + 1 nodes).
    """

    vectors: np.ndarray
    values: np.ndarray
    valid: np.ndarray


def undirected_edges(graph: nx.Graph) -> np.ndarray:
    """``[2, 2E]`` node index pairs (``graph.nodes`` order) in both directions, no self-loops, no duplicates.

    Directed u->v and v->u, and parallel multigraph edges, merge into one undirected edge.
    """
    n = graph.number_of_nodes()
    index = {node: i for i, node in enumerate(graph.nodes)}
    pairs = np.array([(index[u], index[v]) for u, v in graph.edges() if u != v], dtype=np.int64).reshape(-1, 2)
    keys = np.unique(np.concatenate((pairs[:, 0] * n + pairs[:, 1], pairs[:, 1] * n + pairs[:, 0])))
    return np.stack(np.divmod(keys, n))


def normalized_laplacian(graph: nx.Graph) -> sp.csr_matrix:
    """``I - D^-1/2 A D^-1/2`` of the undirected, unweighted, loop-free version of ``graph``.

    Rows follow ``graph.nodes`` order. ``D^-1/2`` is 0 at isolated nodes. Built in one
    sparse construction (no sparse products): on small graphs scipy's per-call overhead,
    not arithmetic, is the cost.
    """
    n = graph.number_of_nodes()
    rows, cols = undirected_edges(graph)  # [2E] each
    degree = np.bincount(rows, minlength=n).astype(np.float64)  # [n]
    inv_sqrt = np.zeros(n)
    inv_sqrt[degree > 0] = degree[degree > 0] ** -0.5
    diagonal = np.arange(n)
    data = np.concatenate((-inv_sqrt[rows] * inv_sqrt[cols], np.ones(n)))
    return sp.csr_matrix((data, (np.concatenate((rows, diagonal)), np.concatenate((cols, diagonal)))), shape=(n, n))


def _fix_signs(vectors: np.ndarray) -> np.ndarray:
    """Flip each column so its third moment is >= 0: a sign rule that commutes with relabelling."""
    third = np.sum(vectors**3, axis=0)  # [k]
    return vectors * np.where(third < 0, -1.0, 1.0)


def _dense_eigenpairs(laplacian: sp.csr_matrix, m: int) -> tuple[np.ndarray, np.ndarray]:
    values, vectors = np.linalg.eigh(laplacian.toarray())  # ascending
    return values[:m], vectors[:, :m]


def _sparse_eigenpairs(laplacian: sp.csr_matrix, m: int) -> tuple[np.ndarray, np.ndarray]:
    n = laplacian.shape[0]
    v0 = np.random.default_rng(_V0_SEED).standard_normal(n)  # fixed start vector: same result every run
    values, vectors = eigsh(laplacian.tocsc(), k=m, sigma=_SHIFT, which="LM", v0=v0)
    order = np.argsort(values)
    return values[order], vectors[:, order]


def laplacian_spectrum(graph: nx.Graph, k: int, solver: str = "auto") -> Spectrum:
    """The ``k`` smallest non-trivial eigenpairs of ``graph``'s normalized Laplacian.

    Args:
        graph: any networkx graph with at least one node.
        k: number of eigenvectors wanted; fewer exist when the graph has <= k nodes, and
            the rest are zero columns marked invalid.
        solver: ``"dense"``, ``"sparse"``, or ``"auto"`` (dense up to ``DENSE_MAX_NODES`` nodes).
    """
    n = graph.number_of_nodes()
    if n == 0:
        raise ValueError("a graph with 0 nodes has no Laplacian spectrum")
    if solver not in ("auto", "dense", "sparse"):
        raise ValueError(f"solver must be auto, dense or sparse, got {solver!r}")
    available = min(k, n - 1)  # the first eigenvector is dropped
    vectors = np.zeros((n, k))
    values = np.zeros(k)
    if available > 0:
        laplacian = normalized_laplacian(graph)
        # eigsh needs k < n; tiny graphs always go dense.
        use_sparse = solver == "sparse" or (solver == "auto" and n > DENSE_MAX_NODES)
        use_sparse = use_sparse and available + 1 < n
        solve = _sparse_eigenpairs if use_sparse else _dense_eigenpairs
        found_values, found_vectors = solve(laplacian, available + 1)
        values[:available] = found_values[1:]
        vectors[:, :available] = _fix_signs(found_vectors[:, 1:])
    valid = np.arange(k) < available
    return Spectrum(vectors=vectors, values=values, valid=valid)
