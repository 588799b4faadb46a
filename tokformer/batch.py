"""`TokenBatch`: the one thing every tokenizer emits and every model consumes.

A tokenizer turns raw samples (text, images, graphs, ...) into a padded batch of tokens.
Each token is either a discrete id (looked up in an embedding table) or a continuous
feature vector (projected to d_model). Each token also says where it sits: an integer
index (sequence position) or a position feature vector (2-D coordinates, Laplacian
eigenvectors, latitude/longitude, ...). The core never looks further than this.

Mask polarity, everywhere in tokformer: ``True`` means "real token / may attend", the
convention of :func:`torch.nn.functional.scaled_dot_product_attention`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor


@dataclass
class TokenBatch:
    """A padded batch of B samples of up to N tokens each.

    Exactly one of ``ids`` and ``features`` is set.

    Attributes:
        ids: ``[B, N]`` long token ids, or None.
        features: ``[B, N, F]`` float per-token features, or None.
        mask: ``[B, N]`` bool, True for real tokens, False for padding.
        positions: ``[B, N]`` long indices, ``[B, N, P]`` float position features, or None
            (no positional information: the core is then permutation-equivariant).
        attn_bias: optional ``[B, N, N]`` (or ``[B, H, N, N]``) additive float bias or
            bool mask (True = may attend) that the tokenizer wants attention to use,
            e.g. a graph's adjacency.
        extras: tokenizer-specific values that travel with the batch (e.g. eigenvalues);
            tensors here are batch-first, so `to` moves them and `select` slices them.
    """

    mask: Tensor
    ids: Tensor | None = None
    features: Tensor | None = None
    positions: Tensor | None = None
    attn_bias: Tensor | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.ids is None) == (self.features is None):
            raise ValueError("TokenBatch needs exactly one of `ids` and `features`")
        if self.mask.dtype != torch.bool or self.mask.dim() != 2:
            raise ValueError(f"mask must be a [B, N] bool tensor, got {tuple(self.mask.shape)} {self.mask.dtype}")
        values = self.ids if self.ids is not None else self.features
        if tuple(values.shape[:2]) != tuple(self.mask.shape):
            raise ValueError(
                f"tokens {tuple(values.shape[:2])} and mask {tuple(self.mask.shape)} disagree on [B, N]"
            )
        if self.positions is not None and tuple(self.positions.shape[:2]) != tuple(self.mask.shape):
            raise ValueError(
                f"positions {tuple(self.positions.shape[:2])} and mask {tuple(self.mask.shape)} disagree on [B, N]"
            )

    @classmethod
    def unpadded(cls, ids: Tensor) -> TokenBatch:
        """Ids ``[B, N]`` with no padding: every token real, positions 0..N-1 in every row (packed
        LM windows, fixed-length sequences)."""
        positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)  # [B, N]
        return cls(ids=ids, mask=torch.ones_like(ids, dtype=torch.bool), positions=positions)

    @property
    def batch_size(self) -> int:
        return self.mask.shape[0]

    @property
    def seq_len(self) -> int:
        return self.mask.shape[1]

    @property
    def lengths(self) -> Tensor:
        """``[B]`` number of real tokens per sample."""
        return self.mask.sum(dim=1)

    @property
    def attention_bias(self) -> Tensor | None:
        """``attn_bias`` as every model hands it to attention: a ``[B, N, N]`` bias gains a head dim
        (``[B, 1, N, N]``, the same for every head of every layer); None when there is none."""
        bias = self.attn_bias
        return bias[:, None] if bias is not None and bias.dim() == 3 else bias

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TokenBatch:
        """A copy with every tensor (extras included) on ``device``."""

        def move(value: Any) -> Any:
            return value.to(device, non_blocking=non_blocking) if isinstance(value, Tensor) else value

        moved = {f.name: move(getattr(self, f.name)) for f in fields(self) if f.name != "extras"}
        return replace(self, **moved, extras={k: move(v) for k, v in self.extras.items()})

    def select(self, index: Tensor | slice) -> TokenBatch:
        """The sub-batch of samples at ``index`` (along B)."""

        def pick(value: Any) -> Any:
            return value[index] if isinstance(value, Tensor) else value

        picked = {f.name: pick(getattr(self, f.name)) for f in fields(self) if f.name != "extras"}
        return replace(self, **picked, extras={k: pick(v) for k, v in self.extras.items()})


# A pytree node (its tensors, None fields and ``extras`` dict are its children), so
# torch.export and torch.compile take a TokenBatch as a model input and can mark each of
# its tensors' batch and sequence dimensions dynamic. The serialised name keeps saved
# programs loadable whatever module path the class is imported under.
torch.export.register_dataclass(TokenBatch, serialized_type_name="tokformer.TokenBatch")
