"""Task ``graph`` end to end: library API, in-memory and file data, CLI errors, predict."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
import torch
from click.testing import CliRunner

from tokformer.cli import main
from tokformer.engine import evaluate, load_run, resolve_config, train
from tokformer.errors import ConfigError
from tokformer.tasks.graph import GraphConfig, GraphTask, register_graphs
from tokformer.tasks.graph_data import cycles_dataset

TINY = {"d_model": 16, "n_heads": 2, "n_layers": 1, "k": 4, "steps": 3, "batch_size": 4, "eval_every": 3,
        "log_every": 3, "warmup_steps": 0, "device": "cpu"}


def _molecules() -> tuple[list[nx.Graph], list[str]]:
    graphs, labels = [], []
    for i in range(10):
        graph = nx.cycle_graph(5 + i % 3) if i % 2 else nx.path_graph(5 + i % 3)
        nx.set_node_attributes(graph, {n: "CNO"[(n + i) % 3] for n in graph}, "atom")
        nx.set_node_attributes(graph, {n: float(n) / 10 for n in graph}, "charge")
        graphs.append(graph)
        labels.append("ring" if i % 2 else "chain")
    return graphs, labels


@pytest.mark.slow
def test_train_in_memory_graphs_with_attributes_then_predict(tmp_path: Path) -> None:
    graphs, labels = _molecules()
    register_graphs("test-molecules", graphs, labels)
    result = train("graph", quiet=True, run_dir=str(tmp_path / "run"), data="test-molecules", folds=2,
                   node_features="attributes", node_attributes=["atom", "charge"], attention="bias", **TINY)
    assert result.step == 3
    # the accuracy the run reports is the one its saved model scores on the held-out fold
    rescored = evaluate(tmp_path / "run", checkpoint="latest", device="cpu", quiet=True)
    assert rescored.metrics["accuracy"] == pytest.approx(result.metrics["accuracy"])
    task, model = load_run(tmp_path / "run", "latest")
    assert task.classes == ["chain", "ring"] and task.tokenizer.categories == {"atom": ["C", "N", "O"]}
    ranked = task.predict(model, graphs[:2], top_k=2)
    assert [len(r) for r in ranked] == [2, 2] and {r[0][0] for r in ranked} <= {"chain", "ring"}
    assert sum(p for _, p in ranked[0]) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.slow
def test_cli_train_and_predict_on_graph_files(tmp_path: Path) -> None:
    data = cycles_dataset(per_class=3, seed=0)
    for i, (graph, label) in enumerate(zip(data.graphs, data.labels, strict=True)):
        folder = tmp_path / "data" / data.classes[label]
        folder.mkdir(parents=True, exist_ok=True)
        nx.write_graphml(graph, folder / f"{i}.graphml")
    runner = CliRunner()
    args = ["train", "graph", "-q", "--run-dir", str(tmp_path / "run"), "-o", f"data={tmp_path / 'data'}",
            "-o", "folds=3", "-o", "pool=mean"]
    args += [x for key, value in TINY.items() for x in ("-o", f"{key}={value}")]
    out = runner.invoke(main, args)
    assert out.exit_code == 0, out.output
    sample = str(tmp_path / "data" / "one-cycle" / "0.graphml")
    out = runner.invoke(main, ["predict", str(tmp_path / "run"), sample, "--top-k", "2"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"{sample}: ") and "two-cycles" in out.output


@pytest.mark.parametrize(
    ("option", "message"),
    [("data=/no/such/dir", "not an existing path nor a built-in"), ("fold=5", "fold must be in 0..4"),
     ("pool=max", "pool")],
)
def test_cli_errors_are_one_line(option: str, message: str, tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["train", "graph", "-q", "-o", option, "-o", "steps=1",
                                    "--run-dir", str(tmp_path / "run")])
    assert out.exit_code == 2 and message in out.output
    assert "Traceback" not in out.output and len(out.output.strip().splitlines()) == 1


def test_bad_graph_file_is_a_one_line_cli_error(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.gml").write_text("not a graph")
    out = CliRunner().invoke(main, ["train", "graph", "-q", "-o", f"data={tmp_path}", "-o", "steps=1",
                                    "--run-dir", str(tmp_path / "run")])
    assert out.exit_code == 2 and "x.gml: not a readable gml graph file" in out.output


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="folds must be >= 2"):
        resolve_config("graph", folds=1)


def test_signs_flip_in_training_steps_only() -> None:
    task = GraphTask(GraphConfig(data="cycles", per_class=4, folds=2, d_model=16, n_heads=2, n_layers=1, k=4))
    dataset = task.train_dataset()
    batch = task.collate([dataset[i] for i in range(len(dataset))], train=True)
    model = task.build_model()
    calls: list[torch.Tensor] = []
    model.register_forward_pre_hook(lambda _module, args: calls.append(args[0].positions))
    model.eval()
    task.step(model, batch), task.step(model, batch)
    model.train()
    task.step(model, batch)
    assert torch.equal(calls[0], batch["tokens"].positions) and torch.equal(calls[1], calls[0])
    assert not torch.equal(calls[2], calls[0]) and torch.equal(calls[2].abs(), calls[0].abs())


def test_registers_and_adjacency_bias_keep_the_model_permutation_invariant() -> None:
    """Registers are padded into the adjacency bias; relabelling nodes must not change the logits."""
    torch.manual_seed(0)
    data = cycles_dataset(per_class=2, seed=0)
    graphs = [nx.lollipop_graph(4, 5), nx.path_graph(9)]  # not regular: node degrees tell nodes apart
    cfg = GraphConfig(d_model=16, n_heads=2, n_layers=2, positions="none", attention="bias", n_registers=3,
                      pool="mean", layer_scale=0.5, norm="rms")
    task = GraphTask(cfg)
    task.classes = data.classes
    task.tokenizer = cfg.tokenizer().fit(graphs)
    model = task.build_model().eval()
    assert model.encoder.registers.shape == (1, 3, 16)
    graph = graphs[0]
    relabelled = nx.relabel_nodes(graph, dict(zip(graph, reversed(list(graph)), strict=True)))
    relabelled = nx.convert_node_labels_to_integers(relabelled, ordering="sorted")
    with torch.no_grad():
        a = model(task.tokenizer.batch([graph, graphs[1]]))
        b = model(task.tokenizer.batch([relabelled, graphs[1]]))
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a[0], a[1])  # different graphs do get different logits
