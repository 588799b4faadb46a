"""``TokenBatch.attn_bias`` is honoured by every model: a bias that hides a token from attention
changes the other tokens' outputs exactly as removing the token (keeping positions) would."""

from __future__ import annotations

import torch

from tokformer.batch import TokenBatch
from tokformer.classifier import EncoderClassifier
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.heads import ClassificationHead
from tokformer.language_model import CausalLM
from tokformer.positional import LearnedPositions
from tokformer.seq2seq import Seq2Seq
from tokformer.tasks.sort import SortConfig, SortModel

CFG = TransformerConfig(d_model=16, n_heads=2, n_layers=2, dropout=0.0)
HIDDEN = 2  # the token the bias hides (a middle one, so later positions matter)


def ids_batch(ids: list[int], positions: list[int], hide: bool = False) -> TokenBatch:
    n = len(ids)
    bias = None
    if hide:
        bias = torch.ones(1, n, n, dtype=torch.bool)
        bias[:, :, HIDDEN] = False  # nobody attends to it
        bias[:, HIDDEN, HIDDEN] = True  # but it attends to itself (a row needs a key)
    return TokenBatch(mask=torch.ones(1, n, dtype=torch.bool), ids=torch.tensor([ids]),
                      positions=torch.tensor([positions]), attn_bias=bias)


def both(ids: list[int]) -> tuple[TokenBatch, TokenBatch, list[int]]:
    """(all tokens with HIDDEN hidden by the bias, the batch without HIDDEN, the kept indices)."""
    keep = [i for i in range(len(ids)) if i != HIDDEN]
    return ids_batch(ids, list(range(len(ids))), hide=True), ids_batch([ids[i] for i in keep], keep), keep


def embedder(vocab: int = 10) -> Embedder:
    torch.manual_seed(0)
    return Embedder(16, vocab_size=vocab, position=LearnedPositions(16, 8))


def test_sort_model() -> None:
    torch.manual_seed(0)
    model = SortModel(SortConfig(seq_len=6, d_model=16, n_heads=2, n_layers=2)).eval()
    hidden, removed, keep = both([3, 1, 4, 1, 5, 9])
    torch.testing.assert_close(model(hidden)[:, keep], model(removed), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(model(ids_batch([3, 1, 4, 1, 5, 9], list(range(6))))[:, keep], model(removed))


def test_causal_lm() -> None:
    model = CausalLM(embedder(), CFG, 10).eval()
    hidden, removed, keep = both([3, 1, 4, 1, 5, 9])
    torch.testing.assert_close(model(hidden)[:, keep], model(removed), atol=1e-5, rtol=1e-5)


def test_encoder_classifier() -> None:
    head = ClassificationHead(16, 3, pool="cls", n_prefix=1)
    model = EncoderClassifier(embedder(), CFG, head).eval()
    hidden, removed, _ = both([0, 1, 4, 1, 5, 9])
    torch.testing.assert_close(model(hidden), model(removed), atol=1e-5, rtol=1e-5)


def test_seq2seq_source_and_target() -> None:
    model = Seq2Seq(embedder(), embedder(), CFG, CFG, 10).eval()
    src = ids_batch([2, 7, 3], [0, 1, 2])
    hidden, removed, keep = both([3, 1, 4, 1, 5, 9])
    torch.testing.assert_close(model(src, hidden)[:, keep], model(src, removed), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.encode(hidden)[:, keep], model.encode(removed), atol=1e-5, rtol=1e-5)
