"""The mixing-only track: a frozen shared encoder, mixers that differ in how tokens meet, and an
additive readout that cannot relate two tokens by itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokformer.engine import seed_everything
from tokformer.tasks.birds.attention import bird_tokens, corner_attention
from tokformer.tasks.birds.data import BOTTOM_LEFT, BOTTOM_RIGHT, TOP_LEFT, TOP_RIGHT
from tokformer.tasks.birds.experiment import BirdsConfig
from tokformer.tasks.birds.mixing import (
    DIAGONALS,
    LABELS,
    WIDTH,
    EncodedStream,
    MixingModel,
    PatchEncoder,
    bird_token_gap,
    build_mixer,
    corner_attention_of,
    diagonal_attention_of,
    encode,
    encoder_at,
    fit,
    mixing_parameters,
    token_accuracy,
    train_encoder,
    train_mixer,
)
from tokformer.tasks.birds.stream import TrainStream, accuracy, make_split

GRID = (4, 4)


def _reach(name: str, grid: tuple[int, int] = GRID) -> torch.Tensor:
    """Which input tokens ``[h, w]`` the mixed token at the top-right corner depends on."""
    torch.manual_seed(0)
    mixer = build_mixer(name, WIDTH, grid)
    for p in mixer.parameters():  # no zero-initialised path may hide a dependency
        torch.nn.init.normal_(p, std=0.1)
    tokens = torch.randn(1, grid[0] * grid[1], WIDTH, requires_grad=True)
    mixer(tokens)[0, grid[1] - 1].sum().backward()  # token (0, w - 1): the top-right corner
    return (tokens.grad[0].abs().sum(dim=-1) > 0).view(grid)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_conv_mixer_of_depth_k_reaches_k_tokens_and_no_further(k: int) -> None:
    reach = _reach(f"conv-{k}")
    rows, cols = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
    within = (rows <= k) & (cols >= 3 - k)  # Chebyshev distance <= k from (0, 3)
    assert torch.equal(reach, within), f"conv-{k} reaches\n{reach.int()}"
    assert bool(reach[3, 0]) == (k >= 3), "the bottom-left token is 3 steps from the top-right one"


@pytest.mark.parametrize("name", ["attention-1", "attention-1-lpos", "matrix-1", "fc"])
def test_global_mixers_relate_the_corners_in_one_layer(name: str) -> None:
    assert _reach(name).all(), name


def test_parameters_grow_as_n_squared_for_the_matrix_and_the_fc_layer_not_for_attention() -> None:
    def count(name: str, side: int) -> int:
        return sum(p.numel() for p in build_mixer(name, WIDTH, (side, side)).parameters())

    small, large = 4, 6  # 16 and 36 tokens: 64 and 96 px images
    assert count("attention-1", small) == count("attention-1", large)
    assert count("attention-1-lpos", large) - count("attention-1-lpos", small) == (36 - 16) * WIDTH  # the table
    assert count("conv-2", small) == count("conv-2", large)
    assert count("matrix-1", large) - count("matrix-1", small) == 36**2 - 16**2
    fc = (36 * WIDTH) ** 2 + 36 * WIDTH - (16 * WIDTH) ** 2 - 16 * WIDTH
    assert count("fc", large) - count("fc", small) == fc


def test_bad_mixer_names_are_refused() -> None:
    for bad in ("conv", "conv-0", "attention-x", "mlp-2", "fc-2", "attention-0-lpos", "conv-2-lpos", "matrix-1-lpos"):
        with pytest.raises(ValueError, match="unknown mixer"):
            build_mixer(bad, WIDTH, GRID)


def test_the_readout_is_additive_over_tokens() -> None:
    """With the identity in place of mixing, the logits are the mean of per-token scores: the readout
    alone cannot relate the two compared birds."""
    torch.manual_seed(0)
    model = MixingModel(PatchEncoder(64), "conv-1", 2)
    model.mixer = torch.nn.Identity()
    images = torch.rand(2, 3, 64, 64)
    mixed = images.clone()
    mixed[0, :, :16, 48:], mixed[1, :, :16, 48:] = images[1, :, :16, 48:], images[0, :, :16, 48:]  # swap corners
    # additive: f(a with b's corner) + f(b with a's corner) = f(a) + f(b)
    torch.testing.assert_close(model(mixed).sum(0), model(images).sum(0), atol=1e-5, rtol=1e-5)


def test_the_encoder_is_trained_once_frozen_and_shared_at_another_size() -> None:
    encoder = train_encoder(seed=0, steps=2, batch_size=8)
    assert not any(p.requires_grad for p in encoder.parameters())
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    cfg = BirdsConfig(steps=2, batch_size=8)
    model, _ = train_mixer(EncodedStream(TrainStream(cfg, "compare", 0), encoder), "attention-1", "compare", cfg,
                           seed=0)
    for name, value in encoder.state_dict().items():
        assert torch.equal(value, before[name]), f"training a mixer changed the shared encoder's {name}"
    assert mixing_parameters(model) == sum(p.numel() for n, p in model.named_parameters()
                                           if not n.startswith("encoder."))
    big = encoder_at(encoder, 96)
    assert big(torch.rand(1, 3, 96, 96)).shape == (1, 36, WIDTH)
    images = torch.rand(1, 3, 64, 64)
    torch.testing.assert_close(big(torch.nn.functional.pad(images, (0, 32, 0, 32)))[0, [0, 1, 6, 7]],
                               encoder(images)[0, [0, 1, 4, 5]])  # the same patch, the same token


def test_the_shared_tokens_are_standardised_so_the_position_code_is_as_long_as_they_are() -> None:
    """A frozen encoder's tokens at their trained scale (about 4x the position code's norm) hid where a
    token was from the attention mixers; standardised, a token and the sin/cos code have norm sqrt(d)."""
    encoder = PatchEncoder(64)
    for p in encoder.parameters():  # a scale far from 1 that only standardising removes
        torch.nn.init.normal_(p, std=0.5)
    tokens = encoder(torch.rand(2, 3, 64, 64))  # [2, 16, d]
    torch.testing.assert_close(tokens.mean(dim=-1), torch.zeros(2, 16), atol=1e-5, rtol=0)
    torch.testing.assert_close(tokens.var(dim=-1, unbiased=False), torch.ones(2, 16), atol=1e-3, rtol=0)
    positions = build_mixer("attention-1", WIDTH, GRID).positions  # [1, 16, d]
    torch.testing.assert_close(positions.norm(dim=-1), torch.full((1, 16), WIDTH**0.5 / 2**0.5))
    assert tokens.norm(dim=-1).div(positions.norm(dim=-1)).max() < 1.5


def test_an_lpos_mixer_learns_a_table_at_the_tokens_scale_in_place_of_the_sin_cos_code() -> None:
    """The -lpos mixers add a trained [1, N, d] table whose cells are as long as a standardised token and
    nearly orthogonal to each other, where the sin/cos codes of a 4 x 4 grid are nearly parallel."""
    torch.manual_seed(0)
    learned, fixed = build_mixer("attention-1-lpos", WIDTH, GRID), build_mixer("attention-1", WIDTH, GRID)
    assert isinstance(learned.positions, torch.nn.Parameter) and "positions" not in dict(fixed.named_parameters())
    table = learned.positions.detach()[0]  # [16, d]
    assert abs(table.norm(dim=-1).mean().item() - WIDTH**0.5) < 1
    cosine = lambda x: torch.nn.functional.normalize(x, dim=-1) @ torch.nn.functional.normalize(x, dim=-1).T
    off_diagonal = ~torch.eye(16, dtype=torch.bool)
    assert cosine(table)[off_diagonal].abs().mean() < 0.15
    assert cosine(fixed.positions[0])[off_diagonal].mean() > 0.9
    tokens = torch.zeros(1, 16, WIDTH)  # the table alone reaches the encoder: its gradient flows
    learned(tokens).sum().backward()
    assert learned.positions.grad.abs().sum() > 0


def test_corner_attention_of_an_attention_mixer_is_read_from_the_patch_tokens() -> None:
    """No class token here: with queries and keys zeroed every token attends uniformly (mass = token share),
    and maps that send the top-right bird's tokens to the bottom-left bird's give mass 1 only at offset 0."""
    test = make_split(BirdsConfig(image_size=64), "compare", seed=0, split="test", n=8)
    model = MixingModel(PatchEncoder(64).eval().requires_grad_(False), "attention-2", n_classes=2).eval()
    for block in model.mixer.encoder.blocks:
        torch.nn.init.zeros_(block.attn.qkv.weight[: 2 * WIDTH])  # q = k = bias: every logit the same
        torch.nn.init.zeros_(block.attn.qkv.bias[: 2 * WIDTH])
    stats = torch.tensor(corner_attention_of(model, test))  # [layer, head, (mass, share)]
    assert stats.shape == (2, 4, 2)
    torch.testing.assert_close(stats[..., 0], stats[..., 1], atol=1e-4, rtol=0)
    assert (stats[..., 1] > 0).all()
    n = 16
    indices = np.arange(len(test.labels))
    pointed = torch.zeros(len(indices), 1, n, n)
    for b in indices:
        queries = bird_tokens(test.meta, int(b), TOP_RIGHT, 16, first=0)
        keys = torch.as_tensor(bird_tokens(test.meta, int(b), BOTTOM_LEFT, 16, first=0))
        pointed[b, :, torch.as_tensor(queries)[:, None], keys[None, :]] = 1.0 / len(keys)
    np.testing.assert_allclose(corner_attention([pointed], test.meta, indices, 16, first=0)[..., 0], 1.0)
    assert corner_attention([pointed], test.meta, indices, 16, first=1)[..., 0].max() < 1.0
    other_route = corner_attention([pointed], test.meta, indices, 16, first=0, source=TOP_LEFT, target=BOTTOM_RIGHT)
    assert other_route[..., 0].max() < 0.5  # the top-left bird's tokens were not pointed anywhere near


def test_diagonal_attention_names_every_route_and_finds_the_one_a_map_takes(monkeypatch) -> None:
    """Maps that send the top-left bird's tokens to the bottom-right bird's: mass 1 on that route only."""
    test = make_split(BirdsConfig(image_size=64), "compare", seed=0, split="test", n=6)
    model = MixingModel(PatchEncoder(64).eval().requires_grad_(False), "attention-1", n_classes=2).eval()
    indices = np.arange(len(test.labels))
    pointed = torch.zeros(len(indices), 4, 16, 16)
    for b in indices:
        queries = torch.as_tensor(bird_tokens(test.meta, int(b), TOP_LEFT, 16, first=0))
        keys = torch.as_tensor(bird_tokens(test.meta, int(b), BOTTOM_RIGHT, 16, first=0))
        pointed[b, :, queries[:, None], keys[None, :]] = 1.0 / len(keys)
    monkeypatch.setattr("tokformer.tasks.birds.mixing.attention_maps", lambda *args: [pointed])
    routes = diagonal_attention_of(model, test)
    assert list(routes) == list(DIAGONALS)
    mass = {name: np.array(r)[..., 0] for name, r in routes.items()}  # [layer, head]
    np.testing.assert_allclose(mass["top-left -> bottom-right"], 1.0, atol=1e-4)
    assert all(mass[name].max() < 0.5 for name in DIAGONALS if name != "top-left -> bottom-right")


def test_routes_split_by_label_find_a_model_that_reads_the_diagonal_where_the_twins_sit(monkeypatch) -> None:
    """Maps that send the top-right bird to the bottom-left one in "same" images and the top-left bird to
    the bottom-right one in "different" images (the diagonal of the twins): over one label, each route
    carries mass 1 in that label's images; over both, every route gets about half."""
    test = make_split(BirdsConfig(image_size=64), "compare", seed=0, split="test", n=8)
    model = MixingModel(PatchEncoder(64).eval().requires_grad_(False), "attention-1", n_classes=2).eval()
    pointed = torch.zeros(len(test.labels), 4, 16, 16)
    for b, label in enumerate(test.labels.tolist()):
        source, target = (TOP_RIGHT, BOTTOM_LEFT) if label == LABELS["same"] else (TOP_LEFT, BOTTOM_RIGHT)
        queries = torch.as_tensor(bird_tokens(test.meta, b, source, 16, first=0))
        keys = torch.as_tensor(bird_tokens(test.meta, b, target, 16, first=0))
        pointed[b, :, queries[:, None], keys[None, :]] = 1.0 / len(keys)

    def maps_of(_model, images, _blocks):  # the pointed maps of the images asked about, in their order
        rows = [next(j for j in range(len(test.labels)) if torch.equal(test.images[j].float() / 255, image))
                for image in images]
        return [pointed[rows]]

    monkeypatch.setattr("tokformer.tasks.birds.mixing.attention_maps", maps_of)
    assert sorted(test.labels.tolist()) == [0] * 4 + [1] * 4

    def mass(label: int | None, route: str) -> float:
        return float(np.array(diagonal_attention_of(model, test, label=label)[route])[..., 0].max())

    assert mass(LABELS["same"], "top-right -> bottom-left") == pytest.approx(1.0, abs=1e-4)
    assert mass(LABELS["same"], "top-left -> bottom-right") < 0.3
    assert mass(LABELS["different"], "top-left -> bottom-right") == pytest.approx(1.0, abs=1e-4)
    assert mass(LABELS["different"], "top-right -> bottom-left") < 0.3
    for route in ("top-right -> bottom-left", "top-left -> bottom-right"):
        assert 0.4 < mass(None, route) < 0.7, "over both labels the route the twins take is diluted"


def test_training_on_the_cached_tokens_is_training_on_the_images() -> None:
    """The encoded stream runs the frozen encoder once per step and shares it between mixers; the mixer it
    trains is the one the images themselves would train, to the bit."""
    cfg = BirdsConfig(steps=3, batch_size=8, per_family={})
    encoder = PatchEncoder(64).eval().requires_grad_(False)
    tokens = EncodedStream(TrainStream(cfg, "compare", 0), encoder)
    calls = []
    encoder.register_forward_hook(lambda *_: calls.append(1))
    cached, _ = train_mixer(tokens, "conv-1", "compare", cfg, seed=0)
    train_mixer(tokens, "attention-1", "compare", cfg, seed=0)
    assert len(calls) == cfg.steps, "the encoder ran more than once per step"
    seed_everything(0)
    direct = MixingModel(encoder, "conv-1", 2)
    fit(direct, "compare", TrainStream(cfg, "compare", 0), cfg, steps=cfg.steps, lr=cfg.lr, warmup=cfg.warmup,
        seed=0, species_aux=0.0)
    for (name, a), b in zip(cached.state_dict().items(), direct.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_accuracy_on_encoded_test_tokens_is_the_accuracy_on_the_images() -> None:
    torch.manual_seed(0)
    test = make_split(BirdsConfig(image_size=64), "compare", seed=1, split="test", n=40)
    model = MixingModel(PatchEncoder(64).eval().requires_grad_(False), "attention-1", n_classes=2)
    for p in model.readout.parameters():  # a readout far from chance on some images, not all
        torch.nn.init.normal_(p, std=1.0)
    on_images = accuracy(model, test, torch.device("cpu"))
    assert 0 < on_images < 1, "a constant prediction would not tell the two apart"
    assert token_accuracy(model, encode(model.encoder, test, batch_size=16), test.labels) == on_images


def test_bird_token_gap_is_the_grid_distance_between_the_nearest_tokens_of_the_two_birds() -> None:
    class Boxes:  # a 64 px image: a 4 x 4 grid of 16 px tokens
        size = 64

        def __init__(self, bottom_left: tuple[float, float, float, float]) -> None:
            self.boxes = {TOP_RIGHT: (50.0, 2.0, 60.0, 12.0), BOTTOM_LEFT: bottom_left}  # TR: token (0, 3) only

        def bird_boxes(self, index: int) -> dict:
            return self.boxes

    assert bird_token_gap(Boxes((2.0, 50.0, 12.0, 60.0)), 0) == 3  # token (3, 0): the opposite corner
    assert bird_token_gap(Boxes((2.0, 34.0, 30.0, 60.0)), 0) == 2  # tokens (2..3, 0..1): nearest (2, 1)
    assert bird_token_gap(Boxes((20.0, 20.0, 40.0, 40.0)), 0) == 1  # tokens (1..2, 1..2): nearest (1, 2)
    assert bird_token_gap(Boxes((50.0, 2.0, 52.0, 4.0)), 0) == 0  # the same token
