"""Generation: the smallest contexts, cache reuse without a slide, the padding id (mutation testing,
benchmarks/results/mutation.md)."""

from __future__ import annotations

import pytest
import torch
from test_generation import GREEDY, VOCAB, documented_window_greedy, short_context_lm

from tokformer.batch import TokenBatch
from tokformer.generation import generate, left_pad


def randint(low: int, high: int) -> int:
    """A random int in ``[low, high]``, from torch's generator (seeded per test by conftest)."""
    return int(torch.randint(low, high + 1, ()))


@pytest.mark.parametrize("context", [2, 3])
def test_a_tiny_context_slides_to_its_last_token(context: int) -> None:
    """``context // 2`` is 1 here: each slide keeps the last token only (brute force agrees)."""
    model = short_context_lm(context, seed=randint(0, 100))
    prompt = torch.randint(0, VOCAB, (context,)).tolist()
    steps = randint(6, 12)
    got = generate(model, *left_pad([prompt]), max_new_tokens=steps, sampling=GREEDY, context=context)[0]
    assert got == documented_window_greedy(model, prompt, steps, context)[0]


def test_a_cached_decode_that_never_slides_feeds_one_token_per_step() -> None:
    """With a context the rows never outgrow, the cache is kept: after the prompt, every step reads one token."""
    model = short_context_lm(64, seed=randint(0, 100))
    prompts = [torch.randint(0, VOCAB, (randint(1, 6),)).tolist() for _ in range(3)]
    widths = []
    features = model.features

    def recording(batch: TokenBatch, *args: object, **kwargs: object) -> torch.Tensor:
        widths.append(batch.ids.shape[1])
        return features(batch, *args, **kwargs)

    model.features = recording
    steps = randint(4, 10)
    generate(model, *left_pad(prompts), max_new_tokens=steps, sampling=GREEDY, context=64)
    assert widths[1:] == [1] * (steps - 1), f"the cache was dropped and the window re-encoded: widths {widths}"


def test_left_padding_uses_id_0_by_default_the_one_id_every_vocabulary_has() -> None:
    lengths = [randint(1, 5) for _ in range(3)]
    ids, mask = left_pad([torch.randint(1, VOCAB, (n,)).tolist() for n in lengths])
    assert (ids[~mask] == 0).all(), ids
