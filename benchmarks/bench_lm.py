"""Decoder-only LMs: tokformer vs Hugging Face ``transformers``, same weights, training and cached generation.

Run: ``python benchmarks/bench_lm.py [--quick] [--profile] [--repeats 5]``. Writes
``benchmarks/results/lm.md``: one table at 1 thread and one at all cores. The default run
takes about 11 minutes on 2 idle cores, nearly all of it generating 1,024 tokens (2
libraries x 2 families x 2 thread counts x 5 rounds, ~15 ms a token); ``--gen-tokens 256``
takes about 5.

Like with like. For each family (GPT-2-shaped: learned positions, LayerNorm, GELU, tied
50,257-row head; Llama-shaped: RoPE, RMSNorm, SwiGLU, grouped-query attention, untied
head) ``transformers`` builds a random model (``attn_implementation="sdpa"``, dropout 0),
every parameter is randomised (norm weights and biases too), and tokformer's ``CausalLM``
is built the way the ``lm`` task builds it (:func:`~tokformer.tasks.lm.build_lm`) and
loaded with the converted state (:mod:`tokformer.interop.hf`). Before any timing the
logits must match and the greedy continuations are compared token by token.

* Training step = forward + cross-entropy + backward + AdamW step, fp32, same batch.
  tokformer's loss is the ``lm`` task's own (:func:`~tokformer.tasks.lm.token_nll`);
  Hugging Face's is the same cross-entropy over its logits. Every round draws a new
  batch of random ids, the same for both libraries.
* Generation: batch 1, a short prompt, greedy, KV cache on both sides; Hugging Face's
  ``generate`` with no end-of-sequence token (so it never stops early) against
  :func:`tokformer.generation.generate`. One timed call makes the longest continuation;
  the shorter rows are the time to its N-th token (a callback stamps every step), so a
  256-token row costs no extra run. Each round uses a new prompt.
* MFU: model FLOPs per second of tokformer's training step over the measured matmul
  peak and over the theoretical fp32 peak (:func:`harness.peak_line`). Model FLOPs per
  token = 6 x (matmul weights, the output layer included, embedding lookups not)
  + 6 x layers x sequence x d_model (attention scores and their weighted sum, causal half).

``--profile`` prints torch.profiler tables of one training step and one 8-token generation
of each model (how a missed target gets explained).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from harness import (
    Machine,
    Timing,
    interleave,
    markdown_table,
    peak_line,
    ratio_cell,
    theoretical_peak,
    thread_counts,
    torch_threads,
    write_results,
)
from torch import Tensor, nn

from tokformer.generation import generate, left_pad
from tokformer.interop.hf import lm_config_from_hf, state_from_hf
from tokformer.language_model import CausalLM
from tokformer.sampling import SamplingConfig
from tokformer.tasks.lm import build_lm, token_nll
from tokformer.tokenizers.bpe import BPETokenizer

TRAIN_TARGET = 1.2
GEN_TARGET = 1.2
LOGIT_TOLERANCE = 1e-4
SMOKE = "**--quick: tiny smoke-test models; the numbers show overheads, not the models.**"


@dataclass(frozen=True)
class Sizes:
    """Every size the run uses; printed into the results file."""

    d_model: int = 512
    heads: int = 8
    kv_heads: int = 2  # Llama only
    layers: int = 4
    gpt2_vocab: int = 50257
    llama_vocab: int = 32000
    llama_ff: int = 1408  # SwiGLU width: about 8/3 x d_model, as Llama's
    batch: int = 2
    seq: int = 256
    prompt: int = 8
    gen_tokens: tuple[int, ...] = (256, 1024)
    repeats: int = 5
    families: tuple[str, ...] = ("gpt2", "llama")
    threads: tuple[int, ...] = field(default_factory=lambda: tuple(thread_counts()))

    @property
    def positions(self) -> int:
        """Context of both models: the training sequence and the longest prompt + continuation fit."""
        return max(self.seq, self.prompt + max(self.gen_tokens))

    def describe(self) -> str:
        return (f"d_model {self.d_model}, {self.heads} heads, {self.layers} layers, context {self.positions}; "
                f"GPT-2-shaped: vocab {self.gpt2_vocab} (tied), d_ff {4 * self.d_model}, GELU (tanh); "
                f"Llama-shaped: vocab {self.llama_vocab} (untied), {self.kv_heads} kv heads, SwiGLU width "
                f"{self.llama_ff}. Training: batch {self.batch} x {self.seq} tokens, fp32, AdamW. Generation: "
                f"batch 1, {self.prompt}-token prompt, greedy, {max(self.gen_tokens)} new tokens per call. "
                f"{self.repeats} interleaved rounds after one warm-up round; median (min-max).")


QUICK = Sizes(d_model=64, heads=4, layers=2, gpt2_vocab=1000, llama_vocab=1000, llama_ff=160, batch=2, seq=32,
              gen_tokens=(16, 48))


# ----------------------------------------------------------------------------- the two models


def hf_model(family: str, s: Sizes) -> nn.Module:
    """A random ``transformers`` model of ``family`` on SDPA attention, every parameter randomised."""
    import transformers

    common = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)  # no token ends a continuation
    if family == "gpt2":
        config = transformers.GPT2Config(n_embd=s.d_model, n_head=s.heads, n_layer=s.layers, n_positions=s.positions,
                                         vocab_size=s.gpt2_vocab, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                         tie_word_embeddings=True, **common)
        cls = transformers.GPT2LMHeadModel
    else:
        config = transformers.LlamaConfig(hidden_size=s.d_model, num_attention_heads=s.heads,
                                          num_key_value_heads=s.kv_heads, num_hidden_layers=s.layers,
                                          intermediate_size=s.llama_ff, max_position_embeddings=s.positions,
                                          vocab_size=s.llama_vocab, tie_word_embeddings=False, **common)
        cls = transformers.LlamaForCausalLM
    model = cls._from_config(config, attn_implementation="sdpa")
    randomise(model)
    return model


def randomise(model: nn.Module, seed: int = 0) -> None:
    """Norm weights around 1, everything else around 0: a default-initialised norm (1s and 0s) would
    let a converter that drops or swaps it go unnoticed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_norm_weight = ("norm" in name or "ln_" in name) and name.endswith("weight")
            base, std = (1.0, 0.1) if is_norm_weight else (0.0, 0.05)
            p.copy_(base + std * torch.randn(p.shape, generator=g))


def tokformer_model(reference: nn.Module) -> CausalLM:
    """The ``lm`` task's model for ``reference``'s config, loaded with its converted weights.

    The ``lm`` task builds models for a BPE tokenizer; a bare byte-level one stands in,
    its table padded to the checkpoint's vocabulary (``embedding_rows``), as a loaded
    Hugging Face folder is.
    """
    hf_config = reference.config.to_dict()
    cfg = lm_config_from_hf(hf_config)
    byte_level = BPETokenizer({bytes([b]): b for b in range(256)}, [])
    model = build_lm(byte_level, cfg)
    model.load_state_dict(state_from_hf(reference.state_dict(), hf_config["model_type"], cfg))
    return model


def parity(ours: CausalLM, theirs: nn.Module, vocab: int, seq: int) -> tuple[float, float]:
    """Max abs logit difference on random ids, and the logits' spread (a flat model would prove
    nothing); fails the run above :data:`LOGIT_TOLERANCE`."""
    ids = torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(1234))
    with torch.no_grad():
        expected = theirs(input_ids=ids).logits
        got = tokformer_forward(ours, ids)
    diff = (got - expected).abs().max().item()
    if diff > LOGIT_TOLERANCE:
        raise SystemExit(f"logits differ by {diff:.2e} (> {LOGIT_TOLERANCE}): the comparison would be meaningless")
    return diff, expected.std().item()


def tokformer_forward(model: CausalLM, ids: Tensor) -> Tensor:
    """Logits of unpadded ``ids`` ``[B, N]``, through the ``lm`` task's own path (``padded=False``)."""
    from tokformer.batch import TokenBatch

    return model(TokenBatch.unpadded(ids), padded=False)


# ----------------------------------------------------------------------------- training


def training_cases(ours: CausalLM, theirs: nn.Module, vocab: int, s: Sizes) -> dict[str, Callable[[int], None]]:
    """One training step per library and round, both on the round's own batch of random ids."""
    windows = {r: torch.randint(0, vocab, (s.batch, s.seq + 1), generator=torch.Generator().manual_seed(r + 10))
               for r in range(-1, s.repeats)}

    def ours_loss(window: Tensor) -> Tensor:
        nll, n = token_nll(ours, window)
        return nll / n

    def their_loss(window: Tensor) -> Tensor:
        logits = theirs(input_ids=window[:, :-1]).logits
        return F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())

    return {"tokformer": train_step(ours, ours_loss, windows), "transformers": train_step(theirs, their_loss, windows)}


def train_step(model: nn.Module, loss_of: Callable[[Tensor], Tensor],
               windows: dict[int, Tensor]) -> Callable[[int], None]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(round_: int) -> None:
        model.train()
        loss_of(windows[round_]).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def model_flops_per_token(model: CausalLM, s: Sizes) -> float:
    """6 x matmul weights (blocks and output layer) + 6 x layers x seq x d (causal attention)."""
    matmul = sum(p.numel() for p in model.encoder.parameters() if p.dim() == 2) + model.head.weight.numel()
    return 6 * matmul + 6 * s.layers * s.seq * s.d_model


# ----------------------------------------------------------------------------- generation


@dataclass
class GenerationRun:
    """Per round: seconds to each requested token count, and the ids of each library."""

    lengths: tuple[int, ...]
    seconds: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    ids: dict[str, list[list[int]]] = field(default_factory=dict)  # every timed round's continuation

    def record(self, name: str, start: float, stamps: list[float], ids: list[int], round_: int) -> None:
        if round_ < 0:
            return  # the warm-up's own
        if len(stamps) < max(self.lengths):
            raise SystemExit(f"{name} stopped after {len(stamps)} of {max(self.lengths)} tokens")
        per_length = self.seconds.setdefault(name, {n: [] for n in self.lengths})
        for n in self.lengths:
            per_length[n].append(stamps[n - 1] - start)
        self.ids.setdefault(name, []).append(ids)

    def timing(self, name: str, n: int) -> Timing:
        return Timing(tuple(self.seconds[name][n]))


def generation_cases(ours: CausalLM, theirs: nn.Module, vocab: int, s: Sizes,
                     run: GenerationRun) -> dict[str, Callable[[int], None]]:
    """Greedy cached generation by each library; the warm-up round makes 8 tokens only."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    prompts = {r: torch.randint(0, vocab, (1, s.prompt), generator=torch.Generator().manual_seed(r + 100))
               for r in range(-1, s.repeats)}
    greedy = SamplingConfig(temperature=0.0)

    class Stamp(StoppingCriteria):
        """Never stops; notes when each new token was chosen."""

        def __init__(self, stamps: list[float]) -> None:
            self.stamps = stamps

        def __call__(self, input_ids: Tensor, scores: Tensor, **kwargs) -> Tensor:
            self.stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    def new_tokens(round_: int) -> int:
        return 8 if round_ < 0 else max(s.gen_tokens)

    def ours_case(round_: int) -> None:
        stamps: list[float] = []
        start = time.perf_counter()
        ids, mask = left_pad(prompts[round_].tolist())
        out = generate(ours, ids, mask, max_new_tokens=new_tokens(round_), sampling=greedy, use_cache=True,
                       on_token=lambda *_: stamps.append(time.perf_counter()))
        run.record("tokformer", start, stamps, out[0], round_)

    def their_case(round_: int) -> None:
        stamps: list[float] = []
        start = time.perf_counter()
        n = new_tokens(round_)
        theirs.eval()
        out = theirs.generate(prompts[round_], attention_mask=torch.ones_like(prompts[round_]), do_sample=False,
                              max_new_tokens=n, min_new_tokens=n, use_cache=True, pad_token_id=0,
                              stopping_criteria=StoppingCriteriaList([Stamp(stamps)]))
        run.record("transformers", start, stamps, out[0, s.prompt:].tolist(), round_)

    return {"tokformer": ours_case, "transformers": their_case}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (or of the shorter end), None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# ----------------------------------------------------------------------------- one family


@dataclass
class FamilyResult:
    family: str
    parameters: int
    logit_diff: float
    logit_std: float
    train: dict[str, Timing]
    generation: GenerationRun
    flops_per_step: float


def bench_family(family: str, s: Sizes, threads: int, profile: bool) -> FamilyResult:
    torch.manual_seed(0)
    theirs = hf_model(family, s)
    ours = tokformer_model(theirs)
    vocab = s.gpt2_vocab if family == "gpt2" else s.llama_vocab
    diff, spread = parity(ours, theirs, vocab, min(s.seq, 64))
    with torch_threads(threads):
        gen = GenerationRun(s.gen_tokens)  # first, while both hold exactly the converted weights
        gen_cases = generation_cases(ours, theirs, vocab, s, gen)
        interleave(gen_cases, s.repeats)
        train_cases = training_cases(ours, theirs, vocab, s)
        train = interleave(train_cases, s.repeats)
        if profile:
            print_profiles(f"{family}, one training step", train_cases, 0, threads)
            print_profiles(f"{family}, generating 8 tokens (the warm-up call)", gen_cases, -1, threads)
    return FamilyResult(family, sum(p.numel() for p in ours.parameters()), diff, spread, train, gen,
                        model_flops_per_token(ours, s) * s.batch * s.seq)


def print_profiles(what: str, cases: dict[str, Callable[[int], None]], round_: int, threads: int) -> None:
    """torch.profiler's table of each library's ``case(round_)``, busiest operators first."""
    from torch.profiler import ProfilerActivity, profile

    for name, case in cases.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            case(round_)
        print(f"\n### profile: {what}, {name}, {threads} thread(s)\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


# ----------------------------------------------------------------------------- report


def target_cell(ratio: float, target: float) -> str:
    return f">= {target}x: {'met' if ratio >= target else 'missed'}"


def rows_of(r: FamilyResult, s: Sizes, measured_peak: float, threads: int) -> list[list[str]]:
    ours, theirs = r.train["tokformer"], r.train["transformers"]
    tokens = s.batch * s.seq
    speedup = theirs.median / ours.median
    rows = [[r.family, "training tokens/s", ours.rate_cell(tokens), theirs.rate_cell(tokens),
             ratio_cell(ours, theirs), target_cell(speedup, TRAIN_TARGET)]]
    for n in s.gen_tokens:
        mine, ref = r.generation.timing("tokformer", n), r.generation.timing("transformers", n)
        rows.append([r.family, f"generation tokens/s, {n} new", mine.rate_cell(n), ref.rate_cell(n),
                     ratio_cell(mine, ref), target_cell(gen_speedup(r, n), GEN_TARGET)])
    flops = r.flops_per_step / ours.median
    theory = theoretical_peak(threads)[0]
    mfu = (f"{100 * flops / measured_peak:.0f}% of measured, {100 * flops / theory:.0f}% of theoretical "
           f"({flops / 1e9:.1f} GFLOP/s)")
    their_mfu = f"{100 * r.flops_per_step / theirs.median / measured_peak:.0f}% of measured"
    rows.append([r.family, "MFU, training", mfu, their_mfu, "", ""])
    return rows


def parity_line(r: FamilyResult) -> str:
    pairs = zip(r.generation.ids["tokformer"], r.generation.ids["transformers"], strict=True)
    where = [first_divergence(ours, theirs) for ours, theirs in pairs]
    n = len(r.generation.ids["tokformer"][0])
    ids = (f"greedy ids identical over all {n} new tokens in every round" if all(w is None for w in where) else
           f"greedy ids first differ at new token {', '.join(str(w) for w in where)} of {n} in rounds "
           "1.. (None: identical; before that token both are identical)")
    return (f"{r.family}: {r.parameters / 1e6:.1f}M parameters; max abs logit difference {r.logit_diff:.1e} "
            f"(logits std {r.logit_std:.2f}); {ids}.")


def gen_speedup(r: FamilyResult, n: int) -> float:
    return r.generation.timing("transformers", n).median / r.generation.timing("tokformer", n).median


def summary(results: list[FamilyResult], s: Sizes, threads: int, measured_peak: float) -> str:
    """The paragraph under a table: what the numbers say, in words."""
    parts = []
    for r in results:
        train = r.train["transformers"].median / r.train["tokformer"].median
        gens = ", ".join(f"{gen_speedup(r, n):.2f}x at {n}" for n in s.gen_tokens)
        mfu = r.flops_per_step / r.train["tokformer"].median / measured_peak
        parts.append(f"{r.family}: tokformer trains {train:.2f}x as fast as transformers "
                     f"({'meets' if train >= TRAIN_TARGET else 'misses'} the {TRAIN_TARGET}x target) at "
                     f"{100 * mfu:.0f}% of the measured matmul rate, so the same FLOPs cannot run more than "
                     f"{1 / mfu:.2f}x faster here; it generates {gens} new tokens (target {GEN_TARGET}x)")
    return f"At {threads} thread(s): " + "; ".join(parts) + ". Ratios > 1 favour tokformer."


def report(machine: Machine, s: Sizes, by_threads: dict[int, tuple[float, str, list[FamilyResult]]]) -> str:
    header = ["model", "measurement", "tokformer", "transformers (sdpa)", "tokformer speedup", "target"]
    sections = ["# Decoder-only LMs: tokformer vs Hugging Face transformers (same weights)", "",
                "Command: `" + " ".join(["python benchmarks/bench_lm.py", *sys.argv[1:]]) + "`", "",
                machine.line(f"{' and '.join(map(str, by_threads))} torch threads"), "", s.describe(), ""]
    for threads, (measured, peak_text, results) in by_threads.items():
        rows = [row for r in results for row in rows_of(r, s, measured, threads)]
        sections += [f"## {threads} thread(s)", "", peak_text + ".", "", markdown_table(header, rows), "",
                     summary(results, s, threads, measured), ""]
    first = next(iter(by_threads.values()))[2]
    sections += ["## Parity (checked before timing)", "", *[f"- {parity_line(r)}" for r in first], ""]
    return "\n".join(sections)


def parse_args() -> tuple[Sizes, bool, bool]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny models and short runs: a smoke test")
    p.add_argument("--profile", action="store_true",
                   help="print torch.profiler tables of a training step and an 8-token generation of each model")
    p.add_argument("--repeats", type=int, help="interleaved rounds (>= 5)")
    p.add_argument("--batch", type=int, help="training batch")
    p.add_argument("--seq", type=int, help="training sequence length")
    p.add_argument("--gen-tokens", type=int, nargs="+", help="new-token counts reported (the largest is generated)")
    p.add_argument("--families", nargs="+", choices=("gpt2", "llama"))
    p.add_argument("--threads", type=int, nargs="+", help="torch thread counts [default: 1 and all cores]")
    args = p.parse_args()
    s = QUICK if args.quick else Sizes()
    chosen = {"repeats": args.repeats, "batch": args.batch, "seq": args.seq,
              "gen_tokens": tuple(sorted(args.gen_tokens)) if args.gen_tokens else None,
              "families": tuple(args.families) if args.families else None,
              "threads": tuple(args.threads) if args.threads else None}
    return replace(s, **{k: v for k, v in chosen.items() if v is not None}), args.profile, args.quick


def main() -> None:
    s, profile, quick = parse_args()
    machine = Machine(("torch", "transformers"))
    by_threads: dict[int, tuple[float, str, list[FamilyResult]]] = {}
    for threads in s.threads:
        measured, text = peak_line(threads)
        results = [bench_family(family, s, threads, profile) for family in s.families]
        by_threads[threads] = (measured, text, results)
    text = report(machine, s, by_threads)
    if quick:
        text = text.replace("\n\n", f"\n\n{SMOKE}\n\n", 1)
    write_results("lm.md", text)


if __name__ == "__main__":
    main()
