"""Unusual but valid data is handled, invalid data is a one-line error: images of any mode
and size, degenerate graphs (docs/reliability.md, "Data")."""

import networkx as nx
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from tokformer.cli import main
from tokformer.engine import load_run, train
from tokformer.tokenizers.graph import MAX_GRAPH_NODES

pytestmark = pytest.mark.usefixtures("one_thread")

ENGINE = dict(steps=2, batch_size=8, eval_every=2, device="cpu", quiet=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    train("classify", run_dir=str(root / "classify"), d_model=32, n_heads=2, n_layers=1, train_size=64,
          eval_size=16, **ENGINE)
    train("graph", run_dir=str(root / "graph"), d_model=32, n_heads=2, n_layers=1, **ENGINE)
    return root


def _image(mode: str, size: tuple[int, int]) -> Image.Image:
    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8))
    return rgb.convert(mode)


IMAGES = {
    "grey": ("L", (32, 32)), "grey+alpha": ("LA", (32, 32)), "rgba": ("RGBA", (32, 32)), "palette": ("P", (32, 32)),
    "16-bit": ("I;16", (32, 32)), "float": ("F", (32, 32)), "cmyk": ("CMYK", (32, 32)), "1-bit": ("1", (32, 32)),
    "1x1 pixel": ("RGB", (1, 1)), "thin strip": ("RGB", (300, 3)), "large": ("RGB", (2000, 1500)),
}


def test_predict_takes_images_of_any_mode_and_size(runs, tmp_path):
    """Every mode becomes 3 channels and every size is resized to the training size (the documented policy)."""
    paths = []
    for name, (mode, size) in IMAGES.items():
        path = tmp_path / f"{name.replace(' ', '_')}.{'tiff' if mode in ('F', 'CMYK', 'I;16') else 'png'}"
        _image(mode, size).save(path)
        paths.append(path)
    result = CliRunner().invoke(main, ["predict", str(runs / "classify"), *map(str, paths), "--top-k", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [str(p) for p in paths]
    task, model = load_run(runs / "classify")
    batch = task.tokenizer.batch(paths)
    training_size = task.tokenizer.batch(torch.zeros(1, 3, *task.tokenizer.image_size))
    assert batch.features.shape[1:] == training_size.features.shape[1:]  # every image: 3-channel training-size patches
    with torch.no_grad():
        probs = model(batch).softmax(-1)  # [images, classes], recomputed from the model
    torch.testing.assert_close(probs.sum(-1), torch.ones(len(paths)))
    for line, row in zip(lines, probs, strict=True):  # "path: class p, class p"
        shown = [part.rsplit(" ", 1) for part in line.split(": ", 1)[1].split(", ")]
        top = row.topk(2)
        assert [name for name, _ in shown] == [task.classes[i] for i in top.indices.tolist()], line
        assert [float(p) for _, p in shown] == pytest.approx(top.values.tolist(), abs=5e-4 + 1e-6), (
            f"{line!r}: not the model's top-2 softmax {top.values.tolist()}")


def _graph_files(tmp_path):
    loops = nx.cycle_graph(5)
    loops.add_edges_from([(0, 0), (3, 3)])
    isolated = nx.path_graph(4)
    isolated.add_nodes_from([10, 11])
    graphs = {
        "one_node": nx.empty_graph(1),
        "self_loops": loops,
        "disconnected": nx.disjoint_union(nx.cycle_graph(4), nx.complete_graph(3)),
        "isolated_nodes": isolated,
        "two_nodes_no_edge": nx.empty_graph(2),
    }
    paths = []
    for name, graph in graphs.items():
        nx.write_graphml(graph, tmp_path / f"{name}.graphml")
        paths.append(tmp_path / f"{name}.graphml")
    return paths


def test_degenerate_graphs_are_classified(runs, tmp_path):
    """One node, self-loops, several components, isolated nodes: all have a Laplacian (padded where
    the graph has fewer eigenvectors than the model uses) and get a prediction."""
    paths = _graph_files(tmp_path)
    result = CliRunner().invoke(main, ["predict", str(runs / "graph"), *map(str, paths), "--top-k", "1"])
    assert result.exit_code == 0, result.output
    assert [line.split(":")[0] for line in result.output.strip().splitlines()] == [str(p) for p in paths]


@pytest.mark.parametrize(("content", "message"), [
    (lambda p: nx.write_graphml(nx.empty_graph(0), p), "the graph has 0 nodes"),
    (lambda p: p.write_text("<graphml><graph><node id='a'/>"), "not a readable graphml graph file"),
    # a 400 kB file of 32,769 nodes; 200,000 (2.5 MB) ran past 5 minutes: attention costs N² per layer
    (lambda p: nx.write_graphml(nx.path_graph(MAX_GRAPH_NODES + 1), p),
     f"bad.graphml: the graph has {MAX_GRAPH_NODES + 1} nodes, more than the {MAX_GRAPH_NODES} a graph may have"),
])
def test_graphs_without_nodes_or_unparsable_are_one_line_errors(runs, tmp_path, content, message):
    path = tmp_path / "bad.graphml"
    content(path)
    result = CliRunner().invoke(main, ["predict", str(runs / "graph"), str(path)])
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
