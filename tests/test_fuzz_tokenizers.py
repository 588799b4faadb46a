"""Property-based fuzzing of the tokenizers with random input.

Every call either tokenizes with the documented shapes (and round-trips, where a round trip is
defined) or raises one of the documented errors, with a one-line message:

* BPE: ``SurrogateError`` (a ``TokenizerError`` and a ``ValueError``) naming the first lone
  surrogate and its index; ``TokenizerError`` for unknown ids, too-long samples and an empty corpus.
* images and graphs: ``DataError`` for a sample the tokenizer cannot take.

Sized to run in well under a minute on one core. Inputs that once leaked another exception type
are pinned with ``@example``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from fractions import Fraction
from numbers import Real
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from PIL import Image

from tokformer.batch import TokenBatch
from tokformer.errors import DataError
from tokformer.tokenizers import BPETokenizer, SurrogateError, TokenizerError
from tokformer.tokenizers.graph import GraphTokenizer
from tokformer.tokenizers.image import ImagePatchTokenizer
from tokformer.tokenizers.laplacian import normalized_laplacian

FLOAT32_MAX = float(np.finfo(np.float32).max)


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny tensors: one intra-op thread is fastest, and kind to a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def assert_one_line(err: BaseException) -> None:
    message = str(err)
    assert message.strip() and "\n" not in message, repr(message)


# ====================================================================== text: byte-level BPE

SPECIALS = ("<|endoftext|>", "<pad>")
CORPUS = [
    "the cat sat on the mat; the dog sat on the log.\n" * 5,
    "Grüße aus München, 안녕하세요 세계, 你好世界, 🙂🚀 emoji.\n" * 3,
    "def add(a, b):\n    return a + b\n<|endoftext|>\n" * 3,
]
UNICODE = st.text(st.characters(exclude_categories=("Cs",)), max_size=120)
# Pieces that exercise the pre-tokenizer: contractions, runs of whitespace, newlines (safe cut
# points for chunked encoding), fragments of the special tokens.
TRICKY = st.lists(
    st.sampled_from([*"ab1 \n\t\r'.!é世🙂", "'s", "'ll", "\n\n", "   ", "<|", "|>", "<pad", "endoftext", "d>"]),
    max_size=50,
).map("".join)
TEXT = st.one_of(UNICODE, TRICKY)
SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
SPECIAL_OR_TEXT = st.one_of(TEXT, st.sampled_from(SPECIALS))


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    # max_length 48 < the longest fuzzed texts, so batch(truncation=True) really cuts.
    return BPETokenizer.train(CORPUS, 360, special_tokens=list(SPECIALS), pad_token="<pad>", max_length=48)


def special_ids(tok: BPETokenizer) -> set[int]:
    return set(tok.special_tokens.values())


@settings(max_examples=150, deadline=None)
@given(text=TEXT, chunk_chars=st.integers(1, 40))
def test_bpe_round_trips_any_unicode_text(bpe, text, chunk_chars):
    ids = bpe.encode(text)
    assert bpe.decode(ids) == text
    assert bpe.decode_bytes(ids) == text.encode("utf-8")
    assert all(0 <= i < bpe.vocab_size for i in ids)
    assert not special_ids(bpe) & set(ids)
    # encoding chunk by chunk (cut only at safe points) gives the same ids and consumes all text
    chunks = list(bpe.iter_encode(text, chunk_chars=chunk_chars))
    assert [i for _, part in chunks for i in part] == ids
    assert sum(consumed for consumed, _ in chunks) == len(text)


@settings(max_examples=40, deadline=None)
@given(
    corpus=st.lists(st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=40), TRICKY), max_size=5),
    merges=st.integers(0, 40),
    pattern=st.sampled_from(["gpt2", "cl100k", r"\p{L}+", r"\d| ?\w+"]),
    min_frequency=st.integers(0, 3),
    text=TEXT,
)
def test_bpe_trained_on_a_random_corpus_round_trips(corpus, merges, pattern, min_frequency, text):
    vocab_size = 256 + len(SPECIALS) + merges
    train = lambda: BPETokenizer.train(
        corpus, vocab_size, pattern=pattern, min_frequency=min_frequency, special_tokens=SPECIALS
    )
    if not any(corpus):
        with pytest.raises(TokenizerError, match="empty") as err:
            train()
        assert_one_line(err.value)
        return
    tok = train()
    assert tok.vocab_size <= vocab_size
    for sample in [*corpus, "".join(corpus), text]:
        ids = tok.encode(sample)
        assert tok.decode(ids) == sample
        assert not special_ids(tok) & set(ids)


@settings(max_examples=80, deadline=None)
# found by fuzzing: with allowed_special the index counted from the end of the last special token
@example(parts=["<|endoftext|>", "ab"], surrogates=[(13, "\ud800")], allowed="all", chunk_chars=40)
# found by fuzzing: iter_encode counted the index from the start of the chunk
@example(parts=["ab\ncd\nef"], surrogates=[(7, "\udfff")], allowed=(), chunk_chars=2)
@given(
    parts=st.lists(SPECIAL_OR_TEXT, max_size=4),
    surrogates=st.lists(st.tuples(st.integers(0, 10**6), SURROGATE), min_size=1, max_size=3),
    allowed=st.sampled_from([(), "all", ("<pad>",)]),
    chunk_chars=st.integers(1, 40),
)
def test_bpe_lone_surrogates_raise_naming_the_first_one(bpe, parts, surrogates, allowed, chunk_chars):
    chars = list("".join(parts))
    for position, surrogate in surrogates:
        chars.insert(position % (len(chars) + 1), surrogate)
    text = "".join(chars)
    first = next(i for i, c in enumerate(text) if 0xD800 <= ord(c) <= 0xDFFF)
    expected = rf"lone surrogate U\+{ord(text[first]):04X} at index {first};"
    calls = [
        lambda: bpe.encode(text, allowed_special=allowed),
        lambda: bpe.encode_batch(["fine", text], allowed_special=allowed),
        lambda: list(bpe.iter_encode(text, allowed_special=allowed, chunk_chars=chunk_chars)),
        lambda: bpe.batch([text], allowed_special=allowed),
    ]
    for call in calls:
        with pytest.raises(SurrogateError, match=expected) as err:
            call()
        assert isinstance(err.value, ValueError) and isinstance(err.value, TokenizerError)
        assert_one_line(err.value)


@settings(max_examples=80, deadline=None)
@given(parts=st.lists(SPECIAL_OR_TEXT, max_size=6))
def test_bpe_special_strings_in_user_text_stay_plain_text(bpe, parts):
    text = "".join(parts)
    ids = bpe.encode(text)
    assert not special_ids(bpe) & set(ids)
    assert bpe.decode(ids) == text
    assert bpe.encode_batch([text]) == [ids]
    assert bpe.batch([text]).ids[0].tolist() == ids
    # Allowed, each inserted special becomes its id (the others stay text), and text still round-trips.
    for allowed in ("all", ("<|endoftext|>",)):
        names = SPECIALS if allowed == "all" else allowed
        allowed_ids = bpe.encode(text, allowed_special=allowed)
        assert bpe.decode(allowed_ids) == text
        for name in SPECIALS:
            count = allowed_ids.count(bpe.special_tokens[name])
            if name in names:
                assert count >= parts.count(name)
            else:
                assert count == 0
        stripped = re.sub("|".join(map(re.escape, names)), "", text)
        assert bpe.decode(allowed_ids, skip_special_tokens=True) == stripped


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(TEXT, max_size=4),
    max_length=st.none() | st.integers(0, 40),
    truncation=st.booleans(),
    pad_to_max_length=st.booleans(),
)
def test_bpe_batch_padding_agrees_with_single_encodes(bpe, texts, max_length, truncation, pad_to_max_length):
    options = {"max_length": max_length, "truncation": truncation, "pad_to_max_length": pad_to_max_length}
    singles = [bpe.encode(t) for t in texts]
    limit = max_length if max_length is not None else (bpe.max_length if truncation else None)
    if limit is not None and not truncation and any(len(s) > limit for s in singles):
        with pytest.raises(TokenizerError, match="truncation=True") as err:
            bpe.batch(texts, **options)
        assert_one_line(err.value)
        return
    batch = bpe.batch(texts, **options)
    kept = [s[:limit] if limit is not None else s for s in singles]
    width = limit if (pad_to_max_length and limit is not None) else max(map(len, kept), default=0)
    assert batch.ids.shape == batch.mask.shape == batch.positions.shape == (len(texts), width)
    assert batch.lengths.tolist() == [len(k) for k in kept]
    pad_id = bpe.special_tokens["<pad>"]
    for row, ids in enumerate(kept):
        assert batch.ids[row].tolist() == ids + [pad_id] * (width - len(ids))
        assert batch.mask[row].tolist() == [True] * len(ids) + [False] * (width - len(ids))
        assert batch.positions[row].tolist() == list(range(width))


@settings(max_examples=80, deadline=None)
@given(ids=st.lists(st.integers(-3, 370), max_size=40), skip=st.booleans())
def test_bpe_decodes_any_known_ids_and_rejects_unknown_ones(bpe, ids, skip):
    known = set(bpe.vocab.values()) | special_ids(bpe)
    if not set(ids) <= known:
        with pytest.raises(TokenizerError, match="unknown token id") as err:
            bpe.decode(ids, skip_special_tokens=skip)
        assert_one_line(err.value)
        return
    text = bpe.decode(ids, skip_special_tokens=skip)  # invalid UTF-8 becomes U+FFFD, never an error
    assert text == bpe.decode_bytes(ids, skip_special_tokens=skip).decode("utf-8", "replace")
    assert bpe.decode(bpe.encode(text)) == text


# ====================================================================== images: patch tokenizer

INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.bool)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SIDE = st.one_of(st.just(1), st.integers(0, 11))  # 0: no pixels; 1: thin
PIL_MODES = (
    *("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB", "HSV"),
    *("I", "I;16", "I;16L", "I;16B", "I;16N", "F"),
)
DOCUMENTED_PIL_MODES = {"1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16", "F"}  # docs/vision.md: converted
NOT_FROM_RGB = {"La"}  # modes PIL cannot convert an RGB image to; made blank instead


@st.composite
def image_configs(draw: Any) -> dict[str, Any]:
    """ImagePatchTokenizer keyword arguments (a dict, so a failing example prints readably)."""
    p = draw(st.integers(1, 4))
    channels = draw(st.sampled_from([1, 3]))
    normalise = draw(st.booleans())
    return {
        "patch_size": p,
        "image_size": (p * draw(st.integers(1, 3)), p * draw(st.integers(1, 3))),
        "resize": draw(st.booleans()),
        "channels": channels,
        "class_token": draw(st.booleans()),
        "size_policy": draw(st.sampled_from(["pad", "resize", "error"])),
        "mean": (0.5,) * channels if normalise else None,
        "std": (0.25,) * channels if normalise else None,
        "interpolation": draw(st.sampled_from(["bilinear", "bicubic"])),
    }


@st.composite
def image_shapes(draw: Any) -> tuple[int, ...]:
    ndim = draw(st.sampled_from([3] * 6 + [2] * 2 + [0, 1, 4]))
    if ndim == 3:
        return draw(st.sampled_from([1, 3, 4] * 2 + [0, 2, 5])), draw(SIDE), draw(SIDE)
    if ndim == 2:
        return draw(SIDE), draw(SIDE)
    return tuple(draw(st.lists(st.integers(0, 3), min_size=ndim, max_size=ndim)))


@st.composite
def pixel_tensors(draw: Any, shape: Any = None) -> torch.Tensor:
    """A tensor of a random dtype: ints of any range, floats in about [0, 1], maybe with NaN/inf."""
    shape = draw(image_shapes()) if shape is None else draw(shape)
    dtype = draw(st.sampled_from(INT_DTYPES + FLOAT_DTYPES))
    if dtype.is_floating_point:
        elements = st.floats(-0.5, 1.5, width=32)
        if draw(st.booleans()):
            elements = elements | st.sampled_from([math.nan, math.inf, -math.inf])
        tensor = torch.from_numpy(draw(arrays(np.float32, shape, elements=elements))).to(dtype)
    else:
        tensor = torch.from_numpy(draw(arrays(np.int64, shape, elements=st.integers(-(2**31), 2**31 - 1))))
        tensor = tensor.to(dtype)
    if tensor.dim() >= 2 and draw(st.booleans()):  # same values, non-contiguous strides
        tensor = tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    return tensor


@st.composite
def pil_images(draw: Any) -> Image.Image:
    mode = draw(st.sampled_from(PIL_MODES))
    w, h = draw(SIDE), draw(SIDE)
    if mode == "F" and draw(st.booleans()):  # float pixels of any value, NaN and inf included
        pixels = draw(arrays(np.float32, (h, w), elements=st.floats(width=32)))
        return Image.frombytes("F", (w, h), pixels.tobytes())
    if mode in NOT_FROM_RGB:
        return Image.new(mode, (w, h))
    return Image.frombytes("RGB", (w, h), draw(st.binary(min_size=3 * w * h, max_size=3 * w * h))).convert(mode)


@st.composite
def batch_shapes(draw: Any) -> tuple[int, ...]:
    """Mostly ``[B, C, H, W]`` (the fast path), sometimes any other rank."""
    if draw(st.sampled_from([True, True, True, False])):
        return draw(st.sampled_from([1, 2, 3, 0])), draw(st.sampled_from([1, 3, 4, 2])), draw(SIDE), draw(SIDE)
    return tuple(draw(st.lists(st.integers(0, 4), max_size=5)))


IMAGE_KINDS = {  # numpy arrays are not an accepted kind (docs/vision.md): a DataError
    "tensor": pixel_tensors(),
    "pil": pil_images(),
    "numpy": arrays(st.sampled_from([np.uint8, np.float32]), st.sampled_from([(4, 4, 3), (3, 4, 4), (4, 4)])),
}
IMAGE_SAMPLE = st.sampled_from(["tensor"] * 4 + ["pil"] * 2 + ["numpy"]).flatmap(IMAGE_KINDS.__getitem__)


def pil_converts(image: Image.Image, channels: int) -> bool:
    """The oracle for PIL images: whether PIL itself can convert ``image`` to RGB (or L)."""
    try:
        (image.convert("RGBA") if image.mode == "P" else image).convert("RGB" if channels == 3 else "L")
    except ValueError:
        return False
    return True


def expected_grid(tok: ImagePatchTokenizer, h: int, w: int) -> tuple[int, int] | str:
    """Patch grid of an ``h`` x ``w`` image, or a regex of the DataError it must raise."""
    if tok.resize:
        h, w = tok.image_size
    p = tok.patch_size
    if h % p == 0 and w % p == 0:
        return h // p, w // p
    if tok.size_policy == "error":
        return f"{h}x{w} pixels is not a multiple of patch_size"
    if tok.size_policy == "pad":
        return -(-h // p), -(-w // p)
    return max(1, round(h / p)), max(1, round(w / p))


def sample_outcome(tok: ImagePatchTokenizer, sample: Any) -> tuple[int, int] | str:
    """The grid one sample must give, or a regex of the DataError it must raise (docs/vision.md)."""
    if isinstance(sample, Image.Image):
        if not pil_converts(sample, tok.channels):
            assert sample.mode not in DOCUMENTED_PIL_MODES
            return f"cannot convert a PIL image of mode '{re.escape(sample.mode)}'"
        h, w = sample.height, sample.width
    elif isinstance(sample, torch.Tensor):
        if sample.dim() not in (2, 3):
            return r"must be \[C, H, W\] or \[H, W\]"
        c = sample.shape[0] if sample.dim() == 3 else 1
        if not (c == tok.channels or (tok.channels == 3 and c in (1, 4)) or (tok.channels == 1 and c in (3, 4))):
            return f"cannot turn a {c}-channel image into {tok.channels} channels"
        h, w = sample.shape[-2:]
    else:
        return f"takes PIL images, tensors or paths, got {type(sample).__name__}"
    if h == 0 or w == 0:
        return "has no pixels"
    return expected_grid(tok, h, w)


def batch_outcome(tok: ImagePatchTokenizer, samples: list[Any]) -> list[tuple[int, int]] | str:
    """Samples are taken in order: the first failing one decides the error."""
    if not samples:
        return "empty batch"
    grids = []
    for sample in samples:
        outcome = sample_outcome(tok, sample)
        if isinstance(outcome, str):
            return outcome
        grids.append(outcome)
    return grids


def is_finite(sample: Any) -> bool:
    return not isinstance(sample, torch.Tensor) or bool(torch.isfinite(sample).all())


def check_image_tokens(tok: ImagePatchTokenizer, batch: TokenBatch, grids: list[tuple[int, int]]) -> None:
    """The documented layout: [class slot?] + patches row-major, (row, col) positions, padded and masked."""
    cls = int(tok.class_token)
    counts = [gh * gw + cls for gh, gw in grids]
    width = max(counts)
    assert batch.features.shape == (len(grids), width, tok.patch_features)
    assert batch.features.is_floating_point()
    assert batch.positions.shape == (len(grids), width, 2)
    assert batch.extras["grid"].tolist() == [list(g) for g in grids]
    for row, ((gh, gw), count) in enumerate(zip(grids, counts, strict=True)):
        assert batch.mask[row].tolist() == [True] * count + [False] * (width - count)
        expected = [[0, 0]] * cls + [[r, c] for r in range(gh) for c in range(gw)]
        assert batch.positions[row, :count].tolist() == expected
        assert not batch.features[row, count:].any()  # padding
        if cls:
            assert not batch.features[row, 0].any()  # the class-token slot


def unpatchify(tokens: torch.Tensor, grid: tuple[int, int], channels: int, p: int) -> torch.Tensor:
    """``[gh*gw, C*P*P]`` patches -> the ``[C, gh*P, gw*P]`` image they were cut from."""
    gh, gw = grid
    return tokens.reshape(gh, gw, channels, p, p).permute(2, 0, 3, 1, 4).reshape(channels, gh * p, gw * p)


def check_pixels_round_trip(tok: ImagePatchTokenizer, batch: TokenBatch, samples: list[Any], grids: list) -> None:
    """Untouched pixels (no resize, no normalisation, float input of matching channels) come back exactly."""
    if tok.resize or tok.mean is not None:
        return
    cls, p = int(tok.class_token), tok.patch_size
    for row, (sample, (gh, gw)) in enumerate(zip(samples, grids, strict=True)):
        if not isinstance(sample, torch.Tensor) or not sample.is_floating_point():
            continue
        image = sample if sample.dim() == 3 else sample[None]
        h, w = image.shape[-2:]
        if image.shape[0] != tok.channels or (tok.size_policy == "resize" and (h % p or w % p)):
            continue
        rebuilt = unpatchify(batch.features[row, cls : cls + gh * gw], (gh, gw), tok.channels, p)
        expected = F.pad(image, (0, gw * p - w, 0, gh * p - h)).to(batch.features.dtype)
        torch.testing.assert_close(rebuilt, expected, rtol=0, atol=0, equal_nan=True)


@settings(max_examples=200, deadline=None)
# found by fuzzing: a 0-pixel image leaked RuntimeError from the resize (resize=True), or gave 0 tokens
@example(config={"patch_size": 2, "image_size": 4}, samples=[torch.zeros(3, 0, 5)])
# found by fuzzing: PIL's ValueError for a mode it cannot convert leaked
@example(config={"patch_size": 2, "image_size": 4}, samples=[Image.new("La", (3, 3))])
@example(config={"patch_size": 2, "image_size": 4}, samples=[])
@given(config=image_configs(), samples=st.lists(IMAGE_SAMPLE, min_size=1, max_size=3))
def test_image_samples_give_documented_tokens_or_data_error(config, samples):
    tok = ImagePatchTokenizer(**config)
    check_batch_outcome(tok, samples, samples, batch_outcome(tok, samples), all(map(is_finite, samples)))


def check_batch_outcome(tok, given, samples, outcome, finite: bool) -> None:
    """``tok.batch(given)`` raises the predicted one-line DataError, or gives the predicted tokens
    (finite where ``finite``, and rebuilding the pixels of ``samples``)."""
    event("tokens" if isinstance(outcome, list) else "DataError: " + re.sub(r"\d+", "N", outcome))
    if isinstance(outcome, str):
        with pytest.raises(DataError, match=outcome) as err:
            tok.batch(given)
        assert_one_line(err.value)
        return
    batch = tok.batch(given)
    check_image_tokens(tok, batch, outcome)
    if finite:
        assert torch.isfinite(batch.features).all()
    check_pixels_round_trip(tok, batch, samples, outcome)


@settings(max_examples=100, deadline=None)
# found by fuzzing: an empty [0, C, H, W] batch whose C needs converting leaked RuntimeError from torch.stack
@example(config={"patch_size": 2, "image_size": 4}, images=torch.zeros(0, 1, 4, 4))
# found by fuzzing: a 0-d tensor leaked TypeError from len()
@example(config={"patch_size": 2, "image_size": 4}, images=torch.tensor(0.5))
@given(
    config=image_configs(),
    images=pixel_tensors(batch_shapes()),
)
def test_image_batch_tensor_of_any_rank(config, images):
    """A tensor given as the whole batch: [B, C, H, W] takes the fast path, any other rank is a sequence."""
    tok = ImagePatchTokenizer(**config)
    outcome = "0-d tensor" if images.dim() == 0 else batch_outcome(tok, list(images))
    samples = [] if images.dim() == 0 else list(images)
    check_batch_outcome(tok, images, samples, outcome, is_finite(images))


SEED_FORMATS = {  # format -> mode saved
    "PNG": "RGB", "GIF": "P", "BMP": "RGB", "JPEG": "RGB", "TIFF": "RGB", "WEBP": "RGB", "ICO": "RGBA",
    "PPM": "RGB", "TGA": "RGB", "PCX": "RGB", "DDS": "RGBA", "QOI": "RGB", "IM": "RGB", "SGI": "RGB",
}  # fmt: skip
MAGIC = [b"", b"\x89PNG\r\n\x1a\n", b"GIF89a", b"BM", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*", b"RIFF", b"P6\n"]


@pytest.fixture(scope="module")
def image_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, bytes], Path]]:
    """Small valid files of many formats to corrupt, and a folder to write them to.

    PIL's decompression-bomb limit is lowered meanwhile: a corrupted header may claim a huge
    size, and that must fail fast (as a DataError) rather than allocate gigabytes.
    """
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (6, 7, 3), dtype=np.uint8), "RGB")
    seeds = {}
    for fmt, mode in SEED_FORMATS.items():
        path = tmp_path_factory.mktemp("seeds") / f"seed.{fmt.lower()}"
        image.convert(mode).save(path, fmt)
        seeds[fmt] = path.read_bytes()
    limit = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = 1 << 14
    yield seeds, tmp_path_factory.mktemp("fuzzed")
    Image.MAX_IMAGE_PIXELS = limit


def check_image_file(path: Path) -> None:
    """A file either tokenizes (it may still be a valid image) or raises a one-line DataError."""
    tok = ImagePatchTokenizer(patch_size=2, image_size=4)
    try:
        batch = tok.batch([path])
    except DataError as err:
        event("DataError")
        assert_one_line(err)
        # read errors name the file; a file that decodes to an unusable image says why
        assert str(path) in str(err) or re.search("cannot convert a PIL image|has no pixels", str(err)), str(err)
        return
    event("tokens")
    check_image_tokens(tok, batch, [(2, 2)])
    assert torch.isfinite(batch.features).all()


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@settings(max_examples=150, deadline=None)
# found by fuzzing: a header claiming 2 billion pixels leaked PIL's DecompressionBombError
@example(fmt="BMP", edits=[(21, 0x7F)], cut=None)
# found by fuzzing: an unknown DDS pixel format leaked NotImplementedError
@example(fmt="DDS", edits=[(80, 0), (81, 0x20)], cut=None)
@given(
    fmt=st.sampled_from(sorted(SEED_FORMATS)),
    edits=st.lists(st.tuples(st.integers(0, 4096), st.integers(0, 255)), max_size=6),
    cut=st.none() | st.integers(0, 4096),
)
def test_image_corrupt_files_give_tokens_or_data_error(image_files, fmt, edits, cut):
    seeds, folder = image_files
    data = bytearray(seeds[fmt])
    for position, byte in edits:
        data[position % len(data)] = byte
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    path = folder / f"fuzzed.{fmt.lower()}"
    path.write_bytes(bytes(data))
    check_image_file(path)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@settings(max_examples=50, deadline=None)
@given(magic=st.sampled_from(MAGIC), data=st.binary(max_size=200), suffix=st.sampled_from(["png", "jpg", "bin"]))
def test_image_random_bytes_as_a_file_give_data_error(image_files, magic, data, suffix):
    path = image_files[1] / f"random.{suffix}"
    path.write_bytes(magic + data)
    check_image_file(path)


# ====================================================================== audio files

AUDIO_SEEDS = {"pcm16.wav": "PCM_16", "pcm24.wav": "PCM_24", "pcmu8.wav": "PCM_U8", "float.wav": "FLOAT",
               "double.wav": "DOUBLE", "stereo.flac": "PCM_16"}


@pytest.fixture(scope="module")
def audio_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, bytes], Path]:
    """Small valid sound files of several encodings to corrupt (written by soundfile), and a folder."""
    soundfile = pytest.importorskip("soundfile")
    rng = np.random.default_rng(0)
    folder = tmp_path_factory.mktemp("audio")
    seeds = {}
    for name, subtype in AUDIO_SEEDS.items():
        channels = 2 if name.startswith("stereo") else 1
        soundfile.write(folder / name, rng.uniform(-0.8, 0.8, (700, channels)), 8000, subtype=subtype)
        seeds[name] = (folder / name).read_bytes()
    return seeds, folder


def check_audio_file(path: Path) -> None:
    """A file either tokenizes into finite tokens or raises a one-line DataError naming it."""
    from tokformer.tokenizers.audio import AudioFrameTokenizer

    tokenizer = AudioFrameTokenizer(frame_hops=2, max_seconds=0.2)
    try:
        batch = tokenizer.batch([path])
    except DataError as err:
        event("DataError")
        assert_one_line(err)
        assert str(path) in str(err), str(err)
        return
    event("tokens")
    assert batch.features.shape[0] == 1 and batch.features.shape[2] == 160 and 1 <= batch.features.shape[1] <= 10
    assert torch.isfinite(batch.features).all()


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(AUDIO_SEEDS)),
       edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=6),
       cut=st.none() | st.integers(0, 4096))
def test_audio_corrupt_files_give_tokens_or_data_error(audio_files, name, edits, cut):
    seeds, folder = audio_files
    data = bytearray(seeds[name])
    for position, byte in edits:  # the header and the first samples: where a reader can go wrong
        data[position % len(data)] = byte
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    path = folder / f"fuzzed-{name}"
    path.write_bytes(bytes(data))
    check_audio_file(path)


@settings(max_examples=50, deadline=None)
@given(magic=st.sampled_from([b"", b"RIFF", b"RIFF\0\0\0\0WAVE", b"RIFF\xff\xff\xff\xffWAVEfmt ", b"fLaC",
                              b"OggS"]),
       data=st.binary(max_size=200), suffix=st.sampled_from(["wav", "flac", "ogg"]))
def test_audio_random_bytes_as_a_file_give_data_error(audio_files, magic, data, suffix):
    path = audio_files[1] / f"random.{suffix}"
    path.write_bytes(magic + data)
    check_audio_file(path)


# ====================================================================== graphs

NODE_LABELS = st.one_of(
    st.integers(-5, 30),
    st.text(max_size=2),
    st.tuples(st.integers(0, 3), st.integers(0, 3)),
    st.frozensets(st.integers(0, 3), max_size=2),
)
NUMBER_VALUES = st.one_of(
    st.integers(-100, 100),
    st.floats(-1e6, 1e6),
    st.booleans(),
    st.fractions(max_denominator=50),
    st.builds(np.float32, st.floats(-1e3, 1e3, width=32)),
    st.builds(np.int64, st.integers(-(2**63), 2**63 - 1)),
)
ANY_VALUES = st.one_of(
    NUMBER_VALUES,
    st.text(max_size=2),
    st.integers(),
    st.floats(),  # NaN, inf, and values beyond float32
    st.sampled_from([10**400, -(10**400), None, b"x", np.bool_(True), 1 + 2j]),
    st.lists(st.integers(), max_size=2),
    st.builds(np.complex64, st.complex_numbers(max_magnitude=10, width=64)),
    st.decimals(allow_nan=False, allow_infinity=False, places=2),
)
EDGE_NUMBERS = st.one_of(  # either side of float32's range, and beyond float64's
    st.sampled_from([10**400, -(10**400), 1e300, -3.5e38, np.float64(1e39), math.inf, -math.inf, math.nan]),
    st.sampled_from([3.4e38, -3.4028234e38, 2**127, 1e-45, 5e-324, np.float64(-1e38)]),
    st.integers(min_value=2**128),
    st.builds(np.complex64, st.complex_numbers(max_magnitude=10, width=64)),
)
MISSING = object()  # a node without the attribute
ATTRIBUTE_STYLES = {  # one style per test case, so a batch is often valid, or invalid for one reason only
    "number": NUMBER_VALUES,
    "edge number": st.one_of(NUMBER_VALUES, NUMBER_VALUES, EDGE_NUMBERS),
    "string": st.text(max_size=2),
    "any": st.one_of(ANY_VALUES, st.just(MISSING)),
}


GRAPH_CLASSES = {"Graph": nx.Graph, "DiGraph": nx.DiGraph, "MultiGraph": nx.MultiGraph, "MultiDiGraph": nx.MultiDiGraph}


@st.composite
def graph_specs(draw: Any, values: st.SearchStrategy, max_nodes: int = 9) -> tuple[str, list, list]:
    """``(class name, [(node, attributes)], edges)`` of any kind of networkx graph: directed, multi,
    self-loops, isolated nodes, labels of mixed types. A spec, not a graph, so a failure prints it."""
    labels = draw(st.lists(NODE_LABELS, unique=True, max_size=max_nodes))
    nodes = []
    for label in labels:
        value = draw(values)
        nodes.append((label, {} if value is MISSING else {"x": value}))
    edges = []
    if labels:
        node = st.sampled_from(labels)
        edges = draw(st.lists(st.tuples(node, node), max_size=2 * len(labels) + 2))
    return draw(st.sampled_from(sorted(GRAPH_CLASSES))), nodes, edges


def build_graph(spec: tuple[str, list, list]) -> nx.Graph:
    kind, nodes, edges = spec
    graph = GRAPH_CLASSES[kind]()
    graph.add_nodes_from(nodes)
    graph.add_edges_from(edges)
    return graph


@st.composite
def graph_configs(draw: Any) -> dict[str, Any]:
    """GraphTokenizer keyword arguments (a dict, so a failing example prints readably)."""
    node_features = draw(st.sampled_from(["degree", "constant", "attributes", "attributes"]))
    return {
        "k": draw(st.integers(1, 6)),
        "positions": draw(st.sampled_from(["laplacian", "none"])),
        "eigenvalues": draw(st.booleans()),
        "sign_flip": draw(st.booleans()),
        "seed": draw(st.integers(0, 9)),
        "node_features": node_features,
        "node_attributes": ["x"] if node_features == "attributes" else [],
        "attention": draw(st.sampled_from(["full", "bias", "mask"])),
        "edge_bias": draw(st.floats(-3, 3)),
        "graph_token": draw(st.booleans()),
        "solver": draw(st.sampled_from(["auto", "dense", "sparse"])),
    }


def attribute_kind(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, (Real, np.number)) and not isinstance(value, np.complexfloating):
        return "number"
    return "other"


def finite_float32(value: Any) -> bool:
    """Whether a number is a finite float32 (features are float32: a finite value must not become inf)."""
    try:
        number = float(value)
    except OverflowError:  # an int beyond float64
        return False
    return math.isfinite(number) and abs(number) <= FLOAT32_MAX


def graphs_valid(tok: GraphTokenizer, samples: list[nx.Graph], fit: str | None) -> bool:
    """Whether the batch must tokenize (else it must raise DataError); docs/graphs.md's rules."""
    if not samples or any(g.number_of_nodes() == 0 for g in samples):
        return False
    if tok.node_features != "attributes":
        return True
    data = [d for g in samples for _, d in g.nodes(data=True)]
    if any("x" not in d for d in data):
        return False
    values = [d["x"] for d in data]
    kinds = {attribute_kind(v) for v in values}
    if fit is None:  # no categories: every value must be a finite number
        return kinds == {"number"} and all(map(finite_float32, values))
    if "other" in kinds or len(kinds) > 1:
        return False
    return fit == "categorical" or kinds == {"string"} or all(map(finite_float32, values))


def adjacency(graph: nx.Graph) -> torch.Tensor:
    """Undirected, loop-free, simple adjacency in graph.nodes order."""
    index = {node: i for i, node in enumerate(graph.nodes)}
    out = torch.zeros(len(index), len(index), dtype=torch.bool)
    for u, v in graph.edges():
        if u != v:
            out[index[u], index[v]] = out[index[v], index[u]] = True
    return out


def check_graph_tokens(tok: GraphTokenizer, batch: TokenBatch, samples: list[nx.Graph]) -> None:
    gt = int(tok.graph_token)
    sizes = [g.number_of_nodes() for g in samples]
    b, width = len(samples), max(sizes) + gt
    assert batch.features.shape == (b, width, tok.num_features)
    assert torch.isfinite(batch.features).all()
    assert batch.extras["num_nodes"].tolist() == sizes
    if tok.positions == "none":
        assert batch.positions is None
    else:
        assert batch.positions.shape == (b, width, tok.num_positions)
        assert torch.isfinite(batch.positions).all()
    for row, (graph, n) in enumerate(zip(samples, sizes, strict=True)):
        assert batch.mask[row].tolist() == [True] * (n + gt) + [False] * (width - n - gt)
        assert not batch.features[row, n + gt :].any()  # padding
        nodes = batch.features[row, gt : gt + n, gt:]  # [n, F - gt]
        if gt:
            assert batch.features[row, 0].tolist() == [1.0] + [0.0] * (tok.num_features - 1)
            assert not batch.features[row, 1:, 0].any()
        adj = adjacency(graph)
        if tok.node_features == "degree":
            torch.testing.assert_close(nodes[:, 0], torch.log1p(adj.sum(1).float()))
        elif tok.node_features == "constant":
            assert torch.equal(nodes, torch.ones(n, 1))
        elif "x" in tok.categories:  # one-hot over known values + "unseen"
            assert torch.equal(nodes.sum(1), torch.ones(n))
        else:
            values = [float(d["x"]) for _, d in graph.nodes(data=True)]
            assert torch.equal(nodes[:, 0], torch.tensor(values, dtype=torch.float32))
        if batch.positions is not None:
            check_positions(tok, batch.positions[row], batch.extras["eig_valid"][row], n, gt)
        if tok.attention != "full":
            check_attention(tok, batch.attn_bias[row], adj, n, gt)
        else:
            assert batch.attn_bias is None


def check_positions(tok: GraphTokenizer, positions: torch.Tensor, valid: torch.Tensor, n: int, gt: int) -> None:
    k = tok.k
    available = min(k, n - 1)
    assert valid.tolist() == [j < available for j in range(k)]
    assert not positions[:gt].any() and not positions[gt + n :].any()  # graph token and padding
    vectors = positions[gt : gt + n, :k]  # [n, k], signs maybe flipped
    assert not vectors[:, available:].any()
    torch.testing.assert_close(vectors[:, :available].norm(dim=0), torch.ones(available), atol=1e-4, rtol=0)
    if tok.eigenvalues:
        values = positions[gt : gt + n, k:]  # the same k eigenvalues on every node
        assert torch.equal(values, values[:1].expand(n, -1))
        assert not values[:, available:].any()
        spectrum = values[0, :available]
        assert (spectrum >= -1e-5).all() and (spectrum <= 2 + 1e-5).all()  # normalized Laplacian
        assert (spectrum.diff() >= -1e-5).all()  # ascending


def check_attention(tok: GraphTokenizer, bias: torch.Tensor, adj: torch.Tensor, n: int, gt: int) -> None:
    width = bias.shape[-1]
    expected = torch.zeros(width, width, dtype=torch.bool)
    expected[gt : gt + n, gt : gt + n] = adj
    if tok.attention == "bias":
        assert bias.is_floating_point()
        assert torch.equal(bias, expected.float() * tok.edge_bias)
        return
    expected |= torch.eye(width, dtype=torch.bool)
    if gt:
        expected[0, :] = expected[:, 0] = True
    assert torch.equal(bias, expected)


ATTRIBUTES = {"node_features": "attributes", "node_attributes": ["x"]}


def _path_with(*values: Any) -> tuple[str, list, list]:
    """Spec of a path graph whose nodes' attribute ``x`` holds ``values``."""
    return "Graph", [(i, {"x": v}) for i, v in enumerate(values)], [(i, i + 1) for i in range(len(values) - 1)]


@settings(max_examples=150, deadline=None)
# found by fuzzing: an int attribute beyond float range leaked OverflowError
@example(config=ATTRIBUTES, styled=("any", [_path_with(10**400, 1)]), fit=None, train=False)
# found by fuzzing: a finite attribute beyond float32 became an inf feature
@example(config=ATTRIBUTES, styled=("number", [_path_with(1e300, 2.0)]), fit="fit", train=False)
# found by fuzzing: a numpy complex attribute was silently cut to its real part
@example(config=ATTRIBUTES, styled=("any", [_path_with(np.complex64(1 + 2j))]), fit=None, train=False)
@given(
    config=graph_configs(),
    styled=st.sampled_from(sorted(ATTRIBUTE_STYLES)).flatmap(
        lambda style: st.tuples(st.just(style), st.lists(graph_specs(ATTRIBUTE_STYLES[style]), max_size=3))
    ),
    fit=st.sampled_from([None, "fit", "categorical"]),
    train=st.booleans(),
)
def test_graphs_give_documented_tokens_or_data_error(config, styled, fit, train):
    tok = GraphTokenizer(**config).augment(train)  # random eigenvector sign flips, as in training
    samples = [build_graph(spec) for spec in styled[1]]
    valid = graphs_valid(tok, samples, fit)
    event(f"{styled[0]}: {'tokens' if valid else 'DataError'}")

    def tokenize() -> TokenBatch:
        if fit is not None and tok.node_features == "attributes":
            tok.fit(samples, categorical=["x"] if fit == "categorical" else None)
        return tok.batch(samples)

    if not valid:
        with pytest.raises(DataError) as err:
            tokenize()
        assert_one_line(err.value)
        return
    check_graph_tokens(tok, tokenize(), samples)


@st.composite
def relabellings(draw: Any) -> tuple[list[tuple[int, int]], list[int]]:
    """Edges of a graph on nodes 0..n-1 (self-loops, isolated nodes) and an order of its nodes."""
    n = draw(st.integers(1, 8))
    node = st.integers(0, n - 1)
    return draw(st.lists(st.tuples(node, node), max_size=2 * n)), draw(st.permutations(range(n)))


def relabelled(edges: list[tuple[int, int]], order: list[int]) -> tuple[nx.Graph, nx.Graph]:
    """The graph on 0..n-1, and the same graph with nodes renamed and inserted in ``order``."""
    n = len(order)
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(edges)
    renamed = nx.Graph()
    renamed.add_nodes_from(f"v{i}" for i in order)
    renamed.add_edges_from((f"v{u}", f"v{v}") for u, v in edges)
    return graph, renamed


@settings(max_examples=60, deadline=None)
@given(relabelling=relabellings(), graph_token=st.booleans())
def test_graph_relabelling_permutes_the_tokens(relabelling, graph_token):
    """Token i of the relabelled graph is node order[i] of the original: same features, same
    neighbourhood mask, same eigenvalues, and the same eigenspaces (a basis-free check; a simple
    eigenvector with a clear third moment must match sign and all)."""
    edges, order = relabelling
    graph, renamed = relabelled(edges, order)
    n, k, gt = len(order), 8, int(graph_token)  # k >= n - 1: every eigenvector is kept
    tok = GraphTokenizer(k=k, eigenvalues=True, attention="mask", graph_token=graph_token, solver="dense")
    a, b = tok.batch([graph]), tok.batch([renamed])
    index = torch.tensor(order) + gt
    if gt:
        index = torch.cat((torch.zeros(1, dtype=torch.long), index))
    assert torch.equal(b.features[0], a.features[0, index])
    assert torch.equal(b.attn_bias[0], a.attn_bias[0][index][:, index])
    torch.testing.assert_close(b.positions[0, :, k:], a.positions[0, index, k:], atol=1e-5, rtol=0)
    va = a.positions[0, index, :k].double()  # [N, k], original, permuted into the renamed graph's order
    vb = b.positions[0, :, :k].double()
    spectrum = np.linalg.eigvalsh(normalized_laplacian(graph).toarray())  # [n] ascending; [0] is dropped
    clusters: list[list[int]] = []
    for j in range(n - 1):
        if clusters and spectrum[j + 1] - spectrum[clusters[-1][-1] + 1] < 1e-6:
            clusters[-1].append(j)
        else:
            clusters.append([j])
    for cluster in clusters:
        if spectrum[cluster[0] + 1] - spectrum[0] < 1e-6:
            continue  # shares an eigenspace with the dropped eigenvector: no basis-free meaning
        projector_a, projector_b = va[:, cluster] @ va[:, cluster].T, vb[:, cluster] @ vb[:, cluster].T
        torch.testing.assert_close(projector_b, projector_a, atol=1e-4, rtol=0)
        if len(cluster) == 1 and abs(float((va[:, cluster] ** 3).sum())) > 1e-3:
            torch.testing.assert_close(vb[:, cluster], va[:, cluster], atol=1e-4, rtol=0)


def test_fractions_and_numpy_scalars_are_numbers():
    """A cheap pin of the attribute kinds the fuzz oracle above assumes."""
    graph = build_graph(_path_with(Fraction(1, 4), np.int64(3), np.float32(0.5), True))
    tok = GraphTokenizer(k=2, node_features="attributes", node_attributes=["x"], graph_token=False)
    assert tok.batch([graph]).features[0, :, 0].tolist() == [0.25, 3.0, 0.5, 1.0]
