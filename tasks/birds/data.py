"""Synthetic bird images for two questions about the same kind of picture.

Every image is split into four quadrants (slots): top-left, top-right, bottom-left,
bottom-right. A slot holds at most one bird, jittered inside it, so "the top-right bird"
is always well defined. Two tasks:

* ``count``: 1-4 birds in random slots; the label is ``count - 1`` (4 balanced classes).
* ``compare``: is the top-right bird the same species as the bottom-left one? Two scenes.
  ``twins`` (the experiment's): a bird in every quadrant, three species, one of them twice on
  a diagonal, so neither the species present, their counts, any single bird nor any two
  neighbouring quadrants say anything: only relating the two diagonal birds answers.
  ``pair``: the compared birds plus a distractor bird in each other slot with probability
  ``extra_birds`` (at 0, "same" means "only one species present", which a histogram of
  species answers without relating the two birds; ``tasks/birds/design.py``).
  Half the images are "same" in both scenes.

Species differ in body shape, beak and colour pattern; within a species, pose (facing,
tilt), scale and colours vary, and every image has a smooth random background, texture,
distractor shapes (some in bird colours) and pixel noise, so neither memorising pixels
nor a single colour answers either question.

Drawing is vectorised with numpy: each bird (or distractor) is rendered in a small
window of local coordinates, all windows of one slot at once, then pasted. Everything
is a pure function of the seed. Metadata (species, slot, centre, scale, tilt) is kept so
:func:`recompute_labels` can check the labels from geometry alone.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

Task = Literal["count", "compare"]
TASKS: tuple[Task, ...] = ("count", "compare")
N_CLASSES: dict[str, int] = {"count": 4, "compare": 2}
SLOT_NAMES = ("top-left", "top-right", "bottom-left", "bottom-right")
TOP_RIGHT, BOTTOM_LEFT = 1, 2
SPLIT_CODES = {"train": 0, "test": 1, "sample": 2, "val": 3}  # one independent random stream each
EXTRA_BIRDS = 0.0  # compare task: chance of a distractor bird in each of the other two slots
Scene = Literal["pair", "twins"]
SCENES: tuple[Scene, ...] = ("pair", "twins")
TOP_LEFT, BOTTOM_RIGHT = 0, 3


@dataclass(frozen=True)
class Species:
    """Shape (in body units: the body's half-length is 1) and colours of one species.

    pattern: ``plain``, ``stripes`` (barred wing), ``spots`` (spotted body), ``cap``
    (dark crown), ``mask`` (band through the eye).
    """

    name: str
    body_b: float  # body half-height (round vs slender)
    head_r: float
    beak_len: float
    beak_w: float  # half-width at the base
    beak_hook: float  # downward bend of the tip
    tail_len: float
    tail_spread: float
    body: tuple[float, float, float]
    belly: tuple[float, float, float]
    wing: tuple[float, float, float]
    head: tuple[float, float, float]
    beak: tuple[float, float, float]
    accent: tuple[float, float, float]  # colour of the pattern
    pattern: str


SPECIES: tuple[Species, ...] = (
    Species("robin", 0.82, 0.50, 0.35, 0.14, 0.0, 0.7, 0.30,
            (0.45, 0.40, 0.35), (0.92, 0.45, 0.15), (0.35, 0.30, 0.27), (0.30, 0.27, 0.25), (0.9, 0.8, 0.3),
            (0.92, 0.45, 0.15), "plain"),
    Species("cardinal", 0.72, 0.48, 0.30, 0.22, 0.05, 1.1, 0.25,
            (0.80, 0.08, 0.10), (0.80, 0.08, 0.10), (0.60, 0.05, 0.08), (0.85, 0.10, 0.12), (0.95, 0.55, 0.15),
            (0.05, 0.05, 0.05), "mask"),
    Species("bluejay", 0.55, 0.42, 0.50, 0.11, 0.0, 1.3, 0.35,
            (0.20, 0.40, 0.85), (0.92, 0.92, 0.95), (0.25, 0.45, 0.90), (0.20, 0.40, 0.85), (0.1, 0.1, 0.1),
            (0.05, 0.05, 0.10), "stripes"),
    Species("goldfinch", 0.88, 0.46, 0.22, 0.16, 0.0, 0.6, 0.22,
            (0.98, 0.85, 0.10), (0.98, 0.85, 0.10), (0.10, 0.10, 0.10), (0.98, 0.85, 0.10), (0.95, 0.65, 0.45),
            (0.05, 0.05, 0.05), "cap"),
    Species("kingfisher", 0.62, 0.62, 0.95, 0.12, 0.0, 0.45, 0.18,
            (0.05, 0.60, 0.65), (0.95, 0.55, 0.10), (0.10, 0.45, 0.80), (0.05, 0.55, 0.70), (0.10, 0.10, 0.10),
            (0.95, 0.95, 0.95), "plain"),
    Species("parrot", 0.70, 0.55, 0.38, 0.26, 0.30, 1.0, 0.45,
            (0.15, 0.70, 0.20), (0.60, 0.85, 0.20), (0.10, 0.35, 0.85), (0.90, 0.15, 0.15), (0.95, 0.90, 0.75),
            (0.95, 0.85, 0.10), "spots"),
)
N_SPECIES = len(SPECIES)
_SPECIES_TABLE = {
    name: np.array([getattr(sp, name) for sp in SPECIES], dtype=np.float32)
    for name in ("body_b", "head_r", "beak_len", "beak_w", "beak_hook", "tail_len", "tail_spread",
                 "body", "belly", "wing", "head", "beak", "accent")
}  # field -> [N_SPECIES] or [N_SPECIES, 3], for vectorised lookups
_PATTERNS = ("plain", "stripes", "spots", "cap", "mask")


@dataclass
class BirdImages:
    """A generated split: images, labels, and the geometry behind the labels.

    Attributes:
        images: ``[N, H, W, 3]`` uint8.
        labels: ``[N]`` int64 class labels of ``task``.
        task: ``count`` or ``compare``.
        bird_image / bird_species / bird_slot: ``[M]`` int64, one entry per bird.
        bird_xy: ``[M, 2]`` float (x = column, y = row) centre in pixels.
        bird_scale / bird_tilt: ``[M]`` float (tilt in radians); bird_facing ``[M]`` +-1.
    """

    images: np.ndarray
    labels: np.ndarray
    task: str
    bird_image: np.ndarray
    bird_species: np.ndarray
    bird_slot: np.ndarray
    bird_xy: np.ndarray
    bird_scale: np.ndarray
    bird_tilt: np.ndarray
    bird_facing: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def size(self) -> int:
        return self.images.shape[1]

    def species_present(self) -> np.ndarray:
        """``[N, N_SPECIES]`` float 0/1: which species appear anywhere in each image."""
        present = np.zeros((len(self), N_SPECIES), dtype=np.float32)
        present[self.bird_image, self.bird_species] = 1.0
        return present

    def bird_boxes(self, index: int) -> dict[int, tuple[float, float, float, float]]:
        """Slot -> (x0, y0, x1, y1) box around each bird of image ``index`` (for figures)."""
        half = _extent(self.size)
        picked = np.flatnonzero(self.bird_image == index)
        return {
            int(self.bird_slot[m]): (
                *(self.bird_xy[m] - half * self.bird_scale[m]),
                *(self.bird_xy[m] + half * self.bird_scale[m]),
            )
            for m in picked
        }


def _unit(size: int) -> float:
    """Pixels per body unit: birds keep the same share of the image at any size."""
    return 4.6 * size / 64


def _extent(size: int) -> float:
    """Half-width in pixels of the box holding a bird at scale 1 (beak tip to tail)."""
    return 2.1 * _unit(size)


def generate(task: Task, n: int, seed: int, *, size: int = 64, split: str = "train",
             extra_birds: float = EXTRA_BIRDS, scene: Scene = "pair", chunk: int = 0) -> BirdImages:
    """``n`` images for ``task``, a pure function of the arguments.

    ``split`` selects an independent random stream, so a test set made with the same
    ``seed`` shares no image with the training set; ``chunk`` another independent stream of the
    same split (a training stream that never repeats an image is chunks 0, 1, 2, ...; chunk 0
    is the split's stream as it always was). ``extra_birds`` (compare, ``scene="pair"``)
    is the probability of a distractor bird in each of the top-left and bottom-right slots;
    ``scene="twins"`` is the layout in which only the compared pair decides (:func:`sample_layout`).
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if size < 32:
        raise ValueError(f"size must be at least 32 px, got {size}")
    rng = layout_rng(task, seed, split, chunk)
    occupied, species, labels = sample_layout(task, n, rng, extra_birds, scene)  # [n, 4] bool, [n, 4] int, [n]
    return draw_scenes(occupied, species, labels, task, rng, size)


def draw_scenes(occupied: np.ndarray, species: np.ndarray, labels: np.ndarray, task: str,
                rng: np.random.Generator, size: int = 64) -> BirdImages:
    """Images of given layouts: a bird of ``species[i, slot]`` wherever ``occupied[i, slot]`` (``[n, 4]``
    each), drawn with ``rng`` (pose, background, distractor shapes, noise); ``labels`` and ``task`` are
    kept as they are. Other tasks over the same pictures (``tasks/vqa_data.py``) choose their own layouts."""
    scenes = _draw_scenes(occupied, species, labels, task, rng, size)
    release_freed_heap()  # the drawing's scratch arrays are freed now
    return scenes


def release_freed_heap() -> None:
    """Hand the heap memory freed since the last call back to the OS (glibc's ``malloc_trim``; elsewhere nothing).

    Why: drawing a chunk allocates tens of MB of float scratch arrays, which glibc serves from its heap
    once a first large block has been freed (its mmap threshold adapts upwards). A caller that keeps
    every chunk's small uint8 images (a training stream, 6.3 MB per 512 images at 64 px) pins the heap
    above the freed scratch, so the process grew by about 50 MB per chunk: measured, 17 GB and an
    out-of-memory kill after 3,000 steps of 64 images, where 2.4 GB was held.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _find_malloc_trim():
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only: musl, macOS and Windows lack it
    except OSError:
        return None


_MALLOC_TRIM = _find_malloc_trim()


def _draw_scenes(occupied: np.ndarray, species: np.ndarray, labels: np.ndarray, task: str,
                 rng: np.random.Generator, size: int) -> BirdImages:
    n = len(occupied)
    margin = _local_window(size, 1.2).shape[1] // 2 + 1  # half a window: no window leaves the canvas
    canvas = np.zeros((n, size + 2 * margin, size + 2 * margin, 3), dtype=np.float32)  # [n, H + 2m, W + 2m, 3]
    canvas[:, margin:-margin, margin:-margin] = _background(n, size, rng)
    _draw_distractors(canvas, size, margin, rng)
    slot_xy = _slot_centres(size)  # [4, 2]
    jitter = 0.09 * size
    birds: dict[str, list[np.ndarray]] = {k: [] for k in ("image", "species", "slot", "xy", "scale", "tilt", "facing")}
    for slot in range(4):
        idx = np.flatnonzero(occupied[:, slot])
        m = len(idx)
        xy = slot_xy[slot] + rng.uniform(-jitter, jitter, size=(m, 2))
        scale = rng.uniform(0.8, 1.2, size=m)
        tilt = rng.uniform(-0.4, 0.4, size=m)
        facing = rng.choice([-1.0, 1.0], size=m)
        _draw_birds(canvas, idx, species[idx, slot], xy + margin, scale, tilt, facing, size, rng)
        for key, value in zip(birds, (idx, species[idx, slot], np.full(m, slot), xy, scale, tilt, facing), strict=True):
            birds[key].append(value)
    canvas = canvas[:, margin:-margin, margin:-margin]  # [n, H, W, 3]
    canvas += 0.03 * rng.standard_normal(size=canvas.shape, dtype=np.float32)
    images = (np.clip(canvas, 0.0, 1.0) * 255 + 0.5).astype(np.uint8)
    cat = {k: np.concatenate(v) for k, v in birds.items()}
    order = np.argsort(cat["image"], kind="stable")  # birds grouped by image
    return BirdImages(
        images=images,
        labels=labels,
        task=task,
        bird_image=cat["image"][order].astype(np.int64),
        bird_species=cat["species"][order].astype(np.int64),
        bird_slot=cat["slot"][order].astype(np.int64),
        bird_xy=cat["xy"][order],
        bird_scale=cat["scale"][order],
        bird_tilt=cat["tilt"][order],
        bird_facing=cat["facing"][order],
    )


def layout_rng(task: Task, seed: int, split: str, chunk: int = 0) -> np.random.Generator:
    """The random stream of a split's chunk; :func:`generate` draws the layouts from it first, so
    ``sample_layout`` on a fresh copy gives the same layouts without drawing a pixel."""
    if chunk < 0:
        raise ValueError(f"chunk must be >= 0, got {chunk}")
    # numpy pads a seed sequence with zeros, so chunk 0 is the three-word stream of earlier versions
    return np.random.default_rng([seed, SPLIT_CODES[split], TASKS.index(task), chunk])


def sample_layout(task: Task, n: int, rng: np.random.Generator, extra_birds: float = EXTRA_BIRDS,
                  scene: Scene = "pair") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which slots hold a bird ``[n, 4]``, each slot's species ``[n, 4]``, and balanced labels ``[n]``.

    Comparison scenes: ``pair``, the top-right and bottom-left birds plus ``extra_birds``
    distractors of any species. ``twins``: a bird in every quadrant, three species, one of
    them twice, on a diagonal: on the top-right/bottom-left one ("same", label 1) or on the
    other ("different"). So every image holds the same multiset of species counts (2, 1, 1),
    no single bird says anything, and every pair of neighbouring quadrants holds two species:
    only relating the birds of a diagonal answers (``tasks/birds/design.py`` computes what each
    partial view can know, exactly).
    """
    species = rng.integers(0, N_SPECIES, size=(n, 4))
    if task == "count":
        labels = rng.permutation(np.arange(n) % 4)  # exactly balanced: count - 1
        ranks = np.argsort(rng.random((n, 4)), axis=1)  # a random order of the slots
        occupied = ranks < (labels + 1)[:, None]
        return occupied, species, labels.astype(np.int64)
    labels = rng.permutation(np.arange(n) % 2)  # 1 = same species
    if scene == "twins":
        twin, first, second = _three_species(n, rng)  # [n] each, all distinct
        same = labels == 1
        species[:, TOP_RIGHT] = np.where(same, twin, first)
        species[:, BOTTOM_LEFT] = np.where(same, twin, second)
        species[:, TOP_LEFT] = np.where(same, first, twin)
        species[:, BOTTOM_RIGHT] = np.where(same, second, twin)
        return np.ones((n, 4), dtype=bool), species, labels.astype(np.int64)
    occupied = rng.random((n, 4)) < extra_birds
    occupied[:, [TOP_RIGHT, BOTTOM_LEFT]] = True
    other = (species[:, TOP_RIGHT] + rng.integers(1, N_SPECIES, size=n)) % N_SPECIES  # uniform over the others
    species[:, BOTTOM_LEFT] = np.where(labels == 1, species[:, TOP_RIGHT], other)
    return occupied, species, labels.astype(np.int64)


def _three_species(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three distinct species per image ``[n]`` each, uniform over ordered triples."""
    order = np.argsort(rng.random((n, N_SPECIES)), axis=1)  # a random permutation per image
    return order[:, 0], order[:, 1], order[:, 2]


def _slot_centres(size: int) -> np.ndarray:
    """``[4, 2]`` (x, y) centre of each quadrant, in slot order TL, TR, BL, BR."""
    q, t = size / 4, 3 * size / 4
    return np.array([[q, q], [t, q], [q, t], [t, t]])


def slot_of(xy: np.ndarray, size: int) -> np.ndarray:
    """Quadrant of pixel positions ``[..., 2]`` (x, y), from geometry alone."""
    right = xy[..., 0] >= size / 2
    bottom = xy[..., 1] >= size / 2
    return 2 * bottom.astype(np.int64) + right.astype(np.int64)


def recompute_labels(data: BirdImages) -> np.ndarray:
    """The labels implied by the bird metadata, slots derived from the centres (a checker)."""
    n = len(data)
    if data.task == "count":
        return np.bincount(data.bird_image, minlength=n) - 1
    slots = slot_of(data.bird_xy, data.size)
    species_at = np.full((n, 4), -1)
    species_at[data.bird_image, slots] = data.bird_species
    return (species_at[:, TOP_RIGHT] == species_at[:, BOTTOM_LEFT]).astype(np.int64)


def _background(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Smooth random colour fields plus oriented texture: ``[n, H, W, 3]`` float32 in about [0, 1]."""
    coarse = rng.uniform(0.25, 0.85, size=(n, 3, 4, 4)).astype(np.float32)
    coarse = 0.6 * coarse + 0.4 * coarse.mean(axis=1, keepdims=True)  # muted colours
    field = F.interpolate(torch.from_numpy(coarse), size=(size, size), mode="bilinear", align_corners=True)
    field = field.permute(0, 2, 3, 1).numpy()  # [n, H, W, 3] (a strided view)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    angle = rng.uniform(0, np.pi, size=(n, 1, 1)).astype(np.float32)
    freq = rng.uniform(0.3, 1.2, size=(n, 1, 1)).astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1, 1)).astype(np.float32)
    waves = np.sin(freq * (xx * np.cos(angle) + yy * np.sin(angle)) + phase)  # [n, H, W]
    return field + 0.06 * waves[..., None]


def _local_window(size: int, scale_max: float) -> np.ndarray:
    """Pixel offsets ``[2, K, K]`` (dy, dx) of a window wide enough for the largest bird."""
    half = int(np.ceil(_extent(size) * scale_max)) + 1
    off = np.arange(-half, half + 1, dtype=np.float32)
    return np.stack(np.meshgrid(off, off, indexing="ij"))


def _paste(canvas: np.ndarray, idx: np.ndarray, origin: np.ndarray, colour: np.ndarray, cover: np.ndarray) -> None:
    """Paint windows ``colour`` ``[m, K, K, 3]`` where ``cover`` ``[m, K, K]`` (bool) is True, at
    integer top-left ``origin`` ``[m, 2]`` (row, col) into ``canvas[idx]``.

    The canvas carries a margin wider than a window, so no window needs clipping; callers
    paste at most one window per image at a time, so writes never collide. Flat indices
    into the ``[n * H * W, 3]`` view are much faster than 3-D fancy indexing.
    """
    _, h, w, _ = canvas.shape
    k = cover.shape[1]
    r = origin[:, 0:1] + np.arange(k)  # [m, K]
    c = origin[:, 1:2] + np.arange(k)
    flat = (idx[:, None, None] * h + r[:, :, None]) * w + c[:, None, :]  # [m, K, K]
    pixels = canvas.reshape(-1, 3)  # a view: writes land in canvas
    pixels[flat[cover]] = colour[cover]


def _bird_frame(xy: np.ndarray, scale: np.ndarray, tilt: np.ndarray, facing: np.ndarray, size: int):
    """Window origins and each window pixel's bird-local coordinates (u forward, v up), in body units."""
    window = _local_window(size, 1.2)  # [2, K, K]
    half = window.shape[1] // 2
    base = np.floor(xy).astype(np.int64)  # [m, 2] (x, y)
    origin = np.stack([base[:, 1] - half, base[:, 0] - half], axis=1)  # (row, col)
    # pixel centres relative to the bird centre
    f32 = lambda a: a.astype(np.float32)[:, None, None]  # [m] -> [m, 1, 1] float32
    dy = window[0][None] + f32(base[:, 1] - xy[:, 1] + 0.5)  # [m, K, K]
    dx = window[1][None] + f32(base[:, 0] - xy[:, 0] + 0.5)
    unit = f32(_unit(size) * scale)
    cos, sin = f32(np.cos(tilt)), f32(np.sin(tilt))
    u = (dx * cos - dy * sin) / unit * f32(facing)
    v = (-dx * sin - dy * cos) / unit
    return origin, u, v


def _draw_birds(
    canvas: np.ndarray,
    idx: np.ndarray,
    species: np.ndarray,
    xy: np.ndarray,
    scale: np.ndarray,
    tilt: np.ndarray,
    facing: np.ndarray,
    size: int,
    rng: np.random.Generator,
) -> None:
    """Render one bird into each image ``idx`` (vectorised over birds) of an ``size``-px image's canvas."""
    if len(idx) == 0:
        return
    m = len(idx)
    origin, u, v = _bird_frame(xy, scale, tilt, facing, size)  # [m, K, K] each
    p = {name: _SPECIES_TABLE[name][species] for name in _SPECIES_TABLE}  # each [m] or [m, 3]
    # per-bird palette, parts in drawing order (0 = transparent): colour jitter per bird
    parts = ("wing", "body", "belly", "accent", "head", "beak")
    palette = np.stack([p[name] for name in parts], axis=1)  # [m, 6, 3]
    palette = palette * rng.uniform(0.85, 1.12, size=(m, 1, 1)) + rng.normal(0, 0.04, size=(m, 1, 3))
    palette = np.concatenate([np.zeros((m, 1, 3)), np.clip(palette, 0, 1), np.full((m, 1, 3), 0.03)], axis=1)
    TAIL, BODY, BELLY, ACCENT, HEAD, BEAK, EYE = 1, 2, 3, 4, 5, 6, 7  # rows of palette (TAIL uses wing colour)
    WING = TAIL
    pattern = np.array([_PATTERNS.index(SPECIES[s].pattern) for s in species])[:, None, None]  # [m, 1, 1]
    e = lambda a: a[:, None, None]  # [m] -> [m, 1, 1]
    part = np.zeros(u.shape, dtype=np.int64)  # [m, K, K] which palette row each pixel shows

    def layer(mask: np.ndarray, row: int) -> None:
        part[mask] = row

    b = e(p["body_b"])
    # tail: a fan behind the body, widening away from it
    t = (-u - 0.7) / e(p["tail_len"] + 0.3)
    layer((t >= 0) & (t <= 1) & (np.abs(v - 0.25 * t) <= 0.12 + e(p["tail_spread"]) * t), TAIL)
    body = (u**2 + (v / b) ** 2) <= 1.0
    layer(body, BODY)
    layer(body & (v < -0.2 * b), BELLY)
    spots = (pattern == _PATTERNS.index("spots")) & (np.sin(7 * u) * np.sin(7 * v) > 0.45)
    layer(body & spots & (v < 0.3 * b), ACCENT)
    wing = (((u + 0.15) / 0.62) ** 2 + ((v - 0.15 * b) / (0.5 * b)) ** 2) <= 1.0
    layer(wing, WING)
    layer(wing & (pattern == _PATTERNS.index("stripes")) & (np.sin(9 * u) > 0.2), ACCENT)
    hr = e(p["head_r"])
    hx, hy = 0.85, 0.55 * b + 0.1
    head = ((u - hx) ** 2 + (v - hy) ** 2) <= hr**2
    layer(head, HEAD)
    layer(head & (pattern == _PATTERNS.index("cap")) & (v > hy + 0.25 * hr), ACCENT)
    layer(head & (pattern == _PATTERNS.index("mask")) & (np.abs(v - hy - 0.1 * hr) < 0.3 * hr), ACCENT)
    # beak: a tapering wedge from the front of the head, bent down by beak_hook
    start = hx + 0.8 * hr
    tb = (u - start) / e(p["beak_len"] + 0.2 * p["head_r"])
    centre = hy - e(p["beak_hook"]) * tb**2
    layer((tb >= 0) & (tb <= 1) & (np.abs(v - centre) <= e(p["beak_w"]) * (1 - tb) + 0.03), BEAK)
    layer(((u - hx - 0.3 * hr) ** 2 + (v - hy - 0.15 * hr) ** 2) <= (0.2 * hr) ** 2, EYE)
    colour = palette[np.arange(m)[:, None, None], part]  # [m, K, K, 3]
    _paste(canvas, idx, origin, colour, part > 0)


def _draw_distractors(canvas: np.ndarray, size: int, margin: int, rng: np.random.Generator) -> None:
    """2-6 clutter shapes per image: discs, bars (twigs), and rings, some in bird colours."""
    n = canvas.shape[0]
    palette = np.array([col for s in SPECIES for col in (s.body, s.wing, s.head, s.belly)], dtype=np.float32)
    counts = rng.integers(2, 7, size=n)
    for k in range(6):
        idx = np.flatnonzero(counts > k)
        m = len(idx)
        xy = rng.uniform(0, size, size=(m, 2)) + margin
        origin, u, v = _bird_frame(xy, rng.uniform(0.4, 1.0, size=m), rng.uniform(0, np.pi, size=m),
                                   np.ones(m), size)
        kind = rng.integers(0, 3, size=m)[:, None, None]
        r2 = u**2 + v**2
        disc = r2 <= 0.8
        bar = (np.abs(v) <= 0.15) & (np.abs(u) <= 2.0)
        ring = (r2 <= 1.0) & (r2 >= 0.5)
        mask = np.where(kind == 0, disc, np.where(kind == 1, bar, ring))
        from_palette = rng.random(m) < 0.5
        colour = np.where(from_palette[:, None], palette[rng.integers(0, len(palette), size=m)],
                          rng.uniform(0, 1, size=(m, 3)))
        colour = np.broadcast_to(colour[:, None, None, :], (*u.shape, 3))
        _paste(canvas, idx, origin, colour, mask)
