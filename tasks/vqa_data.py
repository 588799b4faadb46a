"""Questions about bird scenes: the built-in data of the ``vqa`` task.

The pictures are the birds experiment's (``tasks/birds/data.py``: 64 px, four quadrants, a bird
at most per quadrant, six species, pose, backgrounds and distractor shapes), each drawn to fit
its one question, in words, which has a one-word answer:

=========  ==============================================  ============================
type       asks                                            answers
=========  ==============================================  ============================
count      how many birds                                  one, two, three, four
presence   whether a quadrant holds a bird                 yes, no (as often)
species    the species of the bird in a quadrant           robin, cardinal, ... (6)
same       whether two quadrants' birds are one species    yes, no (as often), any pair
facing     which way the bird in a quadrant looks          left, right
=========  ==============================================  ============================

Does a model read the question, or memorise templates? Each type has several phrasings, the
last of which never appears in training, and some (type, quadrants) combinations never appear
in training either (:data:`HELD_OUT_COMBOS`, e.g. comparing the top-left and bottom-right birds,
though both quadrants are asked about in other ways); evaluation splits hold every phrasing and
combination, and :class:`BirdQuestions` says which examples are held out. :func:`reworded` asks a
split's questions again in phrasings made only of trained words (:data:`REWORDED`). Everything is a
pure function of the seed, split and chunk (independent streams, as in the birds experiment).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tokformer import files
from tokformer.errors import DataError
from tokformer.tasks.birds.data import (
    BOTTOM_RIGHT,
    N_SPECIES,
    SPECIES,
    SPLIT_CODES,
    TOP_LEFT,
    TOP_RIGHT,
    BirdImages,
    draw_scenes,
)
from tokformer.tasks.image_data import readable_image, split_folders

log = logging.getLogger(__name__)

QUESTION_TYPES = ("count", "presence", "species", "same", "facing")
QUADRANT_WORDS = ("top left", "top right", "bottom left", "bottom right")
NUMBER_WORDS = ("one", "two", "three", "four")
YES, NO = "yes", "no"
FACING_WORDS = {-1: "left", 1: "right"}  # the generator's facing: +1 puts the beak towards +x

#: Phrasings of each question type; ``{a}`` and ``{b}`` are quadrants. The last is never trained on.
PHRASINGS: dict[str, tuple[str, ...]] = {
    "count": ("how many birds are there?", "how many birds are in the picture?", "count the birds.",
              "what is the number of birds?"),
    "presence": ("is there a bird at the {a}?", "is the {a} quadrant occupied?", "does the {a} have a bird?",
                 "is a bird sitting in the {a}?"),
    "species": ("what species is the bird at the {a}?", "which bird is at the {a}?", "name the bird in the {a}.",
                "what kind of bird sits in the {a}?"),
    "same": ("are the birds at the {a} and the {b} the same species?", "do the {a} and {b} birds match?",
             "is the {a} bird the same kind as the {b} bird?", "same species in the {a} and the {b}?"),
    "facing": ("which way does the bird at the {a} face?", "is the {a} bird facing left or right?",
               "where does the {a} bird look?", "which direction is the bird in the {a} facing?"),
}
#: One more phrasing of each type, never asked in training and not drawn in any split, made only of
#: words the trained phrasings use, in an order none of them has. Most held-out phrasings above hold
#: a word no training question has, which a model learnt from scratch cannot know; asked in these
#: instead (:func:`reworded`), the same pictures measure whether it reads a question or matches a template.
REWORDED: dict[str, str] = {
    "count": "count the birds in the picture.",
    "presence": "is there a bird in the {a} quadrant?",
    "species": "what species is the {a} bird?",
    "same": "are the {a} and {b} birds the same species?",
    "facing": "which way is the {a} bird facing?",
}
#: (type, quadrants) never asked in training; each quadrant is still asked about in other ways there.
HELD_OUT_COMBOS: frozenset[tuple[str, tuple[int, ...]]] = frozenset({
    ("presence", (TOP_LEFT,)), ("species", (BOTTOM_RIGHT,)), ("facing", (TOP_RIGHT,)),
    ("same", (TOP_LEFT, BOTTOM_RIGHT)),
})
_STREAM = 2  # the birds experiment's tasks use streams 0 (count) and 1 (compare)
_PAIRS = tuple((a, b) for a in range(4) for b in range(a + 1, 4))


@dataclass
class BirdQuestions:
    """A split: one question per picture.

    Attributes:
        scenes: the pictures (``scenes.images``: ``[N, H, W, 3]`` uint8) and the birds in them.
        questions / answers: ``N`` strings each.
        kinds: each question's type (:data:`QUESTION_TYPES`).
        quadrants: the quadrant(s) each question asks about (``()`` for count), in ascending order.
        phrasing: ``[N]`` index into :data:`PHRASINGS` of the question's type.
    """

    scenes: BirdImages
    questions: list[str]
    answers: list[str]
    kinds: list[str]
    quadrants: list[tuple[int, ...]]
    phrasing: np.ndarray

    def __len__(self) -> int:
        return len(self.questions)

    @property
    def held_out_phrasing(self) -> np.ndarray:
        """``[N]`` bool: asked in a phrasing training never uses."""
        last = np.array([len(PHRASINGS[kind]) - 1 for kind in self.kinds])
        return self.phrasing == last

    @property
    def held_out_combo(self) -> np.ndarray:
        """``[N]`` bool: a (type, quadrants) combination training never asks."""
        return np.array([(kind, q) in HELD_OUT_COMBOS for kind, q in zip(self.kinds, self.quadrants, strict=True)])


def bird_questions(n: int, seed: int, split: str = "train", *, size: int = 64, chunk: int = 0) -> BirdQuestions:
    """``n`` pictures with a question each; ``split="train"`` leaves out the held-out phrasings and
    combinations, other splits (``val``, ``test``, ``sample``) ask everything.

    Question first, then a picture that fits it: the type is uniform, and so is the answer within
    its type (so the question alone says nothing: a blind model is at chance per type); the other
    birds of the picture, 1-4 in all, are of any species (the compared species too)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = np.random.default_rng([seed, SPLIT_CODES[split], _STREAM, chunk])
    train = split == "train"
    kinds = [str(k) for k in rng.choice(QUESTION_TYPES, size=n)]
    species = rng.integers(0, N_SPECIES, size=(n, 4))  # [n, 4], where a question does not fix them
    occupied = np.zeros((n, 4), dtype=bool)
    quadrants: list[tuple[int, ...]] = []
    answers: list[str] = []
    for i, kind in enumerate(kinds):
        asked, answer = _design(kind, rng, train, occupied[i], species[i])
        quadrants.append(asked)
        answers.append(answer)
    scenes = draw_scenes(occupied, species, np.zeros(n, dtype=np.int64), "vqa", rng, size)
    facing = np.zeros((n, 4), dtype=np.int64)  # [n, 4] drawn with the pose: read back
    facing[scenes.bird_image, scenes.bird_slot] = scenes.bird_facing.astype(np.int64)
    answers = [FACING_WORDS[int(facing[i, q[0]])] if kind == "facing" else answer
               for i, (kind, q, answer) in enumerate(zip(kinds, quadrants, answers, strict=True))]
    phrasing = np.array([rng.integers(0, len(PHRASINGS[k]) - (1 if train else 0)) for k in kinds])
    questions = [_phrase(kind, q, int(p)) for kind, q, p in zip(kinds, quadrants, phrasing, strict=True)]
    return BirdQuestions(scenes, questions, answers, kinds, quadrants, phrasing)


def _design(kind: str, rng: np.random.Generator, train: bool, occupied: np.ndarray,
            species: np.ndarray) -> tuple[tuple[int, ...], str]:
    """Fill one picture's ``occupied`` (``[4]``, in place; ``species`` too where the question fixes
    it) for a question of ``kind``; return the quadrants asked about and the answer (facing's is
    read from the drawing)."""
    options = _quadrant_options(kind, train)
    asked = options[rng.integers(len(options))] if kind != "count" else ()
    yes = bool(rng.random() < 0.5)
    # 1-4 birds; a comparison, 3-4 (see _compare)
    birds = int(rng.integers(3, 5)) if kind == "same" else int(rng.integers(1, 5))
    if kind == "presence" and not yes:
        _occupy(rng, occupied, (), asked, min(birds, 3))
        return asked, NO
    _occupy(rng, occupied, asked, (), max(birds, len(asked)))
    if kind == "count":
        return asked, NUMBER_WORDS[birds - 1]
    if kind == "presence":
        return asked, YES
    if kind == "same":
        _compare(rng, occupied, species, asked, yes)
        return asked, YES if yes else NO
    return asked, SPECIES[species[asked[0]]].name if kind == "species" else ""


def _compare(rng: np.random.Generator, occupied: np.ndarray, species: np.ndarray, pair: tuple[int, ...],
             same: bool) -> None:
    """Species for a comparison of ``pair`` among 3-4 birds such that one species is always there twice
    and the others once: the compared pair when ``same``, else one compared bird and another. So which
    species are present, and how often, say nothing (as in the birds experiment's ``twins`` scene):
    only relating the two asked-about birds answers."""
    first, second = pair
    others = [q for q in range(4) if occupied[q] and q not in pair]  # [1 or 2]
    x, y, z = rng.permutation(N_SPECIES)[:3]
    species[first], species[second] = x, (x if same else y)
    extra = [y, z] if same else [(x, y)[rng.integers(2)], z]
    for quadrant, kind in zip(others, extra, strict=False):
        species[quadrant] = kind


def _occupy(rng: np.random.Generator, occupied: np.ndarray, inside: tuple[int, ...], outside: tuple[int, ...],
            birds: int) -> None:
    """Put ``birds`` birds in ``occupied`` (``[4]``): every quadrant of ``inside``, none of ``outside``,
    the rest in random free quadrants."""
    free = [q for q in rng.permutation(4) if q not in inside and q not in outside]
    occupied[list(inside) + free[: birds - len(inside)]] = True


def _quadrant_options(kind: str, train: bool) -> list[tuple[int, ...]]:
    """What a question of ``kind`` may ask about: nothing (count), a quadrant, or (same) a pair of them;
    in training, none of :data:`HELD_OUT_COMBOS`."""
    if kind == "count":
        return [()]
    return [q for q in (_PAIRS if kind == "same" else [(q,) for q in range(4)])
            if not (train and (kind, q) in HELD_OUT_COMBOS)]


def trained_questions() -> list[str]:
    """Every question training can ask: each trained phrasing of each type about every quadrant (or
    pair) training asks that type about."""
    return [_phrase(kind, quadrants, phrasing) for kind in QUESTION_TYPES
            for phrasing in range(len(PHRASINGS[kind]) - 1) for quadrants in _quadrant_options(kind, train=True)]


def reworded(data: BirdQuestions) -> list[str]:
    """Each question of ``data`` asked in its type's :data:`REWORDED` phrasing, about the same quadrants:
    the same picture and answer, only the wording changes (a paired test of reading the question)."""
    return [_fill(REWORDED[kind], quadrants) for kind, quadrants in zip(data.kinds, data.quadrants, strict=True)]


def _phrase(kind: str, quadrants: tuple[int, ...], phrasing: int) -> str:
    return _fill(PHRASINGS[kind][phrasing], quadrants)


def _fill(phrasing: str, quadrants: tuple[int, ...]) -> str:
    words = [QUADRANT_WORDS[q] for q in quadrants]
    return phrasing.format(**dict(zip("ab", words, strict=False)))



# -- user data: JSONL lines of image, question, answer -------------------------------------------


@dataclass(frozen=True)
class Record:
    """One example of a user's data: an image file, a question (empty: caption the image) and its answer;
    ``where`` is ``file:line``, for messages."""

    image: Path
    question: str
    answer: str
    where: str


def read_records(path: str | Path) -> tuple[list[Record], int]:
    """The records of one JSONL file, ``{"image": "relative/path.png", "question": "...", "answer": "..."}``
    a line (question optional; image paths relative to the file, never outside its folder), and how
    many were skipped because their image cannot be read (each named in the log; every image is
    decoded once here, so one broken halfway through cannot stop a run later). A malformed line is a
    DataError naming ``file:line``."""
    path = Path(path)
    records, skipped = [], 0
    readable: dict[Path, bool] = {}  # each image decoded once: many lines may name one (a huge one, too)
    for number, line in enumerate(files.read_lines(path), start=1):
        where = f"{path}:{number}"
        record = _record(line, where, path.parent)
        if record.image not in readable:
            readable[record.image] = readable_image(record.image, decode=True)
        if readable[record.image]:
            records.append(record)
        else:
            skipped += 1
    return records, skipped


def _record(line: str, where: str, folder: Path) -> Record:
    fields = files.json_line(line, where)
    if not isinstance(fields, dict):
        raise DataError(f'{where}: expected an object with string fields "image", "answer" and optionally "question"')
    for name in ("image", "answer", "question"):
        if (name in fields or name != "question") and not isinstance(fields.get(name), str):
            raise DataError(f'{where}: "{name}" must be a string, got {files.shown(fields.get(name))}')
    if not fields["answer"].strip():
        raise DataError(f'{where}: "answer" is empty')
    for name in ("image", "answer", "question"):
        files.check_text(fields.get(name, ""), where, name)
    image = files.inside(folder, fields["image"], f'{where}: "image"')
    return Record(image, fields.get("question", "").strip(), fields["answer"].strip(), where)


def read_folder(root: str | Path, val_fraction: float, seed: int) -> tuple[list[Record], list[Record]]:
    """Training and evaluation records of a folder: ``root/train/*.jsonl`` and ``root/val/*.jsonl`` (or
    ``valid``, ``validation``, ``test``) if both are there, as classify reads image folders; else
    ``root/*.jsonl`` with a seeded ``val_fraction`` held out. Skipped images are counted in the log."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"vqa data folder not found: {root}")
    split = split_folders(root)
    if split is not None:
        return read_all(split[0]), read_all(split[1])
    records = read_all(root)
    order = torch.randperm(len(records), generator=torch.Generator().manual_seed(seed)).tolist()
    n_eval = int(round(len(records) * val_fraction))
    if not 0 < n_eval < len(records):
        raise DataError(f"{root} has {len(records)} examples: too few to hold out {val_fraction:.1%} for "
                        "evaluation and train on the rest")
    return [records[i] for i in order[n_eval:]], [records[i] for i in order[:n_eval]]


def read_eval(path: str | Path) -> list[Record]:
    """Evaluation records: every one of a JSONL file, or of a folder's evaluation split (its
    ``val``/``test`` folder when it has ``train`` too, else all of its ``*.jsonl``)."""
    path = Path(path)
    if path.is_file():
        return _counted(path, [path])
    if not path.exists():
        raise DataError(f"vqa data not found: {path}")
    if not path.is_dir():
        raise DataError(f"vqa data {path} is neither a JSONL file nor a folder (a pipe, socket or device)")
    split = split_folders(path)
    return read_all(split[1] if split is not None else path)


def read_all(folder: Path) -> list[Record]:
    """The records of every ``*.jsonl`` file of ``folder`` but hidden ones (``._data.jsonl``, which macOS
    archives add beside each file, is no text); skipped images counted in the log."""
    paths = sorted(p for p in folder.glob("*.jsonl") if p.is_file() and not p.name.startswith("."))
    if not paths:
        raise DataError(f"{folder} has no .jsonl files: expected lines like "
                        '{"image": "images/1.png", "question": "how many birds?", "answer": "three"}')
    return _counted(folder, paths)


def _counted(source: Path, paths: list[Path]) -> list[Record]:
    """The records of ``paths``, with one warning counting the examples skipped for their image; a
    DataError if none is left."""
    records, skipped = [], 0
    for path in paths:
        more, unreadable = read_records(path)
        records += more
        skipped += unreadable
    if skipped:
        log.warning("%s: skipped %d example(s) whose image cannot be read", source, skipped)
    if not records:
        raise DataError(f"{source} has no example with a readable image ({skipped} skipped)")
    return records
