"""Rotary embeddings: the defaults, dtypes, devices and argument checks that the Hugging Face and timm
parity tests (test_modern_layers.py, test_timm_rope.py) leave open (mutation testing,
benchmarks/results/mutation.md)."""

from __future__ import annotations

import pytest
import torch

from tokformer.rotary import RotaryEmbedding, apply_rotary, rotate_half


def randint(low: int, high: int) -> int:
    """A random int in ``[low, high]``, from torch's generator (seeded per test by conftest)."""
    return int(torch.randint(low, high + 1, ()))


def test_default_theta_is_the_papers_10000() -> None:
    """Angles of the default embedding: ``position / 10000 ** (2i / d)`` (Su et al. 2021, eq. 15)."""
    d = 2 * randint(8, 32)
    positions = torch.randint(1024, 2048, (2, 8))  # far enough out that a base of 10,001 turns ~0.01 rad further
    rope = RotaryEmbedding(d)(positions)
    i = torch.arange(d // 2, dtype=torch.float64)
    angles = positions[..., None].double() / 10000.0 ** (2 * i / d)  # [B, N, d/2]
    angles = torch.cat((angles, angles), dim=-1)[:, None]  # half layout: both halves turn pair i by angle i
    for got, want in ((rope.cos, angles.cos()), (rope.sin, angles.sin())):
        torch.testing.assert_close(got.double(), want, atol=1e-3, rtol=0,
                                   msg="the default rotary base is not the paper's 10,000")


def test_rotate_half_defaults_to_one_half_split_block() -> None:
    """``rotate_half(x)`` is Hugging Face Llama's: ``cat(-x[d/2:], x[:d/2])``."""
    d = 4 * randint(1, 8)
    x = torch.randn(2, 3, d)
    torch.testing.assert_close(rotate_half(x), torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1))


@pytest.mark.parametrize("dims", [1, 2])
def test_rotated_queries_keep_their_dtype(dims: int) -> None:
    d = 8
    positions = torch.randint(0, 16, (2, 5) if dims == 1 else (2, 5, 2))
    rope = RotaryEmbedding(d, dims=dims)(positions)  # float32 tables
    q = torch.randn(2, 3, 5, d).to(torch.bfloat16)
    assert apply_rotary(q, rope).dtype == torch.bfloat16, "bfloat16 queries came out in another dtype"


@pytest.mark.parametrize(("dims", "ref_grid"), [(1, None), (2, None), (2, (7, 5))], ids=["1-D", "2-D", "2-D ref_grid"])
def test_tables_are_float32_and_on_the_positions_device(dims: int, ref_grid: tuple[int, int] | None) -> None:
    """float32 like Hugging Face's and timm's tables whatever torch's default dtype, on the ``meta``
    device when the positions are there (standing in for a GPU)."""
    embed = RotaryEmbedding(8, dims=dims, ref_grid=ref_grid)
    positions = torch.randint(0, 6, (2, 5) if dims == 1 else (2, 5, 2))
    reference = embed(positions)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        in_float64 = embed(positions)
    finally:
        torch.set_default_dtype(before)
    assert in_float64.cos.dtype == torch.float32, "a float64 default dtype changed the rotary tables' dtype"
    torch.testing.assert_close(in_float64.cos, reference.cos, rtol=0, atol=0)
    torch.testing.assert_close(in_float64.sin, reference.sin, rtol=0, atol=0)
    assert embed(positions.to("meta")).cos.device == torch.device("meta")


@pytest.mark.parametrize(
    "kwargs",
    [{"d_head": 6, "dims": 2}, {"d_head": 8, "axes": "xy"}, {"d_head": 8, "ref_grid": (4, 4)}],
    ids=["2-D needs d_head divisible by 4", "axes without dims=2", "ref_grid without dims=2"],
)
def test_inconsistent_arguments_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        RotaryEmbedding(**kwargs)


@pytest.mark.parametrize("shape", [(2, 5, 3), (2, 2)], ids=["3 coordinates", "[B, 2] ids"])
def test_2d_positions_must_be_pairs(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="2-D rotary positions"):
        RotaryEmbedding(8, dims=2)(torch.zeros(shape, dtype=torch.long))
