"""Sparse (pair-list) attention equals dense masked attention: kernel, encoder with registers, graph model."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
import torch.nn.functional as F

from tokformer.config import TransformerConfig
from tokformer.sparse_attention import SparsePattern, sparse_attention
from tokformer.tasks.graph import GraphConfig, GraphTask
from tokformer.transformer import Encoder

SIZES = [5, 9, 2]  # real tokens per sample: padding in the batch


def _pattern(heads: int, seed: int = 0) -> SparsePattern:
    """Random pairs within each sample's real tokens, every token with itself, random biases."""
    gen = torch.Generator().manual_seed(seed)
    n = max(SIZES)
    mask = torch.arange(n)[None, :] < torch.tensor(SIZES)[:, None]  # [B, N]
    allowed = (torch.rand(len(SIZES), n, n, generator=gen) < 0.4) | torch.eye(n, dtype=torch.bool)
    allowed &= mask[:, :, None] & mask[:, None, :]
    b, i, j = allowed.nonzero().unbind(1)
    bias = torch.randn(b.shape[0], heads, generator=gen, requires_grad=True)
    return SparsePattern(query=b * n + i, key=b * n + j, mask=mask, bias=bias)


def _grads(out: torch.Tensor, inputs: list[torch.Tensor], weight: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad((out * weight).sum(), inputs))


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_kernel_equals_dense_masked_sdpa_forward_and_backward(kv_heads: int) -> None:
    torch.manual_seed(0)
    pattern = _pattern(heads=4)
    b, n = pattern.mask.shape
    q = torch.randn(b, 4, n, 8, requires_grad=True)
    k, v = (torch.randn(b, kv_heads, n, 8, requires_grad=True) for _ in range(2))
    real = pattern.mask[:, None, :, None].float()  # compare real query rows only (padding rows differ by design)
    weight = torch.randn(b, 4, n, 8) * real
    sparse = sparse_attention(q, k, v, pattern)
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=pattern.to_dense(4), enable_gqa=kv_heads != 4)
    torch.testing.assert_close(sparse * real, dense * real, atol=1e-5, rtol=1e-5)
    inputs = [q, k, v, pattern.bias]
    for got, want in zip(_grads(sparse, inputs, weight), _grads(dense, inputs, weight), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not sparse[~pattern.mask[:, None, :].expand(-1, 4, -1)].any()  # rows without pairs are zeros


def test_encoder_with_registers_equals_dense() -> None:
    """Registers join a sparse pattern as global tokens exactly as they join a dense mask."""
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, dropout=0.0, n_registers=2)
    encoder = Encoder(cfg)
    pattern = _pattern(heads=2, seed=1)
    x = torch.randn(len(SIZES), max(SIZES), 16, requires_grad=True)
    weight = torch.randn_like(x) * pattern.mask[..., None]
    sparse = encoder(x, pattern.mask, attn_mask=pattern)
    dense = encoder(x, pattern.mask, attn_mask=pattern.to_dense(2))
    keep = pattern.mask[..., None].float()
    torch.testing.assert_close(sparse * keep, dense * keep, atol=1e-5, rtol=1e-5)
    params = [x, encoder.registers, pattern.bias]
    for got, want in zip(_grads(sparse, params, weight), _grads(dense, params, weight), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_prepend_global_lists_each_pair_once() -> None:
    pattern = _pattern(heads=1).prepend_global(2)
    pairs = torch.stack((pattern.query, pattern.key), 1)
    assert pairs.unique(dim=0).shape == pairs.shape
    assert pattern.mask.shape == (3, 11) and pattern.mask[:, :2].all()


def _graph_model(attention: str, n_registers: int, learn_bias: bool) -> tuple[GraphTask, torch.nn.Module]:
    torch.manual_seed(0)
    cfg = GraphConfig(d_model=16, n_heads=2, n_layers=2, k=4, eigenvalues=False, attention=attention,
                      n_registers=n_registers, position_reader="signnet", signnet_width=4, learn_bias=learn_bias)
    task = GraphTask(cfg)
    task.classes = ["a", "b", "c"]
    model = task.build_model()
    with torch.no_grad():  # random weights everywhere, biases and norm gains included
        for param in model.parameters():
            param.add_(0.3 * torch.randn_like(param))
    return task, model


@pytest.mark.parametrize("learn_bias", [True, False])
@pytest.mark.parametrize("n_registers", [0, 2])
def test_graph_model_sparse_equals_mask(n_registers: int, learn_bias: bool) -> None:
    """Same weights, attention=sparse vs attention=mask: the same logits and gradients, on a
    batch of graphs of different sizes (padding), with the graph token and registers as global tokens."""
    graphs = [nx.petersen_graph(), nx.path_graph(4), nx.lollipop_graph(4, 3)]
    results = []
    for attention in ("mask", "sparse"):
        task, model = _graph_model(attention, n_registers, learn_bias)
        batch = task.tokenizer.batch(graphs)
        logits = model(batch)
        grads = torch.autograd.grad(logits.square().sum(), list(model.parameters()))
        results.append((logits, grads))
    (dense_logits, dense_grads), (sparse_logits, sparse_grads) = results
    torch.testing.assert_close(sparse_logits, dense_logits, atol=1e-5, rtol=1e-5)
    for got, want in zip(sparse_grads, dense_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert dense_grads[-1].abs().sum() > 0  # gradients reach the model: the comparison means something
