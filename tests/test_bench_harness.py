"""The shared benchmark methodology (``benchmarks/harness.py``) and its use by every script."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tokformer import machine

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


CPUS = {  # vendor, family, flags, cpuinfo MHz, cpufreq max (kHz; None: no cpufreq) -> threads, peak GFLOP/s
    # Intel with AVX-512: 2 x 512-bit FMA = 64 FLOP/cycle; the cpufreq maximum wins over cpuinfo's MHz
    "intel avx512": (("GenuineIntel", 6, "sse avx2 fma avx512f", "2100.000", 3_500_000), 3, 3 * 64 * 3.5),
    # AMD Zen 3/4 (family 25) runs AVX-512 on 256-bit pipes: 32 FLOP/cycle; cpuinfo's MHz under a hypervisor
    "zen4 avx512": (("AuthenticAMD", 25, "sse avx2 fma avx512f", "2450.000", None), 2, 2 * 32 * 2.45),
    # Zen 5 (family 26): 512-bit pipes, 64
    "zen5 avx512": (("AuthenticAMD", 26, "sse avx2 fma avx512f", "3000.000", None), 1, 1 * 64 * 3.0),
    "avx2 fma": (("GenuineIntel", 6, "sse avx avx2 fma", "1000.000", 2_000_000), 4, 4 * 32 * 2.0),
    "no fma": (("GenuineIntel", 6, "sse sse2", "2000.000", None), 1, 1 * 8 * 2.0),
}


@pytest.mark.parametrize("cpu", CPUS, ids=str)
def test_theoretical_peak_of_known_cpus(cpu: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The peak of made-up /proc/cpuinfo and cpufreq files equals the hand-computed product."""
    (vendor, family, flags, mhz, max_khz), threads, gflops = CPUS[cpu]
    (tmp_path / "cpuinfo").write_text(f"vendor_id\t: {vendor}\ncpu family\t: {family}\nmodel name\t: Test CPU\n"
                                      f"cpu MHz\t\t: {mhz}\nflags\t\t: {flags}\n")
    if max_khz is not None:
        (tmp_path / "max_freq").write_text(f"{max_khz}\n")
    fake = {"/proc/cpuinfo": tmp_path / "cpuinfo",
            "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": tmp_path / "max_freq"}
    for module in (harness, machine):  # cpuinfo from tokformer.machine, cpufreq from the harness
        monkeypatch.setattr(module, "Path", lambda p, *rest: fake.get(str(p), Path(p, *rest)))
    peak, product = harness.theoretical_peak(threads)
    assert peak == pytest.approx(gflops * 1e9), f"{cpu}: {product}"


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
