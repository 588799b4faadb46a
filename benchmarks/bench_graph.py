"""Graph tokenizer benchmark: tokenization throughput and training-step time as graphs grow.

For sparse small-world graphs (Watts-Strogatz, mean degree 4) of n = 50 ... 5,000 nodes,
measures graphs/s of :meth:`GraphTokenizer.batch` with the dense (``numpy.linalg.eigh``)
and the sparse (``scipy.sparse.linalg.eigsh``, shift-invert) eigensolver, and the time of
one forward + backward + AdamW step of a small graph Transformer on one graph. Shows
where the two solvers trade places (what ``laplacian.DENSE_MAX_NODES`` is set from).
Prints a Markdown table and writes ``benchmarks/results/graph.md``.

Usage::

    python benchmarks/bench_graph.py [--sizes 50,100,...] [--k 8] [--max-dense 2000]
"""

from __future__ import annotations

import os

# One BLAS / OpenMP thread: on a shared CPU, idle-spinning BLAS threads make a 50x50 eigh
# 100x slower; set before numpy and torch load their thread pools.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import networkx as nx  # noqa: E402
import torch  # noqa: E402

from tokformer.classifier import EncoderClassifier  # noqa: E402
from tokformer.config import TransformerConfig  # noqa: E402
from tokformer.heads import ClassificationHead  # noqa: E402
from tokformer.tokenizers.graph import GraphTokenizer  # noqa: E402
from tokformer.tokenizers.laplacian import DENSE_MAX_NODES  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "graph.md"


def seconds_per_call(fn: Callable[[], object], budget: float = 1.0, max_reps: int = 20) -> float:
    """Median wall time of ``fn`` over as many calls as fit in ``budget`` seconds (at least 1, at most max_reps)."""
    times: list[float] = []
    while len(times) < max_reps and (not times or sum(times) < budget):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def train_step_seconds(graph: nx.Graph, k: int) -> float:
    tokenizer = GraphTokenizer(k=k)
    batch = tokenizer.batch([graph])
    cfg = TransformerConfig(d_model=32, n_heads=4, n_layers=2, dropout=0.0)
    model = EncoderClassifier(tokenizer.build_embedder(32), cfg, ClassificationHead(32, 2, pool="cls", n_prefix=1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    labels = torch.zeros(1, dtype=torch.long)

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(batch), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step()  # warm-up
    return seconds_per_call(step, budget=2.0, max_reps=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,100,200,300,500,1000,2000,5000")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--max-dense", type=int, default=3000, help="skip the dense solver above this size")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        graph = nx.connected_watts_strogatz_graph(n, 4, 0.1, seed=0)
        rates = {}
        for solver in ("dense", "sparse"):
            if solver == "dense" and n > args.max_dense:
                rates[solver] = None
                continue
            tokenizer = GraphTokenizer(k=args.k, solver=solver)
            rates[solver] = 1.0 / seconds_per_call(lambda t=tokenizer, g=graph: t.batch([g]))
        faster = "sparse" if rates["dense"] is None or rates["sparse"] > rates["dense"] else "dense"
        step_ms = 1000 * train_step_seconds(graph, args.k)
        rows.append((n, graph.number_of_edges(), rates["dense"], rates["sparse"], faster, step_ms))
        print(f"n={n}: graphs/s {rates}; step {step_ms:.0f} ms", flush=True)
    fmt = lambda r: "skipped" if r is None else f"{r:,.1f}"  # noqa: E731
    lines = [
        f"Graph tokenizer, Watts-Strogatz graphs (mean degree 4), k={args.k} eigenvectors; "
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads; auto picks dense up to {DENSE_MAX_NODES} nodes.",
        "Training step: forward + backward + AdamW of a 2-layer, d=32 graph Transformer on one graph "
        "(full attention, graph token).",
        "",
        "| nodes | edges | tokenize, dense eigh (graphs/s) | tokenize, sparse eigsh (graphs/s) | faster"
        " | train step (ms) |",
        "|---:|---:|---:|---:|---|---:|",
    ]
    for n, m, dense, sparse, faster, step_ms in rows:
        lines.append(f"| {n:,} | {m:,} | {fmt(dense)} | {fmt(sparse)} | {faster} | {step_ms:,.0f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
