"""Decoding an encoder-decoder: greedy and beam search, batched, on the KV cache.

The source is encoded once. The cross-attention keys/values are computed from the
memory on the first step and kept in static caches; each step then feeds only the newest
target token through the decoder's self-attention cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tokformer.batch import TokenBatch
from tokformer.kv_cache import reorder_caches
from tokformer.seq2seq import Seq2Seq

# fairseq's --beam and Hugging Face's num_beams have no upper bound, but what their users ask for is
# 1-10 to translate and a few hundred at most for n-best lists and search-error studies. 1024 covers
# those; past it a step's score table (batch x beam x vocabulary) and the decoder caches (batch x beam
# rows each) run to gigabytes: a beam of 100,000 asked for 4.5 GB before any error.
MAX_BEAM_SIZE = 1024
# alpha of score / length**alpha. Settings in use lie well inside: 0.6-1 (GNMT, fairseq, Hugging Face's
# 1.0), 2 for long summaries, below 0 to favour short outputs. Within +-10, length**alpha is a finite,
# non-zero float for every length an output can have (up to 10**30); 400 overflowed at length 6 and
# -1000 rounded to 0.0 at length 3, and the decoding failed with OverflowError or ZeroDivisionError.
MAX_LENGTH_PENALTY = 10.0


@dataclass
class DecodeConfig:
    """Decoding limits and beam settings.

    The output may be at most ``max_len_a * source_length + max_len_b`` tokens long, and
    at most ``max_len`` if given (a model with learned positions has no position past it).
    ``length_penalty`` is alpha in score / length**alpha: 0 prefers short outputs (raw
    log-probability), 1 compares per-token averages.
    """

    beam_size: int = 4
    length_penalty: float = 1.0
    max_len_a: float = 1.5
    max_len_b: int = 10
    max_len: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.beam_size <= MAX_BEAM_SIZE:
            raise ValueError(f"beam_size must be in [1, {MAX_BEAM_SIZE}], got {self.beam_size}")
        if not -MAX_LENGTH_PENALTY <= self.length_penalty <= MAX_LENGTH_PENALTY:
            raise ValueError(f"length_penalty must be in [{-MAX_LENGTH_PENALTY:g}, {MAX_LENGTH_PENALTY:g}], "
                             f"got {self.length_penalty}")
        if self.max_len_a < 0 or self.max_len_b < 0 or (self.max_len_a == 0 and self.max_len_b == 0):
            raise ValueError("max_len_a and max_len_b must be >= 0 and not both 0")
        if self.max_len is not None and self.max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {self.max_len}")

    def max_lengths(self, src_mask: Tensor) -> list[int]:
        lengths = src_mask.sum(dim=1).tolist()
        cap = self.max_len if self.max_len is not None else float("inf")
        return [int(min(cap, max(1, int(self.max_len_a * n + self.max_len_b)))) for n in lengths]


def _step(model: Seq2Seq, last: Tensor, t: int, memory: Tensor, memory_mask: Tensor, caches, cross) -> Tensor:
    """Feed the newest target token ``[R]`` at position t; return its logits ``[R, V]``."""
    rows = last.shape[0]
    step = TokenBatch(
        mask=torch.ones(rows, 1, dtype=torch.bool, device=last.device),
        ids=last[:, None],
        positions=torch.full((rows, 1), t, dtype=torch.long, device=last.device),
    )
    key_mask = torch.ones(rows, t + 1, dtype=torch.bool, device=last.device)
    logits = model.decode(
        step, memory if t == 0 else None, memory_mask, caches=caches, cross_caches=cross, key_mask=key_mask
    )
    return logits[:, -1]


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: TokenBatch, bos_id: int, eos_id: int, cfg: DecodeConfig) -> list[list[int]]:
    """The most likely token at each step, until ``eos_id`` or the length limit."""
    model.eval()
    limits = cfg.max_lengths(src.mask)
    memory = model.encode(src)
    caches, cross = model.make_caches()
    last = torch.full((src.batch_size,), bos_id, dtype=torch.long, device=src.mask.device)
    outputs: list[list[int]] = [[] for _ in limits]
    running = [True] * len(limits)
    for t in range(max(limits)):
        last = _step(model, last, t, memory, src.mask, caches, cross).argmax(dim=-1)
        for row, token in enumerate(last.tolist()):
            if not running[row]:
                continue
            if token == eos_id:
                running[row] = False
                continue
            outputs[row].append(token)
            running[row] = len(outputs[row]) < limits[row]
        if not any(running):
            break
    return outputs


@torch.no_grad()
def beam_search(model: Seq2Seq, src: TokenBatch, bos_id: int, eos_id: int, cfg: DecodeConfig) -> list[list[int]]:
    """Keep the ``beam_size`` best partial outputs per sentence; return each sentence's best.

    A sentence is finished once it holds ``beam_size`` complete hypotheses (ended by
    ``eos_id`` among the top ``beam_size`` candidates, or cut at the length limit) and no
    live beam scores better, length-normalised at its current length, than the best of
    them (stopping at ``beam_size`` finished ones alone would drop a live, near-certain
    hypothesis for worse ones that ended early); its answer is the one with the best
    length-normalised score. With ``beam_size == 1`` this is exactly greedy decoding.
    """
    model.eval()
    k = cfg.beam_size
    batch = src.batch_size
    device = src.mask.device
    limits = cfg.max_lengths(src.mask)
    memory_mask = src.mask.repeat_interleave(k, dim=0)  # [B*K, M]
    memory = model.encode(src).repeat_interleave(k, dim=0)  # [B*K, M, d]
    caches, cross = model.make_caches()

    scores = torch.full((batch, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: keep one alive so candidates are distinct
    history = torch.empty(batch * k, 0, dtype=torch.long, device=device)  # [B*K, t]
    last = torch.full((batch * k,), bos_id, dtype=torch.long, device=device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    done = [False] * batch
    normalise = lambda score, length: score / (length**cfg.length_penalty)

    for t in range(max(limits)):
        log_probs = _step(model, last, t, memory, memory_mask, caches, cross).float().log_softmax(dim=-1)
        vocab = log_probs.shape[-1]
        candidates = (scores.view(-1, 1) + log_probs).view(batch, k * vocab)
        top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=-1)  # [B, 2K]
        top_beam, top_token = top_index // vocab, top_index % vocab

        new_scores = torch.full((batch, k), float("-inf"), device=device)
        new_beam = torch.zeros((batch, k), dtype=torch.long, device=device)
        new_token = torch.full((batch, k), eos_id, dtype=torch.long, device=device)
        top_scores_l, top_beam_l, top_token_l = top_scores.tolist(), top_beam.tolist(), top_token.tolist()
        for b in range(batch):
            if done[b]:
                continue
            alive = 0
            ranked = zip(top_scores_l[b], top_beam_l[b], top_token_l[b], strict=True)
            for rank, (score, beam, token) in enumerate(ranked):
                if score == float("-inf"):
                    break
                if token == eos_id:
                    if rank < k:
                        finished[b].append((normalise(score, t + 1), history[b * k + beam].tolist()))
                    continue
                new_scores[b, alive], new_beam[b, alive], new_token[b, alive] = score, beam, token
                alive += 1
                if alive == k:
                    break
            if t + 1 >= limits[b]:  # length limit: the live beams end here
                for i in range(alive):
                    tokens = history[b * k + int(new_beam[b, i])].tolist() + [int(new_token[b, i])]
                    finished[b].append((normalise(float(new_scores[b, i]), t + 1), tokens))
                done[b] = True
            elif len(finished[b]) >= k:  # stop once no live beam beats the best finished one
                live = [normalise(float(new_scores[b, i]), t + 1) for i in range(alive)]
                done[b] = max(live, default=float("-inf")) <= max(score for score, _ in finished[b])
        if all(done):
            break
        index = (torch.arange(batch, device=device)[:, None] * k + new_beam).view(-1)  # [B*K]
        history = torch.cat([history[index], new_token.view(-1, 1)], dim=1)
        reorder_caches(caches, index)  # cross caches are identical across a sentence's beams
        scores, last = new_scores, new_token.view(-1)

    return [max(hyps, key=lambda h: h[0])[1] if hyps else [] for hyps in finished]
