"""Model-side modules of the graph tokenizer: where the graph's edges reach the model.

The shared core sees tokens; these modules, built by
:class:`~tokformer.tokenizers.graph.GraphTokenizer`, turn a graph batch's edge list
(``extras["edges"]``) into what the core understands:

* :class:`GraphAttention`: the attention mask of a batch: a dense ``[B, H, N, N]``
  bias or mask, or a :class:`~tokformer.sparse_attention.SparsePattern` (O(edges)
  memory), with a learned per-head bias for each kind of pair (self, edge, graph token);
* :class:`SignNetPositions`: a sign-invariant reader of Laplacian eigenvectors
  (Lim et al. 2022, "Sign and Basis Invariant Networks for Spectral Graph Representation
  Learning"): ``rho([phi(v_i) + phi(-v_i)]_i)``, with ``phi`` a small GIN over the graph,
  so flipping any eigenvector's sign leaves the model's input exactly unchanged;
* :class:`GraphEmbedder`: node features + SignNet positions -> ``[B, N, d]``.
"""

from __future__ import annotations

from typing import Literal

import torch
from einops import rearrange
from torch import Tensor, nn

from tokformer.batch import TokenBatch
from tokformer.sparse_attention import SparsePattern

Attention = Literal["full", "bias", "mask", "sparse"]
#: Kinds of attention pair, rows of :class:`GraphAttention`'s bias table.
SELF, EDGE, GRAPH = 0, 1, 2
NONE = 3  # an unlisted pair: 0 under ``bias``, -inf under ``mask``


def flat_edges(batch: TokenBatch) -> tuple[Tensor, Tensor, Tensor]:
    """``(query, key, valid)`` ``[B * E]``: flat token indices ``b * N + i`` of every edge (both
    directions) and whether it is real. Padding edges stay in (with ``valid`` False), so shapes
    do not depend on the data and the model exports and compiles whole."""
    edges, valid = batch.extras["edges"], batch.extras["edge_valid"]  # [B, E, 2], [B, E]
    base = torch.arange(batch.batch_size, device=edges.device)[:, None] * batch.seq_len  # [B, 1]
    return (edges[..., 0] + base).flatten(), (edges[..., 1] + base).flatten(), valid.flatten()


def graph_pairs(batch: TokenBatch, graph_token: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``(query, key, kind)`` ``[P]`` of every pair that may attend under ``attention=mask``.

    Pairs: each real token with itself (SELF), each edge both ways (EDGE), and with a graph
    token, it with every node both ways (GRAPH). O(N + E) pairs; eager only (P depends on the data).
    """
    real = batch.mask.flatten().nonzero().squeeze(1)  # [R] flat indices of real tokens
    edge_q, edge_k, valid = flat_edges(batch)
    query, key = [real, edge_q[valid]], [real, edge_k[valid]]
    kinds = [torch.full_like(real, SELF), torch.full_like(query[1], EDGE)]
    if graph_token:
        nodes = real[real % batch.seq_len != 0]  # [R - B] every real token but the graph token
        token = nodes // batch.seq_len * batch.seq_len  # its sample's graph token
        query += [token, nodes]
        key += [nodes, token]
        kinds.append(torch.full_like(nodes, GRAPH).repeat(2))
    return torch.cat(query), torch.cat(key), torch.cat(kinds)


class GraphAttention(nn.Module):
    """A graph batch -> the attention mask every layer uses (None for ``full``).

    With ``learned``, each kind of pair (self, edge, graph token) has one bias per head,
    shared by every layer (as Graphormer's spatial bias, here for 1-hop adjacency only, so
    a Transformer without positions still sees no more than 1-WL does). Without it, dense
    modes use the tokenizer's own ``batch.attn_bias`` (so the model needs no edge list and
    exports with any number of edges) and ``sparse`` has no bias.

    Args:
        attention: ``full`` (no structure), ``bias`` (attend everywhere, pairs get their
            bias), ``mask`` (only pairs attend; dense ``[B, H, N, N]``) or ``sparse``
            (the same pairs as a :class:`SparsePattern`: O(N + E) memory, eager only).
        n_heads: attention heads (one bias each).
        graph_token: token 0 of each sample is a graph token that meets every node.
        edge_bias: initial bias of an edge under ``bias`` (the others start at 0).
        learned: learn the biases.
    """

    def __init__(self, attention: Attention, n_heads: int, *, graph_token: bool, edge_bias: float = 1.0,
                 learned: bool = True) -> None:
        super().__init__()
        self.attention = attention
        self.graph_token = graph_token
        self.bias: nn.Parameter | None = None  # [kind, H]
        if learned and attention != "full":
            table = torch.zeros(3, n_heads)
            if attention == "bias":
                table[EDGE] = edge_bias
            self.bias = nn.Parameter(table)

    def forward(self, batch: TokenBatch) -> Tensor | SparsePattern | None:
        if self.attention == "full":
            return None
        if self.attention == "sparse":
            query, key, kind = graph_pairs(batch, self.graph_token)
            return SparsePattern(query, key, batch.mask, self.bias[kind] if self.bias is not None else None)
        return self._dense(batch) if self.bias is not None else batch.attention_bias

    def _dense(self, batch: TokenBatch) -> Tensor:
        """``[B, H, N, N]`` additive mask: each pair's bias; elsewhere 0 (``bias``) or -inf (``mask``)."""
        b, n = batch.mask.shape
        query, key, valid = flat_edges(batch)
        adjacency = self.bias.new_zeros(b * n * n).index_add(0, query * n + key % n, valid.to(self.bias.dtype))
        kind = torch.where(adjacency.view(b, n, n) > 0, EDGE, NONE)  # [B, N, N]
        real = batch.mask[:, :, None] & batch.mask[:, None, :]  # [B, N, N]
        if self.graph_token:
            index = torch.arange(n, device=kind.device)
            touches_token = (index[:, None] == 0) | (index[None, :] == 0)  # [N, N] row or column 0
            kind = torch.where(touches_token & real, GRAPH, kind)
        kind = torch.where(torch.eye(n, dtype=torch.bool, device=kind.device) & real, SELF, kind)
        off = self.bias.new_full((1, self.bias.shape[1]), float("-inf") if self.attention == "mask" else 0.0)
        return torch.cat((self.bias, off))[kind].permute(0, 3, 1, 2)  # [B, H, N, N]


class GIN(nn.Module):
    """One graph isomorphism layer: ``mlp((1 + eps) h_u + sum of h_w over neighbours w)``."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(()))
        self.mlp = nn.Sequential(nn.Linear(d_in, d_out), nn.GELU(), nn.Linear(d_out, d_out))

    def forward(self, h: Tensor, query: Tensor, key: Tensor, valid: Tensor) -> Tensor:
        """``h`` ``[B * N, ..., c]``; edges as from :func:`flat_edges` -> ``[B * N, ..., d_out]``."""
        weight = valid.to(h.dtype).view(-1, *[1] * (h.dim() - 1))  # padding edges carry nothing
        return self.mlp((1 + self.eps) * h + torch.zeros_like(h).index_add(0, query, h[key] * weight))


class SignNetPositions(nn.Module):
    """Laplacian eigenvectors -> ``[B, N, d]`` position vectors, invariant to each eigenvector's sign.

    An eigenvector's sign is arbitrary; a linear reader must learn to ignore it from
    random flips, and on CSL it does not. SignNet removes the question: each eigenvector
    ``v_i`` (as a signal on the graph, with its eigenvalue if given) goes through the same
    GIN ``phi`` twice, as ``v_i`` and ``-v_i``, and the two outputs are summed, so a flip
    swaps two terms of a sum. ``phi`` aggregates over edges, so it can read how an
    eigenvector varies between neighbours (``A v = (1 - lambda) D v``: its frequency),
    which pooled per-node coordinates do not show. ``rho`` mixes the ``k`` invariant
    summaries per node.

    Args:
        k: eigenvectors per node.
        d_model: output width.
        eigenvalues: positions carry the ``k`` eigenvalues after the eigenvectors; each
            ``phi`` input is then ``(v_i[u], lambda_i)``.
        width: channels of ``phi`` per eigenvector.
        layers: GIN layers in ``phi``.
    """

    def __init__(self, k: int, d_model: int, *, eigenvalues: bool, width: int = 16, layers: int = 2) -> None:
        super().__init__()
        self.k = k
        self.eigenvalues = eigenvalues
        self.phi = nn.ModuleList(GIN(1 + int(eigenvalues) if i == 0 else width, width) for i in range(layers))
        self.act = nn.GELU()
        self.rho = nn.Sequential(nn.Linear(k * width, d_model), nn.GELU(), nn.Linear(d_model, d_model))

    def forward(self, batch: TokenBatch) -> Tensor:  # -> [B, N, d]
        positions, k = batch.positions, self.k
        x = positions[..., :k, None]  # [B, N, k, 1] eigenvector coordinates
        signed = torch.stack((x, -x), dim=2)  # [B, N, 2, k, 1] both signs
        if self.eigenvalues:
            values = positions[..., None, k:, None].expand_as(signed)  # eigenvalues have no sign
            signed = torch.cat((signed, values), dim=-1)  # [B, N, 2, k, 2]
        h = rearrange(signed, "b n s k c -> (b n) s k c")
        edges = flat_edges(batch)
        for i, layer in enumerate(self.phi):
            h = layer(self.act(h) if i else h, *edges)  # [B * N, 2, k, width]
        h = h.sum(dim=1)  # [B * N, k, width]: phi(v) + phi(-v)
        h = rearrange(h, "(b n) k c -> b n k c", b=batch.batch_size)
        h = h * batch.extras["eig_valid"][:, None, :, None]  # padded eigenvectors say nothing
        return self.rho(h.flatten(-2))  # [B, N, d]


class GraphEmbedder(nn.Module):
    """Node features (linear) + SignNet positions, zeroed on the graph token and on padding."""

    def __init__(self, d_model: int, in_features: int, position: SignNetPositions, *, graph_token: bool,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.tokens = nn.Linear(in_features, d_model)
        self.position = position
        self.graph_token = graph_token
        self.drop = nn.Dropout(dropout)

    def forward(self, batch: TokenBatch) -> Tensor:  # -> [B, N, d]
        nodes = batch.mask.clone()  # [B, N]
        nodes[:, : int(self.graph_token)] = False
        x = self.tokens(batch.features) + self.position(batch) * nodes[..., None]
        return self.drop(x)
