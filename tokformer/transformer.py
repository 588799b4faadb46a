"""Transformer stacks: encoder, decoder, and encoder-decoder.

One block type per stack, repeated ``n_layers`` times. A pre-norm stack ends with a final
LayerNorm (the blocks leave the residual stream un-normalised); a post-norm stack does
not need one (each block already ends in a norm).
"""

from __future__ import annotations

from torch import Tensor, nn

from tokformer.blocks import DecoderBlock, EncoderBlock
from tokformer.config import TransformerConfig
from tokformer.kv_cache import KVCache
from tokformer.masks import combine_masks, padding_mask
from tokformer.weights import init_weights


def _final_norm(cfg: TransformerConfig) -> nn.Module:
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if cfg.norm_first and cfg.final_norm else nn.Identity()


def _self_attention_mask(mask: Tensor | None, attn_mask: Tensor | None) -> Tensor | None:
    """Key padding ``[B, Nk]`` and an optional extra mask -> one mask for every layer."""
    return combine_masks(padding_mask(mask) if mask is not None else None, attn_mask)


class Encoder(nn.Module):
    """A stack of self-attention blocks; bidirectional by default, causal on request.

    Causal use is the decoder-only language model: same blocks, a causal mask.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = _final_norm(cfg)
        init_weights(self, cfg.n_layers)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        attn_mask: Tensor | None = None,
        caches: list[KVCache] | None = None,
    ) -> Tensor:
        """``x`` ``[B, N, d]`` -> ``[B, N, d]``.

        Args:
            mask: ``[B, Nk]`` True for real keys; with ``caches``, Nk counts the cached
                positions followed by the N new ones.
            is_causal: forbid attending to later positions.
            attn_mask: extra bool/additive mask or bias, broadcastable to ``[B, H, N, Nk]``.
            caches: one KVCache per block, for incremental decoding.
        """
        layer_mask = _self_attention_mask(mask, attn_mask)
        for i, block in enumerate(self.blocks):
            cache = caches[i] if caches is not None else None
            x = block(x, attn_mask=layer_mask, is_causal=is_causal, cache=cache)
        return self.norm(x)


class Decoder(nn.Module):
    """A stack of causal self-attention + cross-attention blocks."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
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
    ) -> Tensor:
        """``x`` ``[B, N, d]`` attending to ``memory`` ``[B, M, d]`` -> ``[B, N, d]``.

        Args:
            mask: ``[B, Nk]`` True for real target tokens (cached ones first).
            memory_mask: ``[B, M]`` True for real memory tokens.
            caches / cross_caches: per-block self- and cross-attention caches; filled
                cross caches make ``memory`` unnecessary (pass None).
        """
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
            )
        return self.norm(x)


class EncoderDecoder(nn.Module):
    """The original Transformer: a bidirectional encoder read by a causal decoder."""

    def __init__(self, encoder_cfg: TransformerConfig, decoder_cfg: TransformerConfig | None = None) -> None:
        super().__init__()
        decoder_cfg = decoder_cfg or encoder_cfg
        if decoder_cfg.d_model != encoder_cfg.d_model:
            raise ValueError("encoder and decoder must share d_model (cross-attention reads one from the other)")
        self.encoder = Encoder(encoder_cfg)
        self.decoder = Decoder(decoder_cfg)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:  # [B, M, d] -> [B, M, d]
        return self.encoder(src, src_mask)

    def decode(self, tgt: Tensor, memory: Tensor | None, src_mask: Tensor | None = None, **kwargs) -> Tensor:
        return self.decoder(tgt, memory, memory_mask=src_mask, **kwargs)

    def forward(
        self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None
    ) -> Tensor:  # src [B, M, d], tgt [B, N, d] -> [B, N, d]
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, src_mask, mask=tgt_mask)
