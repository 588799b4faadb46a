"""Translation: tokformer's Seq2Seq vs ``torch.nn.Transformer``, training and decoding speed.

Run: ``python benchmarks/bench_translate.py [--repeats 5]``. Prints Markdown tables (1 thread
and all cores) and writes them to ``benchmarks/results/translate.md``.

Like with like: both models get the same dimensions (pre-norm, final norms, ReLU, the
task's dropout), the same embedder (the task's BPE token table + learned positions, shared by both
sides) and the same tied output head, the same batches of the default number-translation
data (padded on both sides, masks on both sides), the same loss (label-smoothed
cross-entropy), optimizer, dtype and thread count. Method (``harness.py``): interleaved
rounds, each on batches no earlier round saw, median (min-max) over >= 5 rounds.

Decoding: tokformer's batched greedy and beam search (KV cache, cross-attention K/V once
per sentence). No cached reference decoder with these exact weights exists in torch.nn, so
the cache's gain is measured against **tokformer's own no-cache path** (the same model
re-run on the whole prefix each step, outputs checked equal), and ``nn.Transformer``'s
greedy loop (also without a cache: it offers none) is shown beside it, labelled as such.
Every sentence is decoded to the same fixed length (no token is treated as end of
sentence), so all do equal work.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from harness import (
    MIN_REPEATS,
    Machine,
    interleave,
    markdown_table,
    ratio_cell,
    thread_counts,
    torch_threads,
    write_results,
)
from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.beam_search import DecodeConfig, beam_search, greedy_decode
from tokformer.tasks.translate import TranslateConfig, TranslateTask
from tokformer.tasks.translate_data import IGNORE_INDEX, TranslationBatch


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


def train_case(model: nn.Module, rounds: list[list[TranslationBatch]], smoothing: float) -> Callable[[int], None]:
    """One call: forward, backward, AdamW step over the round's own batches."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def run(round_: int) -> None:
        model.train()
        for b in rounds[round_ + 1]:  # round -1 is the warm-up's
            logits = model(b.src, b.tgt_in)
            loss = F.cross_entropy(logits.flatten(0, 1), b.labels.flatten(), ignore_index=IGNORE_INDEX,
                                   label_smoothing=smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return run


@torch.no_grad()
def uncached_greedy(model: nn.Module, src: TokenBatch, bos: int, steps: int) -> list[list[int]]:
    """Greedy decoding that re-runs the decoder on the whole prefix at every step (no cache)."""
    memory = model.encode(src)
    out = torch.full((src.batch_size, 1), bos)
    for _ in range(steps):
        next_ids = model.decode(TokenBatch.unpadded(out), memory, src.mask)[:, -1].argmax(-1, keepdim=True)  # [B, 1]
        out = torch.cat([out, next_ids], dim=1)
    return out[:, 1:].tolist()


def decode_case(fn: Callable[[TokenBatch], list[list[int]]], rounds: list[list[TokenBatch]]) -> Callable[[int], None]:
    def run(round_: int) -> None:
        for src in rounds[round_ + 1]:
            fn(src)

    return run


def measure(args: argparse.Namespace, threads: int) -> list[list[str]]:
    """Table rows at ``threads`` torch threads."""
    torch.manual_seed(0)
    per_round = args.train_batches * args.batch_size
    c = TranslateConfig(train_size=per_round * (args.repeats + 1), eval_size=args.decode_sentences * (args.repeats + 1),
                        bpe_sample=2000, d_model=args.d_model, n_heads=args.d_model // 64,
                        encoder_layers=args.layers, decoder_layers=args.layers)
    task = TranslateTask(c)
    train_set, test_set = task.train_dataset(), task.eval_dataset()
    collate = lambda items: task.collate(list(items), train=False)  # noqa: E731  (no augmentation)
    train_rounds = [[collate(train_set[i] for i in range(lo, lo + args.batch_size))
                     for lo in range(r * per_round, (r + 1) * per_round, args.batch_size)]
                    for r in range(args.repeats + 1)]
    decode_rounds = [[collate(test_set[i] for i in range(lo, lo + args.batch_size)).src
                      for lo in range(r * args.decode_sentences, (r + 1) * args.decode_sentences, args.batch_size)]
                     for r in range(args.repeats + 1)]
    ours = task.build_model()
    theirs = TorchSeq2Seq(ours, c)
    assert sum(p.numel() for p in theirs.core.parameters()) == sum(
        p.numel() for m in (ours.encoder, ours.decoder) for p in m.parameters()), "cores differ in size"
    train = interleave({"tokformer": train_case(ours, train_rounds, c.label_smoothing),
                        "torch": train_case(theirs, train_rounds, c.label_smoothing)}, args.repeats)

    fixed = DecodeConfig(beam_size=4, max_len_a=0.0, max_len_b=args.decode_len)
    never = -1  # no end-of-sentence token: every sentence decodes exactly decode_len tokens
    ours.eval()
    theirs.eval()
    decoders = {
        "cached": lambda s: greedy_decode(ours, s, 1, never, fixed),
        "uncached": lambda s: uncached_greedy(ours, s, 1, args.decode_len),
        "torch": lambda s: uncached_greedy(theirs, s, 1, args.decode_len),
        "beam": lambda s: beam_search(ours, s, 1, never, fixed),
    }
    check = decode_rounds[0][0]
    assert decoders["cached"](check) == decoders["uncached"](check), "cached and uncached greedy outputs differ"
    decode = interleave({name: decode_case(fn, decode_rounds) for name, fn in decoders.items()}, args.repeats)

    # real (unpadded) tokens per call, averaged over the timed rounds: each round has its own batches
    tokens = sum(int(b.src.mask.sum() + b.tgt_in.mask.sum()) for r in train_rounds[1:] for b in r) / args.repeats
    sentences = args.decode_sentences
    setting, greedy = f"{threads} thread(s)", f"greedy sentences/s, {args.decode_len} tokens"
    return [
        [setting, "training tokens/s (fwd+bwd+AdamW)", train["tokformer"].rate_cell(tokens, ",.0f"),
         f"{train['torch'].rate_cell(tokens, ',.0f')} (nn.Transformer)",
         ratio_cell(train["tokformer"], train["torch"])],
        [setting, greedy, f"{decode['cached'].rate_cell(sentences)} (KV cache)",
         f"{decode['uncached'].rate_cell(sentences)} (tokformer's own no-cache path)",
         ratio_cell(decode["cached"], decode["uncached"])],
        [setting, greedy, "", f"{decode['torch'].rate_cell(sentences)} (no cache: it "
         "offers none), nn.Transformer", ratio_cell(decode["cached"], decode["torch"])],
        [setting, f"beam 4 sentences/s, {args.decode_len} tokens", f"{decode['beam'].rate_cell(sentences)} (KV cache)",
         "", ""],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--train-batches", type=int, default=4, help="training batches per timed call")
    parser.add_argument("--decode-sentences", type=int, default=128, help="sentences decoded per timed call")
    parser.add_argument("--decode-len", type=int, default=12, help="tokens decoded per sentence")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()
    machine = Machine(("torch",))
    rows = []
    for threads in thread_counts():
        with torch_threads(threads):
            rows += measure(args, threads)
    c = args
    header = ["threads", "measure", "tokformer", "reference", "ratio (reference time / ours)"]
    text = "\n".join([
        "# Translation benchmark",
        "",
        f"Encoder-decoder, d_model={c.d_model}, {c.d_model // 64} heads, {c.layers}+{c.layers} layers, "
        f"d_ff={4 * c.d_model}, dropout 0, fp32, batch {c.batch_size} (default number-translation data, padded); "
        f"{c.train_batches} training batches and {c.decode_sentences} decoded sentences per timed call. "
        f"Median (min-max) of {c.repeats} interleaved rounds, each on data no earlier round saw; the ratio's "
        "brackets are the range of per-round ratios.",
        "",
        markdown_table(header, rows),
        "",
        machine.line("1 thread and all cores"),
    ])
    write_results("translate.md", text)


if __name__ == "__main__":
    main()
