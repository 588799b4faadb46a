"""The shared benchmark methodology (``benchmarks/harness.py``) and its use by every script."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import harness  # noqa: E402


def test_rounds_interleave_cases_and_pass_their_number() -> None:
    calls: list[tuple[str, int]] = []
    cases = {name: (lambda r, name=name: calls.append((name, r))) for name in ("a", "b")}
    timings = harness.interleave(cases, repeats=5)
    warmup = [("a", -1), ("b", -1)]
    rounds = [(name, r) for r in range(5) for name in ("a", "b")]
    assert calls == warmup + rounds
    assert {name: len(t.seconds) for name, t in timings.items()} == {"a": 5, "b": 5}


def test_fewer_than_five_repeats_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 5"):
        harness.interleave({"a": lambda r: None}, repeats=4)


def test_ratio_is_reference_time_over_ours_with_per_round_range() -> None:
    ours = harness.Timing((1.0, 2.0, 1.0, 1.0, 4.0))
    reference = harness.Timing((2.0, 2.0, 3.0, 2.0, 4.0))
    assert harness.ratio_cell(ours, reference) == "2.00x (1.00-3.00)"
    assert ours.rate_cell(10.0) == "10.0 (2.5-10.0)"


def test_theoretical_peak_is_cores_times_flops_per_cycle_times_clock() -> None:
    per_cycle, _ = harness.fp32_flops_per_cycle()
    hz, _ = harness.clock_hz()
    assert harness.theoretical_peak(3)[0] == pytest.approx(3 * per_cycle * hz)


def test_machine_line_names_cpu_threads_load_and_versions() -> None:
    line = harness.Machine(("torch",)).line("1 thread")
    assert harness.cpu_model() in line and "1 thread" in line and "load average" in line
    assert "torch " in line and "python " in line


SPEED_SCRIPTS = sorted(BENCHMARKS.glob("bench_*.py"))


@pytest.mark.parametrize("script", SPEED_SCRIPTS, ids=lambda p: p.name)
def test_every_speed_benchmark_times_through_the_harness(script: Path) -> None:
    """Each script times its rows with ``interleave`` and writes the machine line."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "harness"
                for alias in node.names}
    assert {"interleave", "Machine"} <= imported, imported
