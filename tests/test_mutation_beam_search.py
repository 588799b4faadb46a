"""Decoding limits and the decoding step's device (mutation testing, benchmarks/results/mutation.md)."""

from __future__ import annotations

import math

import pytest
import torch
from test_seq2seq import BOS, batch_of, tiny_seq2seq

from tokformer.batch import TokenBatch
from tokformer.beam_search import DecodeConfig, _step, beam_search, greedy_decode

NEVER = -1  # an end-of-sequence id no model produces: every row runs to its length limit


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_len_a": 0, "max_len_b": 1},
        {"max_len_a": 1, "max_len_b": 0},
        {"max_len_a": 1.5, "max_len_b": 0},
        {"max_len_a": 0.5, "max_len_b": 3, "max_len": 1},
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
def test_limits_at_the_edge_of_validity_are_accepted(kwargs: dict) -> None:
    DecodeConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_len_a": -1, "max_len_b": 5},
        {"max_len_a": 1, "max_len_b": -1},
        {"max_len_a": 0, "max_len_b": 0},
        {"max_len": 0},
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
def test_negative_or_empty_limits_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        DecodeConfig(**kwargs)


@pytest.mark.parametrize("decode", [greedy_decode, beam_search])
@pytest.mark.parametrize(("a", "b", "cap"), [(0, 1, None), (0.5, 1, None), (2.0, 3, 4), (1.0, 2, None)])
def test_output_length_is_the_documented_limit(decode, a: float, b: int, cap: int | None) -> None:
    """Without an end token an output runs to ``min(max_len, floor(a * source_length + b))``, at least 1."""
    model = tiny_seq2seq(seed=int(torch.randint(0, 100, ())))
    sources = [torch.randint(2, 12, (int(torch.randint(1, 7, ())),)).tolist() for _ in range(3)]
    cfg = DecodeConfig(beam_size=2, max_len_a=a, max_len_b=b, max_len=cap)
    outputs = decode(model, batch_of(sources), BOS, NEVER, cfg)
    expected = [min(cap or math.inf, max(1, math.floor(a * len(s) + b))) for s in sources]
    assert [len(o) for o in outputs] == expected


def test_a_decoding_step_runs_on_the_models_device() -> None:
    """On the ``meta`` device (standing in for a GPU): every tensor the step builds must follow the model."""
    model = tiny_seq2seq().to("meta")
    src = batch_of([[3, 4, 5], [6, 7]])
    src = TokenBatch(mask=src.mask.to("meta"), ids=src.ids.to("meta"), positions=src.positions.to("meta"))
    memory = model.encode(src)
    caches, cross = model.make_caches()
    last = torch.full((2,), BOS, dtype=torch.long, device="meta")
    for t in range(3):
        logits = _step(model, last, t, memory, src.mask, caches, cross)
        assert logits.device == torch.device("meta") and logits.shape == (2, 12)
