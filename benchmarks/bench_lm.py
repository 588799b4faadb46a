"""Decoder-only LM: training throughput vs a torch.nn reference, KV-cache speedup, and MFU.

Run: ``python benchmarks/bench_lm.py [--repeats 5] [--profile] [--threads N]``. Prints a
Markdown table and writes it to ``benchmarks/results/lm.md`` (``lm-Nthreads.md`` with
``--threads``: on a machine shared with other jobs, fewer threads than cores can be faster).

Like with like: the reference is ``nn.TransformerEncoder`` of pre-norm GELU
``nn.TransformerEncoderLayer``s with a causal mask (and the ``is_causal`` hint, so it gets
the same fused SDPA kernel), wrapped in the same token + learned-position embedding and
tied output layer; same d_model, heads, layers, d_ff, vocab, context, batch, dtype
(fp32), threads, optimizer (AdamW) and data. Parameter counts are checked equal. Every
measurement is the median of interleaved repeats (ours, reference, ours, ...), because
the machine may be shared: the numbers are noisy.

MFU = model FLOPs per second / peak, where the peak is the median rate of a large fp32
matmul measured in the same run, and model FLOPs per token = 6 x (matmul parameters,
the tied output layer included) + 6 x n_layers x context x d_model (attention scores
and their weighted sum, forward and backward, counting only the causal half).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.generation import generate, left_pad
from tokformer.language_model import CausalLM
from tokformer.positional import LearnedPositions
from tokformer.sampling import SamplingConfig
from tokformer.weights import count_parameters, init_weights

RESULTS = Path(__file__).resolve().parent / "results" / "lm.md"  # with --threads N: lm-Nthreads.md


class ReferenceLM(nn.Module):
    """The same model from ``torch.nn`` parts: embeddings -> nn.TransformerEncoder -> tied head."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, d_ff: int, context: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(context, d)
        layer = nn.TransformerEncoderLayer(d, heads, d_ff, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tokens.weight
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, ids: Tensor) -> Tensor:  # [B, N] -> [B, N, V]
        n = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(n, device=ids.device))
        return self.head(self.encoder(x, mask=self.causal[:n, :n], is_causal=True))


def ours(vocab: int, d: int, heads: int, layers: int, d_ff: int, context: int) -> CausalLM:
    cfg = TransformerConfig(d_model=d, n_heads=heads, n_layers=layers, d_ff=d_ff, dropout=0.0, activation="gelu",
                            norm_first=True)
    model = CausalLM(Embedder(d, vocab_size=vocab, position=LearnedPositions(d, context)), cfg, vocab)
    init_weights(model, layers)
    return model


def ours_forward(model: CausalLM) -> Callable[[Tensor], Tensor]:
    def forward(ids: Tensor) -> Tensor:
        positions = torch.arange(ids.shape[1]).expand_as(ids)
        return model(TokenBatch(ids=ids, mask=torch.ones_like(ids, dtype=torch.bool), positions=positions))

    return forward


def train_seconds(forward: Callable[[Tensor], Tensor], opt: torch.optim.Optimizer, data: Tensor, steps: int) -> float:
    """Seconds per training step (forward, backward, AdamW) on ``data`` ``[B, N+1]``."""
    start = time.perf_counter()
    for _ in range(steps):
        logits = forward(data[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), data[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def matmul_peak(n: int, repeats: int) -> float:
    """Median FLOP/s of an ``n x n`` fp32 matmul: this machine's practical peak."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        rates.append(2 * n**3 / (time.perf_counter() - start))
    return statistics.median(rates)


def model_flops_per_token(model: nn.Module, layers: int, context: int, d: int) -> float:
    matmul_params = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "position" not in n)
    return 6 * matmul_params + 6 * layers * context * d


def bench_training(args: argparse.Namespace) -> dict[str, float]:
    dims = (args.vocab, args.d_model, args.heads, args.layers, args.d_ff, args.context)
    torch.manual_seed(0)
    mine, ref = ours(*dims), ReferenceLM(*dims)
    assert count_parameters(mine) == count_parameters(ref), (count_parameters(mine), count_parameters(ref))
    data = torch.randint(0, args.vocab, (args.batch, args.context + 1))
    runs = {"ours": (ours_forward(mine), torch.optim.AdamW(mine.parameters(), 1e-4)),
            "reference": (ref, torch.optim.AdamW(ref.parameters(), 1e-4))}
    for forward, opt in runs.values():
        train_seconds(forward, opt, data, 1)  # warm up allocator and kernels
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, (forward, opt) in runs.items():
            times[name].append(train_seconds(forward, opt, data, args.steps))
    if args.profile:
        profile(runs, data)
    tokens = args.batch * args.context
    step = {name: statistics.median(t) for name, t in times.items()}
    return {"ours_tok_s": tokens / step["ours"], "ref_tok_s": tokens / step["reference"],
            "flops_per_step": model_flops_per_token(mine, args.layers, args.context, args.d_model) * tokens,
            "ours_step_s": step["ours"], "params": count_parameters(mine)}


def profile(runs: dict, data: Tensor) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for name, (forward, opt) in runs.items():
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            train_seconds(forward, opt, data, 1)
        print(f"\n### profile: {name}\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def bench_generation(args: argparse.Namespace) -> dict[str, float]:
    torch.manual_seed(0)
    model = ours(args.vocab, args.gen_d_model, args.gen_heads, args.gen_layers, 4 * args.gen_d_model,
                 args.gen_tokens + args.gen_prompt).eval()
    ids, mask = left_pad([torch.randint(0, args.vocab, (args.gen_prompt,)).tolist()])
    greedy = SamplingConfig(temperature=0)
    times: dict[bool, list[float]] = {True: [], False: []}
    outputs = {}
    for _ in range(args.gen_repeats):
        for cache in (True, False):
            start = time.perf_counter()
            outputs[cache] = generate(model, ids, mask, max_new_tokens=args.gen_tokens, sampling=greedy,
                                      use_cache=cache)
            times[cache].append(time.perf_counter() - start)
    assert outputs[True] == outputs[False], "cached and uncached greedy generation differ"
    return {"cached_tok_s": args.gen_tokens / statistics.median(times[True]),
            "uncached_tok_s": args.gen_tokens / statistics.median(times[False])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-ff", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="training steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--matmul", type=int, default=2048, help="side of the peak-measuring matmul")
    parser.add_argument("--gen-d-model", type=int, default=256)
    parser.add_argument("--gen-heads", type=int, default=4)
    parser.add_argument("--gen-layers", type=int, default=4)
    parser.add_argument("--gen-prompt", type=int, default=16)
    parser.add_argument("--gen-tokens", type=int, default=512)
    parser.add_argument("--gen-repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print torch.profiler tables of one training step")
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: all cores]")
    args = parser.parse_args()

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    peak = matmul_peak(args.matmul, 2 * args.repeats + 1)
    train = bench_training(args)
    peak = statistics.median([peak, matmul_peak(args.matmul, 2 * args.repeats + 1)])  # before and after
    gen = bench_generation(args)
    mfu = train["flops_per_step"] / train["ours_step_s"] / peak
    dims = (f"d_model {args.d_model}, {args.heads} heads, {args.layers} layers, d_ff {args.d_ff}, GELU, pre-norm, "
            f"vocab {args.vocab} (tied), context {args.context}, batch {args.batch}, fp32, {threads} threads, "
            f"{train['params'] / 1e6:.1f}M parameters")
    rows = [
        ("training tokens/s (fwd+bwd+AdamW)", f"{train['ours_tok_s']:.0f}",
         f"{train['ref_tok_s']:.0f} (nn.TransformerEncoder)", f"{train['ours_tok_s'] / train['ref_tok_s']:.2f}x",
         ">= 1.2x"),
        (f"generation tokens/s, {args.gen_tokens} new, batch 1", f"{gen['cached_tok_s']:.1f} (KV cache)",
         f"{gen['uncached_tok_s']:.1f} (no cache)", f"{gen['cached_tok_s'] / gen['uncached_tok_s']:.1f}x", ">= 5x"),
        ("MFU (training, ours)", f"{100 * mfu:.0f}%", f"peak {peak / 1e9:.0f} GFLOP/s ({args.matmul}^3 fp32 matmul)",
         "", ">= 50%"),
    ]
    table = ["| measurement | tokformer | other | ratio | target |", "|---|---|---|---|---|"]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join([
        f"Training model: {dims}. Generation model: d_model {args.gen_d_model}, {args.gen_heads} heads, "
        f"{args.gen_layers} layers, prompt {args.gen_prompt}, greedy (cached and uncached outputs checked equal).",
        f"Medians of {args.repeats} interleaved repeats ({args.gen_repeats} for generation) on a shared machine: "
        "noisy.", "", *table, ""])
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    out = RESULTS if args.threads is None else RESULTS.with_name(f"lm-{threads}threads.md")
    out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
