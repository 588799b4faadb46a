"""What the models around the core promise that their tests left unchecked (mutation testing,
benchmarks/results/mutation.md): padding, positions and caches reaching the stacks of the
encoder-decoder, the classifier and the causal LM; their heads' ties and biases; the heads' defaults."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tokformer.batch import TokenBatch
from tokformer.classifier import EncoderClassifier
from tokformer.config import TransformerConfig
from tokformer.embedding import Embedder
from tokformer.heads import AttentionPool, ClassificationHead
from tokformer.language_model import CausalLM
from tokformer.positional import (
    LearnedPositions,
    PositionFeatures,
    SinCos2DPositions,
    SinusoidalPositions,
    sinusoidal_encoding,
)
from tokformer.seq2seq import Seq2Seq

D, V = 16, 20


def stack(**options) -> TransformerConfig:
    return TransformerConfig(**{"d_model": D, "n_heads": 2, "n_layers": 2, "dropout": 0.0, **options})


def embedder(**options) -> Embedder:
    return Embedder(D, vocab_size=V, **options)


def randomised(module: nn.Module) -> nn.Module:
    torch.manual_seed(3)
    for p in module.parameters():
        nn.init.normal_(p, std=0.3)
    return module.eval()


def ids(rows: list[list[int]], *, left: bool = False, garbage: int = 7) -> TokenBatch:
    """Rows padded to one width with ``garbage`` ids (masked out), at the end or (``left``) in front;
    every real token keeps the position it has unpadded."""
    width = max(map(len, rows))
    batch_ids = torch.full((len(rows), width), garbage)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    positions = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        batch_ids[i, span], mask[i, span], positions[i, span] = torch.tensor(row), True, torch.arange(len(row))
    return TokenBatch(mask=mask, ids=batch_ids, positions=positions)


def columns(batch: TokenBatch, start: int, stop: int) -> TokenBatch:
    """Tokens ``start:stop`` of every row (a decoding step's batch)."""
    return TokenBatch(mask=batch.mask[:, start:stop], ids=batch.ids[:, start:stop],
                      positions=batch.positions[:, start:stop])


# -- encoder-decoder -------------------------------------------------------------------------------------


def seq2seq(**options) -> Seq2Seq:
    return randomised(Seq2Seq(embedder(), embedder(), stack(**options), stack(**options), V))


SRC, TGT = [[3, 4, 5, 6], [8, 9]], [[1, 5, 2], [1, 4]]


def test_seq2seq_logits_do_not_depend_on_padding_of_either_side() -> None:
    model = seq2seq(rope="1d")
    padded = model(ids(SRC), ids(TGT, left=True))  # [B, Nt, V]: left-padded targets, as a batch decodes them
    for row, (src, tgt) in enumerate(zip(SRC, TGT, strict=True)):
        alone = model(ids([src]), ids([tgt]))[0]
        torch.testing.assert_close(padded[row, -len(tgt):], alone)


def test_seq2seq_positions_reach_both_rotary_stacks() -> None:
    model = seq2seq(rope="1d")
    src, tgt = ids(SRC[:1]), ids(TGT[:1])
    logits = model(src, tgt)
    spread = lambda batch: TokenBatch(mask=batch.mask, ids=batch.ids, positions=batch.positions * 3)
    assert not torch.allclose(model(spread(src), tgt), logits), "the encoder's positions are read"
    assert not torch.allclose(model(src, spread(tgt)), logits), "the decoder's positions are read"


def test_seq2seq_cached_decoding_of_left_padded_targets_equals_the_full_pass() -> None:
    model = seq2seq(rope="1d")
    src, tgt = ids(SRC), ids(TGT, left=True)
    full = model(src, tgt)  # [B, Nt, V]
    memory = model.encode(src)
    caches, cross = model.make_caches()
    steps = []
    for t in range(tgt.seq_len):
        steps.append(model.decode(columns(tgt, t, t + 1), memory, src.mask, caches=caches, cross_caches=cross,
                                  key_mask=tgt.mask[:, :t + 1]))
    real = tgt.mask
    torch.testing.assert_close(torch.cat(steps, dim=1)[real], full[real])


def test_seq2seq_head_is_tied_by_default_without_a_bias_and_starts_small_untied() -> None:
    model = Seq2Seq(embedder(), embedder(), stack(), stack(), V)
    assert model.head.weight is model.tgt_embedder.tokens.weight
    assert model.head.bias is None
    wide = stack(d_model=256, n_heads=4)
    untied = Seq2Seq(Embedder(256, vocab_size=400), Embedder(256, vocab_size=400), wide, wide, 400, tie_output=False)
    assert untied.head.weight is not untied.tgt_embedder.tokens.weight
    assert float(untied.head.weight.std()) == pytest.approx(0.02, rel=0.05)


# -- classifier --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pool", ["mean", "map"])
def test_a_classifiers_logits_do_not_depend_on_padding(pool: str) -> None:
    model = randomised(EncoderClassifier(embedder(position=LearnedPositions(D, 8)), stack(),
                                         ClassificationHead(D, 3, pool=pool, n_prefix=0, pool_heads=2)))
    rows = [[3, 4, 5, 6, 2], [8, 9]]
    padded = model(ids(rows))
    for row, tokens in enumerate(rows):
        torch.testing.assert_close(padded[row], model(ids([tokens]))[0])


# -- causal language model ------------------------------------------------------------------------------


def causal_lm(**options) -> CausalLM:
    return randomised(CausalLM(embedder(position=LearnedPositions(D, 8)), stack(), V, **options))


def test_a_causal_lm_ties_its_head_by_default_and_has_no_bias() -> None:
    model = CausalLM(embedder(), stack(), V)
    assert model.head.weight is model.embedder.tokens.weight and model.head.bias is None
    assert CausalLM(embedder(), stack(), V, tie_embeddings=False).head.bias is None
    with pytest.raises(ValueError, match="tied embeddings"):
        CausalLM(embedder(), stack(), V + 1)  # a table of another shape


def test_a_causal_lm_honours_left_padding_by_default_and_skips_the_mask_only_when_promised() -> None:
    model = causal_lm()
    rows = [[3, 4, 5, 6], [8, 9]]
    batch = ids(rows, left=True)
    logits = model(batch)
    for row, tokens in enumerate(rows):
        torch.testing.assert_close(logits[row, -len(tokens):], model(ids([tokens]))[0])
    unmasked = TokenBatch(mask=torch.ones_like(batch.mask), ids=batch.ids, positions=batch.positions)
    torch.testing.assert_close(model(batch, padded=False), model(unmasked), msg="padded=False: the mask unread")


def test_a_causal_lms_cached_steps_over_left_padding_equal_the_full_pass() -> None:
    model = causal_lm()
    batch = ids([[3, 4, 5, 6], [8, 9]], left=True)
    full = model(batch)
    caches, steps = model.make_caches(), []
    prefix = 2
    steps.append(model(columns(batch, 0, prefix), caches))
    for t in range(prefix, batch.seq_len):
        steps.append(model(columns(batch, t, t + 1), caches, batch.mask[:, :t + 1]))
    torch.testing.assert_close(torch.cat(steps, dim=1)[batch.mask], full[batch.mask])


# -- heads ----------------------------------------------------------------------------------------------------


def test_a_classification_heads_defaults_read_the_class_token() -> None:
    head = randomised(ClassificationHead(D, 3))  # pool "cls" at token 0, one prefix token, no norm
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(head(x), head.proj(x[:, 0]))
    assert isinstance(head.norm, nn.Identity)
    with pytest.raises(ValueError, match="n_classes"):
        ClassificationHead(D, 0)
    assert ClassificationHead(D, 1).proj.out_features == 1, "one class (a single logit) is allowed"


def test_attention_pooling_defaults() -> None:
    head = ClassificationHead(256, 3, pool="map", n_prefix=0, norm_eps=1e-3)
    pool = head.attn_pool
    assert pool.attn.n_heads == 8 and pool.mlp.fc1.out_features == 4 * 256
    assert pool.norm.eps == 1e-3, "the head's norm_eps reaches its pool"
    assert AttentionPool(256, 8, 64).norm.eps == 1e-6
    assert float(AttentionPool(256, 8, 64).latent.std()) == pytest.approx(256**-0.5, rel=0.15)


def test_mean_pooling_skips_the_prefix_and_padding_and_a_lone_token_is_its_own_mean() -> None:
    head = randomised(ClassificationHead(D, 3, pool="mean"))  # one prefix token by default
    x = torch.randn(2, 4, D)
    torch.testing.assert_close(head(x), head.proj(x[:, 1:].mean(dim=1)), msg="no mask: every non-prefix token")
    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    torch.testing.assert_close(head(x, mask)[0], head.proj(x[0, 1]), msg="one real token: the mean is that token")
    assert ClassificationHead(D, 3, norm=True).norm.eps == 1e-6, "timm's ViT epsilon"


# -- position codes -------------------------------------------------------------------------------------


def paper_code(positions: torch.Tensor, d: int, base: float) -> torch.Tensor:
    """PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(p / base^(2i/d)), written out in float64."""
    i = torch.arange(d // 2, dtype=torch.float64)
    angles = positions.double()[..., None] / base ** (2 * i / d)  # [..., d/2]
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2).float()


@pytest.mark.parametrize("base", [None, 100.0])
def test_sinusoidal_codes_are_the_papers(base: float | None) -> None:
    """The paper's base 10,000 by default, any other when given; 2-D: the row's code, then the column's."""
    positions = torch.arange(12).view(2, 6)
    one_d = SinusoidalPositions(16) if base is None else SinusoidalPositions(16, base)
    torch.testing.assert_close(one_d(positions), paper_code(positions, 16, base or 10000.0))
    grid = torch.stack((positions, positions.flip(-1) * 2), dim=-1)  # [B, N, 2] (row, col)
    two_d = SinCos2DPositions(16) if base is None else SinCos2DPositions(16, base)
    expected = torch.cat((paper_code(grid[..., 0], 8, base or 10000.0), paper_code(grid[..., 1], 8, base or 10000.0)),
                         dim=-1)
    torch.testing.assert_close(two_d(grid), expected)


def test_position_codes_keep_the_positions_device_and_the_models_dtype() -> None:
    meta = torch.arange(5, device="meta")
    assert sinusoidal_encoding(meta, 8).device == meta.device, "the frequencies are built beside the positions"
    assert sinusoidal_encoding(torch.arange(5, dtype=torch.float64), 8).dtype == torch.float32
    features = PositionFeatures(3, D).to(torch.bfloat16)
    assert features(torch.randn(2, 4, 3)).dtype == torch.bfloat16, "float32 features meet a bfloat16 projection"
    text = embedder(position=SinusoidalPositions(D)).to(torch.bfloat16)
    assert text(ids([[1, 2, 3, 4]])).dtype == torch.bfloat16, "a float32 code keeps bfloat16 tokens"
