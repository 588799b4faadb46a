"""MultiHeadAttention: the paths the parity tests of test_attention.py leave open (mutation testing,
benchmarks/results/mutation.md): biases of cross-attention, q/k norms, grouped-query masks, dropout
in training and eval, float masks of another dtype, sparse patterns, the device of the causal mask."""

from __future__ import annotations

import pytest
import torch

from tokformer.attention import MultiHeadAttention
from tokformer.kv_cache import KVCache
from tokformer.masks import padding_mask
from tokformer.sparse_attention import SparsePattern

D, H = 32, 4


def randint(low: int, high: int) -> int:
    """A random int in ``[low, high]``, from torch's generator (seeded per test by conftest)."""
    return int(torch.randint(low, high + 1, ()))


def random_padding(b: int, n: int) -> torch.Tensor:
    """``[B, N]`` True-for-real: every sample keeps a random prefix of at least one token."""
    lengths = torch.randint(1, n + 1, (b,))
    lengths[0] = n - 1  # at least one padded key somewhere
    return torch.arange(n)[None, :] < lengths[:, None]


def dense_pattern(keep: torch.Tensor) -> SparsePattern:
    """Every real token with every real token of its sample: the pair list of a padding mask."""
    n = keep.shape[1]
    allowed = keep[:, :, None] & keep[:, None, :]
    b, i, j = allowed.nonzero().unbind(1)
    return SparsePattern(query=b * n + i, key=b * n + j, mask=keep)


def test_cross_attention_without_bias_has_no_bias_parameters() -> None:
    attn = MultiHeadAttention(D, H, cross=True, bias=False)
    biases = [name for name, _ in attn.named_parameters() if name.endswith("bias")]
    assert biases == [], f"bias=False, yet cross-attention has {biases}"


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_qk_norm_normalises_small_activations_to_unit_scale(kind: str) -> None:
    """The default epsilon is negligible: heads of tiny activations still come out unit-RMS (layer: unit std)."""
    attn = MultiHeadAttention(D, H, qk_norm=kind)
    scale = 10 ** -float(torch.empty(()).uniform_(1, 2))
    heads = torch.randn(2, H, 7, D // H) * scale
    for norm in (attn.q_norm, attn.k_norm):
        out = norm(heads)
        rms = out.square().mean(-1).sqrt()
        torch.testing.assert_close(rms, torch.ones_like(rms), atol=2e-2, rtol=0,
                                   msg=f"{kind} q/k norm left activations of scale {scale:.3g} at RMS {rms.mean():.3g}")


@torch.no_grad()
def test_grouped_query_attention_ignores_padded_keys() -> None:
    attn = MultiHeadAttention(D, H, n_kv_heads=H // 2).eval()
    b, n = randint(2, 4), randint(4, 9)
    keep = random_padding(b, n)
    x = torch.randn(b, n, D)
    other = x.clone()
    other[~keep] = torch.randn(int((~keep).sum()), D) * 5  # new content at the padded positions only
    out, out_other = (attn(t, attn_mask=padding_mask(keep)) for t in (x, other))
    torch.testing.assert_close(out[keep], out_other[keep], msg="real tokens read the content of padded keys")


@pytest.mark.parametrize("n_kv_heads", [H, H // 2], ids=["MHA", "GQA"])
def test_attention_dropout_acts_in_training_only(n_kv_heads: int) -> None:
    attn = MultiHeadAttention(D, H, n_kv_heads=n_kv_heads, dropout=0.5)
    x = torch.randn(2, 6, D)
    keep = random_padding(2, 6)
    for mask in (None, padding_mask(keep)):
        attn.train()
        assert not torch.equal(attn(x, attn_mask=mask), attn(x, attn_mask=mask)), "no dropout in training"
        attn.eval()
        ref = MultiHeadAttention(D, H, n_kv_heads=n_kv_heads, dropout=0.0).eval()
        ref.load_state_dict(attn.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(attn(x, attn_mask=mask), ref(x, attn_mask=mask),
                                       msg="dropout acted in eval mode")


@torch.no_grad()
def test_a_float_mask_is_applied_in_the_query_dtype_whatever_its_own() -> None:
    """A float32 bias on a bfloat16 model gives what the same bias in bfloat16 gives."""
    attn = MultiHeadAttention(D, H).to(torch.bfloat16).eval()
    x = torch.randn(2, 5, D).to(torch.bfloat16)
    bias = torch.randn(2, 1, 5, 5) * 3
    torch.testing.assert_close(attn(x, attn_mask=bias), attn(x, attn_mask=bias.to(torch.bfloat16)), rtol=0, atol=0)


@pytest.mark.parametrize("n_kv_heads", [H, H // 2], ids=["MHA", "GQA"])
def test_sparse_pattern_equals_its_dense_mask_and_drops_out_in_training_only(n_kv_heads: int) -> None:
    attn = MultiHeadAttention(D, H, n_kv_heads=n_kv_heads, dropout=0.4)
    b, n = randint(2, 3), randint(3, 7)
    keep = random_padding(b, n)
    pattern = dense_pattern(keep)
    x = torch.randn(b, n, D)
    attn.eval()
    with torch.no_grad():
        sparse, dense = attn(x, attn_mask=pattern), attn(x, attn_mask=padding_mask(keep))
    torch.testing.assert_close(sparse[keep], dense[keep], atol=1e-5, rtol=1e-5,
                               msg="in eval, a sparse pattern must equal its dense mask")
    attn.train()
    assert not torch.equal(attn(x, attn_mask=pattern), attn(x, attn_mask=pattern)), "no dropout in training"


@pytest.mark.parametrize("case", ["is_causal", "cache", "cross"])
def test_sparse_pattern_is_refused_with_causal_cache_or_cross(case: str) -> None:
    keep = torch.ones(2, 4, dtype=torch.bool)
    attn = MultiHeadAttention(D, H, cross=case == "cross")
    x = torch.randn(2, 4, D)
    kwargs = {"is_causal": case == "is_causal", "cache": KVCache() if case == "cache" else None}
    with pytest.raises(ValueError, match="SparsePattern"):
        attn(x, x if case == "cross" else None, attn_mask=dense_pattern(keep), **kwargs)


def test_causal_mask_is_built_on_the_inputs_device() -> None:
    """A causal mask next to a padding mask, on the ``meta`` device (standing in for a GPU)."""
    attn = MultiHeadAttention(D, H).to("meta")
    keep = torch.ones(2, 1, 1, 5, dtype=torch.bool, device="meta")
    out = attn(torch.empty(2, 5, D, device="meta"), attn_mask=keep, is_causal=True)
    assert out.device == torch.device("meta")
