"""Image datasets for the ``classify`` task: built-in shapes, an ImageFolder directory, or a
torchvision dataset by name; plus the standard training augmentations.

Every dataset here yields ``(image, label)`` with ``image`` a PIL image or a ``[C, H, W]``
uint8 tensor: whatever the image tokenizer accepts. Augmentation wraps a dataset
(:class:`Augmented`) so the eval set stays untouched.

Bad data policy (docs/vision.md): files PIL cannot identify are skipped with a warning
naming them when a folder is scanned; a file that breaks later, while being decoded, is
skipped then, with a warning naming it (:class:`ImageFiles`). An empty folder, a class folder
without images, or a missing torchvision dataset without ``download`` is a DataError.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset

from tokformer.engine import check_data_fits
from tokformer.errors import DataError
from tokformer.tokenizers.image import checked_image, open_image

log = logging.getLogger(__name__)

SHAPE_CLASSES = (
    "disc", "square", "triangle", "ring", "cross",
    "h_stripes", "v_stripes", "checker", "diagonal", "frame",
)  # fmt: skip
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")
#: Names of the held-out folder beside ``train/`` in data that come split.
HELD_OUT_FOLDERS = ("val", "valid", "validation", "test")
TORCHVISION_DATASETS = {
    "cifar10": "CIFAR10",
    "cifar100": "CIFAR100",
    "mnist": "MNIST",
    "fashion_mnist": "FashionMNIST",
    "kmnist": "KMNIST",
}


# -- built-in shapes ------------------------------------------------------------------------


def _shape_mask(kind: int, yy: np.ndarray, xx: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    """Boolean ``[S, S]`` foreground of class ``kind`` at a random place and scale."""
    r = rng.uniform(0.22, 0.4) * size  # half-extent in pixels
    cy, cx = rng.uniform(r, size - r, size=2)
    dy, dx = yy - cy, xx - cx
    box = (np.abs(dy) <= r) & (np.abs(dx) <= r)
    period = rng.integers(3, 6)
    thick = max(1.5, r * rng.uniform(0.25, 0.4))
    if kind == 0:  # disc
        return dy**2 + dx**2 <= r**2
    if kind == 1:  # square
        return box
    if kind == 2:  # triangle, apex up
        return (dy <= r) & (np.abs(dx) <= (dy + r) / 2)
    if kind == 3:  # ring
        dist = np.sqrt(dy**2 + dx**2)
        return (dist <= r) & (dist >= r - thick)
    if kind == 4:  # plus-shaped cross
        return box & ((np.abs(dy) <= thick / 2) | (np.abs(dx) <= thick / 2))
    if kind == 5:  # horizontal stripes in a box
        return box & ((yy // period) % 2 == 0)
    if kind == 6:  # vertical stripes in a box
        return box & ((xx // period) % 2 == 0)
    if kind == 7:  # checkerboard in a box
        return box & (((yy // period) + (xx // period)) % 2 == 0)
    if kind == 8:  # one diagonal bar, either direction
        sign = rng.choice((-1.0, 1.0))
        return box & (np.abs(dy - sign * dx) <= thick)
    return box & ~((np.abs(dy) <= r - thick) & (np.abs(dx) <= r - thick))  # 9: hollow square frame


def make_shapes(n: int, size: int = 32, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``n`` images ``[n, 3, size, size]`` uint8 and labels ``[n]``; same arguments, same data.

    Ten classes of shape or texture, each drawn at a random position and scale, in a random
    bright colour on a random darker background, with pixel noise. Colours are drawn
    independently of the class, so the class cannot be read off the mean colour: a model
    must see shape. (Bright-on-dark keeps edge polarity fixed, which a ViT learns much
    faster than random polarity; area differences between classes are swamped by the
    colour and scale randomness, see the test.)
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    images = np.empty((n, size, size, 3), dtype=np.uint8)
    labels = rng.integers(0, len(SHAPE_CLASSES), size=n)
    for i, kind in enumerate(labels):
        hue = rng.uniform(0, 1, size=(2, 3))  # colour of shape and background, then their brightness:
        fg = 0.55 + 0.45 * hue[0] / hue[0].max()  # a bright shape ...
        bg = 0.35 * hue[1] / hue[1].max() * rng.uniform(0.2, 1)  # ... on a darker background
        mask = _shape_mask(int(kind), yy, xx, rng, size)[..., None]
        image = np.where(mask, fg, bg) + rng.normal(0, 0.06, size=(size, size, 3))
        images[i] = (np.clip(image, 0, 1) * 255).round().astype(np.uint8)
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(labels).long()


class TensorImages(Dataset):
    """Images held in memory as one uint8 tensor ``[n, C, H, W]`` with labels ``[n]``."""

    def __init__(self, images: Tensor, labels: Tensor, classes: list[str]) -> None:
        self.images, self.labels, self.classes = images, labels, classes

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        return self.images[i], int(self.labels[i])


def shapes_datasets(train_size: int, eval_size: int, size: int, seed: int) -> tuple[TensorImages, TensorImages]:
    """Train and eval sets of the built-in shapes, from disjoint seeds. Refused in one line when they
    cannot fit in memory: each image is ``3 * size**2`` bytes, and one image being drawn takes about
    200 bytes a pixel of float temporaries (its grids, colours, mask and noise)."""
    check_data_fits((train_size + eval_size) * 3 * size**2 + 200 * size**2,
                    f"train_size + eval_size = {train_size + eval_size:,} built-in {size} x {size} images")
    classes = list(SHAPE_CLASSES)
    return (
        TensorImages(*make_shapes(train_size, size, seed), classes),
        TensorImages(*make_shapes(eval_size, size, seed + 1), classes),
    )


# -- folders --------------------------------------------------------------------------------


#: Files in a row that fail to decode which :class:`ImageFiles` steps over before it gives up (timm's
#: ImageDataset allows as many): beyond that the folder, not a file, is broken.
MAX_SKIPPED_IN_A_ROW = 20


class ImageFiles(Dataset):
    """``(path, label)`` pairs, opened lazily.

    A file that fails to decode (a valid header over broken pixel data passes the scan's cheap check)
    is skipped with a warning naming it, for the next file, as timm's ImageDataset does: one broken
    file in a large folder must not stop a run at the same step again on every resume. More than
    :data:`MAX_SKIPPED_IN_A_ROW` in a row is a DataError.
    """

    def __init__(self, samples: list[tuple[Path, int]], classes: list[str]) -> None:
        self.samples, self.classes = samples, classes

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        tries = min(MAX_SKIPPED_IN_A_ROW + 1, len(self.samples))
        for offset in range(tries):
            path, label = self.samples[(i + offset) % len(self.samples)]
            try:
                return open_image(path), label
            except DataError as err:
                log.warning("skipping an image that cannot be decoded, for the next one: %s", err)
        raise DataError(f"{tries} image files in a row, from {self.samples[i][0]} on, cannot be decoded")


def readable_image(path: Path, decode: bool = False) -> bool:
    """The file passes :func:`checked_image`'s header checks (a regular file, within the pixel limit) and
    PIL can identify it (cheap: nothing is decoded), or with ``decode`` decodes whole (a valid header
    over broken or truncated pixel data fails only here); other files are skipped with a warning naming
    them."""
    try:
        with checked_image(path) as image:
            image.load() if decode else image.verify()
        return True
    except DataError as err:
        log.warning("skipping unreadable image: %s", err)
        return False


def scan_folder(root: Path, classes: list[str] | None = None, *, extensions: Sequence[str] = IMAGE_EXTENSIONS,
                readable: Callable[[Path], bool] = readable_image, what: str = "image",
                ) -> tuple[list[tuple[Path, int]], list[str]]:
    """Files under ``root/CLASS/...`` with their class index, like torchvision's ImageFolder: images by
    default, or any other ``what`` (``audio``) whose files end in ``extensions`` and pass ``readable``
    (which warns, naming each file it turns away).

    ``classes`` fixes the class list (an eval folder must use the training classes); by
    default it is the sorted subfolder names, and each must hold at least one readable file.
    """
    if not root.is_dir():
        raise DataError(f"image folder not found: {root}")
    found = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not found:
        example = "image.png" if what == "image" else f"{what}{extensions[0]}"
        raise DataError(f"{root} has no class folders: expected {root}/CLASS_NAME/{example} for each class")
    fixed = classes is not None
    classes = classes if fixed else found
    samples: list[tuple[Path, int]] = []
    for label, name in enumerate(classes):
        files = sorted(
            p for p in (root / name).rglob("*") if p.suffix.lower() in extensions and p.is_file()
        ) if (root / name).is_dir() else []
        files = [p for p in files if readable(p)]
        if not files and not fixed:
            raise DataError(f"class folder {root / name} has no readable {what} files ({', '.join(extensions)})")
        samples += [(p, label) for p in files]
    if fixed and (extra := sorted(set(found) - set(classes))):
        raise DataError(f"{root} has classes the training data lacks: {', '.join(extra[:5])}")
    return samples, classes


def split_folders(root: Path) -> tuple[Path, Path] | None:
    """``(root/train, root/val)`` (or ``valid``, ``validation``, ``test``) for data that come split, None
    for one folder to split. A ``train`` folder with no held-out folder beside it is a DataError: read
    as one folder, ``train`` would become a class of its own, or its files would be missed."""
    train = root / "train"
    held_out = next((root / n for n in HELD_OUT_FOLDERS if (root / n).is_dir()), None)
    if train.is_dir() and held_out is None:
        raise DataError(f"{root} has a train/ folder but no {'/, '.join(HELD_OUT_FOLDERS)}/ beside it: add the "
                        f"held-out split there, or put all the data directly in {root} to hold out a share")
    return (train, held_out) if train.is_dir() else None


def folder_datasets(root: Path, val_fraction: float, seed: int, *,
                    files_dataset: Callable[[list[tuple[Path, int]], list[str]], Any] = ImageFiles,
                    **scan: Any) -> tuple[Any, Any]:
    """``root/train`` + ``root/val`` (or ``root/test``) if present; else ``root``'s class
    folders, with a seeded ``val_fraction`` of the files held out. Each split is a ``files_dataset``
    (:class:`ImageFiles` for images); ``scan`` goes to :func:`scan_folder` (another kind of file)."""
    split = split_folders(root)
    if split is not None:
        train, classes = scan_folder(split[0], **scan)
        evals, _ = scan_folder(split[1], classes, **scan)
        return files_dataset(train, classes), files_dataset(evals, classes)
    samples, classes = scan_folder(root, **scan)
    order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(seed)).tolist()
    n_eval = int(round(len(samples) * val_fraction))
    if n_eval >= len(samples):
        raise DataError(f"{root} has {len(samples)} files: too few to hold out {val_fraction:.0%} for evaluation")
    evals = [samples[i] for i in order[:n_eval]]
    return files_dataset([samples[i] for i in order[n_eval:]], classes), files_dataset(evals, classes)


# -- torchvision datasets by name -------------------------------------------------------------


def torchvision_datasets(name: str, root: Path, download: bool) -> tuple[Dataset, Dataset]:
    """A torchvision dataset's train and test splits; without ``download`` the files must be in ``root``."""
    import torchvision.datasets as tvd

    cls = getattr(tvd, TORCHVISION_DATASETS[name])
    try:
        return cls(str(root), train=True, download=download), cls(str(root), train=False, download=download)
    except RuntimeError as err:  # torchvision's "Dataset not found or corrupted"
        hint = "check the network" if download else "pass -o download=true (needs network) or put its files there"
        raise DataError(f"{name} not found under {root}: {err}; {hint}") from None
    except OSError as err:  # download failure
        raise DataError(f"could not download {name} into {root}: {err}") from None


def dataset_labels(dataset: Dataset) -> list[int]:
    """Every label of a dataset of this module or of torchvision, without decoding images where
    the dataset keeps its labels apart (baselines need only them)."""
    if isinstance(dataset, Augmented):
        return dataset_labels(dataset.base)
    if isinstance(dataset, TensorImages):
        return dataset.labels.tolist()
    if isinstance(dataset, ImageFiles):
        return [label for _, label in dataset.samples]
    targets = getattr(dataset, "targets", None)  # torchvision's
    return [int(t) for t in targets] if targets is not None else [int(dataset[i][1]) for i in range(len(dataset))]


def save_class_folders(images: Iterable[np.ndarray], labels: Iterable[Any], root: Path) -> Path:
    """Images (``[H, W]`` or ``[H, W, 3]`` uint8 arrays) as ``root/<label>/<i>.png``: the layout
    ``tokformer train classify --data ROOT`` reads. Returns ``root``."""
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(folder / f"{i}.png")
    return root


def dataset_classes(dataset: Dataset) -> list[str]:
    classes = getattr(dataset, "classes", None)
    if not classes:
        raise DataError(f"{type(dataset).__name__} does not list its classes")
    return [str(c) for c in classes]


# -- augmentation ---------------------------------------------------------------------------


def to_rgb(image: Any) -> Tensor:
    """PIL image (any mode) or ``[C, H, W]`` uint8 tensor -> ``[3, H, W]`` uint8 tensor.

    Palette images go through RGBA so transparency is resolved; alpha is dropped;
    grayscale is repeated over the three channels.
    """
    from torchvision.transforms import v2  # torchvision: ~1 s to import, only when images are read

    if isinstance(image, Image.Image):
        if image.mode == "P":
            image = image.convert("RGBA")
        return v2.functional.to_image(image.convert("RGB"))
    if image.dim() == 2:
        image = image.unsqueeze(0)
    if image.shape[0] == 1:
        return image.expand(3, -1, -1)
    return image[:3]


def eval_transform(image_size: tuple[int, int] | None, interpolation: str) -> Callable[[Any], Tensor]:
    """RGB, resized to ``image_size`` as each image is read (None: kept at its size), with the tokenizer's
    ``interpolation``, as timm's eval transform resizes before batching. Left to the tokenizer, a batch of
    full-size images was stacked and made float first: 32 PNGs of 5700² pixels (3 MB on disk) asked for
    12.5 GB. An image already at ``image_size`` is left as it is."""
    from torchvision.transforms import InterpolationMode, v2

    if image_size is None:
        return to_rgb
    return v2.Compose([to_rgb, v2.Resize(list(image_size), interpolation=InterpolationMode(interpolation),
                                         antialias=True)])


def train_transform(image_size: int, crop_scale: float, flip: bool) -> Callable[[Any], Tensor]:
    """RGB, random resized crop (area ``crop_scale``..1 of the image; a plain resize at 1) and horizontal flip."""
    from torchvision.transforms import v2

    crop = (
        v2.RandomResizedCrop(image_size, scale=(crop_scale, 1.0), antialias=True)
        if crop_scale < 1.0
        else v2.Resize((image_size, image_size), antialias=True)
    )
    steps: list[Any] = [to_rgb, crop]
    if flip:
        steps.append(v2.RandomHorizontalFlip())
    return v2.Compose(steps)


class Augmented(Dataset):
    """A dataset with a transform applied to each image; labels untouched."""

    def __init__(self, base: Dataset, transform: Callable[[Any], Tensor]) -> None:
        self.base, self.transform = base, transform

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        image, label = self.base[i]
        return self.transform(image), label
