"""Transformer blocks: attention and a feed-forward network, each wrapped in a residual.

Pre-norm (``x + f(norm(x))``, the default, as in GPT-2 and ViT) keeps an identity path
from input to output and trains stably without warmup tricks; post-norm
(``norm(x + f(x))``, as in "Attention Is All You Need") is available for fidelity to the
paper and parity with ``torch.nn.TransformerEncoderLayer(norm_first=False)``.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from tokformer.attention import MultiHeadAttention
from tokformer.config import TransformerConfig
from tokformer.kv_cache import KVCache
from tokformer.layers import FeedForward, GatedFeedForward, LayerScale, make_norm
from tokformer.rotary import Rope
from tokformer.sparse_attention import SparsePattern


def _attention(cfg: TransformerConfig, cross: bool = False) -> MultiHeadAttention:
    return MultiHeadAttention(
        cfg.d_model,
        cfg.n_heads,
        dropout=cfg.attn_dropout_p,
        proj_dropout=cfg.dropout,
        bias=cfg.bias_of("qkv"),
        proj_bias=cfg.bias_of("out"),
        cross=cross,
        n_kv_heads=cfg.n_kv_heads,
        qk_norm=cfg.norm if cfg.qk_norm else None,
        norm_eps=cfg.norm_eps,
    )


def _feed_forward(cfg: TransformerConfig) -> nn.Module:
    if cfg.mlp == "plain":
        return FeedForward(
            cfg.d_model, cfg.ff_width, activation=cfg.activation, dropout=cfg.dropout, bias=cfg.bias_of("mlp")
        )
    gate = "silu" if cfg.mlp == "swiglu" else ("gelu_tanh" if cfg.activation == "gelu_tanh" else "gelu")
    return GatedFeedForward(cfg.d_model, cfg.ff_width, activation=gate, dropout=cfg.dropout, bias=cfg.bias_of("mlp"))


def _norm(cfg: TransformerConfig) -> nn.Module:
    return make_norm(cfg.norm, cfg.d_model, cfg.norm_eps)


def _layer_scale(cfg: TransformerConfig) -> nn.Module:
    return LayerScale(cfg.d_model, cfg.layer_scale) if cfg.layer_scale is not None else nn.Identity()


def _sublayer(cfg: TransformerConfig, make: Callable[[TransformerConfig], nn.Module]) -> tuple[nn.Module, ...]:
    """The ``(norm, body, layer scale)`` of one residual sublayer, built in that order.

    Every sublayer of every block is these three modules; building them in one place keeps
    their order, and so the blocks' parameter order and state-dict keys, the same everywhere.
    """
    return _norm(cfg), make(cfg), _layer_scale(cfg)


def _residual(x: Tensor, sublayer: Callable[[Tensor], Tensor], norm: nn.Module, norm_first: bool) -> Tensor:
    """``x + f(norm(x))`` (pre-norm) or ``norm(x + f(x))`` (post-norm): the one place the two differ."""
    return x + sublayer(norm(x)) if norm_first else norm(x + sublayer(x))


class EncoderBlock(nn.Module):
    """Self-attention + feed-forward. Bidirectional or causal, decided per call.

    Also the block of decoder-only language models (self-attention with a causal mask).
    Names follow timm's ``Block`` (norm1, attn, ls1, norm2, mlp, ls2).
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.norm_first = cfg.norm_first
        self.norm1, self.attn, self.ls1 = _sublayer(cfg, _attention)
        self.norm2, self.mlp, self.ls2 = _sublayer(cfg, _feed_forward)

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | SparsePattern | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
        rope: Rope | None = None,
    ) -> Tensor:  # [B, N, d] -> [B, N, d]
        attend = lambda h: self.ls1(self.attn(h, attn_mask=attn_mask, is_causal=is_causal, cache=cache, rope=rope))
        x = _residual(x, attend, self.norm1, self.norm_first)
        return _residual(x, lambda h: self.ls2(self.mlp(h)), self.norm2, self.norm_first)


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention to the encoder memory, feed-forward."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.norm_first = cfg.norm_first
        self.norm1, self.attn, self.ls1 = _sublayer(cfg, _attention)
        self.norm2, self.cross_attn, self.ls_cross = _sublayer(cfg, lambda c: _attention(c, cross=True))
        self.norm3, self.mlp, self.ls2 = _sublayer(cfg, _feed_forward)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        *,
        attn_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        is_causal: bool = True,
        cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
        rope: Rope | None = None,
    ) -> Tensor:  # x [B, N, d], memory [B, M, d] -> [B, N, d]
        attend = lambda h: self.ls1(self.attn(h, attn_mask=attn_mask, is_causal=is_causal, cache=cache, rope=rope))
        cross = lambda h: self.ls_cross(self.cross_attn(h, memory, attn_mask=memory_mask, cache=cross_cache))
        x = _residual(x, attend, self.norm1, self.norm_first)
        x = _residual(x, cross, self.norm2, self.norm_first)
        return _residual(x, lambda h: self.ls2(self.mlp(h)), self.norm3, self.norm_first)
