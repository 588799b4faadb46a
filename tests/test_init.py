"""Models built from library parts initialise themselves: no trap left for the caller.

An untrained model that predicts ``V`` classes should be close to uniform, so its first loss
is near ln(V). ``nn.Embedding``'s default N(0, 1) table, tied to the output layer, gives
logits with a standard deviation near sqrt(d_model) and a first loss many times ln(V)
(and a backward pass slowed by denormals). These tests build models the way the README
does, without calling :func:`tokformer.weights.init_weights`, and fail on that trap.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tokformer.batch import TokenBatch
from tokformer.classifier import EncoderClassifier
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.heads import ClassificationHead
from tokformer.language_model import CausalLM
from tokformer.positional import LearnedPositions, SinusoidalPositions
from tokformer.seq2seq import Seq2Seq

D, VOCAB, N = 128, 4096, 32


def ids_batch(generator: torch.Generator, batch: int = 4, length: int = N) -> TokenBatch:
    ids = torch.randint(0, VOCAB, (batch, length), generator=generator)
    return TokenBatch(ids=ids, mask=torch.ones_like(ids, dtype=torch.bool),
                      positions=torch.arange(length).expand(batch, length))


def cfg(**options) -> TransformerConfig:
    return TransformerConfig(d_model=D, n_heads=4, n_layers=2, d_ff=4 * D, dropout=0.0, **options)


def first_loss(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return F.cross_entropy(logits.flatten(0, -2), labels.flatten()).item()


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("options", [{}, {"norm": "rms", "mlp": "swiglu", "rope": "1d", "n_kv_heads": 2}],
                         ids=["gpt2", "llama"])
def test_untrained_causal_lm_starts_at_the_uniform_loss(tied: bool, options: dict) -> None:
    torch.manual_seed(0)
    position = None if options else LearnedPositions(D, N)
    model = CausalLM(Embedder(D, vocab_size=VOCAB, position=position), cfg(**options), VOCAB, tie_embeddings=tied)
    batch = ids_batch(torch.Generator().manual_seed(1))
    with torch.no_grad():
        loss = first_loss(model(batch)[:, :-1], batch.ids[:, 1:])
    assert abs(loss - math.log(VOCAB)) < 0.1 * math.log(VOCAB), loss


def test_untrained_seq2seq_starts_at_the_uniform_loss() -> None:
    torch.manual_seed(0)
    embedder = Embedder(D, vocab_size=VOCAB, position=LearnedPositions(D, N))
    model = Seq2Seq(embedder, embedder, cfg(), cfg(), VOCAB, tie_output=True)
    gen = torch.Generator().manual_seed(1)
    src, tgt = ids_batch(gen), ids_batch(gen)
    with torch.no_grad():
        loss = first_loss(model(src, tgt)[:, :-1], tgt.ids[:, 1:])
    assert abs(loss - math.log(VOCAB)) < 0.1 * math.log(VOCAB), loss


def test_untrained_classifier_starts_at_the_uniform_loss() -> None:
    torch.manual_seed(0)
    classes = 10
    model = EncoderClassifier(Embedder(D, vocab_size=VOCAB, position=LearnedPositions(D, N)), cfg(),
                              ClassificationHead(D, classes, pool="mean"))
    batch = ids_batch(torch.Generator().manual_seed(1), batch=64)
    with torch.no_grad():
        loss = first_loss(model(batch), torch.randint(0, classes, (64,), generator=torch.Generator().manual_seed(2)))
    assert abs(loss - math.log(classes)) < 0.1 * math.log(classes), loss


@pytest.mark.parametrize("scale", [False, True])
def test_token_table_starts_small_or_at_unit_scale_when_scaled(scale: bool) -> None:
    """GPT-2's 0.02 without scaling; with the paper's sqrt(d) scaling the scaled vectors have unit std."""
    torch.manual_seed(0)
    embedder = Embedder(D, vocab_size=VOCAB, position=SinusoidalPositions(D), scale=scale)
    scaled_std = (embedder.tokens.weight * embedder.scale).std().item()
    assert scaled_std == pytest.approx(1.0 if scale else 0.02, rel=0.05)


def test_learned_positions_start_small_beside_the_tokens() -> None:
    torch.manual_seed(0)
    assert LearnedPositions(D, 1024).table.weight.std().item() == pytest.approx(0.02, rel=0.05)
