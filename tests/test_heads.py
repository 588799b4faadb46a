"""ClassificationHead pooling, label-smoothing cross-entropy, top-k counting; EncoderClassifier wiring."""

import math

import pytest
import torch

from tokformer import Embedder, TokenBatch, TransformerConfig
from tokformer.classifier import EncoderClassifier
from tokformer.heads import ClassificationHead, label_smoothing_cross_entropy, masked_mean, topk_correct


def test_masked_mean_ignores_padding_and_survives_empty_rows():
    x = torch.tensor([[[1.0], [3.0], [100.0]], [[5.0], [7.0], [9.0]]])  # [2, 3, 1]
    mask = torch.tensor([[True, True, False], [False, False, False]])
    assert masked_mean(x, mask).flatten().tolist() == [2.0, 0.0]
    assert masked_mean(x, None).flatten().tolist() == pytest.approx([104 / 3, 7.0])


def test_cls_pooling_reads_only_token_zero():
    torch.manual_seed(0)
    head = ClassificationHead(8, 4, pool="cls", n_prefix=1)
    x = torch.randn(2, 5, 8)
    y = x.clone()
    y[:, 1:] = torch.randn(2, 4, 8)  # change every non-class token
    assert torch.equal(head(x), head(y))


def test_mean_pooling_skips_prefix_and_padding():
    torch.manual_seed(0)
    head = ClassificationHead(8, 3, pool="mean", n_prefix=1, norm=True)
    x = torch.randn(1, 4, 8)
    mask = torch.tensor([[True, True, True, False]])
    expected = head.proj(head.norm(x[:, 1:3].mean(dim=1)))
    torch.testing.assert_close(head(x, mask), expected)
    y = x.clone()
    y[:, 0] += 10  # the class token
    y[:, 3] += 10  # a padding token
    torch.testing.assert_close(head(y, mask), expected)


def test_cls_pooling_needs_a_prefix():
    with pytest.raises(ValueError, match="class-token prefix"):
        ClassificationHead(8, 3, pool="cls", n_prefix=0)
    with pytest.raises(ValueError, match="pool must be"):
        ClassificationHead(8, 3, pool="max")


def test_label_smoothing_matches_the_formula():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    target = torch.tensor([0, 1])
    s, c = 0.1, 3
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp[torch.arange(2), target]
    uniform = -logp.mean(dim=-1)
    expected = ((1 - s) * nll + s * uniform).mean()  # target distribution (1-s) one-hot + s/C
    torch.testing.assert_close(label_smoothing_cross_entropy(logits, target, s), expected)
    soft = torch.full((2, c), s / c) + (1 - s) * torch.nn.functional.one_hot(target, c)
    torch.testing.assert_close(label_smoothing_cross_entropy(logits, soft), expected)


def test_label_smoothing_zero_is_plain_cross_entropy():
    logits = torch.tensor([[0.0, math.log(3.0)]])
    # p(class 1) = 3/4
    assert label_smoothing_cross_entropy(logits, torch.tensor([1])).item() == pytest.approx(-math.log(0.75))


def test_topk_correct_counts_hits():
    logits = torch.tensor(
        [
            [0.9, 0.1, 0.0, 0.0, 0.0, 0.0],  # true 0: top-1 hit
            [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],  # true 1: rank 5 of 6, top-5 hit only
            [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],  # true 0: rank 6, miss
        ]
    )
    hits = topk_correct(logits, torch.tensor([0, 1, 0]), (1, 5, 10))
    assert {k: int(v) for k, v in hits.items()} == {1: 1, 5: 2, 10: 3}


def test_encoder_classifier_applies_the_batch_attention_bias():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=8, n_heads=2, n_layers=1, dropout=0.0)
    model = EncoderClassifier(Embedder(8, in_features=4), cfg, ClassificationHead(8, 3, pool="mean")).eval()
    features = torch.randn(1, 3, 4)
    mask = torch.ones(1, 3, dtype=torch.bool)
    isolated = torch.eye(3, dtype=torch.bool)[None]  # [1, N, N]: each token attends to itself only
    with torch.no_grad():
        mixed = model.features(TokenBatch(mask=mask, features=features))
        alone = model.features(TokenBatch(mask=mask, features=features, attn_bias=isolated))
        singles = torch.cat([model.features(TokenBatch(mask=mask[:, :1], features=features[:, i : i + 1]))
                             for i in range(3)], dim=1)
    torch.testing.assert_close(alone, singles)
    assert not torch.allclose(mixed, singles)
