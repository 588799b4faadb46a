"""Bird models: output shapes, locality of the local readout, and recomputed attention weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokformer.engine import load_run
from tokformer.tasks.birds import experiment
from tokformer.tasks.birds.attention import attention_maps, bird_attention, bird_tokens, own_bird_attention
from tokformer.tasks.birds.data import BOTTOM_LEFT, TOP_RIGHT, generate
from tokformer.tasks.birds.experiment import BirdsConfig
from tokformer.tasks.birds.models import (
    CONVERGENCE_CAP,
    PATIENCE,
    TOKEN_NORMS,
    BirdTransformer,
    LocalCNN,
    build_model,
    parse_spec,
)

ALL_FAMILIES = ["local-d2", "pool-d3", "global", "mlp", "transformer-l1", "transformer-local-l1", "mixer-l1"]


@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_models_map_images_to_logits(name: str) -> None:
    model = build_model(name, n_classes=4, image_size=32)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 4)


@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_only_models_marked_any_size_take_another_image_size(name: str) -> None:
    """The second-size column's premise: a flattened map, a pixel MLP and an N x N mixing matrix
    are sized for the training image; convolutions and attention are not."""
    model = build_model(name, n_classes=4, image_size=32)
    if parse_spec(name).any_size:
        assert model(torch.rand(2, 3, 48, 48)).shape == (2, 4)
    else:
        with pytest.raises(RuntimeError):
            model(torch.rand(2, 3, 48, 48))


def test_mixing_matrix_grows_with_tokens_squared_and_attention_does_not() -> None:
    def size(name: str, image: int) -> int:
        return sum(p.numel() for p in build_model(name, 4, image_size=image).parameters())

    tokens = {image: build_model("mixer-l1", 4, image_size=image).tokenizer.grid_size for image in (32, 64)}
    n32, n64 = (tokens[i][0] * tokens[i][1] for i in (32, 64))
    assert size("mixer-l1", 64) - size("mixer-l1", 32) == n64**2 - n32**2
    assert size("transformer-local-l1", 64) == size("transformer-local-l1", 32)


def test_parse_spec_rejects_unknown_names() -> None:
    assert parse_spec("pool-d5").depth == 5
    assert (parse_spec("transformer-l2").budget, parse_spec("transformer-l2-x4").budget) == (1, 4)
    assert parse_spec("transformer-l2-x4").label == "Transformer, linear patches, 2 layers, 4x steps"
    assert parse_spec("global-x5").label == "CNN global head (flatten+MLP), 4 conv, 5x steps"
    assert parse_spec("transformer-local-l2").family == "transformer-local"
    assert (parse_spec("mlp").depth, parse_spec("mixer-l3").depth) == (2, 3)
    for bad in ("resnet50", "transformer-l2-x", "transformer-localx-l2"):
        with pytest.raises(ValueError, match="unknown model"):
            parse_spec(bad)
    for bad in ("pool", "mixer", "transformer-d2", "mlp-l2"):
        with pytest.raises(ValueError, match="takes a depth"):
            parse_spec(bad)
    for bad in ("transformer-l2-x0", "pool-d0", "pool-d1025", "transformer-l2-x1001"):  # the caps: no end of
        with pytest.raises(ValueError, match=r"the depth must be 1\.\.1024 and the step multiple 1\.\.1000"):
            parse_spec(bad)  # memory or time past them
    assert (parse_spec("pool-d1024").depth, parse_spec("transformer-l2-x1000").budget) == (1024, 1000)


def test_lpos_names_a_token_model_with_learned_positions_and_its_own_calibration() -> None:
    spec = parse_spec("transformer-local-l2-lpos-x3")
    assert (spec.family, spec.depth, spec.budget, spec.learned_positions) == ("transformer-local", 2, 3, True)
    assert (spec.base, spec.setting) == ("transformer-local-l2-lpos", "transformer-local-lpos")
    assert spec.label == "Transformer, local CNN tokenizer, 2 layers, learned positions, 3x steps"
    plain = parse_spec("transformer-l1")
    assert (plain.learned_positions, plain.setting) == (False, "transformer")
    for bad in ("pool-d3-lpos", "global-lpos", "mlp-lpos"):
        with pytest.raises(ValueError, match="only the token models"):
            parse_spec(bad)
    with pytest.raises(ValueError, match="unknown model"):
        parse_spec("transformer-l2-x3-lpos")  # the step multiple comes last
    cfg = BirdsConfig(per_family={"transformer-local": (1e-3, 0.05), "transformer-local-lpos": (1e-2, 0.1)})
    lrs = {name: experiment.run_settings(name, "compare", cfg, seed=0)["train"]["lr"]
           for name in ("transformer-local-l2", "transformer-local-l2-lpos-x3")}
    assert lrs == {"transformer-local-l2": 1e-3, "transformer-local-l2-lpos-x3": 1e-2}


@pytest.mark.parametrize("name", ["transformer-l1", "transformer-local-l2", "mixer-l1"])
def test_lpos_models_learn_a_position_table_at_the_standardised_tokens_scale(name: str) -> None:
    """Why ``-lpos`` exists: the 2-D sin/cos codes of a small grid are nearly parallel, so what tells two cells
    apart is a small part of each token; a table of unit-variance entries gives each cell a code as long as a
    standardised token and nearly orthogonal to the others'. The table trains, and is the only position code."""
    torch.manual_seed(0)
    sincos, learned = build_model(name, 4, image_size=64), build_model(f"{name}-lpos", 4, image_size=64)
    assert sincos.embedder.pos_embed is None and learned.embedder.sincos is None
    n = sincos.tokenizer.grid_size[0] * sincos.tokenizer.grid_size[1]
    prefix = learned.embedder.n_prefix
    table = learned.embedder.pos_embed[0, prefix:].detach()  # [N, d], the class token's row left out
    assert table.shape == (n, 64) and abs(table.std().item() - 1) < 0.1
    codes = sincos.embedder.sincos(sincos.tokenizer.batch(torch.rand(1, 3, 64, 64)).positions[:, prefix:])[0]

    def mean_cosine(x: torch.Tensor) -> float:  # [N, d] -> mean cosine over distinct pairs
        unit = torch.nn.functional.normalize(x, dim=-1)
        return ((unit @ unit.T).sum() - n).item() / (n * (n - 1))

    def spread(x: torch.Tensor) -> float:  # how far a cell's code is from the mean code
        return (x - x.mean(0)).norm(dim=-1).mean().item()

    if n == 16:  # the local tokenizer's 4 x 4 grid
        assert mean_cosine(codes) > 0.9 and spread(codes) < 2
    assert abs(mean_cosine(table)) < 0.05 and spread(table) > 7  # a standardised token's norm is sqrt(64) = 8
    learned(torch.rand(2, 3, 64, 64)).sum().backward()
    assert learned.embedder.pos_embed.grad.abs().sum() > 0
    assert "pos_embed" in learned.embedder.no_weight_decay()
    if parse_spec(name).any_size:  # the table is resampled to another grid
        assert learned(torch.rand(2, 3, 96, 96)).shape == (2, 4)


def test_a_step_multiple_trains_that_many_times_the_steps() -> None:
    cfg = BirdsConfig(image_size=32, steps=4, batch_size=8, n_test=8)
    for name, expected in (("transformer-l1", 4), ("transformer-l1-x2", 8)):
        settings = experiment.run_settings(name, "count", cfg, seed=0)
        assert settings["train"]["steps"] == expected, name
        assert experiment.train_model(name, "count", cfg, seed=0).curve[-1][0] == expected, name


def test_es_names_a_run_to_convergence_of_the_same_model() -> None:
    spec = parse_spec("mixer-l2-lpos-es")
    assert (spec.family, spec.depth, spec.learned_positions, spec.converges) == ("mixer", 2, True, True)
    assert (spec.base, spec.budget, spec.budget_name) == ("mixer-l2-lpos", CONVERGENCE_CAP, "early stop")
    assert spec.label.endswith(f", learned positions, early stopping (up to {CONVERGENCE_CAP}x steps)")
    assert (parse_spec("mixer-l2-x3").converges, parse_spec("mixer-l2-x3").budget_name) == (False, "3x")
    assert sorted(["mlp-es", "mlp-x10", "mlp", "mlp-x3"], key=lambda n: parse_spec(n).budget_order) == [
        "mlp", "mlp-x3", "mlp-x10", "mlp-es"]
    for bad in ("mlp-x3-es", "mlp-es-x3", "mlp-es-lpos", "mlp-ES"):
        with pytest.raises(ValueError, match="unknown model"):
            parse_spec(bad)


def test_a_run_to_convergence_is_evaluated_every_budget_and_stopped_by_the_engine() -> None:
    cfg = BirdsConfig(image_size=32, steps=4, batch_size=8, n_test=8)
    plain, converging = (experiment.run_settings(n, "count", cfg, seed=0)["train"] for n in ("mlp-x3", "mlp-es"))
    assert (plain["steps"], plain["eval_every"], "early_stop" in plain) == (12, 3, False)
    assert (converging["steps"], converging["eval_every"], converging["early_stop"]) == (
        4 * CONVERGENCE_CAP, 4, PATIENCE)


def test_a_run_to_convergence_stops_early_and_keeps_its_best_model(tmp_path, monkeypatch) -> None:
    """The sweep scores the model of the best validation accuracy, not the last step's, once the engine stopped
    the run for want of a better one."""
    monkeypatch.setattr(experiment, "PATIENCE", 1)  # stops at the first evaluation that is not a new best
    cfg = BirdsConfig(image_size=32, steps=2, batch_size=8, n_test=16, lr=0.05)
    run = experiment.train_model("mlp-es", "count", cfg, seed=0, run_dir=tmp_path / "run")
    last_step, best_step = run.curve[-1][0], max(run.curve, key=lambda point: point[1])[0]
    assert last_step < 2 * CONVERGENCE_CAP, "early stopping ended the run before its cap"
    assert best_step < last_step and [s for s, _ in run.curve] == list(range(2, last_step + 1, 2))
    kept = {k: v for k, v in run.model.state_dict().items()}
    for checkpoint, same in (("best", True), ("latest", False)):
        _, model = load_run(tmp_path / "run", checkpoint, "cpu")
        assert all(torch.equal(kept[k], v) for k, v in model.state_dict().items()) is same, checkpoint


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
    block = model.encoder.blocks[0]
    captured = {}
    block.attn.register_forward_hook(lambda _m, args, out: captured.update(x=args[0], out=out))
    with torch.no_grad():
        model(images)
        v = block.attn.qkv(captured["x"]).chunk(3, dim=-1)[2]  # [B, N, d]
        v = v.reshape(3, 17, 4, -1).transpose(1, 2)  # [B, H, N, Dh]
        by_hand = block.attn.proj((maps[0] @ v).transpose(1, 2).reshape(3, 17, -1))
    torch.testing.assert_close(by_hand, captured["out"], atol=1e-5, rtol=1e-4)


def test_own_bird_attention_measures_mass_on_the_birds_own_tokens() -> None:
    """Uniform attention gives exactly the bird's token share; attention kept inside each bird gives 1."""
    meta = generate("compare", 4, seed=3, size=64)
    patch, n = 8, 1 + 64
    uniform = [torch.full((4, 2, n, n), 1.0 / n)]
    stats = own_bird_attention(uniform, meta, np.arange(4), patch)  # [1, 2 heads, 3]
    np.testing.assert_allclose(stats[..., 0], stats[..., 2], rtol=1e-6)
    np.testing.assert_allclose(stats[..., 1], stats[..., 2] - 1.0 / n, rtol=1e-6)
    assert (stats[..., 2] > 0).all() and (stats[..., 2] < 0.2).all()
    inside = torch.zeros(4, 2, n, n)
    for b in range(4):
        for slot in (TOP_RIGHT, BOTTOM_LEFT):
            own = torch.as_tensor(bird_tokens(meta, b, slot, patch))
            inside[b, :, own[:, None], own[None, :]] = 1.0 / len(own)
    np.testing.assert_allclose(own_bird_attention([inside], meta, np.arange(4), patch)[..., 0], 1.0, rtol=1e-6)


@pytest.mark.parametrize("name", ["transformer-l1", "transformer-local-l1", "mixer-l1"])
def test_token_models_standardise_each_patch_embedding_before_the_position_code(name: str) -> None:
    """Why the token models can locate a bird: each token reaches the encoder as a standardised embedding
    plus the 2-D position code, whatever scale the projection has grown to. The projection's output
    layer (and a LayerNorm's gain, where it has one) is scaled up 50x here, as training may: standardised,
    the tokens are unchanged; with a learned gain or without a norm the position code becomes a rounding
    error of every token."""
    images = torch.rand(3, 3, 32, 32)
    tokens = {}
    for norm in TOKEN_NORMS:
        torch.manual_seed(0)
        model = build_model(name, n_classes=4, image_size=32, token_norm=norm)
        batch = model.tokenizer.batch(images)
        before = model.embedder(batch)
        grown = [m for m in model.embedder.proj.modules() if isinstance(m, torch.nn.Linear)][-1:]  # the output layer
        grown += [m for m in model.embedder.proj.modules() if isinstance(m, torch.nn.LayerNorm)]
        with torch.no_grad():
            for p in (p for module in grown for p in module.parameters()):
                p.mul_(50)
        tokens[norm] = (t[:, model.embedder.n_prefix:] for t in (before, model.embedder(batch)))  # no class token
    positions = model.embedder.sincos(model.tokenizer.batch(images).positions[:, model.embedder.n_prefix:])
    embedded, scaled = tokens["standardise"]
    standardised = embedded - positions  # [B, N, d]
    torch.testing.assert_close(standardised.mean(-1), torch.zeros(standardised.shape[:2]), atol=1e-5, rtol=0)
    torch.testing.assert_close(standardised.var(-1, unbiased=False), torch.ones(standardised.shape[:2]), atol=1e-3,
                               rtol=0)
    torch.testing.assert_close(scaled, embedded, atol=1e-4, rtol=0)  # the projection's scale does not reach them
    for norm in ("affine", "none"):
        plain, plain_scaled = tokens[norm]
        assert (plain_scaled - positions).norm(dim=-1).mean() > 20 * (plain - positions).norm(dim=-1).mean(), norm


def test_the_sweep_builds_its_token_models_as_its_config_says() -> None:
    """``BirdsConfig.token_norm`` reaches the models a sweep trains, and only the token models."""
    models = {norm: build_model("transformer-l1", 4, image_size=32, token_norm=norm) for norm in TOKEN_NORMS}
    norm = models["standardise"].embedder.proj[-1]
    assert isinstance(norm, torch.nn.LayerNorm) and not list(norm.parameters()), "nothing to regrow the scale"
    assert isinstance(models["affine"].embedder.proj[-1], torch.nn.LayerNorm)
    assert len(list(models["affine"].embedder.proj[-1].parameters())) == 2
    assert isinstance(models["none"].embedder.proj, torch.nn.Linear)
    keys = {norm: build_model("pool-d2", 4, image_size=32, token_norm=norm).state_dict().keys() for norm in TOKEN_NORMS}
    assert keys["standardise"] == keys["affine"] == keys["none"]
    assert BirdsConfig().token_norm == "standardise"
    with pytest.raises(ValueError, match="token_norm must be one of standardise, affine, none; got 'scaled'"):
        build_model("mixer-l1", 4, image_size=32, token_norm="scaled")


def test_bird_attention_measures_the_patch_tokens_mass_on_every_bird() -> None:
    """Uniform attention gives exactly the birds' token share; attention kept on the birds (all of them,
    or only the first) gives 1; attention kept off them gives 0."""
    meta = generate("count", 6, seed=4, size=64)
    patch, n = 16, 1 + 16
    uniform = [torch.full((6, 2, n, n), 1.0 / n)]
    stats = bird_attention(uniform, meta, np.arange(6), patch)  # [1, 2 heads, 2]
    np.testing.assert_allclose(stats[..., 0], stats[..., 1], rtol=1e-6)
    on_birds, on_first, off_birds = (torch.zeros(6, 2, n, n) for _ in range(3))
    for b in range(6):
        slots = list(meta.bird_boxes(b))
        every = np.unique(np.concatenate([bird_tokens(meta, b, slot, patch) for slot in slots]))
        first = bird_tokens(meta, b, slots[0], patch)
        rest = np.setdiff1d(np.arange(n), every)
        on_birds[b, :, :, every] = 1.0 / len(every)
        on_first[b, :, :, first] = 1.0 / len(first)
        off_birds[b, :, :, rest] = 1.0 / len(rest)
    for on in (on_birds, on_first):
        np.testing.assert_allclose(bird_attention([on], meta, np.arange(6), patch)[..., 0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(bird_attention([off_birds], meta, np.arange(6), patch)[..., 0], 0.0, atol=1e-7)
