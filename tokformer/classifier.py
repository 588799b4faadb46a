"""`EncoderClassifier`: any tokenizer's embedder + the shared encoder + a classification head.

With an image patch embedder this is a Vision Transformer; with a graph node embedder, a
graph Transformer classifier. The model itself knows neither: it maps a
:class:`~tokformer.TokenBatch` to class logits.
"""

from __future__ import annotations

from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.config import TransformerConfig
from tokformer.heads import ClassificationHead
from tokformer.masks import padding_or_none
from tokformer.transformer import Encoder


class EncoderClassifier(nn.Module):
    """``TokenBatch`` -> ``[B, n_classes]`` logits: embed, encode bidirectionally, pool, project.

    Args:
        embedder: maps the batch to ``[B, N, d]`` (a tokenizer's ``build_embedder``).
        encoder_cfg: the Transformer stack; ``d_model`` must match the embedder's.
        head: pooling + projection; with ``head.norm`` (post-pool LayerNorm) build the
            encoder with ``final_norm=False``, as timm does for average pooling.
    """

    def __init__(self, embedder: nn.Module, encoder_cfg: TransformerConfig, head: ClassificationHead) -> None:
        super().__init__()
        self.embedder = embedder
        self.encoder = Encoder(encoder_cfg)
        self.head = head
        nn.init.normal_(head.proj.weight, std=0.02)
        nn.init.zeros_(head.proj.bias)

    def features(self, batch: TokenBatch) -> Tensor:
        """Encoded tokens ``[B, N, d]``; the batch's ``attn_bias`` (e.g. a graph's adjacency), if any,
        applies to every head of every layer."""
        x = self.embedder(batch)  # [B, N, d]
        return self.encoder(x, padding_or_none(batch.mask), attn_mask=batch.attention_bias, positions=batch.positions)

    def forward(self, batch: TokenBatch) -> Tensor:  # -> [B, n_classes]
        return self.head(self.features(batch), batch.mask)

