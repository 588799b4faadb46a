"""Translation: tokformer's Seq2Seq vs ``torch.nn.Transformer``, training and decoding speed.

Run: ``python benchmarks/bench_translate.py [--threads N] [--repeats 5]``. Prints a Markdown
table and writes it to ``benchmarks/results/translate.md``.

Like with like: both models get the same dimensions (pre-norm, final norms, ReLU, the
task's dropout), the same embedder (the task's BPE token table + learned positions, shared by both
sides) and the same tied output head, the same batches of the default number-translation
data (padded on both sides, masks on both sides), the same loss (label-smoothed
cross-entropy), optimizer, dtype and thread count. Timings interleave the two models and
report medians, because the machine may be shared.

Decoding: tokformer's batched greedy and beam search (KV cache, cross-attention K/V once
per sentence) against a greedy loop over ``nn.Transformer`` that re-runs the decoder on
the whole prefix each step (what it offers without a cache). Every sentence is decoded to
the same fixed length (no token is treated as end of sentence), so both do equal work.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.beam_search import DecodeConfig, beam_search, greedy_decode
from tokformer.tasks.translate import TranslateConfig, TranslateTask
from tokformer.tasks.translate_data import IGNORE_INDEX, TranslationBatch

RESULTS = Path(__file__).resolve().parent / "results" / "translate.md"


class TorchSeq2Seq(nn.Module):
    """``nn.Transformer`` between the tokformer model's own embedder and tied head."""

    def __init__(self, like: nn.Module, c: TranslateConfig) -> None:
        super().__init__()
        self.embedder, self.head = like.tgt_embedder, like.head  # the same modules: equal work around the core
        self.core = nn.Transformer(c.d_model, c.n_heads, c.encoder_layers, c.decoder_layers,
                                   dim_feedforward=c.d_ff or 4 * c.d_model, dropout=c.dropout, batch_first=True,
                                   norm_first=True)

    def encode(self, src: TokenBatch) -> Tensor:  # [B, M, d]
        # torch's padding masks are True for padding: the opposite of tokformer's polarity
        return self.core.encoder(self.embedder(src), src_key_padding_mask=~src.mask)

    def decode(self, tgt: TokenBatch, memory: Tensor, memory_mask: Tensor) -> Tensor:  # [B, N, V]
        causal = torch.ones(tgt.seq_len, tgt.seq_len, dtype=torch.bool).triu(1)  # True = may not attend
        x = self.core.decoder(self.embedder(tgt), memory, tgt_mask=causal, tgt_is_causal=True,
                              tgt_key_padding_mask=~tgt.mask, memory_key_padding_mask=~memory_mask)
        return self.head(x)

    def forward(self, src: TokenBatch, tgt: TokenBatch) -> Tensor:
        return self.decode(tgt, self.encode(src), src.mask)


def train_rate(model: nn.Module, batches: list[TranslationBatch], smoothing: float) -> float:
    """Source + target tokens per second over one pass of forward, backward, AdamW step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    tokens = sum(int(b.src.mask.sum() + b.tgt_in.mask.sum()) for b in batches)
    start = time.perf_counter()
    for b in batches:
        logits = model(b.src, b.tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), b.labels.flatten(), ignore_index=IGNORE_INDEX,
                               label_smoothing=smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return tokens / (time.perf_counter() - start)


@torch.no_grad()
def torch_greedy(model: TorchSeq2Seq, src: TokenBatch, bos: int, steps: int) -> Tensor:  # [B, steps]
    memory = model.encode(src)
    out = torch.full((src.batch_size, 1), bos)
    for _ in range(steps):
        tgt = TokenBatch(mask=torch.ones_like(out, dtype=torch.bool), ids=out,
                         positions=torch.arange(out.shape[1]).expand_as(out))
        out = torch.cat([out, model.decode(tgt, memory, src.mask)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out[:, 1:]


def decode_rate(fn, sources: list[TokenBatch]) -> float:
    """Sentences per second."""
    start = time.perf_counter()
    for src in sources:
        fn(src)
    return sum(s.batch_size for s in sources) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--train-batches", type=int, default=10)
    parser.add_argument("--decode-sentences", type=int, default=128)
    parser.add_argument("--decode-len", type=int, default=12, help="tokens decoded per sentence")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    c = TranslateConfig(train_size=args.batch_size * args.train_batches, eval_size=args.decode_sentences,
                        bpe_sample=2000, d_model=args.d_model, n_heads=args.d_model // 64,
                        encoder_layers=args.layers, decoder_layers=args.layers)
    task = TranslateTask(c)
    train_set, test_set = task.train_dataset(), task.eval_dataset()
    batches = [task.collate([train_set[i] for i in range(lo, lo + args.batch_size)])
               for lo in range(0, len(train_set), args.batch_size)]
    ours = task.build_model()
    theirs = TorchSeq2Seq(ours, c)
    assert sum(p.numel() for p in theirs.core.parameters()) == sum(
        p.numel() for m in (ours.encoder, ours.decoder) for p in m.parameters()), "cores differ in size"

    rates: dict[str, list[float]] = {"tokformer": [], "torch": []}
    for _ in range(args.repeats + 1):  # the first round warms up and is dropped
        for name, model in (("tokformer", ours), ("torch", theirs)):
            rates[name].append(train_rate(model, batches, c.label_smoothing))
    train = {name: statistics.median(r[1:]) for name, r in rates.items()}

    sources = [task.collate([test_set[i] for i in range(lo, min(lo + args.batch_size, len(test_set)))]).src
               for lo in range(0, len(test_set), args.batch_size)]
    fixed = DecodeConfig(beam_size=4, max_len_a=0.0, max_len_b=args.decode_len)
    never = -1  # no end-of-sentence token: every sentence decodes exactly decode_len tokens
    ours.eval()
    theirs.eval()
    runs = {
        "tokformer greedy (KV cache)": lambda s: greedy_decode(ours, s, 1, never, fixed),
        "tokformer beam 4 (KV cache)": lambda s: beam_search(ours, s, 1, never, fixed),
        "nn.Transformer greedy (no cache)": lambda s: torch_greedy(theirs, s, 1, args.decode_len),
    }
    decode: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats + 1):
        for name, fn in runs.items():
            decode[name].append(decode_rate(fn, sources))
    decode_med = {name: statistics.median(r[1:]) for name, r in decode.items()}

    spread = lambda r: f"{min(r[1:]):,.0f}-{max(r[1:]):,.0f}"  # noqa: E731
    lines = [
        f"Encoder-decoder, d_model={c.d_model}, {c.n_heads} heads, {c.encoder_layers}+{c.decoder_layers} layers, "
        f"d_ff={4 * c.d_model}, dropout {c.dropout}, fp32, {args.threads} threads, batch {args.batch_size} "
        f"(default number-translation data, padded). Medians of {args.repeats} interleaved repeats "
        "(range in brackets).",
        "",
        "| measure | tokformer | torch.nn.Transformer | tokformer / torch |",
        "|---|---|---|---|",
        f"| training tokens/s | {train['tokformer']:,.0f} ({spread(rates['tokformer'])}) | "
        f"{train['torch']:,.0f} ({spread(rates['torch'])}) | {train['tokformer'] / train['torch']:.2f}x |",
        f"| greedy sentences/s ({args.decode_len} tokens) | {decode_med['tokformer greedy (KV cache)']:,.1f} | "
        f"{decode_med['nn.Transformer greedy (no cache)']:,.1f} (no KV cache) | "
        f"{decode_med['tokformer greedy (KV cache)'] / decode_med['nn.Transformer greedy (no cache)']:.2f}x |",
        f"| beam 4 sentences/s ({args.decode_len} tokens) | {decode_med['tokformer beam 4 (KV cache)']:,.1f} | "
        "n/a | |",
    ]
    table = "\n".join(lines)
    print(table)
    RESULTS.parent.mkdir(exist_ok=True)
    command = " ".join(["python benchmarks/bench_translate.py", *sys.argv[1:]])
    RESULTS.write_text(f"# Translation benchmark\n\nCommand: `{command}`\n\n{table}\n", encoding="utf-8")


if __name__ == "__main__":
    main()
