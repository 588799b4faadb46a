"""Mask builders keep the device and dtype they are asked for (mutation testing, benchmarks/results/mutation.md).

The ``meta`` device stands in for a GPU: a mask built on the CPU instead of the requested device
fails there, on a machine without one too.
"""

from __future__ import annotations

import pytest
import torch

from tokformer.masks import causal_mask, combine_masks, padding_or_none, prefix_lm_mask, to_additive

META = torch.device("meta")


def randint(low: int, high: int) -> int:
    """A random int in ``[low, high]``, from torch's generator (seeded per test by conftest)."""
    return int(torch.randint(low, high + 1, ()))


def test_causal_mask_is_built_on_the_requested_device() -> None:
    n_queries = randint(1, 6)
    mask = causal_mask(n_queries, n_queries + randint(0, 4), device=META)
    assert mask.device == META, f"causal_mask(device=meta) built its mask on {mask.device}"


@pytest.mark.parametrize("per_sample", [False, True], ids=["int prefix", "tensor prefix"])
def test_prefix_lm_mask_is_built_on_the_requested_device(per_sample: bool) -> None:
    n = randint(2, 8)
    prefix = torch.randint(0, n, (3,)) if per_sample else randint(0, n)
    mask = prefix_lm_mask(prefix, n, device=META)
    assert mask.device == META, f"prefix_lm_mask(device=meta) built its mask on {mask.device}"


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_to_additive_gives_the_requested_dtype_for_bool_and_float_masks(dtype: torch.dtype) -> None:
    keep = torch.rand(2, 5) > 0.5
    assert to_additive(keep, dtype).dtype == dtype, "a bool mask's bias must have the requested dtype"
    bias = torch.randn(2, 5)
    assert to_additive(bias, dtype).dtype == dtype, "a float mask must be cast to the requested dtype"
    assert to_additive(keep.to(META), dtype).device == META, "the bias must sit on the mask's device"


def test_combine_masks_adds_in_the_float_masks_dtype() -> None:
    """A bool mask meets a half-precision bias in the bias's dtype (not float32's promotion)."""
    keep = torch.rand(2, 1, 4, 4) > 0.3
    keep[..., 0] = True
    bias = torch.randn(2, 1, 4, 4).to(torch.bfloat16)
    out = combine_masks(keep, bias)
    assert out.dtype == torch.bfloat16, f"bool + bfloat16 bias combined to {out.dtype}"
    expected = bias.float().masked_fill(~keep, float("-inf"))
    torch.testing.assert_close(out.float(), expected)


def test_padding_or_none_keeps_a_mask_with_padding_and_drops_an_all_real_one() -> None:
    b, n = randint(1, 4), randint(2, 6)
    padded = torch.ones(b, n, dtype=torch.bool)
    padded[randint(0, b - 1), randint(0, n - 1)] = False
    assert padding_or_none(padded) is padded, "a mask with padding was dropped: padded keys would be attended"
    assert padding_or_none(torch.ones(b, n, dtype=torch.bool)) is None, "an all-real mask should take the fused path"
