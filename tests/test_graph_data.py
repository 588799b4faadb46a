"""Graph datasets: the CSL and cycles generators, file loading, labels, folds."""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from tokformer.errors import DataError
from tokformer.tasks.graph_data import (
    CSL_SKIPS,
    csl_dataset,
    cycles_dataset,
    labeled_graphs,
    load_graphs,
    read_graph,
    stratified_folds,
)


def test_csl_graphs_are_relabelled_circulants_of_their_class() -> None:
    data = csl_dataset(per_class=2, seed=0)
    assert len(data.graphs) == 20 and data.labels == [i // 2 for i in range(20)] and len(data.classes) == 10
    for graph, label in zip(data.graphs, data.labels, strict=True):
        reference = nx.circulant_graph(41, [1, CSL_SKIPS[label]])
        assert list(graph.nodes) == list(range(41)) and all(d == 4 for _, d in graph.degree)
        assert nx.is_isomorphic(graph, reference)
        assert set(map(frozenset, graph.edges)) != set(map(frozenset, reference.edges))  # actually relabelled


def test_csl_classes_are_pairwise_non_isomorphic() -> None:
    """Different adjacency spectra prove non-isomorphism (VF2 on regular graphs takes minutes)."""
    data = csl_dataset(per_class=1, seed=0)
    spectra = [np.linalg.eigvalsh(nx.to_numpy_array(g)) for g in data.graphs]
    for a, b in itertools.combinations(spectra, 2):
        assert np.abs(a - b).max() > 1e-6


def test_csl_is_deterministic_given_a_seed() -> None:
    edges = lambda data: [sorted(g.edges) for g in data.graphs]  # noqa: E731
    assert edges(csl_dataset(3, seed=7)) == edges(csl_dataset(3, seed=7))
    assert edges(csl_dataset(3, seed=7)) != edges(csl_dataset(3, seed=8))
    assert len(csl_dataset().graphs) == 150  # the standard benchmark size


def test_cycles_labels_count_components() -> None:
    data = cycles_dataset(per_class=10, seed=0)
    for graph, label in zip(data.graphs, data.labels, strict=True):
        assert all(d == 2 for _, d in graph.degree) and 12 <= graph.number_of_nodes() <= 24
        assert nx.number_connected_components(graph) == label + 1


def test_stratified_folds_spread_every_class() -> None:
    labels = [0] * 15 + [1] * 15
    folds = stratified_folds(labels, 5, seed=0)
    for f in range(5):
        assert [labels[i] for i in range(30) if folds[i] == f].count(0) == 3


def _write_class_dirs(root: Path) -> None:
    (root / "ring").mkdir(parents=True)
    (root / "line").mkdir()
    nx.write_graphml(nx.cycle_graph(5), root / "ring" / "a.graphml")
    nx.write_gml(nx.cycle_graph(6), root / "ring" / "b.gml")
    nx.write_edgelist(nx.path_graph(4), root / "line" / "c.edgelist", data=False)
    (root / "line" / "notes.txt").write_text("ignored: not a graph suffix")


def test_load_class_directory(tmp_path: Path) -> None:
    _write_class_dirs(tmp_path)
    data = load_graphs(str(tmp_path))
    assert data.classes == ["line", "ring"] and sorted(data.labels) == [0, 1, 1]
    assert sorted(g.number_of_nodes() for g in data.graphs) == [4, 5, 6]
    with pytest.raises(DataError, match="not in the class set"):
        load_graphs(str(tmp_path), classes=["ring"])


def test_load_manifest(tmp_path: Path) -> None:
    _write_class_dirs(tmp_path)
    manifest = tmp_path / "data.csv"
    manifest.write_text("path,label\nring/a.graphml,ring\nline/c.edgelist,line\n")
    data = load_graphs(str(manifest), classes=["ring", "line", "star"])
    assert data.labels == [0, 1] and data.classes == ["ring", "line", "star"]
    manifest.write_text("path,label\nring/a.graphml,\n")
    with pytest.raises(DataError, match=r"data.csv:2: missing label"):
        load_graphs(str(manifest))
    manifest.write_text("path,label\nring/a.graphml,tree\n")
    with pytest.raises(DataError, match="'tree' is not in the class set"):
        load_graphs(str(manifest), classes=["ring"])
    manifest.write_text("file,class\nx,y\n")
    with pytest.raises(DataError, match="header 'path,label'"):
        load_graphs(str(manifest))


def test_files_that_are_not_graphs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.graphml"
    bad.write_text("this is not xml")
    with pytest.raises(DataError, match="not a readable graphml graph file"):
        read_graph(bad)
    gml = tmp_path / "bad.gml"
    gml.write_bytes(b"\x00\x01garbage [")
    with pytest.raises(DataError, match="not a readable gml"):
        read_graph(gml)
    with pytest.raises(DataError, match="unknown graph file type"):
        read_graph(tmp_path / "x.png")
    empty = tmp_path / "empty.edgelist"
    empty.write_text("")
    with pytest.raises(DataError, match="0 nodes"):
        read_graph(empty)
    with pytest.raises(DataError, match="not an existing path nor a built-in"):
        load_graphs(str(tmp_path / "missing"))


@pytest.mark.parametrize("suffix", [".graphml", ".gml", ".edgelist"])
def test_a_pipe_named_like_a_graph_file_is_refused_by_name_not_waited_on(tmp_path: Path, named_pipe,
                                                                         suffix: str) -> None:
    """networkx opened the path itself: a FIFO blocked forever (predict, a class folder, a manifest row)."""
    _write_class_dirs(tmp_path)
    pipe = named_pipe(tmp_path / "ring" / f"pipe{suffix}")
    with pytest.raises(DataError, match=f"^{pipe} is not a regular file"):
        read_graph(pipe)
    with pytest.raises(DataError, match=f"^{pipe} is not a regular file"):  # a class folder: refused, as a
        load_graphs(str(tmp_path))  # graph file that does not parse is (docs/graphs.md)
    manifest = tmp_path / "data.csv"
    manifest.write_text(f"path,label\nring/a.graphml,ring\nring/pipe{suffix},ring\n")
    with pytest.raises(DataError, match=f"^{pipe} is not a regular file"):
        load_graphs(str(manifest))
    manifest_pipe = named_pipe(tmp_path / "pipe.csv")  # the manifest itself: it was "not an existing path"
    with pytest.raises(DataError, match=f"^{manifest_pipe} is not a regular file"):
        load_graphs(str(manifest_pipe))


def test_manifest_paths_that_leave_its_folder_are_refused_unread(tmp_path: Path) -> None:
    """They were read: /etc/passwd was parsed as an edge list and its first line printed in the error."""
    _write_class_dirs(tmp_path / "data")
    outside = tmp_path / "secret.edgelist"
    outside.write_text("root:x:0:0 secret\n")
    (tmp_path / "data" / "link.edgelist").symlink_to(outside)
    manifest = tmp_path / "data" / "data.csv"
    for path, why in [("../secret.edgelist", "points outside"), (str(outside), "points outside"),
                      ("link.edgelist", "is a link that leads outside")]:
        manifest.write_text(f"path,label\nring/a.graphml,ring\n{path},ring\n")
        with pytest.raises(DataError, match=f"^{manifest}:3: path: .* {why} ") as info:
            load_graphs(str(manifest))
        assert "root:x" not in str(info.value)


def test_in_memory_labels() -> None:
    graphs = [nx.path_graph(3), nx.cycle_graph(3)]
    assert labeled_graphs(graphs, ["b", "a"]).labels == [1, 0]
    assert labeled_graphs(graphs, [0, 2]).classes == ["0", "1", "2"]
    with pytest.raises(DataError, match="outside the class indices"):
        labeled_graphs(graphs, [0, 2], classes=["x", "y"])
    with pytest.raises(DataError, match="graph 1 has no label"):
        labeled_graphs(graphs, ["a", None])
    with pytest.raises(DataError, match="all class names"):
        labeled_graphs(graphs, ["a", 1])
    with pytest.raises(DataError, match="0 nodes"):
        labeled_graphs([nx.Graph()], ["a"])
