import math

import pytest
import torch

from tokformer import TokenBatch
from tokformer.embedding import Embedder
from tokformer.positional import (
    LearnedPositions,
    PositionFeatures,
    SinCos2DPositions,
    SinusoidalPositions,
    sinusoidal_encoding,
)


def test_sinusoidal_matches_the_paper_formula():
    d = 16
    pe = sinusoidal_encoding(torch.arange(50), d)
    for pos in (0, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_sinusoidal_dot_product_depends_only_on_offset():
    pe = sinusoidal_encoding(torch.arange(200), 64).double()
    for k in (1, 5, 20):
        dots = (pe[:-k] * pe[k:]).sum(-1)  # PE_i . PE_{i+k} for every i
        assert torch.allclose(dots, dots[0].expand_as(dots), atol=1e-4)
    # and it does change with k, so the test could fail
    assert not math.isclose((pe[0] * pe[1]).sum().item(), (pe[0] * pe[20]).sum().item(), abs_tol=1e-3)


def test_sinusoidal_positions_work_for_any_length():
    module = SinusoidalPositions(8)
    positions = torch.tensor([[0, 1, 100_000]])
    assert module(positions).shape == (1, 3, 8)


def test_learned_positions_refuse_positions_past_table():
    module = LearnedPositions(8, max_len=4)
    assert module(torch.tensor([[0, 3]])).shape == (1, 2, 8)
    with pytest.raises(ValueError, match="max_len=4"):
        module(torch.tensor([[4]]))


def test_sincos_2d_codes_rows_and_columns_in_separate_halves():
    module = SinCos2DPositions(16)
    coords = torch.tensor([[[0.0, 0.0], [0.0, 3.0], [2.0, 0.0]]])
    out = module(coords)
    assert torch.equal(out[0, 0, :8], out[0, 1, :8])  # same row
    assert not torch.equal(out[0, 0, 8:], out[0, 1, 8:])  # different column
    assert torch.equal(out[0, 0, 8:], out[0, 2, 8:])  # same column
    with pytest.raises(ValueError):
        SinCos2DPositions(10)


def test_embedder_adds_position_features_to_projected_tokens():
    position = PositionFeatures(3, 8)
    embedder = Embedder(8, in_features=5, position=position)
    batch = TokenBatch(mask=torch.ones(2, 4, dtype=torch.bool), features=torch.randn(2, 4, 5),
                       positions=torch.randn(2, 4, 3))
    expected = embedder.tokens(batch.features) + position(batch.positions)
    torch.testing.assert_close(embedder(batch), expected)


def test_embedder_scales_ids_and_requires_positions_when_it_has_an_encoding():
    embedder = Embedder(16, vocab_size=10, position=SinusoidalPositions(16), scale=True)
    ids = torch.tensor([[1, 2, 3]])
    batch = TokenBatch(mask=torch.ones(1, 3, dtype=torch.bool), ids=ids, positions=torch.arange(3)[None])
    expected = embedder.tokens(ids) * 4.0 + sinusoidal_encoding(torch.arange(3)[None], 16)
    torch.testing.assert_close(embedder(batch), expected)
    with pytest.raises(ValueError, match="no positions"):
        embedder(TokenBatch(mask=torch.ones(1, 3, dtype=torch.bool), ids=ids))
    with pytest.raises(ValueError, match="exactly one"):
        Embedder(8)
