"""Where a vqa model looks: the recomputed attention is the attention the model used (under its
prefix-LM and padding mask), the share on the asked-about birds measures what it says, and the
figure command writes its file whole and never over one it did not make."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from einops import rearrange
from PIL import Image

from tokformer.cli import main
from tokformer.engine import train
from tokformer.tasks.birds.attention import bird_tokens
from tokformer.tasks.vqa import Example, VQAConfig, VQATask
from tokformer.tasks.vqa_attention import (
    MAX_QUESTIONS,
    answer_attention,
    asked_bird_share,
    pair_bird_share,
    question_maps,
)
from tokformer.tasks.vqa_data import bird_questions

TINY = dict(image_size=32, patch_size=8, train_size=64, eval_size=32, d_model=32, n_heads=2, n_layers=2,
            vocab_size=300, tokenizer="linear")


@pytest.fixture(scope="module")
def task_and_model():
    task = VQATask(VQAConfig(**TINY))
    torch.manual_seed(0)
    model = task.build_model().eval()
    with torch.no_grad():
        for p in model.parameters():  # far from uniform attention
            p.add_(torch.randn_like(p) * 0.3)
    return task, model


def test_the_recomputed_attention_is_the_one_the_model_used(task_and_model) -> None:
    """Each block's attention output (the input of its output projection) is the recomputed
    probabilities times the block's values, for padded questions of different lengths."""
    task, model = task_and_model
    data = bird_questions(3, seed=1, split="test", size=32)
    images = list(torch.from_numpy(data.scenes.images).permute(0, 3, 1, 2))
    questions = ["how many birds are there?", "", "are the birds at the top left and the bottom right the same?"]
    captured_qkv, captured_out = [], []
    hooks = [h for b in model.encoder.blocks for h in (
        b.attn.qkv.register_forward_hook(lambda _m, _i, out: captured_qkv.append(out)),
        b.attn.proj.register_forward_hook(lambda _m, args, _o: captured_out.append(args[0])))]
    try:
        batch = task.collate([Example(i, q, "") for i, q in zip(images, questions, strict=True)], train=False)
        with torch.no_grad():
            model(batch["image"], batch["prompt"], batch["answer"])
    finally:
        for hook in hooks:
            hook.remove()
    from tokformer.masks import prefix_lm_mask
    from tokformer.tasks.birds.attention import attention_maps

    mixed = model.segments({k: batch[k] for k in ("image", "prompt", "answer")})
    n = mixed.x.shape[1]
    mask = (prefix_lm_mask(mixed.end_of("prompt"), n)[None] & mixed.mask[:, None, :])[:, None]
    maps = attention_maps(model, (batch["image"], batch["prompt"], batch["answer"]), model.encoder.blocks, mask)
    real = mixed.mask  # padding queries attend to something too, but nothing reads them
    for probs, qkv, out in zip(maps, captured_qkv, captured_out, strict=True):
        _, _, v = rearrange(qkv, "b n (three h d) -> three b h n d", three=3, h=2)
        mixed_heads = rearrange(probs @ v, "b h n d -> b n (h d)")
        torch.testing.assert_close(mixed_heads[real], out[real], rtol=1e-4, atol=1e-5)


def test_answer_attention_covers_the_picture_and_leaves_the_rest_to_the_question(task_and_model) -> None:
    task, model = task_and_model
    images = list(torch.zeros(2, 3, 32, 32, dtype=torch.uint8))
    maps = answer_attention(model, task, images, ["how many birds are there?", "is it?"])
    n_image = task.image_tokenizer.grid_size[0] * task.image_tokenizer.grid_size[1]
    assert len(maps) == 2 and all(m.shape == (2, 2, n_image) for m in maps)
    assert all(bool((m >= 0).all() and (m.sum(-1) < 1).all()) for m in maps)  # the prompt and the BOS take the rest
    grids = question_maps(model, task, images[0], ["how many birds are there?", "is it?"])
    assert [g.shape for g in grids] == [task.image_tokenizer.grid_size] * 2
    assert all(np.isclose(g.sum(), 1.0) for g in grids)


def test_the_asked_bird_share_is_one_for_uniform_attention_and_the_inverse_share_on_the_bird() -> None:
    data = bird_questions(40, seed=2, split="test", size=32)
    patch, n_image = 8, 16
    uniform = [torch.full((40, 2, n_image), 0.5 / n_image)]  # half the attention on the picture, spread evenly
    np.testing.assert_allclose(asked_bird_share(uniform, data, patch), 1.0)
    focused = torch.zeros(40, 2, n_image)
    expected = []
    for b, asked in enumerate(data.quadrants):
        present = set(data.scenes.bird_slot[data.scenes.bird_image == b].tolist())
        if asked and set(asked) <= present:
            tokens = np.unique(np.concatenate([bird_tokens(data.scenes, b, q, patch, first=0) for q in asked]))
            focused[b, :, tokens] = 0.3 / len(tokens)
            expected.append(n_image / len(tokens))
        else:
            focused[b] = 1.0 / n_image  # not a quadrant question, or its bird is absent: not counted
    np.testing.assert_allclose(asked_bird_share([focused], data, patch), np.mean(expected), rtol=1e-6)


def test_the_share_of_one_question_type_averages_over_that_types_questions_only() -> None:
    """``kinds`` keeps the questions of those types: pair questions focused on their birds, every other
    question spread evenly, give the pair's inverse token share for ``same`` and 1 for the rest."""
    data = bird_questions(60, seed=3, split="test", size=32)
    patch, n_image = 8, 16
    maps = torch.full((60, 1, n_image), 1.0 / n_image)
    expected = []
    for b, asked in enumerate(data.quadrants):
        present = set(data.scenes.bird_slot[data.scenes.bird_image == b].tolist())
        if data.kinds[b] == "same" and set(asked) <= present:
            tokens = np.unique(np.concatenate([bird_tokens(data.scenes, b, q, patch, first=0) for q in asked]))
            maps[b, :, :] = 0.0
            maps[b, :, tokens] = 1.0 / len(tokens)
            expected.append(n_image / len(tokens))
    assert expected, "no comparison with both birds present among the scenes"
    np.testing.assert_allclose(asked_bird_share([maps], data, patch, kinds={"same"}), np.mean(expected), rtol=1e-6)
    np.testing.assert_allclose(asked_bird_share([maps], data, patch, kinds={"species", "facing"}), 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="no question of count about a quadrant"):
        asked_bird_share([maps], data, patch, kinds={"count"})


def test_the_pair_share_tells_one_head_per_bird_from_every_head_on_one_bird() -> None:
    """On a 2 x 2 grid (one token per quadrant, each bird within its own): a head on each asked-about bird
    scores 4 (all of a head's attention on one token of four), both heads on the first bird score 0 for
    the second; the pooled share gives both the pair's ceiling, 2, and so cannot tell them apart."""
    data = bird_questions(80, seed=4, split="test", size=32)
    patch, n_image = 16, 4
    one_each, both_on_first = torch.full((80, 2, n_image), 0.25), torch.full((80, 2, n_image), 0.25)
    pairs = 0
    for b, asked in enumerate(data.quadrants):
        present = set(data.scenes.bird_slot[data.scenes.bird_image == b].tolist())
        if len(asked) == 2 and set(asked) <= present:
            first, second = (bird_tokens(data.scenes, b, q, patch, first=0).tolist() for q in asked)
            assert len(first) == len(second) == 1 and first != second
            one_each[b], both_on_first[b] = 0.0, 0.0
            one_each[b, 0, first], one_each[b, 1, second] = 1.0, 1.0
            both_on_first[b, :, first] = 1.0
            pairs += 1
    assert pairs > 1, "too few comparisons with both birds present"
    np.testing.assert_allclose(pair_bird_share([one_each], data, patch), [4.0])
    np.testing.assert_allclose(pair_bird_share([both_on_first], data, patch), [0.0])
    for maps in (one_each, both_on_first):
        np.testing.assert_allclose(asked_bird_share([maps], data, patch, kinds={"same"}), 2.0)


def test_the_attention_command_writes_its_figure_and_keeps_what_is_there(tmp_path) -> None:
    run = tmp_path / "run"
    train("vqa", run_dir=str(run), steps=2, warmup_steps=1, batch_size=8, quiet=True, **TINY)
    picture = tmp_path / "birds.png"
    Image.fromarray(bird_questions(1, seed=0, split="sample", size=32).scenes.images[0]).save(picture)
    out = tmp_path / "figure.png"
    args = ["vqa", "attention", str(run), str(picture), "how many birds are there?", "is there a bird at the top left?",
            "-o", str(out), "-q"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert Image.open(out).size[0] > Image.open(out).size[1]  # one panel per question, side by side
    out.write_bytes(b"mine")
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 2 and "exists; pass --overwrite" in again.output and out.read_bytes() == b"mine"
    assert CliRunner().invoke(main, [*args, "--overwrite"]).exit_code == 0 and out.read_bytes() != b"mine"
    assert not list(tmp_path.glob(".*partial*"))
    bad_layer = CliRunner().invoke(main, [*args, "--overwrite", "--layer", "5"])
    assert bad_layer.exit_code == 2 and "the model has 2 layers" in bad_layer.output
    folder = tmp_path / "figures"
    folder.mkdir()
    onto_folder = CliRunner().invoke(main, [*args[:-3], "-o", str(folder), "-q", "--overwrite"])
    assert onto_folder.exit_code == 2 and "is a folder or another non-file" in onto_folder.output
    assert folder.is_dir() and not list(tmp_path.glob(".*partial*")), "a half-written figure was left behind"
    onto_picture = CliRunner().invoke(main, [*args[:-3], "-o", str(picture), "-q", "--overwrite"])
    assert onto_picture.exit_code == 2
    assert f"is the input {picture}: writing there would replace it" in onto_picture.output
    many = CliRunner().invoke(main, [*args[:4], *["how many birds are there?"] * (MAX_QUESTIONS + 1), "-o",
                                     str(tmp_path / "many.png"), "-q"])
    assert many.exit_code == 2 and f"one figure shows at most {MAX_QUESTIONS}" in many.output
    assert not (tmp_path / "many.png").exists()
