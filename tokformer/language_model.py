"""`CausalLM`: a decoder-only language model built from the shared core.

Embedder (the tokenizer's) -> causal Encoder stack -> linear head to the vocabulary.
GPT-style: the "decoder-only" model is the encoder stack with a causal mask; there is no
cross-attention because there is nothing to cross-attend to.
"""

from __future__ import annotations

from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.kv_cache import KVCache, cached_length, make_caches
from tokformer.masks import padding_or_none
from tokformer.transformer import Encoder


class CausalLM(nn.Module):
    """Next-token prediction over a vocabulary of ``vocab_size`` ids.

    Args:
        embedder: maps a TokenBatch of ids (and positions) to ``[B, N, d]``.
        cfg: the Transformer stack.
        vocab_size: output classes.
        tie_embeddings: share the input embedding table with the output projection
            (Press & Wolf 2017): fewer parameters, and usually a better small model.
    """

    def __init__(self, embedder: Embedder, cfg: TransformerConfig, vocab_size: int, tie_embeddings: bool = True):
        super().__init__()
        self.embedder = embedder
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, vocab_size, bias=False)
        nn.init.normal_(self.head.weight, std=0.02)
        if tie_embeddings:
            if not isinstance(embedder.tokens, nn.Embedding) or embedder.tokens.weight.shape != self.head.weight.shape:
                raise ValueError("tied embeddings need an id embedding table of shape [vocab_size, d_model]")
            self.head.weight = embedder.tokens.weight

    def features(
        self,
        batch: TokenBatch,
        caches: list[KVCache] | None = None,
        key_mask: Tensor | None = None,
        *,
        padded: bool = True,
    ) -> Tensor:
        """The last layer's output ``[B, N, d]``, before the vocabulary head (see :meth:`forward`).

        Generation reads it to project only the last position onto the vocabulary: the head is
        the largest matrix in a small LM, and a prompt's other positions need no logits.
        """
        x = self.embedder(batch)  # [B, N, d]
        key_mask = batch.mask if key_mask is None else key_mask
        if cached_length(caches) == 0:  # no padding, promised or found: SDPA's fused causal kernel
            key_mask = padding_or_none(key_mask) if padded else None
        return self.encoder(x, key_mask, is_causal=True, attn_mask=batch.attention_bias, caches=caches,
                            positions=batch.positions)

    def forward(
        self,
        batch: TokenBatch,
        caches: list[KVCache] | None = None,
        key_mask: Tensor | None = None,
        *,
        padded: bool = True,
    ) -> Tensor:
        """Logits ``[B, N, vocab]`` for the next token after each position.

        ``key_mask`` ``[B, Nk]`` covers cached and new positions when decoding with
        ``caches``; by default it is ``batch.mask``. ``batch.attn_bias`` (``[B, N, Nk]``), if any,
        applies on top of the causal mask. ``padded=False`` is the caller's promise
        that no token is padding (packed training windows): attention then takes SDPA's fused
        causal kernel without looking at the mask, compiled or not.
        """
        return self.head(self.features(batch, caches, key_mask, padded=padded))

    def make_caches(self) -> list[KVCache]:
        return make_caches(len(self.encoder.blocks))

