"""The vqa task's built-in questions about bird scenes: answers true to the pictures, splits that
are pure functions of their seeds, held-out phrasings and combinations kept out of training,
answers no question alone predicts, comparisons the species present do not answer."""

from __future__ import annotations

import hashlib
import os
import re
import struct
import zlib
from collections import Counter, defaultdict

import numpy as np
import pytest

from tokformer.tasks.birds.data import SPECIES
from tokformer.tasks.vqa_data import (
    FACING_WORDS,
    HELD_OUT_COMBOS,
    NUMBER_WORDS,
    PHRASINGS,
    QUADRANT_WORDS,
    QUESTION_TYPES,
    REWORDED,
    BirdQuestions,
    bird_questions,
    reworded,
    trained_questions,
)


@pytest.fixture(scope="module")
def test_split() -> BirdQuestions:
    return bird_questions(3000, seed=0, split="test", size=32)


@pytest.fixture(scope="module")
def train_split() -> BirdQuestions:
    return bird_questions(3000, seed=0, split="train", size=32)


def birds_of(data: BirdQuestions, i: int) -> dict[int, tuple[int, int]]:
    """Quadrant -> (species, facing) of picture ``i``, from the drawn birds' records."""
    s = data.scenes
    return {int(q): (int(sp), int(f)) for q, sp, f in zip(s.bird_slot[s.bird_image == i],
                                                          s.bird_species[s.bird_image == i],
                                                          s.bird_facing[s.bird_image == i], strict=True)}


def expected_answer(kind: str, quadrants: tuple[int, ...], birds: dict[int, tuple[int, int]]) -> str:
    if kind == "count":
        return NUMBER_WORDS[len(birds) - 1]
    if kind == "presence":
        return "yes" if quadrants[0] in birds else "no"
    if kind == "same":
        return "yes" if birds[quadrants[0]][0] == birds[quadrants[1]][0] else "no"
    species, facing = birds[quadrants[0]]
    return SPECIES[species].name if kind == "species" else FACING_WORDS[facing]


def test_every_answer_is_what_the_drawn_birds_say(test_split, train_split) -> None:
    for data in (test_split, train_split):
        for i in range(len(data)):
            assert data.answers[i] == expected_answer(data.kinds[i], data.quadrants[i], birds_of(data, i)), i


def test_every_question_is_a_phrasing_of_its_type_naming_its_quadrants(test_split) -> None:
    for kind, quadrants, phrasing, question in zip(test_split.kinds, test_split.quadrants, test_split.phrasing,
                                                   test_split.questions, strict=True):
        words = dict(zip("ab", (QUADRANT_WORDS[q] for q in quadrants), strict=False))
        assert question == PHRASINGS[kind][phrasing].format(**words)
        assert list(quadrants) == sorted(set(quadrants)) and len(quadrants) == {"count": 0, "same": 2}.get(kind, 1)


def test_a_split_is_a_pure_function_of_seed_split_and_chunk() -> None:
    def digest(data: BirdQuestions) -> str:
        return hashlib.sha256(data.scenes.images.tobytes() + repr((data.questions, data.answers)).encode()).hexdigest()

    first = bird_questions(40, seed=3, split="val", size=32)
    assert digest(first) == digest(bird_questions(40, seed=3, split="val", size=32))
    others = [bird_questions(40, seed=4, split="val", size=32), bird_questions(40, seed=3, split="test", size=32),
              bird_questions(40, seed=3, split="val", size=32, chunk=1)]
    pictures = {p.tobytes() for p in first.scenes.images}
    for other in others:
        assert not pictures & {p.tobytes() for p in other.scenes.images}


def test_training_never_asks_a_held_out_phrasing_or_combination(train_split, test_split) -> None:
    assert not train_split.held_out_phrasing.any()
    assert not train_split.held_out_combo.any()
    asked = Counter((k, q) for k, q in zip(test_split.kinds, test_split.quadrants, strict=True))
    assert all(asked[combo] >= 20 for combo in HELD_OUT_COMBOS)
    held = Counter(k for k, h in zip(test_split.kinds, test_split.held_out_phrasing, strict=True) if h)
    assert all(held[kind] >= 50 for kind in QUESTION_TYPES)
    # training asks each held-out type about other quadrants, and about each held-out quadrant in other ways
    trained = set(zip(train_split.kinds, train_split.quadrants, strict=True))
    for kind, quadrants in HELD_OUT_COMBOS:
        assert any(k == kind and q != quadrants for k, q in trained)
        assert all(any(k != kind and x in q for k, q in trained) for x in quadrants)


def test_only_the_held_out_comparison_phrasing_is_made_of_trained_words() -> None:
    """docs/vqa.md says which held-out phrasings hold words no training question has: the score on them
    measures English a model trained from scratch never saw, as well as whether it reads the question."""
    new = {kind: set(_words(phrasings[-1])) - _trained_words() for kind, phrasings in PHRASINGS.items()}
    assert new == {"count": {"number", "of"}, "presence": {"sitting"}, "species": {"of", "sits"}, "same": set(),
                   "facing": {"direction"}}


def _words(phrasing: str) -> list[str]:
    """The words of a phrasing, its quadrant slots left out."""
    return re.findall(r"[a-z]+", phrasing.replace("{a}", "").replace("{b}", ""))


def _trained_words() -> set[str]:
    return {w for phrasings in PHRASINGS.values() for p in phrasings[:-1] for w in _words(p)}


def test_the_reworded_phrasings_are_new_arrangements_of_trained_words_only() -> None:
    """A reworded phrasing holds no word the trained phrasings lack, yet its words come in an order no
    phrasing of its type has (so it is no template the model could have memorised)."""
    for kind, phrasing in REWORDED.items():
        assert set(_words(phrasing)) <= _trained_words(), kind
        assert _words(phrasing) not in [_words(p) for p in PHRASINGS[kind]], kind
        assert phrasing.count("{a}") == (kind != "count") and phrasing.count("{b}") == (kind == "same")
    assert set(REWORDED) == set(QUESTION_TYPES)


def test_the_trained_questions_are_those_training_asks_and_no_held_out_one(train_split, test_split) -> None:
    trained = trained_questions()
    assert set(train_split.questions) == set(trained) and len(trained) == len(set(trained))
    held_out = test_split.held_out_phrasing | test_split.held_out_combo
    assert {q for q, h in zip(test_split.questions, held_out, strict=True) if h}.isdisjoint(trained)


def test_rewording_a_split_keeps_its_pictures_answers_and_quadrants(test_split) -> None:
    before = list(test_split.questions)
    questions = reworded(test_split)
    assert test_split.questions == before and len(questions) == len(test_split)
    for question, kind, quadrants in zip(questions, test_split.kinds, test_split.quadrants, strict=True):
        names = dict(zip("ab", (QUADRANT_WORDS[q] for q in quadrants), strict=False))
        assert question == REWORDED[kind].format(**names)
        assert question not in {p.format(**names) for p in PHRASINGS[kind]}


def test_no_question_predicts_its_answer(train_split, test_split) -> None:
    """The blind baseline (each training question's most frequent answer, else its type's) is at chance
    on every type: within 4 standard errors of 1 / the number of answers."""
    by_question, by_kind = defaultdict(Counter), defaultdict(Counter)
    for question, kind, answer in zip(train_split.questions, train_split.kinds, train_split.answers, strict=True):
        by_question[question][answer] += 1
        by_kind[kind][answer] += 1
    n_answers = {"count": 4, "presence": 2, "species": len(SPECIES), "same": 2, "facing": 2}
    for kind in QUESTION_TYPES:
        rows = [i for i, k in enumerate(test_split.kinds) if k == kind]
        guesses = [(by_question[test_split.questions[i]] or by_kind[kind]).most_common(1)[0][0] for i in rows]
        accuracy = np.mean([g == test_split.answers[i] for g, i in zip(guesses, rows, strict=True)])
        chance = 1 / n_answers[kind]
        assert len(by_kind[kind]) == n_answers[kind]
        assert abs(accuracy - chance) < 4 * np.sqrt(chance * (1 - chance) / len(rows)), (kind, accuracy)


def test_the_species_present_do_not_answer_a_comparison(test_split) -> None:
    """Every comparison's picture has one species twice and the others once, whatever the answer: a
    species histogram (or any single bird) cannot tell "same" from "different"."""
    shapes: dict[str, Counter] = {"yes": Counter(), "no": Counter()}
    for i, kind in enumerate(test_split.kinds):
        if kind == "same":
            counts = Counter(species for species, _ in birds_of(test_split, i).values())
            shapes[test_split.answers[i]][tuple(sorted(counts.values()))] += 1
    assert set(shapes["yes"]) == set(shapes["no"]) == {(1, 2), (1, 1, 2)}
    assert min(shapes["yes"].values()) > 100 and min(shapes["no"].values()) > 100


def test_facing_right_puts_the_birds_forward_direction_towards_plus_x() -> None:
    """FACING_WORDS rests on the generator's convention: the beak is drawn ahead of the head, at
    positive forward coordinates ``u``; an untilted bird facing +1 has ``u`` growing with the column
    (towards the picture's right), one facing -1 the other way."""
    from tokformer.tasks.birds import data as birds

    for facing in (1.0, -1.0):
        _, u, _ = birds._bird_frame(np.array([[40.0, 40.0]]), np.array([1.0]), np.array([0.0]),
                                    np.array([facing]), 64)  # [1, K, K]: rows, columns
        step = np.diff(u[0], axis=1)  # along a row, column to column
        assert np.all(np.sign(step) == facing)
        assert FACING_WORDS[int(facing)] == ("right" if facing > 0 else "left")


# -- user data ---------------------------------------------------------------------------------


def write_folder(root, lines: list[str], images: dict[str, bytes | None] | None = None):
    """``root/data.jsonl`` with ``lines``; ``images``: relative path -> bytes (None: a real PNG)."""
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    for name, content in (images or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(root / name)
        else:
            (root / name).write_bytes(content)
    (root / "data.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return root / "data.jsonl"


def test_records_read_with_images_relative_to_their_file(tmp_path) -> None:
    from tokformer.tasks.vqa_data import read_records

    path = write_folder(tmp_path, ['{"image": "img/a.png", "question": " how many? ", "answer": "two"}',
                                   '{"image": "img/b.png", "answer": "a bird", "extra": 1}'],
                        {"img/a.png": None, "img/b.png": None})
    records, skipped = read_records(path)
    assert skipped == 0
    assert [(r.image, r.question, r.answer, r.where) for r in records] == [
        (tmp_path / "img/a.png", "how many?", "two", f"{path}:1"), (tmp_path / "img/b.png", "", "a bird", f"{path}:2")]


@pytest.mark.parametrize(("line", "message"), [
    ("not json", "not valid JSON"),
    ("[1, 2]", 'expected an object with string fields "image", "answer"'),
    ('{"image": "a.png"}', '"answer" must be a string, got None'),
    ('{"image": "a.png", "answer": 3}', '"answer" must be a string, got 3'),
    ('{"image": "a.png", "answer": "  "}', '"answer" is empty'),
    ('{"image": "a.png", "answer": "x", "question": null}', '"question" must be a string, got None'),
    ('{"image": 7, "answer": "x"}', '"image" must be a string, got 7'),
    ('{"image": "../a.png", "answer": "x"}', "points outside"),
    ('{"image": "/etc/passwd", "answer": "x"}', "points outside"),
    ('{"image": "loop.png", "answer": "x"}', '"image": \'loop.png\' cannot be followed'),
    ('{"image": "' + "a/" * 3000 + 'a.png", "answer": "x"}', "is longer than 4096 bytes, more than a path may be"),
    ("", "empty line"),
    ('{"image": "a.png", "answer": "x", "question": "bad \\ud800"}', '"question" holds a lone surrogate'),
    ('{"image": "a.png", "answer": "\\udfff"}', '"answer" holds a lone surrogate'),
])
def test_a_bad_line_is_one_error_naming_file_and_line(line, message, tmp_path) -> None:
    from tokformer.errors import DataError
    from tokformer.tasks.vqa_data import read_records

    path = write_folder(tmp_path, ['{"image": "a.png", "answer": "x"}', line], {"a.png": None})
    (tmp_path / "loop.png").symlink_to("loop.png")  # a link to itself: resolving it raised RuntimeError
    with pytest.raises(DataError) as info:
        read_records(path)
    assert str(info.value).startswith(f"{path}:2: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def _broken_pixels() -> dict[str, bytes]:
    """Images whose header PIL reads but whose pixels do not decode: a PNG with scrambled compressed data
    (its checksums recomputed, so ``verify`` passes) and a JPEG cut after a third of its bytes."""
    import io

    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    png, jpeg = io.BytesIO(), io.BytesIO()
    Image.fromarray(pixels).save(png, format="PNG")
    Image.fromarray(pixels).save(jpeg, format="JPEG")
    data, at, out = png.getvalue(), 8, png.getvalue()[:8]
    while at < len(data):
        (length,), kind = struct.unpack(">I", data[at:at + 4]), data[at + 4:at + 8]
        body = data[at + 8:at + 8 + length]
        body = bytes(b ^ 0x33 for b in body) if kind == b"IDAT" else body
        out += struct.pack(">I", length) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        at += 12 + length
    return {"scrambled.png": out, "cut.jpg": jpeg.getvalue()[: len(jpeg.getvalue()) // 3]}


def test_unreadable_images_are_skipped_named_and_counted(tmp_path, caplog) -> None:
    """Not an image, missing, and valid headers over pixels that do not decode (which passed the scan
    and stopped the run at the batch holding them): all named, skipped and counted up front."""
    from tokformer.tasks.vqa_data import read_folder

    broken = _broken_pixels()
    lines = [f'{{"image": "{name}", "answer": "x"}}'
             for name in ("a.png", "b.png", "c.png", "broken.png", "missing.png", *broken)]
    write_folder(tmp_path, lines, {"a.png": None, "b.png": None, "c.png": None, "broken.png": b"not a png", **broken})
    with caplog.at_level("WARNING"):
        train, val = read_folder(tmp_path, val_fraction=1 / 3, seed=0)
    assert sorted(r.image.name for r in train + val) == ["a.png", "b.png", "c.png"] and len(val) == 1
    assert all(name in caplog.text for name in ("broken.png", "missing.png", *broken))
    assert "skipped 4 example(s) whose image cannot be read" in caplog.text


def test_paths_the_file_system_refuses_are_skipped_and_counted(tmp_path, caplog) -> None:
    """An image under a file (``images.zip/001.png``) and a name part longer than a file name may be: the
    OSError escaped the reader, which stopped with ``Not a directory`` or ``File name too long``."""
    from tokformer.tasks.vqa_data import read_records

    lines = [f'{{"image": "{name}", "answer": "x"}}' for name in ("a.png", "images.zip/001.png", "b" * 300 + ".png")]
    path = write_folder(tmp_path, lines, {"a.png": None, "images.zip": b"PK"})
    with caplog.at_level("WARNING"):
        records, skipped = read_records(path)
    assert [r.image.name for r in records] == ["a.png"] and skipped == 2
    assert "images.zip/001.png" in caplog.text and "b" * 300 in caplog.text


def test_an_image_named_by_many_lines_is_decoded_once(tmp_path, monkeypatch) -> None:
    """A 100 kB PNG can decode to 100 MB: a million lines naming it cost a million decodes (days)."""
    from tokformer.tasks import vqa_data

    decoded = []
    monkeypatch.setattr(vqa_data, "readable_image",
                        lambda path, decode: decoded.append(path.name) or path.name != "b.png")  # b: unreadable
    path = write_folder(tmp_path, [f'{{"image": "{name}", "answer": "x"}}' for name in ["a.png", "b.png"] * 50])
    records, skipped = vqa_data.read_records(path)
    assert sorted(decoded) == ["a.png", "b.png"], "each image file once"
    assert len(records) == 50 and skipped == 50, "every line still counted"


def test_hidden_jsonl_files_are_not_read(tmp_path) -> None:
    """macOS archives put ``._data.jsonl`` (binary metadata) beside ``data.jsonl``: the read stopped on it."""
    from tokformer.tasks.vqa_data import read_eval

    write_folder(tmp_path, ['{"image": "a.png", "answer": "x"}'], {"a.png": None})
    (tmp_path / "._data.jsonl").write_bytes(b"\x00\x05\x16\x07\xff\xfe")
    assert [r.image.name for r in read_eval(tmp_path)] == ["a.png"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_evaluation_data_that_is_a_pipe_is_named_as_one_not_as_missing(tmp_path) -> None:
    from tokformer.errors import DataError
    from tokformer.tasks.vqa_data import read_eval

    os.mkfifo(tmp_path / "data.jsonl")
    with pytest.raises(DataError, match="is neither a JSONL file nor a folder"):
        read_eval(tmp_path / "data.jsonl")


def test_an_evaluation_file_counts_what_it_skips(tmp_path, caplog) -> None:
    """``tokformer evaluate RUN --data FILE.jsonl`` said nothing of the examples it left out."""
    from tokformer.tasks.vqa_data import read_eval

    path = write_folder(tmp_path, [f'{{"image": "{name}", "answer": "x"}}' for name in ("a.png", "gone.png")],
                        {"a.png": None})
    with caplog.at_level("WARNING"):
        records = read_eval(path)
    assert [r.image.name for r in records] == ["a.png"]
    assert f"{path}: skipped 1 example(s) whose image cannot be read" in caplog.text


def test_a_train_folder_without_a_held_out_one_is_refused_by_name(tmp_path) -> None:
    """Read as one flat folder, DIR/train/*.jsonl gave "DIR has no .jsonl files" (and a classify folder
    took ``train`` for a class)."""
    from tokformer.errors import DataError
    from tokformer.tasks.image_data import folder_datasets
    from tokformer.tasks.vqa_data import read_eval, read_folder

    write_folder(tmp_path / "train", ['{"image": "a.png", "answer": "x"}'] * 3, {"a.png": None})
    for read in (lambda: read_folder(tmp_path, 0.5, seed=0), lambda: read_eval(tmp_path),
                 lambda: folder_datasets(tmp_path, 0.5, seed=0)):
        with pytest.raises(DataError, match=rf"^{tmp_path} has a train/ folder but no val/, valid/, validation/, "
                                            r"test/ beside it"):
            read()


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1])
def test_a_held_out_share_that_leaves_no_split_is_refused_with_the_options(fraction) -> None:
    """``--val-fraction 0`` passed the option check and then failed every run on a folder."""
    from tokformer.tasks.vqa import VQAConfig

    with pytest.raises(ValueError, match=rf"val_fraction must be in \(0, 1\), got {fraction}"):
        VQAConfig(val_fraction=fraction)


def _png_header(width: int, height: int) -> bytes:
    """A PNG of a few dozen bytes whose header claims ``width`` x ``height`` RGB pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = chunk(b"IDAT", zlib.compress(b"\0" * 10)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + body


@pytest.mark.parametrize(("side", "why"), [(100_000, "exceeds limit"), (6_000, "more than the 33,554,432")],
                         ids=["past PIL's bomb limit", "past tokformer's pixel limit"])
def test_an_image_whose_header_claims_too_many_pixels_is_skipped_and_counted(tmp_path, caplog, side, why) -> None:
    """A few bytes of header must not stop the whole folder with an internal error (PIL raises its
    DecompressionBombError from Image.open) nor be decoded: it is skipped like an unreadable file."""
    from tokformer.tasks.vqa_data import read_folder

    lines = [f'{{"image": "{name}", "answer": "x"}}' for name in ("a.png", "b.png", "c.png", "big.png")]
    write_folder(tmp_path, lines, {"a.png": None, "b.png": None, "c.png": None, "big.png": _png_header(side, side)})
    with caplog.at_level("WARNING"):
        train, val = read_folder(tmp_path, val_fraction=1 / 3, seed=0)
    assert sorted(r.image.name for r in train + val) == ["a.png", "b.png", "c.png"]
    assert "big.png" in caplog.text and why in caplog.text
    assert "skipped 1 example(s) whose image cannot be read" in caplog.text


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_named_like_an_image_is_skipped_not_waited_on(tmp_path, caplog) -> None:
    """Opening a FIFO blocks until someone writes to it: the scan hung forever on one."""
    from tokformer.tasks.vqa_data import read_folder

    lines = [f'{{"image": "{name}", "answer": "x"}}' for name in ("a.png", "b.png", "c.png", "pipe.png")]
    write_folder(tmp_path, lines, {"a.png": None, "b.png": None, "c.png": None})
    os.mkfifo(tmp_path / "pipe.png")
    with caplog.at_level("WARNING"):
        train, val = read_folder(tmp_path, val_fraction=1 / 3, seed=0)
    assert sorted(r.image.name for r in train + val) == ["a.png", "b.png", "c.png"]
    assert "pipe.png is not a regular file" in caplog.text


def test_train_and_val_folders_are_read_as_given(tmp_path) -> None:
    from tokformer.tasks.vqa_data import read_folder

    write_folder(tmp_path / "train", ['{"image": "a.png", "answer": "x"}'] * 3, {"a.png": None})
    write_folder(tmp_path / "val", ['{"image": "b.png", "answer": "y"}'], {"b.png": None})
    train, val = read_folder(tmp_path, val_fraction=0.5, seed=0)
    assert [r.answer for r in train] == ["x"] * 3 and [r.answer for r in val] == ["y"]


def test_a_held_out_split_is_seeded(tmp_path) -> None:
    from tokformer.tasks.vqa_data import read_folder

    write_folder(tmp_path, [f'{{"image": "a.png", "answer": "{i}"}}' for i in range(20)], {"a.png": None})
    first = read_folder(tmp_path, 0.25, seed=1)
    assert first == read_folder(tmp_path, 0.25, seed=1) and first != read_folder(tmp_path, 0.25, seed=2)
    assert len(first[1]) == 5 and {r.answer for r in first[0] + first[1]} == {str(i) for i in range(20)}


@pytest.mark.parametrize(("setup", "message"), [
    ("nothing", "has no .jsonl files"),
    ("unreadable", "has no example with a readable image"),
    ("one", "too few to hold out"),
    ("absent", "vqa data folder not found"),
])
def test_folders_without_usable_data_are_refused(setup, message, tmp_path) -> None:
    from tokformer.errors import DataError
    from tokformer.tasks.vqa_data import read_folder

    root = tmp_path / "data"
    if setup == "nothing":
        root.mkdir()
    elif setup == "unreadable":
        write_folder(root, ['{"image": "gone.png", "answer": "x"}'])
    elif setup == "one":
        write_folder(root, ['{"image": "a.png", "answer": "x"}'], {"a.png": None})
    with pytest.raises(DataError, match=message):
        read_folder(root, 0.2, seed=0)


def test_a_file_saved_with_a_byte_order_mark_reads_like_one_without(tmp_path) -> None:
    """Windows editors start UTF-8 files with a BOM: the first JSON line was refused ("Unexpected UTF-8 BOM"),
    and a parallel-text file would have glued it to its first sentence."""
    from tokformer.files import read_lines
    from tokformer.tasks.vqa_data import read_records

    path = write_folder(tmp_path, ['{"image": "a.png", "answer": "x"}', '{"image": "a.png", "answer": "y"}'],
                        {"a.png": None})
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    records, skipped = read_records(path)
    assert [r.answer for r in records] == ["x", "y"] and skipped == 0
    assert read_lines(path)[0].startswith('{"image"')
