import torch

from tokformer.masks import causal_mask, combine_masks, padding_mask, prefix_lm_mask, rows_with_keys, to_additive


def test_causal_mask_square_is_lower_triangular():
    assert torch.equal(causal_mask(4, 4), torch.ones(4, 4, dtype=torch.bool).tril())


def test_causal_mask_aligns_last_query_with_last_key():
    # 2 new queries over 5 keys (3 cached): they sit at positions 3 and 4.
    expected = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(2, 5), expected)


def test_prefix_lm_mask_is_bidirectional_in_prefix_and_causal_after():
    mask = prefix_lm_mask(2, 4)
    expected = torch.tensor(
        [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(mask, expected)
    per_sample = prefix_lm_mask(torch.tensor([2, 0]), 4)
    assert per_sample.shape == (2, 1, 4, 4)
    assert torch.equal(per_sample[0, 0], expected)
    assert torch.equal(per_sample[1, 0], causal_mask(4, 4))


def test_padding_mask_broadcasts_over_heads_and_queries():
    keys = torch.tensor([[True, False, True]])
    assert padding_mask(keys).shape == (1, 1, 1, 3)


def test_combine_bool_masks_intersects_and_mixed_masks_add():
    a = torch.tensor([[True, True, False]])
    b = torch.tensor([[True, False, True]])
    assert torch.equal(combine_masks(a, b), torch.tensor([[True, False, False]]))
    bias = torch.tensor([[0.5, 1.0, 2.0]])
    mixed = combine_masks(a, bias)
    assert mixed[0, 0] == 0.5 and mixed[0, 1] == 1.0 and mixed[0, 2] == float("-inf")
    assert combine_masks(None, None) is None


def test_to_additive_and_rows_with_keys():
    mask = torch.tensor([[True, False], [False, False]])
    additive = to_additive(mask)
    assert additive[0, 0] == 0 and torch.isinf(additive[0, 1])
    assert rows_with_keys(mask).squeeze(-1).tolist() == [True, False]
    assert rows_with_keys(additive).squeeze(-1).tolist() == [True, False]
