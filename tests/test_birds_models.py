"""Bird models: output shapes, locality of the local readout, and recomputed attention weights."""

from __future__ import annotations

import pytest
import torch

from tokformer.tasks.birds import experiment
from tokformer.tasks.birds.attention import attention_maps
from tokformer.tasks.birds.experiment import BirdsConfig, make_split
from tokformer.tasks.birds.models import BirdTransformer, LocalCNN, build_model, parse_spec


@pytest.mark.parametrize("name", ["local-d2", "pool-d3", "global", "transformer-l1"])
def test_models_map_images_to_logits(name: str) -> None:
    model = build_model(name, n_classes=4, image_size=32)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 4)


def test_parse_spec_rejects_unknown_names() -> None:
    assert parse_spec("pool-d5").depth == 5
    assert (parse_spec("transformer-l2").budget, parse_spec("transformer-l2-x4").budget) == (1, 4)
    assert parse_spec("transformer-l2-x4").label == "Transformer, 2 layers, 4x steps"
    for bad in ("resnet50", "pool-d2-x4", "transformer-l2-x"):
        with pytest.raises(ValueError, match="unknown model"):
            parse_spec(bad)
    with pytest.raises(ValueError, match="at least 1"):
        parse_spec("transformer-l2-x0")


def test_a_step_multiple_trains_that_many_times_the_steps(monkeypatch) -> None:
    cfg = BirdsConfig(image_size=32, n_train=32, steps=3, batch_size=8)
    train = make_split(cfg, "count", 0, "train")
    build, calls = experiment.build_model, []

    def counting_build(*args, **kwargs):
        model = build(*args, **kwargs)
        model.register_forward_hook(lambda *_: calls.append(1))
        return model

    monkeypatch.setattr(experiment, "build_model", counting_build)
    for name, expected in (("transformer-l1", 3), ("transformer-l1-x2", 6)):
        calls.clear()
        experiment.train_model(name, "count", train, cfg, seed=0, device=torch.device("cpu"))
        assert len(calls) == expected, name


def test_local_readout_is_additive_over_far_apart_regions() -> None:
    """Changing one corner shifts the logits by an amount that does not depend on the other corner."""
    torch.manual_seed(0)
    model = LocalCNN(2, 3, pool=False, image_size=32).eval()
    base = torch.rand(1, 3, 32, 32)
    a, b = base.clone(), base.clone()
    a[..., :8, 24:] = torch.rand(3, 8, 8)  # a new top-right corner
    b[..., 24:, :8] = torch.rand(3, 8, 8)  # a new bottom-left corner
    both = a.clone()
    both[..., 24:, :8] = b[..., 24:, :8]
    with torch.no_grad():
        f = lambda x: model(x)[0]
        assert torch.allclose(f(both) - f(b), f(a) - f(base), atol=1e-6)


def test_recomputed_attention_reproduces_the_layer_output() -> None:
    torch.manual_seed(0)
    model = BirdTransformer(2, n_layers=2, patch=8, image_size=32).eval()
    images = torch.rand(3, 3, 32, 32)
    maps = attention_maps(model, images)
    assert len(maps) == 2 and maps[0].shape == (3, 4, 17, 17)  # 16 patches + class token
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(3, 4, 17))
    # layer 1 by hand: attention weights @ values, then the output projection
    block = model.net.encoder.blocks[0]
    captured = {}
    block.attn.register_forward_hook(lambda _m, args, out: captured.update(x=args[0], out=out))
    with torch.no_grad():
        model(images)
        v = block.attn.qkv(captured["x"]).chunk(3, dim=-1)[2]  # [B, N, d]
        v = v.reshape(3, 17, 4, -1).transpose(1, 2)  # [B, H, N, Dh]
        by_hand = block.attn.proj((maps[0] @ v).transpose(1, 2).reshape(3, 17, -1))
    torch.testing.assert_close(by_hand, captured["out"], atol=1e-5, rtol=1e-4)
