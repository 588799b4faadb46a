"""Autoregressive generation from a `CausalLM`, with or without the KV cache.

Prompts of different lengths are left-padded into one batch, so every row's last prompt
token sits in the last column and the new tokens line up. Padding is masked out of
attention, and positions count real tokens only (a row's first real token is position 0
however much padding precedes it), so a batched row generates exactly what it would alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from tokformer.batch import TokenBatch
from tokformer.language_model import CausalLM
from tokformer.sampling import SamplingConfig, sample_next

# New tokens from which a column-major copy of the head pays for itself on CPU (see vocabulary_head)
COLUMN_HEAD_MIN_TOKENS = 32


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Lists of ids -> (``[B, T]`` ids, ``[B, T]`` mask) with padding on the left."""
    if not sequences or any(len(s) == 0 for s in sequences):
        raise ValueError("every prompt needs at least one token")
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.bool)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq) :] = torch.as_tensor(list(seq), dtype=torch.long)
        mask[row, width - len(seq) :] = True
    return ids, mask


def positions_from_mask(mask: Tensor) -> Tensor:
    """``[B, T]`` position of each token among its row's real tokens (padding gets 0)."""
    return (mask.long().cumsum(dim=1) - 1).clamp(min=0)


@torch.no_grad()
def generate(
    model: CausalLM,
    ids: Tensor,
    mask: Tensor,
    *,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    eos_id: int | None = None,
    stop: Callable[[list[int]], bool] | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    on_token: Callable[[Tensor, Tensor], None] | None = None,
    context: int | None = None,
    vocab_size: int | None = None,
) -> list[list[int]]:
    """Continue each left-padded prompt ``ids`` ``[B, T]`` (``mask`` True = real token).

    Args:
        max_new_tokens: the most tokens to add per row.
        sampling: greedy when ``temperature == 0``; default is plain sampling at 1.0.
        eos_id: a row ends after producing this id (which is not returned).
        stop: called with a row's new ids after each step; True ends the row (e.g. a stop
            string appeared in the decoded text).
        use_cache: reuse keys/values of past tokens (O(1) work per new token per layer)
            instead of re-running the whole sequence each step.
        on_token: called after each step with the ``[B]`` new ids and the ``[B]`` bool
            "row still running" flags, for streaming.
        context: the most tokens the model reads at once (its training context); None for
            no limit. A row about to exceed it slides: it keeps its last ``context // 2``
            tokens (see :func:`slide`), re-encoded from position 0, so generation goes on
            past the context with a window of between ``context // 2`` and ``context``
            tokens. Every row slides on its own schedule, so a batched row still generates
            exactly what it would alone, cached or not. Prompts must fit ``context``.
        vocab_size: only ids below it are generated: a model may have more embedding rows than its
            tokenizer has tokens (Hugging Face models pad theirs), and the padding ids decode to nothing.

    Returns the new ids of each row.
    """
    sampling = sampling or SamplingConfig()
    model.eval()
    device = next(model.parameters()).device
    windows = [row[keep].tolist() for row, keep in zip(ids, mask.bool(), strict=True)]  # real tokens per row
    if context is not None and any(len(w) > context for w in windows):
        raise ValueError(f"a prompt is longer than the context of {context} tokens; shorten it first")
    batch_size = len(windows)
    running = torch.ones(batch_size, dtype=torch.bool, device=device)
    new_tokens: list[list[int]] = [[] for _ in range(batch_size)]
    caches = None
    step_ids = step_mask = key_mask = step_positions = None
    head = vocabulary_head(model, max_new_tokens)
    for _ in range(max_new_tokens):
        slid = context is not None and _slide_full(windows, context)
        if caches is None or slid or not use_cache:  # (re-)encode every row's whole window
            step_ids, key_mask = left_pad(windows)
            step_ids, key_mask = step_ids.to(device), key_mask.to(device)
            step_mask, step_positions = key_mask, positions_from_mask(key_mask)
            caches = model.make_caches() if use_cache else None
        batch = TokenBatch(mask=step_mask, ids=step_ids, positions=step_positions)
        logits = head(model.features(batch, caches, key_mask=key_mask)[:, -1])  # [B, V]
        if vocab_size is not None and logits.shape[-1] > vocab_size:  # padding rows: never generated
            logits = logits.float()
            logits[:, vocab_size:] = -1e9  # finite, so the NaN/inf check still sees a real overflow
        next_ids = sample_next(logits, sampling, generator)  # [B]
        for row in running.nonzero().flatten().tolist():
            token = int(next_ids[row])
            if token == eos_id:
                running[row] = False
                continue
            new_tokens[row].append(token)
            if stop is not None and stop(new_tokens[row]):
                running[row] = False
        if on_token is not None:
            on_token(next_ids, running)
        if not running.any():
            break
        for row, token in enumerate(next_ids.tolist()):
            windows[row].append(token)  # finished rows too: the batch stays rectangular
        ones = torch.ones(batch_size, 1, dtype=torch.bool, device=device)
        key_mask = torch.cat([key_mask, ones], dim=1)
        step_ids, step_mask, step_positions = next_ids[:, None], ones, step_positions[:, -1:] + 1
    return new_tokens


def vocabulary_head(model: CausalLM, max_new_tokens: int) -> Callable[[Tensor], Tensor]:
    """``[B, d]`` -> ``[B, V]`` logits through the model's head, laid out for decoding.

    Decoding multiplies one row per sequence by the head's ``[V, d]`` weight. On CPU, MKL's
    matrix-vector kernel can read that row-major layout at well under the memory bandwidth of
    a ``[d, V]`` one (measured in benchmarks/bench_lm.py, docs/lm.md), and the head is most of
    a small model's decode step. So a long CPU decode first copies the weight transposed (one
    more head's memory, freed when generation ends) and multiplies by the copy; short decodes
    and GPUs use the head as it is.
    """
    weight, bias = model.head.weight, model.head.bias
    if weight.device.type != "cpu" or max_new_tokens < COLUMN_HEAD_MIN_TOKENS:
        return model.head
    columns = weight.t().contiguous()  # [d, V]
    return (lambda x: x @ columns) if bias is None else (lambda x: torch.addmm(bias, x, columns))


def slide(window: list[int], context: int) -> list[int]:
    """The tokens a row keeps once it has ``context + 1``: its last ``context // 2`` (at least 1).

    Half, not ``context``, because a slide re-encodes the kept tokens (their learned or
    rotary positions all change): keeping half makes that happen once every
    ``context // 2`` tokens, so a cached decode costs about twice an unslid one, while the
    model always reads at least half its context.
    """
    return window[-max(1, context // 2) :]


def _slide_full(windows: list[list[int]], context: int) -> bool:
    """Slide every row that outgrew ``context``, in place; whether any did."""
    slid = False
    for row, window in enumerate(windows):
        if len(window) > context:
            windows[row] = slide(window, context)
            slid = True
    return slid
