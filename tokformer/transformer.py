"""Transformer stacks: encoder and decoder (the encoder-decoder model is :class:`~tokformer.seq2seq.Seq2Seq`).

One block type per stack, repeated ``n_layers`` times. A pre-norm stack ends with a final
norm (the blocks leave the residual stream un-normalised); a post-norm stack does not
need one (each block already ends in a norm).

With ``cfg.rope`` set, a stack turns the tokens' ``positions`` into rotations once per
forward pass and hands them to every block; the embedder then adds no positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokformer.blocks import DecoderBlock, EncoderBlock
from tokformer.config import TransformerConfig
from tokformer.kv_cache import KVCache, cached_length
from tokformer.layers import make_norm
from tokformer.masks import combine_masks, padding_mask
from tokformer.rotary import Rope, RotaryEmbedding, prepend_identity
from tokformer.sparse_attention import SparsePattern
from tokformer.weights import init_weights


def _final_norm(cfg: TransformerConfig) -> nn.Module:
    return make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if cfg.norm_first and cfg.final_norm else nn.Identity()


def _rotary(cfg: TransformerConfig) -> RotaryEmbedding | None:
    if cfg.rope == "none":
        return None
    return RotaryEmbedding(
        cfg.d_head,
        cfg.rope_theta,
        dims=2 if cfg.rope == "2d" else 1,
        layout=cfg.rope_layout,
        axes=cfg.rope_axes,
        ref_grid=cfg.rope_ref_grid,
    )


def _rope(rotary: RotaryEmbedding | None, positions: Tensor | None) -> Rope | None:
    if rotary is None:
        return None
    if positions is None:
        raise ValueError("this stack uses rotary position embeddings: pass the tokens' `positions`")
    return rotary(positions)


def _self_attention_mask(
    mask: Tensor | None, attn_mask: Tensor | SparsePattern | None
) -> Tensor | SparsePattern | None:
    """Key padding ``[B, Nk]`` and an optional extra mask -> one mask for every layer.

    A sparse pattern lists real tokens only, so it already excludes padding."""
    if isinstance(attn_mask, SparsePattern):
        return attn_mask
    return combine_masks(padding_mask(mask) if mask is not None else None, attn_mask)


def _pad_front(mask: Tensor, n: int, dims: int) -> Tensor:
    """Open ``n`` leading slots (True / 0: attend) in the key dim and, with ``dims=2``, the query
    dim of a bool or additive mask; a query dim of size 1 broadcasts and stays as it is."""
    fill = True if mask.dtype == torch.bool else 0.0
    pad_queries = dims == 2 and mask.dim() >= 2 and mask.shape[-2] != 1
    return F.pad(mask, (n, 0, n, 0) if pad_queries else (n, 0), value=fill)


class Encoder(nn.Module):
    """A stack of self-attention blocks; bidirectional by default, causal on request.

    Causal use is the decoder-only language model: same blocks, a causal mask.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.registers = nn.Parameter(torch.zeros(1, cfg.n_registers, cfg.d_model)) if cfg.n_registers else None
        self.rotary = _rotary(cfg)
        self.norm_pre = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if cfg.input_norm else nn.Identity()
        self.blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = _final_norm(cfg)
        init_weights(self, cfg.n_layers)

    def no_weight_decay(self) -> list[str]:
        """Register tokens are learned inputs, like embeddings: decay would only erase them."""
        return ["registers"] if self.registers is not None else []

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        attn_mask: Tensor | SparsePattern | None = None,
        caches: list[KVCache] | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``x`` ``[B, N, d]`` -> ``[B, N, d]``.

        Args:
            mask: ``[B, Nk]`` True for real keys; with ``caches``, Nk counts the cached
                positions followed by the N new ones.
            is_causal: forbid attending to later positions.
            attn_mask: extra bool/additive mask or bias, broadcastable to ``[B, H, N, Nk]``,
                or a :class:`~tokformer.sparse_attention.SparsePattern`. Registers join either
                as global tokens (they see every token, every token sees them), so the mask
                must be bidirectional; causal attention is ``is_causal``, under which the
                registers are a prefix that sees only itself.
            caches: one KVCache per block, for incremental decoding.
            positions: the N tokens' positions ``[B, N]`` / ``[B, N, 2]``; needed (only)
                with rotary embeddings.
        """
        rope = _rope(self.rotary, positions)
        n_reg = self.registers.shape[1] if self.registers is not None else 0
        inserted = n_reg if cached_length(caches) == 0 else 0  # later passes find them in the KV cache
        if n_reg:
            # Registers go in front of the tokens, visible to all and unrotated; they are
            # dropped again at the output, so callers never see them. Masks gain their keys.
            mask = _pad_front(mask, n_reg, 1) if mask is not None else None
            if isinstance(attn_mask, SparsePattern):
                attn_mask = attn_mask.prepend_global(n_reg)
            elif attn_mask is not None:
                attn_mask = _pad_front(attn_mask, n_reg, 2 if inserted else 1)
        if inserted:
            x = torch.cat((self.registers.expand(x.shape[0], -1, -1).to(x.dtype), x), dim=1)
            rope = prepend_identity(rope, n_reg) if rope is not None else None
        x = self.norm_pre(x)
        layer_mask = _self_attention_mask(mask, attn_mask)
        for i, block in enumerate(self.blocks):
            cache = caches[i] if caches is not None else None
            x = block(x, attn_mask=layer_mask, is_causal=is_causal, cache=cache, rope=rope)
        return self.norm(x[:, inserted:])


class Decoder(nn.Module):
    """A stack of causal self-attention + cross-attention blocks."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        if cfg.n_registers:
            raise ValueError("register tokens belong to encoders; a decoder reads its memory instead")
        self.rotary = _rotary(cfg)
        self.blocks = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = _final_norm(cfg)
        init_weights(self, cfg.n_layers)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        *,
        is_causal: bool = True,
        attn_mask: Tensor | None = None,
        caches: list[KVCache] | None = None,
        cross_caches: list[KVCache] | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``x`` ``[B, N, d]`` attending to ``memory`` ``[B, M, d]`` -> ``[B, N, d]``.

        Args:
            mask: ``[B, Nk]`` True for real target tokens (cached ones first).
            memory_mask: ``[B, M]`` True for real memory tokens.
            caches / cross_caches: per-block self- and cross-attention caches; filled
                cross caches make ``memory`` unnecessary (pass None).
            positions: the N target tokens' positions (rotary embeddings only; they
                rotate self-attention, never cross-attention).
        """
        rope = _rope(self.rotary, positions)
        self_mask = _self_attention_mask(mask, attn_mask)
        cross_mask = padding_mask(memory_mask) if memory_mask is not None else None
        for i, block in enumerate(self.blocks):
            x = block(
                x,
                memory,
                attn_mask=self_mask,
                memory_mask=cross_mask,
                is_causal=is_causal,
                cache=caches[i] if caches is not None else None,
                cross_cache=cross_caches[i] if cross_caches is not None else None,
                rope=rope,
            )
        return self.norm(x)

