"""Training a byte-level BPE vocabulary with the incremental algorithm.

A naive trainer recounts every adjacent pair of the corpus after each merge: O(corpus)
per merge. Here, as in Hugging Face's ``BpeTrainer``, we:

1. count each unique pre-token once (a corpus is mostly repeats of a few words);
2. keep the count of every adjacent pair and, per pair, the set of words containing it;
3. keep candidate merges in a max-heap checked lazily: a popped entry whose count is
   stale is pushed back with the true count, so a merge only touches the words that
   contain its pair and only updates the pairs next to each merge site.

Tie-breaking and bookkeeping follow HF's trainer exactly (higher count first, then the
smaller pair of ids; ids are special tokens first, then the 256 bytes in the order of
their byte-level characters, then merges in creation order), so both produce identical
merges on the same input. That includes HF's quirks: a heap entry carries the words
recorded when it was pushed, and a merged pair's own count is never decremented.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from tokformer.tokenizers.base import TokenizerError
from tokformer.tokenizers.byte_level import alphabet_order, str_to_token
from tokformer.tokenizers.pretokenize import pretokenizer, resolve_pattern


@dataclass
class TrainedBPE:
    """What training produces: special tokens, byte-level vocabulary and ranked merges.

    Attributes:
        special_tokens: special token string -> id (the first ids).
        vocab: token bytes -> id for every non-special token.
        merges: merged pairs of token bytes in rank order.
        pattern: the pre-tokenization regex source used.
    """

    special_tokens: dict[str, int]
    vocab: dict[bytes, int]
    merges: list[tuple[bytes, bytes]]
    pattern: str


def count_pretokens(texts: Iterable[str], pattern: str, show_progress: bool = False) -> Counter[str]:
    """How often each pre-token occurs in ``texts``."""
    split = pretokenizer(pattern)
    counts: Counter[str] = Counter()
    for text in tqdm(texts, desc="pre-tokenize", unit="text", disable=not show_progress):
        counts.update(split(text))
    return counts


def train_bpe(
    texts: Iterable[str],
    vocab_size: int,
    *,
    pattern: str = "gpt2",
    min_frequency: int = 0,
    special_tokens: Sequence[str] = (),
    show_progress: bool = False,
) -> TrainedBPE:
    """Learn merges until the vocabulary (specials + 256 bytes + merges) has ``vocab_size`` tokens.

    Args:
        texts: the corpus, one string per document or line.
        vocab_size: target vocabulary size; at least 256 + number of special tokens.
        pattern: "gpt2", "cl100k" or a regex (see :mod:`.pretokenize`).
        min_frequency: stop when the best pair occurs fewer times than this.
        special_tokens: strings that get the first ids and are never merged.
        show_progress: show tqdm progress bars.
    """
    source = resolve_pattern(pattern)
    specials = list(dict.fromkeys(special_tokens))
    if vocab_size < 256 + len(specials):
        raise TokenizerError(
            f"vocab size {vocab_size} is below 256 bytes + {len(specials)} special tokens = {256 + len(specials)}"
        )
    word_counts = count_pretokens(texts, source, show_progress)
    if not word_counts:
        raise TokenizerError("the training corpus is empty")

    # HF looks tokens up by their byte-level string, specials included, so a merge that
    # spells a special token's string reuses the special's id. Mirror that lookup.
    id_to_token: list[bytes] = [_special_key(s) for s in specials]
    token_to_id = {key: i for i, key in enumerate(id_to_token)}
    byte_id = [0] * 256
    for b in alphabet_order():
        byte_id[b] = len(id_to_token)
        id_to_token.append(bytes([b]))
        token_to_id[bytes([b])] = byte_id[b]

    words = [[byte_id[b] for b in word.encode()] for word in word_counts]
    counts = list(word_counts.values())
    merges = _merge_loop(words, counts, id_to_token, token_to_id, vocab_size, min_frequency, show_progress)

    # HF keeps merges in a map keyed by pair: a pair merged twice (possible only when two
    # merges spell the same string) keeps its last rank. Mirror that when listing them.
    last_rank = {pair: rank for rank, pair in enumerate(merges)}
    ordered = sorted(last_rank, key=last_rank.__getitem__)
    return TrainedBPE(
        special_tokens={s: i for i, s in enumerate(specials)},
        vocab={tok: i for i, tok in enumerate(id_to_token) if i >= len(specials)},
        merges=[(id_to_token[a], id_to_token[b]) for a, b in ordered],
        pattern=source,
    )


def _special_key(special: str) -> bytes:
    """The bytes whose byte-level string equals ``special`` (or its UTF-8 if there are none)."""
    try:
        return str_to_token(special)
    except KeyError:
        return special.encode()


def _merge_loop(
    words: list[list[int]],
    counts: list[int],
    id_to_token: list[bytes],
    token_to_id: dict[bytes, int],
    vocab_size: int,
    min_frequency: int,
    show_progress: bool,
) -> list[tuple[int, int]]:
    """The incremental merge loop; mutates ``words``, ``id_to_token`` and ``token_to_id``."""
    pair_counts: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    for index, (word, count) in enumerate(zip(words, counts, strict=True)):
        for pair in zip(word, word[1:], strict=False):
            pair_counts[pair] = pair_counts.get(pair, 0) + count
            where.setdefault(pair, set()).add(index)

    # Entries: (-count, pair, words to visit). heapq is a min-heap, so the largest count
    # pops first and, among equal counts, the smaller pair: HF's order.
    heap = [(-pair_counts[pair], pair, pos) for pair, pos in where.items() if pair_counts[pair] > 0]
    heapq.heapify(heap)
    merges: list[tuple[int, int]] = []
    progress = tqdm(total=vocab_size, initial=len(id_to_token), desc="merges", disable=not show_progress)
    while heap and len(id_to_token) < vocab_size:
        neg_count, pair, pos = heapq.heappop(heap)
        true_count = pair_counts[pair]
        if -neg_count != true_count:
            heapq.heappush(heap, (-true_count, pair, pos))
            continue
        if true_count < 1 or min_frequency > true_count:
            break
        a, b = pair
        new_token = id_to_token[a] + id_to_token[b]
        new_id = token_to_id.get(new_token)
        if new_id is None:
            new_id = len(id_to_token)
            id_to_token.append(new_token)
            token_to_id[new_token] = new_id
            progress.update(1)
        merges.append(pair)

        created: dict[tuple[int, int], set[int]] = {}
        for index in pos:
            _merge_word(words, index, a, b, new_id, counts[index], pair_counts, created)
        for new_pair, new_pos in created.items():
            count = pair_counts[new_pair]
            if count > 0:
                heapq.heappush(heap, (-count, new_pair, new_pos))
    progress.close()
    return merges


def _merge_word(
    words: list[list[int]],
    index: int,
    a: int,
    b: int,
    new_id: int,
    count: int,
    pair_counts: dict[tuple[int, int], int],
    created: dict[tuple[int, int], set[int]],
) -> None:
    """Merge every (a, b) in one word left to right and update the neighbouring pair counts.

    Mirrors HF's ``Word::merge``: for each merge site, the pairs with the left and right
    neighbours lose ``count`` and the pairs with the new token gain it.
    """
    word = words[index]
    last = len(word) - 1  # a pair can start at positions 0 .. last - 1
    out: list[int] = []
    copied = 0  # word[:copied] is already in `out`
    i = 0
    while True:
        try:
            i = word.index(a, i, last)  # C-speed scan to the next candidate site
        except ValueError:
            break
        if word[i + 1] != b:
            i += 1
            continue
        out += word[copied:i]
        if out:
            # The left neighbour may be a merge made a moment ago; like HF we then
            # decrement (new, a), which that merge has just incremented.
            prev = out[-1]
            pair_counts[(prev, a)] = pair_counts.get((prev, a), 0) - count
            left_new = (prev, new_id)
            pair_counts[left_new] = pair_counts.get(left_new, 0) + count
            created.setdefault(left_new, set()).add(index)
        if i + 2 <= last:
            nxt = word[i + 2]
            pair_counts[(b, nxt)] = pair_counts.get((b, nxt), 0) - count
            right_new = (new_id, nxt)
            pair_counts[right_new] = pair_counts.get(right_new, 0) + count
            created.setdefault(right_new, set()).add(index)
        out.append(new_id)
        i += 2
        copied = i
    if copied:
        out += word[copied:]
        words[index] = out
