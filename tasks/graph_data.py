"""Where graph-classification data comes from: built-in generated datasets and the user's files.

Built-in datasets (generated with networkx, offline, deterministic given a seed):

* ``csl``: Circular Skip-Link graphs (Murphy et al. 2019). Class ``i`` is the 41-node
  circulant graph with edges to the nodes 1 and ``s_i`` steps away, ``s`` in
  (2, 3, 4, 5, 6, 9, 11, 12, 13, 16); each sample is a random relabelling. All of them
  are 4-regular, so the 1-WL test, and a Transformer without positions, sees ten copies
  of the same graph.
* ``cycles``: 2-regular graphs on ``n`` in [12, 24] nodes; class 0 is one ``n``-cycle,
  class 1 two disjoint cycles. Again every node looks alike locally; only global
  structure (connectivity) tells the classes apart.

User data, either of:

* a directory with one sub-directory per class, holding graph files
  (``DIR/<class>/*.graphml|*.gml|*.edgelist|*.edges``); classes are the sorted names;
* a manifest CSV file with a header ``path,label`` and one graph per row; paths are
  relative to the manifest's directory and may not leave it.

A sample is a :class:`LabeledGraphs` (graphs, integer labels, class names).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np

from tokformer import files
from tokformer.errors import DataError
from tokformer.files import where
from tokformer.tokenizers.graph import check_graph_size

CSL_NODES = 41
CSL_SKIPS = (2, 3, 4, 5, 6, 9, 11, 12, 13, 16)
GRAPH_SUFFIXES = (".graphml", ".gml", ".edgelist", ".edges")
BUILTIN = ("csl", "cycles")


@dataclass(frozen=True)
class LabeledGraphs:
    """Graphs with integer labels in ``range(len(classes))``."""

    graphs: list[nx.Graph]
    labels: list[int]
    classes: list[str]


def relabel_randomly(graph: nx.Graph, rng: np.random.Generator) -> nx.Graph:
    """A copy of ``graph`` on nodes 0..n-1 under a random permutation, nodes inserted in 0..n-1 order.

    Token order follows ``graph.nodes`` order, so the insertion order is shuffled too,
    not only the labels.
    """
    perm = rng.permutation(graph.number_of_nodes())
    mapping = {node: int(perm[i]) for i, node in enumerate(graph.nodes)}
    out = nx.Graph()
    out.add_nodes_from(range(graph.number_of_nodes()))
    out.add_edges_from((mapping[u], mapping[v]) for u, v in graph.edges())
    return out


def csl_graph(skip: int) -> nx.Graph:
    """The CSL graph with skip length ``skip``: a 41-cycle plus chords ``i -> i + skip``."""
    return nx.circulant_graph(CSL_NODES, [1, skip])


def csl_dataset(per_class: int = 15, seed: int = 0) -> LabeledGraphs:
    """CSL: ``per_class`` random relabellings of each of the 10 skip-link graphs (150 by default)."""
    rng = np.random.default_rng(seed)
    graphs, labels = [], []
    for label, skip in enumerate(CSL_SKIPS):
        for _ in range(per_class):
            graphs.append(relabel_randomly(csl_graph(skip), rng))
            labels.append(label)
    return LabeledGraphs(graphs, labels, [f"skip-{s}" for s in CSL_SKIPS])


def cycles_dataset(per_class: int = 50, seed: int = 0, sizes: tuple[int, int] = (12, 24)) -> LabeledGraphs:
    """One cycle (label 0) vs two disjoint cycles (label 1) on the same number of nodes."""
    rng = np.random.default_rng(seed)
    graphs, labels = [], []
    for _ in range(per_class):
        n = int(rng.integers(sizes[0], sizes[1] + 1))
        first = int(rng.integers(3, n - 2))  # both cycles need >= 3 nodes
        two = nx.disjoint_union(nx.cycle_graph(first), nx.cycle_graph(n - first))
        graphs += [relabel_randomly(nx.cycle_graph(n), rng), relabel_randomly(two, rng)]
        labels += [0, 1]
    return LabeledGraphs(graphs, labels, ["one-cycle", "two-cycles"])


def builtin_dataset(name: str, per_class: int, seed: int) -> LabeledGraphs:
    if name == "csl":
        return csl_dataset(per_class, seed)
    if name == "cycles":
        return cycles_dataset(per_class, seed)
    raise DataError(f"unknown built-in graph dataset {name!r}; choose {', '.join(BUILTIN)} or give a path")


# ---- files ---------------------------------------------------------------------------------


def read_graph(path: Path) -> nx.Graph:
    """One graph from a GraphML, GML or edge-list file; DataError if it is not one."""
    suffix = path.suffix.lower()
    if suffix not in GRAPH_SUFFIXES:
        raise DataError(f"{path}: unknown graph file type {suffix!r}; use one of {', '.join(GRAPH_SUFFIXES)}")
    # read here, not by networkx: files.read_bytes refuses a pipe (which would block) or a device such as
    # /dev/zero (which never ends), and names the file for any other read error
    data = io.BytesIO(files.read_bytes(path))
    try:
        with files.reading(path):  # text that is not UTF-8 is named as in any other file
            if suffix == ".graphml":
                graph = nx.read_graphml(data)
            elif suffix == ".gml":
                graph = nx.read_gml(data)
            else:
                graph = nx.read_edgelist(data, comments="#")
    except DataError:
        raise
    except Exception as err:  # each networkx reader raises its own parse errors
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"{path}: not a readable {suffix[1:]} graph file: {first_line}") from None
    check_graph_size(graph, str(path))
    return graph


def load_graph_directory(root: Path, classes: Sequence[str] | None = None) -> LabeledGraphs:
    """Graphs from ``root/<class>/<file>``; ``classes`` (if given) fixes the class order and set."""
    found = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not found:
        raise DataError(f"{root}: a directory without class sub-directories; expected {root}/<class>/<graph file>")
    names = list(classes) if classes else found
    stray = sorted(set(found) - set(names))
    if stray:
        raise DataError(f"{root}: class directory {stray[0]!r} is not in the class set {names}")
    graphs, labels = [], []
    for label, name in enumerate(names):
        files = sorted(p for p in (root / name).iterdir() if p.suffix.lower() in GRAPH_SUFFIXES)
        for file in files:
            graphs.append(read_graph(file))
            labels.append(label)
    if not graphs:
        raise DataError(f"{root}: no graph files ({', '.join(GRAPH_SUFFIXES)}) in the class directories")
    return LabeledGraphs(graphs, labels, names)


def load_manifest(manifest: Path, classes: Sequence[str] | None = None) -> LabeledGraphs:
    """Graphs listed in a CSV with columns ``path,label``; labels are class names."""
    try:
        rows = list(csv.DictReader(io.StringIO(files.read_text(manifest), newline="")))
    except csv.Error as err:
        raise DataError(f"{manifest}: cannot read the manifest: {err}") from None
    if not rows or not {"path", "label"} <= set(rows[0]):
        raise DataError(f"{manifest}: expected a CSV with a header 'path,label' and one row per graph")
    for line, row in enumerate(rows, start=2):
        if not (row.get("label") or "").strip():
            raise DataError(f"{manifest}:{line}: missing label")
        if not (row.get("path") or "").strip():
            raise DataError(f"{manifest}:{line}: missing path")
    names = list(classes) if classes else sorted({row["label"].strip() for row in rows})
    index = {name: i for i, name in enumerate(names)}
    graphs, labels = [], []
    for line, row in enumerate(rows, start=2):
        label = row["label"].strip()
        if label not in index:
            raise DataError(f"{manifest}:{line}: label {label!r} is not in the class set {names}")
        # a path from the file may not lead out of its folder: /etc/passwd is no graph, and its parse error
        # would print a line of it
        graphs.append(read_graph(files.inside(manifest.parent, row["path"].strip(), f"{manifest}:{line}: path")))
        labels.append(index[label])
    return LabeledGraphs(graphs, labels, names)


def load_graphs(source: str, *, classes: Sequence[str] | None = None, per_class: int = 15,
                seed: int = 0) -> LabeledGraphs:
    """A built-in dataset by name, a class directory, or a manifest CSV, by what ``source`` is."""
    if source in BUILTIN:
        return builtin_dataset(source, per_class, seed)
    path = Path(source)
    if path.is_dir():
        return load_graph_directory(path, classes)
    if path.exists():  # a file, or a pipe or device named as one: read_text names that
        if path.suffix.lower() != ".csv":
            raise DataError(f"{path}: a graph dataset file must be a .csv manifest (path,label)")
        return load_manifest(path, classes)
    raise DataError(f"graph dataset {where(source)} is not an existing path nor a built-in ({', '.join(BUILTIN)})")


def stratified_folds(labels: Sequence[int], n_folds: int, seed: int) -> list[int]:
    """Each sample's fold in ``range(n_folds)``: every class spread evenly over folds, shuffled by ``seed``."""
    rng = np.random.default_rng(seed)
    fold = [0] * len(labels)
    for label in sorted(set(labels)):
        members = [i for i, y in enumerate(labels) if y == label]
        for rank, i in enumerate(rng.permutation(members)):
            fold[int(i)] = rank % n_folds
    return fold


def labeled_graphs(graphs: Sequence[nx.Graph], labels: Sequence[int | str],
                   classes: Sequence[str] | None = None) -> LabeledGraphs:
    """Check in-memory graphs and labels; labels are class names, or indices into ``classes``.

    Without ``classes``, string labels define the class set (sorted) and integer labels
    ``0..max``. A missing (None) label, or one outside the class set, is a DataError.
    """
    if len(graphs) != len(labels):
        raise DataError(f"{len(graphs)} graphs but {len(labels)} labels")
    if not graphs:
        raise DataError("no graphs given")
    for i, (graph, label) in enumerate(zip(graphs, labels, strict=True)):
        if not isinstance(graph, nx.Graph):
            raise DataError(f"sample {i} is a {type(graph).__name__}, not a networkx graph")
        check_graph_size(graph, f"graph {i}")
        if label is None or (isinstance(label, str) and not label.strip()):
            raise DataError(f"graph {i} has no label")
    if all(isinstance(y, str) for y in labels):
        names = list(classes) if classes else sorted(set(labels))
        index = {name: i for i, name in enumerate(names)}
        bad = next((y for y in labels if y not in index), None)
        if bad is not None:
            raise DataError(f"label {bad!r} is not in the class set {names}")
        return LabeledGraphs(list(graphs), [index[y] for y in labels], names)
    if all(isinstance(y, (int, np.integer)) and not isinstance(y, bool) for y in labels):
        names = list(classes) if classes else [str(i) for i in range(int(max(labels)) + 1)]
        bad = next((y for y in labels if not 0 <= y < len(names)), None)
        if bad is not None:
            raise DataError(f"label {bad} is outside the class indices 0..{len(names) - 1}")
        return LabeledGraphs(list(graphs), [int(y) for y in labels], names)
    raise DataError("labels must be all class names (str) or all class indices (int)")
