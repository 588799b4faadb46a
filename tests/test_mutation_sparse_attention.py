"""Sparse attention: GQA when N equals the head count, large logits, bfloat16, dropout, one global token,
patterns without biases (mutation testing, benchmarks/results/mutation.md)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_sparse_attention import _pattern

from tokformer.sparse_attention import SparsePattern, sparse_attention


def randint(low: int, high: int) -> int:
    """A random int in ``[low, high]``, from torch's generator (seeded per test by conftest)."""
    return int(torch.randint(low, high + 1, ()))


def random_pattern(b: int, n: int, heads: int | None) -> SparsePattern:
    """Random pairs within each sample's real tokens (every token with itself); biases when ``heads``."""
    sizes = torch.randint(1, n + 1, (b,))
    sizes[0] = n
    mask = torch.arange(n)[None, :] < sizes[:, None]
    allowed = ((torch.rand(b, n, n) < 0.5) | torch.eye(n, dtype=torch.bool)) & mask[:, :, None] & mask[:, None, :]
    s, i, j = allowed.nonzero().unbind(1)
    bias = torch.randn(s.shape[0], heads) if heads else None
    return SparsePattern(query=s * n + i, key=s * n + j, mask=mask, bias=bias)


def dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: SparsePattern) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=pattern.to_dense(q.shape[1]),
                                          enable_gqa=k.shape[1] != q.shape[1])


def real_rows(out: torch.Tensor, pattern: SparsePattern) -> torch.Tensor:
    return out * pattern.mask[:, None, :, None]


def test_grouped_query_heads_when_tokens_equal_heads() -> None:
    """N == H (4 tokens, 4 query heads, 2 key/value heads): the head count must be read off the head dim."""
    pattern = random_pattern(3, 4, heads=4)
    q, k, v = torch.randn(3, 4, 4, 8), torch.randn(3, 2, 4, 8), torch.randn(3, 2, 4, 8)
    torch.testing.assert_close(real_rows(sparse_attention(q, k, v, pattern), pattern),
                               real_rows(dense(q, k, v, pattern), pattern), atol=1e-5, rtol=1e-5)


def test_large_logits_stay_finite_and_equal_dense() -> None:
    """Logits near 100: exp() would overflow without the per-query peak taken off."""
    pattern = random_pattern(2, randint(3, 7), heads=None)
    q, k, v = (torch.randn(2, 2, pattern.n_tokens, 8) for _ in range(3))
    q = q * 40 / q.norm(dim=-1, keepdim=True)
    k = k * 40 / k.norm(dim=-1, keepdim=True)  # |q . k| / sqrt(8) up to ~566
    out = sparse_attention(q, k, v, pattern)
    assert torch.isfinite(out).all(), "large logits overflowed"
    torch.testing.assert_close(real_rows(out, pattern), real_rows(dense(q, k, v, pattern), pattern),
                               atol=1e-4, rtol=1e-4)


def test_bfloat16_queries_with_a_float32_bias() -> None:
    pattern = random_pattern(2, randint(3, 7), heads=2)
    q, k, v = (torch.randn(2, 2, pattern.n_tokens, 8).to(torch.bfloat16) for _ in range(3))
    out = sparse_attention(q, k, v, pattern)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(real_rows(out.float(), pattern),
                               real_rows(dense(q.float(), k.float(), v.float(), pattern), pattern),
                               atol=3e-2, rtol=3e-2)


def test_dropout_drops_weights_and_zero_dropout_is_exact() -> None:
    pattern = _pattern(heads=2)
    q, k, v = (torch.randn(3, 2, pattern.n_tokens, 8) for _ in range(3))
    p = float(torch.empty(()).uniform_(0.2, 0.8))
    first, second = sparse_attention(q, k, v, pattern, p), sparse_attention(q, k, v, pattern, p)
    assert not torch.equal(first, second), f"dropout_p={p:.2f} dropped nothing"
    exact = sparse_attention(q, k, v, pattern, 0.0)
    torch.testing.assert_close(real_rows(exact, pattern), real_rows(dense(q, k, v, pattern), pattern),
                               atol=1e-5, rtol=1e-5)
    assert torch.equal(exact, sparse_attention(q, k, v, pattern, 0.0))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_prepend_global_equals_padding_the_dense_mask(n: int) -> None:
    """The new tokens attend to and are attended by every real token and each other (bias 0)."""
    pattern = random_pattern(2, randint(2, 6), heads=2)
    got = pattern.prepend_global(n).to_dense(2)  # [B, H, N + n, N + n]
    real = F.pad(pattern.mask, (n, 0), value=True)  # [B, N + n]
    meets = real[:, None, :, None] & real[:, None, None, :]
    expected = torch.full_like(got, float("-inf"))
    expected = expected.masked_fill(meets, 0.0)  # globals with real tokens (and real with real, fixed below)
    expected[..., n:, n:] = pattern.to_dense(2)
    assert torch.equal(got, expected)


def test_to_dense_of_a_pattern_without_biases_is_zero_on_its_pairs() -> None:
    pattern = random_pattern(randint(1, 3), randint(2, 6), heads=None)
    heads = randint(1, 3)
    got = pattern.to_dense(heads)
    b, n = pattern.mask.shape
    listed = torch.zeros(b * n, n, dtype=torch.bool)
    listed[pattern.query, pattern.key % n] = True
    listed = listed.view(b, 1, n, n).expand(b, heads, n, n)
    assert torch.equal(got, torch.zeros_like(got).masked_fill(~listed, float("-inf")))


@pytest.mark.parametrize("p", [0.2, 0.3, 0.7])
def test_dropout_keeps_each_pair_with_probability_1_minus_p_scaled_by_its_inverse(p: float) -> None:
    """Uniform weights (zero queries) over values of 1: a query's output is kept_pairs / (pairs * (1 - p))."""
    n = randint(30, 60)
    allowed = torch.ones(1, n, n, dtype=torch.bool)
    s, i, j = allowed.nonzero().unbind(1)
    pattern = SparsePattern(query=s * n + i, key=s * n + j, mask=torch.ones(1, n, dtype=torch.bool))
    q, k, v = torch.zeros(1, 1, n, 1), torch.randn(1, 1, n, 1), torch.ones(1, 1, n, 1)
    kept = sparse_attention(q, k, v, pattern, p).flatten() * n * (1 - p)  # kept pairs per query
    torch.testing.assert_close(kept, kept.round(), atol=1e-3, rtol=0,
                               msg=f"weights were not dropped at p={p} and rescaled by 1 / (1 - {p})")
    share = float(kept.sum()) / n**2
    assert abs(share - (1 - p)) < 4 * ((p * (1 - p)) / n**2) ** 0.5, f"kept {share:.3f} of the pairs at p={p}"
