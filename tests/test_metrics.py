"""Top-k hit counting."""

import torch

from tokformer.metrics import topk_correct


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
