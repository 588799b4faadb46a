"""Where a vqa model looks: the attention of the answer's first token over the picture's tokens.

The answer's first token (BOS) is the query that predicts the first answer word; its attention
over the image segment, per layer and head, is the map. For a question about a quadrant (or a
pair of them), :func:`asked_bird_share` measures how much of that attention falls on the asked-
about bird(s), against their share of the picture's tokens: 1 is what uniform attention gives,
more means the question sent the model there. The maps are recomputed from each block's q/k
under the model's own mask (prefix-LM, padding), as the birds experiment does
(:func:`~tokformer.tasks.birds.attention.attention_maps`).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from tokformer.engine import save_figure
from tokformer.errors import ConfigError, UsageError
from tokformer.files import check_output_file
from tokformer.masks import prefix_lm_mask
from tokformer.tasks.birds.attention import attention_maps, bird_tokens
from tokformer.tasks.vqa import Example, VQATask
from tokformer.tasks.vqa_data import BirdQuestions


@torch.no_grad()
def answer_attention(model: nn.Module, task: VQATask, images: Sequence[Any], questions: Sequence[str]) -> list[Tensor]:
    """Per layer, ``[B, heads, N_image]``: the attention of each example's answer-start token over its
    picture's tokens (a share of all its attention: the prompt's tokens take the rest)."""
    batch = task.collate([Example(image, question, "") for image, question in zip(images, questions, strict=True)],
                         train=False)
    device = next(model.parameters()).device
    inputs = tuple(batch[name].to(device) for name in ("image", "prompt", "answer"))
    mixed = model.segments(dict(zip(("image", "prompt", "answer"), inputs, strict=True)))
    n = mixed.x.shape[1]
    mask = (prefix_lm_mask(mixed.end_of("prompt"), n, device)[None] & mixed.mask[:, None, :])[:, None]  # [B,1,N,N]
    maps = attention_maps(model, inputs, model.encoder.blocks, mask)
    query, image = mixed.spans["answer"].start, mixed.spans["image"]
    return [m[:, :, query, image] for m in maps]


def _with_asked_birds(data: BirdQuestions,
                      kinds: Collection[str] | None = None) -> Iterator[tuple[int, tuple[int, ...]]]:
    """``(example, asked quadrants)`` of each question about a quadrant or pair whose asked quadrants
    all hold a bird; ``kinds``: of those types only."""
    for b, asked in enumerate(data.quadrants):
        birds = set(data.scenes.bird_slot[data.scenes.bird_image == b].tolist())
        if asked and set(asked) <= birds and (kinds is None or data.kinds[b] in kinds):
            yield b, asked


def _share(probs: Tensor, tokens: np.ndarray) -> Tensor:
    """``[heads]``: one example's attention over the picture (``probs``: ``[heads, N_image]``) on
    ``tokens``, as a multiple of their share of the picture's tokens (1: uniform)."""
    return (probs[:, tokens].sum(dim=-1) / probs.sum(dim=-1)) / (len(tokens) / probs.shape[-1])


def asked_bird_share(maps: list[Tensor], data: BirdQuestions, patch: int,
                     kinds: Collection[str] | None = None) -> np.ndarray:
    """``[layers, heads]``: attention on the asked-about birds' tokens as a multiple of their share of
    the picture's tokens, averaged over the questions about a quadrant or pair whose asked quadrants
    all hold a bird (``maps[l][b]`` belongs to example ``b`` of ``data``); ``kinds``: of those types only."""
    total, used = np.zeros((len(maps), maps[0].shape[1])), 0
    for b, asked in _with_asked_birds(data, kinds):
        tokens = np.unique(np.concatenate([bird_tokens(data.scenes, b, q, patch, first=0) for q in asked]))
        for layer, probs in enumerate(maps):
            total[layer] += _share(probs[b], tokens).numpy()
        used += 1
    if not used:
        raise ValueError(f"no question{' of ' + ', '.join(sorted(kinds)) if kinds else ''} about a quadrant "
                         "with its bird(s) present")
    return total / used


def pair_bird_share(maps: list[Tensor], data: BirdQuestions, patch: int) -> np.ndarray:
    """``[layers]``: for the questions about a pair whose two birds are both there, the attention on
    the less-looked-at bird from the head that looks at it most, as a multiple of that bird's token
    share, averaged over those questions.

    :func:`asked_bird_share` pools the pair: all attention on one of the two birds already scores the
    pair's ceiling, so it cannot tell gathering both birds from looking at one. Here a model that
    sends some head to each bird scores as high as on a one-bird question; one that looks at a single
    bird scores about 1 (uniform) or less."""
    total, used = np.zeros(len(maps)), 0
    for b, asked in _with_asked_birds(data):
        if len(asked) != 2:
            continue
        birds = [bird_tokens(data.scenes, b, q, patch, first=0) for q in asked]
        for layer, probs in enumerate(maps):
            total[layer] += min(float(_share(probs[b], tokens).max()) for tokens in birds)
        used += 1
    if not used:
        raise ValueError("no question about a pair with both birds present")
    return total / used


def plot_question_attention(image: np.ndarray, questions: Sequence[str], answers: Sequence[str],
                            maps: Sequence[np.ndarray], path: str | Path, title: str = "") -> Path:
    """One picture asked several questions: the picture, then per question its ``[grid, grid]``
    attention map over the picture, the answer in the panel's title. Writes a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(questions) + 1, figsize=(2.6 * (len(questions) + 1), 3.0))
    axes[0].imshow(image)
    axes[0].set_title("picture", fontsize=9)
    for ax, question, answer, grid in zip(axes[1:], questions, answers, maps, strict=True):
        ax.imshow(image)
        size = image.shape[0]
        ax.imshow(grid, cmap="magma", alpha=0.6, extent=(0, size, size, 0), interpolation="nearest")
        ax.set_title(f"{textwrap.fill(question, 30)}\n-> {answer or '(nothing)'}", fontsize=8)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    return path


def question_maps(model: nn.Module, task: VQATask, image: Any, questions: Sequence[str],
                  layer: int = -1) -> list[np.ndarray]:
    """For each question about ``image``: layer ``layer``'s head-averaged attention of the answer start
    over the picture, as the ``[grid, grid]`` patch grid (normalised to sum 1)."""
    maps = answer_attention(model, task, [image] * len(questions), questions)[layer].mean(dim=1)  # [Q, N_image]
    rows, cols = task.image_tokenizer.grid_size
    maps = maps / maps.sum(dim=-1, keepdim=True)
    return [m.reshape(rows, cols).numpy() for m in maps]


#: Most questions one figure shows: a panel each, side by side (a thousand would ask matplotlib for a
#: canvas thousands of inches wide).
MAX_QUESTIONS = 8


def figure_path(out: str | os.PathLike, *, overwrite: bool, image: str | os.PathLike) -> Path:
    """``out`` as a Path, checked before the model loads: a file ``check_output_file`` allows, whose
    extension names a format matplotlib writes (its format is taken from there; without one the
    temporary file's random suffix was taken for it: ``Format 'u24juc3f' is not supported``)."""
    from matplotlib.backend_bases import FigureCanvasBase

    path = check_output_file(out, overwrite=overwrite, inputs=[image])
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    if path.suffix[1:].lower() not in formats:
        what = f"extension {path.suffix!r}" if path.suffix else "no extension"
        raise UsageError(f"--out {out} has {what}, which names no figure format; end it with one of "
                         f"{', '.join('.' + f for f in formats)}")
    return path


def attention_figure(source: str | os.PathLike, image: str | os.PathLike, questions: Sequence[str],
                     out: str | os.PathLike, *, layer: int = -1, overwrite: bool = False, checkpoint: str = "best",
                     device: str = "cpu") -> Path:
    """``tokformer vqa attention``: the figure of :func:`plot_question_attention` for one image file
    and several questions, asked of the vqa model of ``source`` (a run directory or model folder)."""
    from tokformer.engine import load
    from tokformer.tokenizers.image import open_image

    if len(questions) > MAX_QUESTIONS:
        raise UsageError(f"{len(questions)} questions: one figure shows at most {MAX_QUESTIONS}; draw several")
    out = figure_path(out, overwrite=overwrite, image=image)
    predictor = load(source, checkpoint, device)
    if not isinstance(predictor.task, VQATask):
        raise ConfigError(f"{source} is not a vqa model")
    task, model = predictor.task, predictor.model
    n_layers = len(model.encoder.blocks)
    if not -n_layers <= layer < n_layers:
        raise UsageError(f"--layer {layer}: the model has {n_layers} layers (0..{n_layers - 1}, or -1 for the last)")
    picture = open_image(Path(image)).convert("RGB").resize(task.image_tokenizer.image_size[::-1])
    answers = [task.predict(model, [picture], prompt=question)[0] for question in questions]
    maps = question_maps(model, task, picture, questions, layer)
    return plot_question_attention(np.asarray(picture), questions, answers, maps, out,
                                   title=f"attention of the answer's first token, layer {layer % n_layers}")
