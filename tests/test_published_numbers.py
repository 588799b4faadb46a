"""Every figure README's result tables quote comes from the results file the row cites.

README's "Results on built-in data" and "Benchmarks" tables end each row with a ``source``
column linking a file under ``benchmarks/results/``, which a committed script writes. Each
number the row's result columns quote (decimals, percentages, and in the benchmark table the
throughputs too) must be found in that file, to the precision the README quotes it (0.446 in
the file may be quoted as 0.45; a share 0.9994 as 99.9%).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(%|x)?")
LINK = re.compile(r"\[[^\]]*\]\((benchmarks/results/[\w.-]+\.md)\)")


def table(heading: str) -> list[list[str]]:
    """The rows (cells) of the first Markdown table after ``heading``."""
    section = README[README.index(heading):]
    lines = [line for line in section.splitlines()[1:] if line.startswith("|")]
    start = next(i for i, line in enumerate(section.splitlines()[1:]) if line.startswith("|"))
    block = []
    for line in section.splitlines()[1 + start:]:
        if not line.startswith("|"):
            break
        block.append([cell.strip() for cell in line.strip("|").split("|")])
    assert lines, heading
    return block[2:]  # without the header and its rule


def quoted(cell: str, integers: bool) -> list[tuple[float, int, bool]]:
    """(value, decimals, is a percentage) of each number in a cell; integers only if asked for."""
    found = []
    for whole, fraction, unit in NUMBER.findall(cell):
        if not fraction and not integers and unit != "%":
            continue
        found.append((float(whole.replace(",", "") + fraction), len(fraction) - 1 if fraction else 0, unit == "%"))
    return found


def in_file(value: float, decimals: int, percent: bool, text: str) -> bool:
    """Whether some number of ``text`` rounds to ``value`` at ``decimals`` (as a share, x 100, for a percentage)."""
    numbers = [float(w.replace(",", "") + f) for w, f, _ in NUMBER.findall(text)]
    scales = (1.0, 100.0) if percent else (1.0,)
    return any(round(n * scale, decimals) == round(value, decimals) for n in numbers for scale in scales)


def checked_rows(heading: str, result_columns: slice, integers: bool) -> list[tuple[str, str, list[str]]]:
    rows = []
    for cells in table(heading):
        link = LINK.search(cells[-1])
        assert link, f"the row {cells[0]!r} cites no results file in its last column"
        rows.append((cells[0], link.group(1), cells[result_columns]))
    return rows


ROWS = [("results", *row) for row in checked_rows("## Results on built-in data", slice(2, 3), integers=False)] + [
    ("benchmarks", *row) for row in checked_rows("## Benchmarks", slice(1, 4), integers=True)]


@pytest.mark.parametrize(("table_name", "row", "source", "cells"), ROWS, ids=[f"{t}: {r[:40]}" for t, r, *_ in ROWS])
def test_every_quoted_figure_is_in_the_results_file_the_row_cites(table_name: str, row: str, source: str,
                                                                   cells: list[str]) -> None:
    text = (REPO / source).read_text(encoding="utf-8")
    missing = [f"{value:.{decimals}f}{'%' if percent else ''}" for cell in cells
               for value, decimals, percent in quoted(cell, integers=table_name == "benchmarks")
               if not in_file(value, decimals, percent, text)]
    assert not missing, f"{row!r} quotes {missing}, which {source} does not hold"


def test_the_check_can_fail() -> None:
    """A figure that is not in the file is reported; one rounded from it is not."""
    assert in_file(0.45, 2, False, "0.446 s") and not in_file(0.46, 2, False, "0.446 s")
    assert in_file(99.9, 1, True, "accuracy 0.9994") and not in_file(99.9, 1, False, "accuracy 0.9994")
    assert quoted("260 / 486 at 1.02x, 99.9%", integers=False) == [(1.02, 2, False), (99.9, 1, True)]


def test_the_flagship_table_is_the_committed_full_reports_table_verbatim() -> None:
    """README's birds table is copied from docs/birds/report.md, which the sweep wrote: every line of it
    (header, rule, each model's row with its per-seed values) is a line of that report's table."""
    section = README.split("## The flagship experiment")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    report = (REPO / "docs" / "birds" / "report.md").read_text(encoding="utf-8").splitlines()
    assert len(rows) >= 12, "the full sweep's table, not a few rows of it"
    assert [row for row in rows if row not in report] == []
