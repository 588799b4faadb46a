"""``torch.compile`` vs eager for training the task models: graph breaks, compile time, step time.

Run: ``python benchmarks/bench_compile.py [--quick] [--threads 1 2] [--models lm vit translate]``.
Writes ``benchmarks/results/compile.md``. The default run takes about 5 minutes on 2 idle
cores, most of it compiling (3 models x 2 thread counts, 15-30 s each).

Models, each built by its task (the model the engine trains):

* ``lm``: :func:`~tokformer.tasks.lm.build_lm` (d_model 512, 8 heads, 4 layers, context
  256, the task's default vocabulary of 1,024 and dropout), on random token windows;
* ``vit``: :class:`~tokformer.tasks.classify.ClassifyTask`'s ``build_model`` (the task's
  local patch tokenizer, mean pooling, sincos positions; ViT-Tiny width as in
  ``bench_vit.py``: d 192, 3 heads, 6 layers, 64 px, patch 8), on random images;
* ``translate``: :class:`~tokformer.tasks.translate.TranslateTask`'s ``build_model``
  (d 256, 4 heads, 3 + 3 layers, its BPE), on random sentence pairs of random lengths,
  padded as the task pads them.

Graph breaks: :func:`torch._dynamo.explain` of the task's training ``step`` (forward +
loss, what the engine runs) and of the model's forward alone (what the engine compiles:
``torch.compile(model)``); every break is listed with its reason and place.

Timing: a training step = the task's ``step`` (forward + loss) + backward + AdamW step,
eager against ``torch.compile(model)`` (inductor, default mode) exactly as the engine
compiles, on two copies of the same weights. The compiled step is warmed up first (its
first call's time is the compile time, reported apart), then the two are timed in
interleaved rounds, each round on a new batch of the same shape (a new shape would
recompile). Every model and thread count compiles afresh (``torch._dynamo.reset``, an empty
inductor cache): inductor's CPU kernels fix their thread count when compiled. On CUDA, when present,
one run on the GPU instead.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from harness import Machine, Timing, interleave, markdown_table, ratio_cell, thread_counts, torch_threads, write_results
from torch import nn

from tokformer.engine.data import to_device
from tokformer.runtime.task import Task

LM_TARGET = 1.3


@dataclass(frozen=True)
class Sizes:
    """Every size the run uses; printed into the results file."""

    lm_d: int = 512
    lm_heads: int = 8
    lm_layers: int = 4
    lm_context: int = 256
    lm_batch: int = 4
    vit_d: int = 192
    vit_heads: int = 3
    vit_layers: int = 6
    vit_image: int = 64
    vit_patch: int = 8
    vit_batch: int = 32
    tr_d: int = 256
    tr_heads: int = 4
    tr_layers: int = 3
    tr_batch: int = 32
    tr_len: int = 24  # longest sentence per side; the others are shorter, padded as the task pads
    repeats: int = 5

    def describe(self, name: str) -> str:
        return {
            "lm": f"lm: d {self.lm_d}, {self.lm_heads} heads, {self.lm_layers} layers, batch {self.lm_batch} x "
                  f"{self.lm_context} tokens",
            "vit": f"vit: d {self.vit_d}, {self.vit_heads} heads, {self.vit_layers} layers, {self.vit_image} px, "
                   f"patch {self.vit_patch}, batch {self.vit_batch}",
            "translate": f"translate: d {self.tr_d}, {self.tr_heads} heads, {self.tr_layers} + {self.tr_layers} "
                         f"layers, batch {self.tr_batch}, up to {self.tr_len} tokens a side",
        }[name]


QUICK = Sizes(lm_d=64, lm_heads=4, lm_layers=2, lm_context=32, lm_batch=2, vit_d=48, vit_heads=3, vit_layers=2,
              vit_image=32, vit_batch=4, tr_d=32, tr_heads=2, tr_layers=1, tr_batch=4, tr_len=8)


@dataclass
class Case:
    """A task, its model, and a fresh batch per round (one shape throughout)."""

    task: Task
    model: nn.Module
    batch: Callable[[int], Any]
    forward: Callable[[nn.Module, Any], Any]  # what the engine's compiled module is called with


# ----------------------------------------------------------------------------- the task models


def lm_case(s: Sizes) -> Case:
    from tokformer.tasks.lm import LMConfig, LMTask, build_lm
    from tokformer.tokenizers.bpe import BPETokenizer

    cfg = LMConfig(data="", d_model=s.lm_d, n_heads=s.lm_heads, n_layers=s.lm_layers, context_len=s.lm_context)
    cfg = replace(cfg, embedding_rows=cfg.vocab_size)  # a byte-level stand-in for the task's trained BPE
    task = LMTask(cfg)
    model = build_lm(BPETokenizer({bytes([b]): b for b in range(256)}, []), cfg)

    def batch(round_: int) -> torch.Tensor:  # [B, context + 1] packed windows, as the task's corpus gives
        return torch.randint(0, cfg.vocab_size, (s.lm_batch, s.lm_context + 1), generator=_seeded(round_))

    def forward(m: nn.Module, windows: torch.Tensor) -> Any:
        from tokformer.batch import TokenBatch

        return m(TokenBatch.unpadded(windows[:, :-1]), padded=False)

    return Case(task, model, batch, forward)


def vit_case(s: Sizes) -> Case:
    from tokformer.tasks.classify import ClassifyConfig, ClassifyTask

    cfg = ClassifyConfig(image_size=s.vit_image, patch_size=s.vit_patch, d_model=s.vit_d, n_heads=s.vit_heads,
                         n_layers=s.vit_layers)
    task = ClassifyTask(cfg)
    task.classes = [f"class{i}" for i in range(10)]
    model = task.build_model()

    def batch(round_: int) -> dict[str, Any]:
        g = _seeded(round_)
        images = torch.randint(0, 256, (s.vit_batch, 3, s.vit_image, s.vit_image), dtype=torch.uint8, generator=g)
        labels = torch.randint(0, len(task.classes), (s.vit_batch,), generator=g).tolist()
        return task.collate(list(zip(images, labels, strict=True)), True)

    return Case(task, model, batch, lambda m, b: m(b["tokens"]))


def translate_case(s: Sizes) -> Case:
    from tokformer.tasks.translate import TranslateConfig, TranslateTask

    cfg = TranslateConfig(train_size=256, eval_size=16, bpe_sample=256, d_model=s.tr_d, n_heads=s.tr_heads,
                          encoder_layers=s.tr_layers, decoder_layers=s.tr_layers)
    task = TranslateTask(cfg)
    vocab = task.tokenizers()[1].vocab_size
    model = task.build_model()

    def batch(round_: int) -> Any:
        """Random pairs; the first of each side is the longest, so every round has one shape."""
        g = _seeded(round_)
        lengths = torch.randint(s.tr_len // 2, s.tr_len + 1, (2, s.tr_batch), generator=g)
        lengths[:, 0] = s.tr_len
        pairs = [(_ids(int(a), vocab, g), _ids(int(b), vocab, g)) for a, b in lengths.t()]
        return task.collate(pairs, True)

    return Case(task, model, batch, lambda m, b: m(b.src, b.tgt_in))


def _ids(n: int, vocab: int, g: torch.Generator) -> list[int]:
    return torch.randint(3, vocab, (n,), generator=g).tolist()  # not the specials (ids 0-2)


def _seeded(round_: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + round_)


BUILDERS: dict[str, Callable[[Sizes], Case]] = {"lm": lm_case, "vit": vit_case, "translate": translate_case}


# ----------------------------------------------------------------------------- graph breaks


@dataclass
class Breaks:
    graphs: int
    count: int
    reasons: list[str]

    def cell(self) -> str:
        return f"{self.count} ({self.graphs} graph{'s' * (self.graphs != 1)})"


def graph_breaks(fn: Callable[..., Any], *args: Any) -> Breaks:
    """``torch._dynamo.explain``'s graph and break counts, and each break's reason and place."""
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(fn)(*args)
    reasons = []
    for b in explanation.break_reasons:
        where = "; ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in b.user_stack[-2:]) or "no user frame"
        reasons.append(f"{b.reason.splitlines()[0]} at {where}")
    torch._dynamo.reset()
    # a break whose remainder holds no op (an .item() at the very end) is not in graph_break_count
    return Breaks(explanation.graph_count, max(explanation.graph_break_count, len(reasons)), reasons)


def step_loss(case: Case) -> Callable[[nn.Module, Any], torch.Tensor]:
    return lambda model, batch: case.task.step(model, batch).loss


# ----------------------------------------------------------------------------- timing


@dataclass
class Result:
    name: str
    step_breaks: Breaks
    forward_breaks: Breaks
    compile_seconds: float
    timings: dict[str, Timing]
    loss_diff: float
    profiles: dict[str, str]


def training_step(case: Case, model: nn.Module, batches: dict[int, Any]) -> Callable[[int], torch.Tensor]:
    """Forward + loss (the task's step) + backward + AdamW on the round's batch; returns the loss."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step(round_: int) -> torch.Tensor:
        loss = case.task.step(model, batches[round_]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def warm_up_compiler() -> None:
    """Compile a one-op function once, so the first model's compile time does not also carry
    dynamo's and inductor's one-time start (imports, the C++ toolchain probe)."""
    from torch._inductor.utils import fresh_cache

    with fresh_cache():
        torch.compile(lambda x: x * 2)(torch.ones(4))
    torch._dynamo.reset()


def cold(name: str, s: Sizes, device: torch.device, sync: Callable[[], None], profiles: bool = False) -> Result:
    """:func:`bench_model` in an empty inductor cache: a compile time read from a warm cache (an
    earlier run's, or another thread count's) is no compile time, and inductor's CPU kernels
    carry the thread count they were compiled for, so a cached kernel could run at the wrong one."""
    from torch._inductor.utils import fresh_cache

    with fresh_cache():
        return bench_model(name, s, device, sync, profiles)


def profile_table(step: Callable[[int], torch.Tensor]) -> str:
    """torch.profiler's ops of one step, by self time: where a compiled step gains or loses."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(-1)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)


def bench_model(name: str, s: Sizes, device: torch.device, sync: Callable[[], None],
                profiles: bool = False) -> Result:
    torch.manual_seed(0)
    case = BUILDERS[name](s)
    case.model.to(device)
    batches = {r: to_device(case.batch(r), device) for r in range(-2, s.repeats)}  # -2: compile, -1: warm-up
    probe = batches[-2]
    step_breaks = graph_breaks(step_loss(case), case.model, probe)
    forward_breaks = graph_breaks(case.forward, case.model, probe)
    eager_model = case.model
    compiled_model = torch.compile(copy.deepcopy(case.model))  # as the engine: torch.compile(raw)
    eager, compiled = training_step(case, eager_model, batches), training_step(case, compiled_model, batches)
    sync()
    start = time.perf_counter()
    compiled_loss = compiled(-2)  # compiles forward and backward
    sync()
    compile_seconds = time.perf_counter() - start
    loss_diff = abs(float(eager(-2)) - float(compiled_loss))  # same weights, same batch: same loss
    timings = interleave({"eager": eager, "compiled": compiled}, s.repeats, sync=sync)
    steps = {"eager": eager, "compiled": compiled}
    tables = {kind: profile_table(step) for kind, step in steps.items()} if profiles else {}
    torch._dynamo.reset()
    return Result(name, step_breaks, forward_breaks, compile_seconds, timings, loss_diff, tables)


# ----------------------------------------------------------------------------- report


def table(results: list[Result]) -> str:
    header = ["model", "graph breaks: step / forward", "compile (first step)", "eager step", "compiled step",
              "compiled speedup", "first-step loss diff (a)"]
    rows = [[r.name, f"{r.step_breaks.cell()} / {r.forward_breaks.cell()}", f"{r.compile_seconds:.1f} s",
             r.timings["eager"].seconds_cell(), r.timings["compiled"].seconds_cell(),
             ratio_cell(r.timings["compiled"], r.timings["eager"]), f"{r.loss_diff:.1e}"] for r in results]
    return markdown_table(header, rows)


def summary(results: list[Result], where: str) -> str:
    parts = []
    for r in results:
        speedup = r.timings["eager"].median / r.timings["compiled"].median
        target = f" (target {LM_TARGET}x: {'met' if speedup >= LM_TARGET else 'missed'})" if r.name == "lm" else ""
        parts.append(f"{r.name} trains {speedup:.2f}x as fast compiled{target} after {r.compile_seconds:.0f} s of "
                     f"compiling, with {r.forward_breaks.count} graph break(s) in the compiled forward")
    return f"{where}: " + "; ".join(parts) + "."


def break_list(results: list[Result]) -> list[str]:
    lines = []
    for r in results:
        for kind, breaks in (("step", r.step_breaks), ("forward", r.forward_breaks)):
            lines += [f"- {r.name} {kind}: {reason}" for reason in breaks.reasons]
    return lines or ["- none"]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny models: a smoke test (compiling still takes a while)")
    p.add_argument("--models", nargs="+", choices=sorted(BUILDERS), default=["lm", "vit", "translate"])
    p.add_argument("--threads", type=int, nargs="+",
                   help="CPU torch thread counts, each compiled afresh [default: 1 and all cores]")
    p.add_argument("--repeats", type=int, help="interleaved rounds (>= 5)")
    p.add_argument("--profile", action="store_true",
                   help="add torch.profiler tables of one eager and one compiled step (written to compile-profile.md)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    warm_up_compiler()
    s = QUICK if args.quick else Sizes()
    s = replace(s, repeats=args.repeats) if args.repeats else s
    machine = Machine(("torch",))
    sections: list[tuple[str, list[Result]]] = []
    if torch.cuda.is_available():
        device = torch.device("cuda")
        results = [cold(n, s, device, torch.cuda.synchronize, args.profile) for n in args.models]
        sections.append((f"CUDA ({torch.cuda.get_device_name()})", results))
    else:
        for threads in args.threads or thread_counts():
            with torch_threads(threads):
                results = [cold(n, s, torch.device("cpu"), lambda: None, args.profile) for n in args.models]
            sections.append((f"CPU, {threads} thread(s)", results))
    where = "; ".join(title for title, _ in sections)
    smoke = ["**--quick: tiny smoke-test models; the numbers show overheads, not the models.**", ""]
    text = ["# torch.compile vs eager: training steps of the task models", "", *(smoke if args.quick else []),
            "Command: `" + " ".join(["python benchmarks/bench_compile.py", *sys.argv[1:]]) + "`", "",
            machine.line(where), "", "Models: " + "; ".join(s.describe(n) for n in args.models) + ". fp32, AdamW, "
            f"{s.repeats} interleaved rounds after one warm-up round; median (min-max) seconds per step.", ""]
    for title, results in sections:
        text += [f"## {title}", "", table(results), "", summary(results, title), ""]
    text += ["(a) |eager - compiled| loss of the same first batch on the same weights; the lm task's dropout "
             "(0.1) draws different masks in eager and compiled code, so its losses differ by that much.", "",
             "## Graph breaks (place: the last two user frames)", "", *break_list(sections[0][1]), ""]
    for title, results in sections:
        for r in results:
            text += [f"## Profile: {r.name}, {kind}, {title}\n\n```text\n{table}\n```\n"
                     for kind, table in r.profiles.items()]
    write_results("compile-profile.md" if args.profile else "compile.md", "\n".join(text))


if __name__ == "__main__":
    main()
