"""Byte-level BPE text tokenizer (GPT-2 family), registered as ``"bpe"``.

Encoding cuts text into pre-tokens with a regex, turns each pre-token's UTF-8 bytes into
byte tokens and applies the ranked merges (:mod:`.bpe_merge`). A compiled library runs those
steps where it gives the same ids (:mod:`.bpe_backend`; ``tokenizer.backend`` names the one
that runs), on threads for a batch. The pure-Python encoder is the reference and the fallback:
text is mostly repeats of a few thousand pre-tokens, so it caches each pre-token's ids, and
splits large inputs at safe boundaries to encode them on several processes.

Lone surrogates (``"\\ud800"``) have no UTF-8 encoding, so :meth:`BPETokenizer.encode`
raises :class:`SurrogateError` naming the index of the first one; encode
``text.encode("utf-8", "replace").decode()`` yourself if replacing them is acceptable.
Decoding joins all bytes before UTF-8 decoding, so tokens that split a character decode
correctly; an id sequence that is not valid UTF-8 decodes with U+FFFD replacements.
"""

from __future__ import annotations

import multiprocessing
import weakref
from array import array
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from itertools import chain
from pathlib import Path
from typing import Any, Literal

import regex
from torch import nn

from tokformer import machine
from tokformer.batch import TokenBatch
from tokformer.embedding import Embedder
from tokformer.positional import LearnedPositions
from tokformer.tokenizers import bpe_backend
from tokformer.tokenizers.base import Tokenizer, TokenizerError, pad_ids
from tokformer.tokenizers.bpe_files import BPEFiles, read_hf_json, read_vocab_merges, write_hf_json, write_vocab_merges
from tokformer.tokenizers.bpe_merge import Ranks, merge_piece
from tokformer.tokenizers.bpe_train import train_bpe
from tokformer.tokenizers.pretokenize import PATTERNS, chunker, is_named, pretokenizer, resolve_pattern, safe_chunks
from tokformer.tokenizers.registry import register_tokenizer

HF_FILE = "tokenizer.json"
CACHE_LIMIT = 500_000  # cached pre-tokens before the cache is cleared
CACHED_PIECE_LEN = 256  # longer pieces are rare and not worth keeping
PARALLEL_MIN_CHARS = 1_000_000  # below this, starting processes costs more than it saves
THREAD_CHUNK_CHARS = 1 << 16  # a batch on threads cuts longer texts into pieces about this long
SMALL_TEXTS_PER_WORKER = 256  # more texts than this per worker go to the library's own batch call

AllowedSpecial = Collection[str] | Literal["all"]


class SurrogateError(TokenizerError, ValueError):
    """Text holds a lone surrogate code point, which has no UTF-8 bytes to tokenize."""


@register_tokenizer("bpe")
class BPETokenizer(Tokenizer):
    """Byte-level BPE over a regex pre-tokenizer.

    Args:
        vocab: token bytes -> id; must hold all 256 single bytes.
        merges: pairs of token bytes in rank order; each pair and its concatenation must be in ``vocab``.
        special_tokens: special string -> id (ids distinct from ``vocab``'s).
        pattern: pre-tokenization regex or a name in :data:`~.pretokenize.PATTERNS`.
        ignore_merges: emit a pre-token that is itself in the vocabulary as one token
            without applying merges (HF's option, used by Llama-3 style files).
        max_length: longest sequence the embedder's learned positions support.
        pad_token: special token used for padding in :meth:`batch` (id 0 if None; padding
            is masked out either way).
        backend: who encodes: ``"auto"`` (the first compiled library that gives exactly the
            Python encoder's ids, else Python), ``"python"``, or a library by name
            (``"riptoken"``, ``"tiktoken"``; an error if it cannot). See :mod:`.bpe_backend`.
    """

    def __init__(
        self,
        vocab: Mapping[bytes, int],
        merges: Sequence[tuple[bytes, bytes]],
        *,
        special_tokens: Mapping[str, int] | None = None,
        pattern: str = "gpt2",
        ignore_merges: bool = False,
        max_length: int = 1024,
        pad_token: str | None = None,
        backend: str = bpe_backend.AUTO,
    ) -> None:
        self.vocab = dict(vocab)
        self.merges = list(merges)
        self.special_tokens = dict(special_tokens or {})
        self.pattern = resolve_pattern(pattern)
        self.ignore_merges = ignore_merges
        self.max_length = max_length
        self.pad_token = pad_token
        missing = [b for b in range(256) if bytes([b]) not in self.vocab]
        if missing:
            raise TokenizerError(
                f"byte-level vocabulary lacks {len(missing)} single bytes, e.g. {bytes([missing[0]])!r}"
            )
        if pad_token is not None and pad_token not in self.special_tokens:
            raise TokenizerError(f"pad token {pad_token!r} is not a special token")
        self._id_to_bytes: dict[int, bytes] = {i: tok for tok, i in self.vocab.items()}
        clash = [s for s, i in self.special_tokens.items() if i in self._id_to_bytes]
        if clash:
            raise TokenizerError(f"special token {clash[0]!r} reuses the id of a vocabulary token")
        self._id_to_bytes.update({i: s.encode() for s, i in self.special_tokens.items()})
        self._ranks: Ranks = {}
        for rank, (a, b) in enumerate(self.merges):
            try:
                self._ranks[(self.vocab[a], self.vocab[b])] = (rank, self.vocab[a + b])
            except KeyError as err:
                raise TokenizerError(
                    f"merge {rank} ({a!r}, {b!r}) uses token {err} that is not in the vocabulary"
                ) from None
        self._vocab_size = max(self._id_to_bytes) + 1
        self._byte_ids = [self.vocab[bytes([b])] for b in range(256)]
        self._split = pretokenizer(self.pattern)
        self._chunk = chunker(self.pattern)
        self._cache: dict[str, tuple[int, ...]] = {}
        self._specials_compiled: dict[frozenset[str], regex.Pattern[str]] = {}
        self._executor: tuple[tuple[int, bool], Executor] | None = None  # (workers, threads?), pool
        self._finalizer: weakref.finalize | None = None
        self._backend_choice = bpe_backend.AUTO
        self._compiled: bpe_backend.CompiledEncoder | None = None
        self._resolved = False  # the backend is chosen at the first encode: its checks cost a pass over the vocabulary
        self.use_backend(backend)

    # ----------------------------------------------------------------- construction

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        *,
        pattern: str = "gpt2",
        min_frequency: int = 0,
        special_tokens: Sequence[str] = (),
        show_progress: bool = False,
        **options: Any,
    ) -> BPETokenizer:
        """Train on ``texts`` (see :func:`~.bpe_train.train_bpe`); ``options`` go to the constructor."""
        trained = train_bpe(
            texts,
            vocab_size,
            pattern=pattern,
            min_frequency=min_frequency,
            special_tokens=special_tokens,
            show_progress=show_progress,
        )
        return cls(
            trained.vocab, trained.merges, special_tokens=trained.special_tokens, pattern=trained.pattern, **options
        )

    @classmethod
    def from_files(cls, files: BPEFiles, **options: Any) -> BPETokenizer:
        return cls(
            files.vocab,
            files.merges,
            special_tokens=files.special_tokens,
            pattern=files.pattern,
            ignore_merges=files.ignore_merges,
            **options,
        )

    @classmethod
    def from_hf_json(cls, path: str | Path, **options: Any) -> BPETokenizer:
        """Load a Hugging Face byte-level BPE ``tokenizer.json``."""
        return cls.from_files(read_hf_json(Path(path)), **options)

    @classmethod
    def from_vocab_merges(
        cls,
        vocab_path: str | Path,
        merges_path: str | Path,
        *,
        special_tokens: Sequence[str] = (),
        pattern: str = "gpt2",
        **options: Any,
    ) -> BPETokenizer:
        """Load GPT-2 style ``vocab.json`` + ``merges.txt``; name the special tokens the vocab holds."""
        files = read_vocab_merges(Path(vocab_path), Path(merges_path), tuple(special_tokens), resolve_pattern(pattern))
        return cls.from_files(files, **options)

    def files(self) -> BPEFiles:
        return BPEFiles(self.vocab, self.merges, self.special_tokens, self.pattern, self.ignore_merges)

    def mergeable_ranks(self) -> dict[bytes, int]:
        """The vocabulary in tiktoken's form (``tiktoken.Encoding(mergeable_ranks=...)``): token bytes -> id.

        tiktoken merges the pair whose joined bytes have the lowest rank, so using ids as
        ranks reproduces our merge order only where the ids grow with it: every merged
        token's id above every single byte's and above the ids of the merges before it.
        """
        refusal = bpe_backend.rank_order_refusal(self.vocab, self.merges, self._byte_ids)
        if refusal is not None:
            raise TokenizerError(f"{refusal}, so they are no tiktoken ranks")
        return dict(self.vocab)

    def save_hf_json(self, path: str | Path) -> None:
        write_hf_json(self.files(), Path(path))

    def save_vocab_merges(self, directory: str | Path) -> tuple[Path, Path]:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        return write_vocab_merges(self.files(), path)

    # Tokenizer API: tokenizer_config.json holds the options, tokenizer.json the model.
    def get_config(self) -> dict[str, Any]:
        return {"max_length": self.max_length, "pad_token": self.pad_token}

    def save_files(self, directory: Path) -> None:
        self.save_hf_json(directory / HF_FILE)

    @classmethod
    def from_config(cls, config: dict[str, Any], directory: Path) -> BPETokenizer:
        unknown = set(config) - {"max_length", "pad_token"}
        if unknown:
            raise TokenizerError(f"unknown bpe tokenizer config keys: {sorted(unknown)}")
        return cls.from_hf_json(directory / HF_FILE, **config)

    # ----------------------------------------------------------------- properties

    @property
    def backend(self) -> str:
        """The encoder that runs: ``"python"`` or the compiled library's name."""
        compiled = self._compiled_encoder()
        return bpe_backend.PYTHON if compiled is None else compiled.name

    def use_backend(self, backend: str) -> None:
        """Encode with ``backend`` from now on (a choice of the constructor's ``backend``), e.g. on a loaded
        tokenizer; a library that cannot encode this tokenizer exactly is refused at the next encode."""
        bpe_backend.checked_choice(backend)
        self.close()  # a pool of the other kind (threads or processes) would outlive the choice
        self._backend_choice, self._compiled, self._resolved = backend, None, False

    def _compiled_encoder(self) -> bpe_backend.CompiledEncoder | None:
        if not self._resolved:
            vocabulary = bpe_backend.Vocabulary(self.vocab, self.merges, self._ranks, self._byte_ids, self.pattern)
            self._compiled = bpe_backend.select(self._backend_choice, vocabulary)
            self._resolved = True
        return self._compiled

    @property
    def vocab_size(self) -> int:
        """One more than the largest id (ids need not be contiguous in loaded files)."""
        return self._vocab_size

    def token_to_id(self, token: bytes | str) -> int:
        """Id of a special token (str) or of a vocabulary token (bytes)."""
        return self.special_tokens[token] if isinstance(token, str) else self.vocab[token]

    def id_to_token(self, token_id: int) -> bytes:
        return self._id_to_bytes[token_id]

    # ----------------------------------------------------------------- encoding

    def encode(self, text: str, *, allowed_special: AllowedSpecial = (), num_workers: int | None = 1) -> list[int]:
        """Token ids of ``text``.

        Special-token strings in ``text`` are plain text unless listed in
        ``allowed_special`` (or it is ``"all"``): text a user typed must not be able
        to inject an end-of-text token. ``num_workers`` > 1 (None: all cores) encodes a
        large text on several processes, with the same result.
        """
        workers = _resolve_workers(num_workers, len(text))
        if workers > 1 and self._can_cut(allowed_special):
            chunks = safe_chunks(text, max(len(text) // (workers * 4), 1), self.pattern)
            try:
                return list(chain.from_iterable(self._encode_parallel(chunks, allowed_special, workers)))
            except SurrogateError:
                raise _surrogate_error(text) from None  # a chunk's error counts from the chunk's start
        return self._encode_one(text, self._special_regex(allowed_special))

    def encode_batch(
        self, texts: Sequence[str], *, allowed_special: AllowedSpecial = (), num_workers: int | None = None
    ) -> list[list[int]]:
        """Token ids of each text; on all cores (``num_workers=None``) once the batch is large."""
        workers = min(_resolve_workers(num_workers, sum(map(len, texts))), len(texts))  # one more would only wait
        if workers > 1:
            return self._encode_parallel(list(texts), allowed_special, workers)
        special = self._special_regex(allowed_special)
        return [self._encode_one(text, special) for text in texts]

    def iter_encode(
        self, text: str, *, allowed_special: AllowedSpecial = (), chunk_chars: int = 1 << 20
    ) -> Iterator[tuple[int, list[int]]]:
        """Encode a large text chunk by chunk, yielding (characters consumed, ids) for progress bars.

        The chunks' ids concatenate to :meth:`encode`'s. Text that cannot be cut safely
        (see :meth:`_can_cut`) is encoded as a single chunk.
        """
        chunks = safe_chunks(text, chunk_chars, self.pattern) if self._can_cut(allowed_special) else [text]
        special = self._special_regex(allowed_special)
        for chunk in chunks:
            try:
                ids = self._encode_one(chunk, special)
            except SurrogateError:
                raise _surrogate_error(text) from None  # a chunk's error counts from the chunk's start
            yield len(chunk), ids

    def batch(
        self,
        samples: Sequence[str],
        *,
        max_length: int | None = None,
        truncation: bool = False,
        pad_to_max_length: bool = False,
        allowed_special: AllowedSpecial = (),
    ) -> TokenBatch:
        """Encode and pad texts into a TokenBatch (ids, True-for-real mask, positions 0..N-1)."""
        pad_id = self.special_tokens[self.pad_token] if self.pad_token is not None else 0
        return pad_ids(
            self.encode_batch(samples, allowed_special=allowed_special),
            pad_id=pad_id,
            max_length=max_length if max_length is not None else (self.max_length if truncation else None),
            truncation=truncation,
            pad_to_max_length=pad_to_max_length,
        )

    def build_embedder(
        self, d_model: int, *, dropout: float = 0.0, positions: bool = True, rows: int | None = None
    ) -> nn.Module:
        """Token table plus learned positions up to ``max_length`` (GPT-2's choice).

        ``positions=False`` leaves them out, for a model whose attention places tokens itself
        (rotary embeddings); ``rows`` pads the table past the vocabulary (checkpoints often
        round it up to a multiple of 64 or 128).
        """
        position = LearnedPositions(d_model, self.max_length) if positions else None
        return Embedder(d_model, vocab_size=rows or self.vocab_size, position=position, dropout=dropout)

    def _can_cut(self, allowed_special: AllowedSpecial) -> bool:
        """Whether text may be cut at :func:`~.pretokenize.safe_chunks` points without changing its ids.

        Those points are known for the named patterns only, and a cut must not split an
        allowed special token, which it could only do if the token contains a newline.
        """
        allowed = self.special_tokens if allowed_special == "all" else allowed_special
        return is_named(self.pattern) and not any("\n" in s for s in allowed)

    def _encode_one(self, text: str, special: regex.Pattern[str] | None) -> list[int]:
        if special is None:
            return self._encode_ordinary(text)
        ids: list[int] = []
        end = 0
        try:
            for match in special.finditer(text):
                ids += self._encode_ordinary(text[end : match.start()])
                ids.append(self.special_tokens[match.group()])
                end = match.end()
            ids += self._encode_ordinary(text[end:])
        except SurrogateError:
            raise _surrogate_error(text) from None  # the error of a slice counts from the slice's start
        return ids

    def _encode_ordinary(self, text: str) -> list[int]:
        """Encode text with no special tokens, on the compiled backend if there is one."""
        compiled = self._compiled if self._resolved else self._compiled_encoder()
        if compiled is None:
            return self._encode_in_python(text)
        try:
            return compiled.encode_ordinary(text)
        except UnicodeEncodeError:  # a lone surrogate (the libraries take UTF-8 only)
            raise _surrogate_error(text) from None

    def _encode_in_python(self, text: str) -> list[int]:
        """The reference encoder: cached units (see :func:`~.pretokenize.chunker`), misses in one pass."""
        units = self._chunk(text)
        cache = self._cache
        try:
            return list(chain.from_iterable(map(cache.__getitem__, units)))
        except KeyError:
            pass
        if len(cache) > CACHE_LIMIT:
            cache.clear()
        fresh = {unit: self._encode_unit(unit, text) for unit in set(units) if unit not in cache}
        cache.update(fresh)
        ids = list(chain.from_iterable(map(cache.__getitem__, units)))
        for unit in fresh:
            if len(unit) > CACHED_PIECE_LEN:  # rare and not worth keeping
                del cache[unit]
        return ids

    def _encode_unit(self, unit: str, text: str) -> tuple[int, ...]:
        """Ids of a chunk: its pieces' ids, each from the cache or merged (and then cached, shared by chunks)."""
        if self._chunk is self._split:
            return tuple(self._encode_piece(unit, text))
        cache = self._cache
        ids: list[int] = []
        for piece in self._split(unit):
            found = cache.get(piece)
            if found is None:
                found = tuple(self._encode_piece(piece, text))
                if len(piece) <= CACHED_PIECE_LEN:
                    cache[piece] = found
            ids += found
        return tuple(ids)

    def _encode_piece(self, piece: str, text: str) -> list[int]:
        try:
            data = piece.encode("utf-8")
        except UnicodeEncodeError:
            raise _surrogate_error(text) from None
        if self.ignore_merges and data in self.vocab:
            return [self.vocab[data]]
        return merge_piece(list(map(self._byte_ids.__getitem__, data)), self._ranks)

    def _special_regex(self, allowed_special: AllowedSpecial) -> regex.Pattern[str] | None:
        allowed = set(self.special_tokens) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(self.special_tokens)
        if unknown:
            raise TokenizerError(f"allowed_special names unknown special tokens: {sorted(unknown)}")
        if not allowed:
            return None
        return self._compiled_specials(frozenset(allowed))

    def _compiled_specials(self, allowed: frozenset[str]) -> regex.Pattern[str]:
        # Longest first, so a special that extends another wins.
        return self._specials_compiled.setdefault(
            allowed, regex.compile("|".join(regex.escape(s) for s in sorted(allowed, key=len, reverse=True)))
        )

    def _encode_parallel(self, texts: list[str], allowed_special: AllowedSpecial, workers: int) -> list[list[int]]:
        """Encode on ``workers`` threads (a compiled backend, which lets go of the GIL) or processes.

        Processes return their ids as a packed array (cheap to send back). The pool lives as
        long as the tokenizer, so the Python encoder's workers keep their pre-token caches
        from one call to the next (a data loader calls this once per batch).
        """
        special = self._special_regex(allowed_special)
        compiled = self._compiled_encoder()
        if compiled is not None:
            return self._encode_on_threads(compiled, texts, allowed_special, special, workers)
        chunksize = max(1, len(texts) // (workers * 8))
        tasks = ((text, special) for text in texts)
        packed = list(self._pool(workers).map(_encode_in_worker, tasks, chunksize=chunksize))
        return [array("I", blob).tolist() for blob in packed]

    def _encode_on_threads(self, compiled: bpe_backend.CompiledEncoder, texts: list[str],
                           allowed_special: AllowedSpecial, special: regex.Pattern[str] | None,
                           workers: int) -> list[list[int]]:
        """A compiled backend on all ``workers``: long texts cut where the ids cannot change (so that one long
        document does not leave a core idle), then groups of pieces on a thread pool, or, for many short
        texts, the library's own batch call on all cores (which gives up the GIL once, not once a line)."""
        cut = self._can_cut(allowed_special)
        pieces: list[str] = []
        counts = []
        for text in texts:
            long = cut and len(text) > THREAD_CHUNK_CHARS
            parts = safe_chunks(text, THREAD_CHUNK_CHARS, self.pattern) if long else [text]
            pieces += parts
            counts.append(len(parts))
        try:
            many_small = len(pieces) > workers * SMALL_TEXTS_PER_WORKER
            if many_small and compiled.encode_ordinary_batch and special is None and workers == machine.cores():
                try:
                    encoded = compiled.encode_ordinary_batch(pieces)  # the library's own threads, all cores
                except UnicodeEncodeError:
                    raise SurrogateError from None
            else:
                size = -(-len(pieces) // (workers * 4))
                groups = [pieces[start : start + size] for start in range(0, len(pieces), size)]
                encoded = list(chain.from_iterable(self._pool(workers, threads=True).map(
                    lambda group: [self._encode_one(piece, special) for piece in group], groups)))
        except SurrogateError:  # named in the first text that holds one, counted from that text's start
            raise _surrogate_error(next(text for text in texts if _has_surrogate(text))) from None
        out, at = [], 0
        for count in counts:
            out.append(encoded[at] if count == 1 else list(chain.from_iterable(encoded[at : at + count])))
            at += count
        return out

    def _pool(self, workers: int, threads: bool = False) -> Executor:
        if self._executor is None or self._executor[0] != (workers, threads):
            self.close()
            if threads:
                pool: Executor = ThreadPoolExecutor(workers, thread_name_prefix="bpe")
            else:
                # fork shares the parent's state (and warm cache) without pickling it.
                start = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
                context = multiprocessing.get_context(start)
                pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(self,))
            self._executor = ((workers, threads), pool)
            self._finalizer = weakref.finalize(self, pool.shutdown, wait=False, cancel_futures=True)
        return self._executor[1]

    def close(self) -> None:
        """Stop the worker processes of parallel encoding, if any (they also stop with the tokenizer)."""
        if self._executor is not None:
            self._finalizer()
            self._executor = None

    def __getstate__(self) -> dict[str, Any]:
        # Sent to spawned workers: without the pool (not picklable) or the cache (large).
        state = dict(self.__dict__)
        state.update(_executor=None, _finalizer=None, _cache={}, _split=None, _chunk=None, _compiled=None,
                     _resolved=False)  # a library's encoder does not pickle: the worker builds its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._split = pretokenizer(self.pattern)  # a custom pattern's splitter is a closure
        self._chunk = chunker(self.pattern)

    # ----------------------------------------------------------------- decoding

    def decode_bytes(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> bytes:
        """The bytes the ids stand for, joined before any UTF-8 decoding."""
        table = self._id_to_bytes
        specials = set(self.special_tokens.values()) if skip_special_tokens else ()
        try:
            return b"".join(table[i] for i in ids if i not in specials)
        except KeyError as err:
            raise TokenizerError(f"unknown token id {err}") from None

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        """Text of ``ids``; invalid UTF-8 (possible only for hand-made id lists) becomes U+FFFD."""
        return self.decode_bytes(ids, skip_special_tokens=skip_special_tokens).decode("utf-8", errors="replace")


def _surrogate_error(text: str) -> SurrogateError:
    """The error for ``text``, naming its first lone surrogate and that one's index in ``text``."""
    where = _SURROGATE.search(text)
    index = where.start() if where else -1
    return SurrogateError(
        f"text has a lone surrogate U+{ord(text[index]):04X} at index {index}; it has no UTF-8 encoding"
    )


_SURROGATE = regex.compile(r"[\ud800-\udfff]")


def _has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def _resolve_workers(num_workers: int | None, total_chars: int) -> int:
    if num_workers is None:
        return machine.cores() if total_chars >= PARALLEL_MIN_CHARS else 1
    if not 1 <= num_workers <= machine.MAX_WORKERS:  # each is a forked process
        raise TokenizerError(f"num_workers must be between 1 and {machine.MAX_WORKERS}, got {num_workers}")
    return num_workers


_WORKER: BPETokenizer | None = None


def _init_worker(tokenizer: BPETokenizer) -> None:
    global _WORKER
    _WORKER = tokenizer


def _encode_in_worker(task: tuple[str, regex.Pattern[str] | None]) -> bytes:
    assert _WORKER is not None, "worker not initialised"
    text, special = task
    return array("I", _WORKER._encode_one(text, special)).tobytes()


__all__ = ["PATTERNS", "BPETokenizer", "SurrogateError"]
