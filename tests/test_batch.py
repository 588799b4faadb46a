import pytest
import torch

from tokformer import TokenBatch


def test_token_batch_needs_exactly_one_of_ids_and_features():
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="exactly one"):
        TokenBatch(mask=mask)
    with pytest.raises(ValueError, match="exactly one"):
        TokenBatch(mask=mask, ids=torch.zeros(2, 3, dtype=torch.long), features=torch.zeros(2, 3, 4))


def test_token_batch_rejects_inconsistent_shapes_and_float_masks():
    with pytest.raises(ValueError, match="disagree"):
        TokenBatch(mask=torch.ones(2, 3, dtype=torch.bool), ids=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="bool"):
        TokenBatch(mask=torch.ones(2, 3), ids=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="positions"):
        TokenBatch(
            mask=torch.ones(2, 3, dtype=torch.bool),
            ids=torch.zeros(2, 3, dtype=torch.long),
            positions=torch.zeros(2, 5, dtype=torch.long),
        )


def test_token_batch_select_and_lengths():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    batch = TokenBatch(
        mask=mask,
        features=torch.randn(2, 3, 4),
        positions=torch.randn(2, 3, 2),
        extras={"eigenvalues": torch.randn(2, 5), "name": "x"},
    )
    assert batch.lengths.tolist() == [2, 1]
    second = batch.select(torch.tensor([1]))
    assert second.batch_size == 1 and second.lengths.tolist() == [1]
    assert torch.equal(second.extras["eigenvalues"], batch.extras["eigenvalues"][1:])
    assert second.extras["name"] == "x"


def test_token_batch_to_moves_every_tensor(device):
    batch = TokenBatch(
        mask=torch.ones(1, 2, dtype=torch.bool),
        ids=torch.zeros(1, 2, dtype=torch.long),
        positions=torch.arange(2)[None],
        extras={"e": torch.ones(1, 3)},
    )
    moved = batch.to(device)
    assert moved.ids.device.type == device.type
    assert moved.mask.device.type == device.type
    assert moved.positions.device.type == device.type
    assert moved.extras["e"].device.type == device.type


def test_unpadded_batch_marks_every_token_real_and_counts_positions_per_row():
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    batch = TokenBatch.unpadded(ids)
    assert batch.ids is ids and batch.mask.all() and batch.mask.shape == (2, 3)
    assert batch.positions.tolist() == [[0, 1, 2], [0, 1, 2]]
