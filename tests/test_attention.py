"""Attention: parity with torch.nn.MultiheadAttention, masks, fully masked rows, KV cache."""

import pytest
import torch
from torch import nn

from tokformer.attention import MultiHeadAttention
from tokformer.kv_cache import KVCache
from tokformer.masks import causal_mask, padding_mask

D, H = 32, 4


def reference_mha(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """A torch MultiheadAttention carrying the same weights as ``ours``."""
    ref = nn.MultiheadAttention(D, H, batch_first=True)
    with torch.no_grad():
        if ours.cross:
            ref.in_proj_weight.copy_(torch.cat([ours.q.weight, ours.kv.weight]))
            ref.in_proj_bias.copy_(torch.cat([ours.q.bias, ours.kv.bias]))
        else:
            ref.in_proj_weight.copy_(ours.qkv.weight)
            ref.in_proj_bias.copy_(ours.qkv.bias)
        ref.out_proj.weight.copy_(ours.proj.weight)
        ref.out_proj.bias.copy_(ours.proj.bias)
    return ref.eval()


def test_self_attention_matches_torch_multihead_attention_with_padding():
    attn = MultiHeadAttention(D, H).eval()
    ref = reference_mha(attn)
    x = torch.randn(3, 7, D)
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[1, 5:] = False
    keep[2, 2:] = False
    ours = attn(x, attn_mask=padding_mask(keep))
    # torch's key_padding_mask has the opposite polarity: True = ignore.
    theirs, _ = ref(x, x, x, key_padding_mask=~keep, need_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_causal_self_attention_matches_torch_with_causal_mask():
    attn = MultiHeadAttention(D, H).eval()
    ref = reference_mha(attn)
    x = torch.randn(2, 6, D)
    ours = attn(x, is_causal=True)
    theirs, _ = ref(x, x, x, attn_mask=~causal_mask(6, 6), need_weights=False)  # True = forbidden there
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_cross_attention_matches_torch_multihead_attention():
    attn = MultiHeadAttention(D, H, cross=True).eval()
    ref = reference_mha(attn)
    x, memory = torch.randn(2, 4, D), torch.randn(2, 9, D)
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[0, 6:] = False
    ours = attn(x, memory, attn_mask=padding_mask(keep))
    theirs, _ = ref(x, memory, memory, key_padding_mask=~keep, need_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_additive_bias_matches_explicit_softmax():
    attn = MultiHeadAttention(D, 1).eval()
    x = torch.randn(1, 5, D)
    bias = torch.randn(1, 1, 5, 5)
    q, k, v = attn.qkv(x).chunk(3, dim=-1)
    weights = torch.softmax(q @ k.transpose(-1, -2) / D**0.5 + bias[0], dim=-1)
    expected = attn.proj(weights @ v)
    torch.testing.assert_close(attn(x, attn_mask=bias), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("polarity", ["bool", "additive"])
def test_fully_masked_rows_give_zeros_and_finite_gradients(polarity, device):
    attn = MultiHeadAttention(D, H).to(device)
    x = torch.randn(2, 5, D, device=device, requires_grad=True)
    keep = torch.ones(2, 5, dtype=torch.bool, device=device)
    keep[1] = False  # sample 1 has no real key at all
    mask = padding_mask(keep)
    if polarity == "additive":
        mask = torch.zeros(mask.shape, device=device).masked_fill(~mask, float("-inf"))
    attn.proj.bias.data.zero_()  # so a zero attention output shows up as zero
    out = attn(x, attn_mask=mask)
    assert torch.isfinite(out).all()
    assert torch.count_nonzero(out[1]) == 0
    assert torch.count_nonzero(out[0]) > 0
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters())


def test_self_attention_cache_incremental_equals_full(device):
    attn = MultiHeadAttention(D, H).to(device).eval()
    x = torch.randn(2, 9, D, device=device)
    full = attn(x, is_causal=True)
    cache = KVCache()
    prefill = attn(x[:, :4], is_causal=True, cache=cache)  # a chunk of 4, then one at a time
    steps = [attn(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat([prefill, *steps], dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 9


def test_cross_attention_cache_reuses_memory_projection():
    attn = MultiHeadAttention(D, H, cross=True).eval()
    x, memory = torch.randn(2, 3, D), torch.randn(2, 6, D)
    cache = KVCache()
    first = attn(x, memory, cache=cache)
    again = attn(x, None, cache=cache)  # memory no longer needed
    torch.testing.assert_close(first, again)
    assert cache.length == 6


def test_cache_grows_past_initial_capacity_and_reorders():
    cache = KVCache()
    k = torch.arange(40.0).reshape(2, 1, 20, 1)
    for t in range(20):
        cache.append(k[:, :, t : t + 1], k[:, :, t : t + 1])
    torch.testing.assert_close(cache.keys, k)
    cache.reorder(torch.tensor([1, 1]))
    torch.testing.assert_close(cache.keys, k[[1, 1]])


def test_reordered_cache_equals_a_cache_built_from_the_reordered_sequences():
    """Beam search reorders the cache to follow surviving hypotheses: keys AND values must move with the rows."""
    attn = MultiHeadAttention(D, H).eval()
    x = torch.randn(3, 9, D)
    index = torch.tensor([2, 0, 2])  # row 1 dropped, row 2 duplicated
    cache = KVCache()
    attn(x[:, :6], is_causal=True, cache=cache)
    cache.reorder(index)
    fresh = KVCache()
    attn(x[index, :6], is_causal=True, cache=fresh)
    assert cache.length == fresh.length == 6
    torch.testing.assert_close(cache.keys, fresh.keys, msg=lambda m: f"reordered cache keys are wrong: {m}")
    torch.testing.assert_close(cache.values, fresh.values, msg=lambda m: f"reordered cache values are wrong: {m}")
    # Decoding on after the reorder equals full causal attention over the reordered sequences.
    steps = torch.cat([attn(x[index, t : t + 1], is_causal=True, cache=cache) for t in range(6, 9)], dim=1)
    full = attn(x[index], is_causal=True)[:, 6:]
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5,
                               msg=lambda m: f"decoding after a cache reorder differs from recomputation: {m}")


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(30, 4)
