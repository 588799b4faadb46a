"""The number generator's references, checked against a table and an independent parser."""

from __future__ import annotations

import re

import pytest

from tokformer.tasks.numbers_de import MAX_NUMBER, english, german, split_numbers

KNOWN = {
    1: ("one", "eins"),
    7: ("seven", "sieben"),
    10: ("ten", "zehn"),
    11: ("eleven", "elf"),
    12: ("twelve", "zwölf"),
    16: ("sixteen", "sechzehn"),
    17: ("seventeen", "siebzehn"),
    21: ("twenty-one", "einundzwanzig"),
    30: ("thirty", "dreißig"),
    60: ("sixty", "sechzig"),
    70: ("seventy", "siebzig"),
    99: ("ninety-nine", "neunundneunzig"),
    100: ("one hundred", "einhundert"),
    101: ("one hundred one", "einhunderteins"),
    111: ("one hundred eleven", "einhundertelf"),
    324: ("three hundred twenty-four", "dreihundertvierundzwanzig"),
    1000: ("one thousand", "eintausend"),
    1001: ("one thousand one", "eintausendeins"),
    2021: ("two thousand twenty-one", "zweitausendeinundzwanzig"),
    31000: ("thirty-one thousand", "einunddreißigtausend"),
    100000: ("one hundred thousand", "einhunderttausend"),
    201001: ("two hundred one thousand one", "zweihunderteintausendeins"),
    716017: ("seven hundred sixteen thousand seventeen", "siebenhundertsechzehntausendsiebzehn"),
    999999: ("nine hundred ninety-nine thousand nine hundred ninety-nine",
             "neunhundertneunundneunzigtausendneunhundertneunundneunzig"),
}


@pytest.mark.parametrize("n", sorted(KNOWN))
def test_known_cases(n: int) -> None:
    assert (english(n), german(n)) == KNOWN[n]


# An independent reading of German number words: longest-match morphemes, then
# "hundert" multiplies the running group and "tausend" closes it.
_DE_VALUES = {"eins": 1, "ein": 1, "zwei": 2, "drei": 3, "vier": 4, "fünf": 5, "sechs": 6, "sieben": 7,
              "acht": 8, "neun": 9, "zehn": 10, "elf": 11, "zwölf": 12, "sechzehn": 16, "siebzehn": 17,
              "zwanzig": 20, "dreißig": 30, "sechzig": 60, "siebzig": 70}
_DE_TOKEN = re.compile("|".join(sorted([*_DE_VALUES, "zig", "zehn", "und", "hundert", "tausend"], key=len,
                                       reverse=True)))


def parse_german(text: str) -> int:
    tokens = _DE_TOKEN.findall(text)
    assert "".join(tokens) == text, f"{text!r} is not made of number morphemes"
    total, group, previous = 0, 0, None
    for token in tokens:
        if token == "zig":  # vierzig, fünfzig, achtzig, neunzig: the unit just read was a tens digit
            group += 9 * previous
        elif token == "zehn":  # dreizehn ... neunzehn
            group += 10
        elif token == "hundert":
            group *= 100
        elif token == "tausend":
            total, group = group * 1000, 0
        elif token != "und":
            previous = _DE_VALUES[token]
            group += previous
    return total + group


_EN_SMALL = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
             "sixteen seventeen eighteen nineteen")
_EN_TENS = "twenty thirty forty fifty sixty seventy eighty ninety"
_EN_VALUES = {w: i for i, w in enumerate(_EN_SMALL.split())} | {
    w: 10 * i for i, w in enumerate(_EN_TENS.split(), start=2)}


def parse_english(text: str) -> int:
    total, group = 0, 0
    for word in text.replace("-", " ").split():
        if word == "hundred":
            group *= 100
        elif word == "thousand":
            total, group = group * 1000, 0
        else:
            group += _EN_VALUES[word]
    return total + group


def test_every_number_parses_back_and_follows_the_conventions() -> None:
    for n in range(1, MAX_NUMBER + 1, 17):  # ~59k numbers, every pattern of the low three digits
        de, en = german(n), english(n)
        assert parse_german(de) == n, (n, de)
        assert parse_english(en) == n, (n, en)
        assert not de.endswith("ein") and "eins" not in de[:-4], de  # "eins" only as the final word
        assert "hundertund" not in de and "tausendund" not in de, de


def test_out_of_range_is_rejected() -> None:
    for n in (0, MAX_NUMBER + 1, -5):
        with pytest.raises(ValueError):
            german(n)
        with pytest.raises(ValueError):
            english(n)


def test_split_is_deterministic_and_held_out_numbers_are_never_trained_on() -> None:
    train, held_out = split_numbers(20000, 500, seed=3)
    assert (train, held_out) == split_numbers(20000, 500, seed=3)
    assert len(train) == 20000 and len(held_out) == len(set(held_out)) == 500
    assert not set(train) & set(held_out)
    assert min(held_out) >= 100 and max(held_out) <= MAX_NUMBER
    assert min(train) < 10 and max(train) > 100000  # every magnitude is trained on
    assert split_numbers(20000, 500, seed=4)[1] != held_out
