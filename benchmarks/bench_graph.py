"""Graph benchmarks: eigensolvers as graphs grow, and dense vs sparse attention on large graphs.

Two parts, each rewriting its own section of ``benchmarks/results/graph.md``:

* ``--part attention`` (default): one training step (forward + backward + AdamW) of the
  graph task's model (2 layers, d=32, 4 heads, graph token, no positions: they cost
  tokenization, not attention) on one sparse graph of 1,000 / 5,000 / 20,000 nodes
  (Watts-Strogatz, mean degree 6, nodes relabelled at random so their order carries no
  locality), for each of :data:`METHODS`: dense full attention (what the task did), dense
  neighbours-only attention (a bool mask, or learned per-head biases, which make it a
  float ``[1, 4, N, N]`` bias), and the sparse kernel (the same function as the dense
  neighbours-only mask). Step times: ``--repeats`` rounds, each timing one step of every
  method in turn (interleaved, so load drift hits all alike), in one process per size;
  median and min-max; dense step times above ``--max-dense`` nodes are estimated (N^2).
  Peak memory, at every size: a fresh process per (size, method) runs two steps under an
  address-space limit (``--memory-limit``, so dense attention fails with an
  out-of-memory error instead of swapping the machine) and reports its peak RSS.
* ``--part tokenize``: graphs/s of the dense and the sparse eigensolver (where
  ``laplacian.DENSE_MAX_NODES`` comes from).

Usage (alone on the machine; a few minutes)::

    OMP_NUM_THREADS=1 python benchmarks/bench_graph.py [--sizes 1000,5000,20000] [--repeats 5]
    OMP_NUM_THREADS=1 python benchmarks/bench_graph.py --part tokenize
"""

from __future__ import annotations

import os

# One BLAS / OpenMP thread: on a shared CPU, idle-spinning BLAS threads make a 50x50 eigh
# 100x slower; set before numpy and torch load their thread pools.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from harness import Machine, interleave  # noqa: E402

from tokformer.tasks.graph import GraphConfig, GraphTask  # noqa: E402
from tokformer.tokenizers.graph import GraphTokenizer  # noqa: E402
from tokformer.tokenizers.laplacian import DENSE_MAX_NODES  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "graph.md"
#: method -> (graph-task options, table label); "sparse" ones are timed at every size
METHODS: dict[str, tuple[dict[str, object], str]] = {
    "full": ({"attention": "full"}, "dense, full"),
    "mask": ({"attention": "mask"}, "dense, neighbours (bool mask)"),
    "mask-learned": ({"attention": "mask", "learn_bias": True}, "dense, neighbours, learned biases"),
    "sparse": ({"attention": "sparse"}, "sparse, neighbours"),
    "sparse-learned": ({"attention": "sparse", "learn_bias": True}, "sparse, neighbours, learned biases"),
}
GiB = 2**30


# ---- attention: dense vs sparse -------------------------------------------------------------


def sparse_graph(n: int) -> nx.Graph:
    """Watts-Strogatz (mean degree 6), relabelled at random: no locality in node order."""
    graph = nx.connected_watts_strogatz_graph(n, 6, 0.1, seed=0)
    order = np.random.default_rng(0).permutation(n)
    return nx.relabel_nodes(graph, dict(enumerate(order.tolist())))


def build(n: int, method: str) -> Callable[[], None]:
    """A ready training step of the graph task's model on one ``n``-node graph."""
    torch.manual_seed(0)
    task = GraphTask(GraphConfig(d_model=32, n_heads=4, n_layers=2, positions="none", **METHODS[method][0]))
    task.classes = ["a", "b"]
    graph = sparse_graph(n)
    batch = task.tokenizer.collate([task.tokenizer.encode(graph)])
    model = task.build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    labels = torch.zeros(1, dtype=torch.long)

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(batch), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def peak_rss() -> float:
    """Peak resident memory of this process so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def child_time(n: int, methods: list[str], repeats: int) -> dict:
    steps = {m: build(n, m) for m in methods}
    timings = interleave({m: lambda _, step=step: step() for m, step in steps.items()}, repeats)
    return {"times": {m: list(t.seconds) for m, t in timings.items()}}


def child_memory(n: int, method: str, limit: float) -> dict:
    resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
    try:
        step = build(n, method)
        step()
        step()
    except (MemoryError, RuntimeError) as error:  # torch reports a failed allocation as RuntimeError
        return {"oom": str(error).splitlines()[0][:120]}
    return {"peak": peak_rss()}


def run_child(args: list[str], timeout: float) -> dict:
    """Run this script as a child (``--child ...``) and parse the JSON line it prints last."""
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True,
                         timeout=timeout, check=False)
    if out.returncode != 0:
        return {"oom": f"exit {out.returncode}: {(out.stderr.strip().splitlines() or [''])[-1][:120]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def step_cell(times: list[float] | None, n: int, measured: dict[int, float]) -> str:
    """Median (min-max) seconds; for a dense method not run, its time scaled as N^2 from the
    largest size it was measured at."""
    if times:
        return f"{statistics.median(times):,.3f} ({min(times):,.3f}-{max(times):,.3f})"
    if not measured:
        return "not run"
    base = max(measured)
    return f"not run; ~{measured[base] * (n / base) ** 2:,.0f} estimated (N^2 from {base:,})"


def memory_cell(mem: dict) -> str:
    """Peak GiB, or the out-of-memory error."""
    return f"out of memory ({mem['oom']})" if "oom" in mem else f"{mem['peak'] / GiB:,.2f}"


def attention_part(args: argparse.Namespace, machine: Machine) -> str:
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    edges = {n: sparse_graph(n).number_of_edges() for n in sizes}
    for n in sizes:
        methods = [m for m in METHODS if m.startswith("sparse") or n <= args.max_dense]
        timing = run_child(["time", str(n), ",".join(methods), str(args.repeats)], timeout=3600)["times"]
        memory = {m: run_child(["memory", str(n), m, str(args.memory_limit * GiB)], timeout=3600) for m in METHODS}
        for method in METHODS:
            times = timing.get(method)
            mem = memory[method]
            rows.append((n, method, times, mem))
            print(f"n={n} {method}: times {times} memory {mem}", flush=True)
    sparse_time = {n: statistics.median(t) for n, m, t, _ in rows if m == "sparse" and t}
    lines = [
        "## Attention: dense vs sparse",
        "",
        machine.line(f"{torch.get_num_threads()} torch thread(s)"),
        "",
        "One training step (forward + backward + AdamW) of the graph task's model (2 layers, d=32, 4 heads, "
        "graph token, no positions) on one Watts-Strogatz graph (mean degree 6, "
        f"nodes in random order). Times: median (min-max) of {args.repeats} interleaved repeats after a warm-up. "
        "Memory: peak RSS of a fresh process running two steps (about 0.7 GiB of it is Python and torch), "
        f"under a {args.memory_limit:g} GiB address-space limit.",
        "",
        "| nodes | edges | attention | step (s) | vs sparse | peak memory (GiB) |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for n, method, times, mem in rows:
        measured = {size: statistics.median(t) for size, m, t, _ in rows if m == method and t}
        ratio = f"{statistics.median(times) / sparse_time[n]:,.1f}x" if times else ""
        lines.append(f"| {n:,} | {edges[n]:,} | {METHODS[method][1]} | {step_cell(times, n, measured)} | {ratio} "
                     f"| {memory_cell(mem)} |")
    return "\n".join(lines) + "\n"


# ---- eigensolvers --------------------------------------------------------------------------


def tokenize_part(args: argparse.Namespace, machine: Machine) -> str:
    rows = []
    for n in (int(s) for s in args.tokenize_sizes.split(",")):
        graph = nx.connected_watts_strogatz_graph(n, 4, 0.1, seed=0)
        solvers = ["sparse"] if n > args.max_dense_solver else ["dense", "sparse"]
        tokenizers = {solver: GraphTokenizer(k=args.k, solver=solver) for solver in solvers}
        timings = interleave({s: lambda _, t=t, g=graph: t.batch([g]) for s, t in tokenizers.items()}, args.repeats)
        rates: dict[str, float | None] = {s: 1.0 / timings[s].median if s in timings else None
                                          for s in ("dense", "sparse")}
        faster = "sparse" if rates["dense"] is None or rates["sparse"] > rates["dense"] else "dense"
        rows.append((n, graph.number_of_edges(), rates["dense"], rates["sparse"], faster))
        print(f"n={n}: graphs/s {rates}", flush=True)
    fmt = lambda r: "skipped" if r is None else f"{r:,.1f}"  # noqa: E731
    lines = [
        "## Eigensolvers",
        "",
        machine.line(f"{torch.get_num_threads()} torch thread(s)"),
        "",
        f"Graph tokenizer, Watts-Strogatz graphs (mean degree 4), k={args.k} eigenvectors; auto picks dense up to "
        f"{DENSE_MAX_NODES} nodes.",
        "",
        "| nodes | edges | tokenize, dense eigh (graphs/s) | tokenize, sparse eigsh (graphs/s) | faster |",
        "|---:|---:|---:|---:|---|",
    ]
    for n, m, dense, sparse, faster in rows:
        lines.append(f"| {n:,} | {m:,} | {fmt(dense)} | {fmt(sparse)} | {faster} |")
    return "\n".join(lines) + "\n"


# ---- report ----------------------------------------------------------------------------------


def write_section(section: str) -> None:
    """Replace the section with the same ``## `` heading in the results file (or append it)."""
    heading = section.splitlines()[0]
    old = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    parts = [p for p in ("## " + s for s in old.split("\n## ")[1:]) if not p.startswith(heading)]
    head = old.split("\n## ")[0] if old.startswith("# ") else "# Graph benchmarks (`benchmarks/bench_graph.py`)\n"
    RESULTS.write_text("\n".join([head.rstrip() + "\n", *sorted([*parts, section])]), encoding="utf-8")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, n = sys.argv[2], int(sys.argv[3])
        result = (child_time(n, sys.argv[4].split(","), int(sys.argv[5])) if kind == "time"
                  else child_memory(n, sys.argv[4], float(sys.argv[5])))
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("attention", "tokenize"), default="attention")
    parser.add_argument("--sizes", default="1000,5000,20000", help="attention part: graph sizes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-dense", type=int, default=5000,
                        help="attention part: time dense attention up to this size (memory is measured at every size)")
    parser.add_argument("--memory-limit", type=float, default=16.0, help="GiB of address space per child process")
    parser.add_argument("--tokenize-sizes", default="50,100,200,300,500,1000,2000,5000")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--max-dense-solver", type=int, default=3000, help="tokenize part: skip dense eigh above")
    args = parser.parse_args()
    machine = Machine(("torch", "numpy", "scipy", "networkx"))
    section = attention_part(args, machine) if args.part == "attention" else tokenize_part(args, machine)
    print(section)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_section(section)


if __name__ == "__main__":
    main()
