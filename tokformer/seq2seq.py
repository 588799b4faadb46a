"""`Seq2Seq`: the original encoder-decoder Transformer with an output head.

The encoder reads the source with bidirectional attention; the decoder reads the target
shifted right (``<bos> I love`` to predict ``I love you``) with causal self-attention and
cross-attends to the encoder output.
"""

from __future__ import annotations

from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.kv_cache import KVCache, make_caches
from tokformer.transformer import Decoder, Encoder


class Seq2Seq(nn.Module):
    """Source TokenBatch + target TokenBatch -> next-target-token logits.

    Args:
        src_embedder / tgt_embedder: the tokenizers' embedders; pass the same module twice
            to share embeddings between a shared source/target vocabulary.
        encoder_cfg / decoder_cfg: the two stacks (same d_model).
        tgt_vocab_size: output classes.
        tie_output: reuse the target embedding table as the output projection.
    """

    def __init__(
        self,
        src_embedder: Embedder,
        tgt_embedder: Embedder,
        encoder_cfg: TransformerConfig,
        decoder_cfg: TransformerConfig,
        tgt_vocab_size: int,
        tie_output: bool = True,
    ) -> None:
        super().__init__()
        if encoder_cfg.d_model != decoder_cfg.d_model:
            raise ValueError("encoder and decoder must share d_model (cross-attention reads one from the other)")
        self.src_embedder = src_embedder
        self.tgt_embedder = tgt_embedder
        self.encoder = Encoder(encoder_cfg)
        self.decoder = Decoder(decoder_cfg)
        self.head = nn.Linear(decoder_cfg.d_model, tgt_vocab_size, bias=False)
        nn.init.normal_(self.head.weight, std=0.02)
        if tie_output:
            self.head.weight = tgt_embedder.tokens.weight

    def encode(self, src: TokenBatch) -> Tensor:  # -> memory [B, M, d]
        """The source's ``attn_bias``, if any, applies to the encoder's self-attention."""
        return self.encoder(self.src_embedder(src), src.mask, attn_mask=src.attention_bias, positions=src.positions)

    def decode(
        self,
        tgt: TokenBatch,
        memory: Tensor | None,
        memory_mask: Tensor,
        *,
        caches: list[KVCache] | None = None,
        cross_caches: list[KVCache] | None = None,
        key_mask: Tensor | None = None,
    ) -> Tensor:
        """Logits ``[B, N, V]``; with caches, ``key_mask`` covers cached + new target tokens. The
        target's ``attn_bias``, if any, applies to the decoder's self-attention (with the causal mask)."""
        x = self.tgt_embedder(tgt)
        x = self.decoder(
            x,
            memory,
            tgt.mask if key_mask is None else key_mask,
            memory_mask,
            caches=caches,
            cross_caches=cross_caches,
            attn_mask=tgt.attention_bias,
            positions=tgt.positions,
        )
        return self.head(x)

    def forward(self, src: TokenBatch, tgt: TokenBatch) -> Tensor:  # -> [B, N, V]
        return self.decode(tgt, self.encode(src), src.mask)

    def make_caches(self) -> tuple[list[KVCache], list[KVCache]]:
        """Fresh (self-attention, cross-attention) caches for incremental decoding."""
        n = len(self.decoder.blocks)
        return make_caches(n), make_caches(n)
