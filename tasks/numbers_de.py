"""English number phrases -> German number words: the offline default of task ``translate``.

A real translation problem in miniature: a closed vocabulary, exact references, and word
reordering that a word-by-word lookup cannot do. German puts units before tens
("twenty-four" -> "vierundzwanzig") and writes a number below a million as one word.

Conventions (one of each choice, fixed so references are exact):

- English: no "and"; tens and units hyphenated ("twenty-four"); "one hundred", "one thousand".
- German: the explicit "ein" before hundred and thousand ("einhundert", "eintausend",
  "einhunderteins"); a final 1 is "eins" ("einhunderteins", "eintausendeins") but "ein"
  inside a compound ("einundzwanzig", "einunddreißigtausend"); "ß" in "dreißig".

The range is 1..999 999. The split is by number: the held-out numbers never occur in
training, so exact match on them measures the rule, not memory.
"""

from __future__ import annotations

import numpy as np

MAX_NUMBER = 999_999

_EN_UNITS = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_EN_TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
             "nineteen"]
_EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]

_DE_UNITS = ["", "ein", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]
_DE_TEENS = ["zehn", "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn", "siebzehn", "achtzehn",
             "neunzehn"]
_DE_TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]

# Digit-count weights of sampled numbers: short numbers are few, so they are drawn less.
_DIGIT_WEIGHTS = np.array([1, 2, 4, 6, 8, 9], dtype=np.float64)


def _check(n: int) -> None:
    if not 1 <= n <= MAX_NUMBER:
        raise ValueError(f"number {n} is outside 1..{MAX_NUMBER}")


def _english_below_1000(n: int) -> list[str]:
    hundreds, rest = divmod(n, 100)
    words = [_EN_UNITS[hundreds], "hundred"] if hundreds else []
    if rest >= 20:
        tens, units = divmod(rest, 10)
        words.append(_EN_TENS[tens] + (f"-{_EN_UNITS[units]}" if units else ""))
    elif rest >= 10:
        words.append(_EN_TEENS[rest - 10])
    elif rest:
        words.append(_EN_UNITS[rest])
    return words


def english(n: int) -> str:
    """``324`` -> ``"three hundred twenty-four"``."""
    _check(n)
    thousands, rest = divmod(n, 1000)
    words = _english_below_1000(thousands) + ["thousand"] if thousands else []
    return " ".join(words + _english_below_1000(rest))


def _german_below_100(n: int, final: bool) -> str:
    if n == 1:
        return "eins" if final else "ein"
    if n < 10:
        return _DE_UNITS[n]
    if n < 20:
        return _DE_TEENS[n - 10]
    tens, units = divmod(n, 10)
    return (_DE_UNITS[units] + "und" if units else "") + _DE_TENS[tens]  # units before tens


def _german_below_1000(n: int, final: bool) -> str:
    hundreds, rest = divmod(n, 100)
    head = _DE_UNITS[hundreds] + "hundert" if hundreds else ""
    return head + (_german_below_100(rest, final) if rest else "")


def german(n: int) -> str:
    """``324`` -> ``"dreihundertvierundzwanzig"`` (conventions in the module docstring)."""
    _check(n)
    thousands, rest = divmod(n, 1000)
    head = _german_below_1000(thousands, final=False) + "tausend" if thousands else ""
    return head + (_german_below_1000(rest, final=True) if rest else "")


def sample_numbers(count: int, rng: np.random.Generator, min_digits: int = 1) -> np.ndarray:  # [count] int64
    """``count`` numbers: a digit count drawn by weight, then a uniform number of that length."""
    weights = _DIGIT_WEIGHTS[min_digits - 1 :]
    digits = rng.choice(np.arange(min_digits, 7), size=count, p=weights / weights.sum())
    low = 10 ** (digits - 1)
    return rng.integers(low, 10 * low)  # high is exclusive: 10**digits - 1 at most


def split_numbers(train_size: int, eval_size: int, seed: int) -> tuple[list[int], list[int]]:
    """Deterministic (train, held-out) numbers; no held-out number occurs in training.

    Held-out numbers have at least three digits: the 99 numbers below 100 are the
    vocabulary the rule is built from, so every one of them may appear in training.
    Training numbers may repeat (short ones must, there are only 9 one-digit numbers).
    """
    rng = np.random.default_rng(seed)
    held_out: list[int] = []
    seen: set[int] = set()
    while len(held_out) < eval_size:
        for n in sample_numbers(eval_size, rng, min_digits=3).tolist():
            if n not in seen and len(held_out) < eval_size:
                seen.add(n)
                held_out.append(n)
    train: list[int] = []
    while len(train) < train_size:
        train.extend(n for n in sample_numbers(train_size, rng).tolist() if n not in seen)
    return train[:train_size], held_out


def number_pairs(numbers: list[int]) -> list[tuple[str, str]]:
    """``[(english, german), ...]`` for each number."""
    return [(english(n), german(n)) for n in numbers]
