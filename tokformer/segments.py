"""Mixing modalities: several tokenizers' batches as one sequence for one Transformer.

A :class:`~tokformer.batch.TokenBatch` holds one kind of token: ids or features, one kind of
position. An image followed by a question is two of them. :class:`SegmentEmbedder` embeds each
segment with its own tokenizer's embedder (so each keeps its positions: 2-D patch coordinates for
the image, 0..n-1 for the text), adds a learned embedding of the segment's modality (type
embedding: which tokenizer a token came from), and concatenates the segments along the sequence
in the order given, masks included. Padding stays where each segment put it: a padded prompt
leaves masked slots between the prompt and the answer, which attention ignores, so a sample's
outputs do not depend on how much its neighbours made the batch pad (tested).

With :func:`~tokformer.masks.prefix_lm_mask` over the segments before the answer, this is the
PaliGemma layout: bidirectional over image + prompt, causal over the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tokformer.batch import TokenBatch


@dataclass
class MixedSequence:
    """Segments embedded and concatenated.

    Attributes:
        x: ``[B, N, d]`` the embedded tokens of every segment, in order.
        mask: ``[B, N]`` True for real tokens (each segment's own mask, concatenated).
        spans: segment name -> its ``slice`` of the N tokens.
    """

    x: Tensor
    mask: Tensor
    spans: dict[str, slice]

    def end_of(self, name: str) -> int:
        """Where segment ``name`` ends: the prefix length of everything up to and including it."""
        return self.spans[name].stop


class SegmentEmbedder(nn.Module):
    """Embed named segments (one :class:`TokenBatch` per modality) into one sequence.

    Args:
        embedders: segment name -> the module that embeds that segment's batch (usually its
            tokenizer's ``build_embedder(d_model)``); the forward pass takes the segments in
            this order.
        d_model: the model width, shared by every embedder.

    The type embeddings start at N(0, 0.02), like GPT-2's token table: small next to the
    token embeddings, so a fresh model sees its tokens first.
    """

    def __init__(self, embedders: Mapping[str, nn.Module], d_model: int) -> None:
        super().__init__()
        if not embedders:
            raise ValueError("SegmentEmbedder needs at least one segment")
        self.embedders = nn.ModuleDict(embedders)
        self.types = nn.Embedding(len(embedders), d_model)
        nn.init.normal_(self.types.weight, std=0.02)

    @property
    def names(self) -> list[str]:
        return list(self.embedders)

    def forward(self, segments: Mapping[str, TokenBatch]) -> MixedSequence:
        if set(segments) != set(self.embedders):
            raise ValueError(f"expected the segments {self.names}, got {list(segments)}")
        sizes = {name: segments[name].batch_size for name in self.names}
        if any(size != sizes[self.names[0]] for size in sizes.values()):  # no set(): traced sizes are unhashable
            raise ValueError(f"segments disagree on the batch size: {sizes}")
        parts, masks, spans, start = [], [], {}, 0
        for name in self.names:
            batch = segments[name]
            parts.append(self.embed(name, batch))
            masks.append(batch.mask)
            spans[name] = slice(start, start + batch.seq_len)
            start += batch.seq_len
        return MixedSequence(torch.cat(parts, dim=1), torch.cat(masks, dim=1), spans)

    def embed(self, name: str, batch: TokenBatch) -> Tensor:
        """One segment alone, typed: ``[B, n, d]``. Incremental decoding embeds each new answer token
        this way, after the segments before it went through the model once."""
        x = self.embedders[name](batch)  # [B, n, d]
        if tuple(x.shape[:2]) != tuple(batch.mask.shape):
            raise ValueError(
                f"segment {name!r}: its embedder gave {tuple(x.shape[:2])} tokens for a batch of "
                f"{tuple(batch.mask.shape)}"
            )
        return x + self.types.weight[self.names.index(name)].to(x.dtype)
