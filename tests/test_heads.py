"""ClassificationHead pooling and masked mean; EncoderClassifier wiring."""

import pytest
import torch

from tokformer import Embedder, TokenBatch, TransformerConfig
from tokformer.classifier import EncoderClassifier
from tokformer.heads import ClassificationHead, masked_mean


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
