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


def test_stolen_share_is_the_hosts_share_of_the_machines_cpu_time_between_two_readings(tmp_path, monkeypatch) -> None:
    stat = tmp_path / "stat"
    monkeypatch.setattr(machine, "Path", lambda p, *rest: stat if str(p) == "/proc/stat" else Path(p, *rest))
    assert machine.cpu_ticks() is None, "no /proc/stat (not Linux): nothing measured"
    #                 user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 10 50 800 20 5 5 10 40 0\ncpu0 50 5 25 400 10 2 3 5 20 0\nintr 1 2\n")
    before = machine.cpu_ticks()
    assert before == (10, 1000), "steal is the 8th column; guests are already counted in user and nice"
    stat.write_text("cpu  160 10 70 900 20 5 5 130 90 0\n")
    after = machine.cpu_ticks()
    assert machine.stolen_share(before, after) == pytest.approx(120 / 300)
    assert machine.stolen_share(after, after) is None, "no time passed: no share"
    assert machine.stolen_share(None, after) is None and machine.stolen_share(before, None) is None
    for garbled in ("intr 1 2 3 4 5 6 7 8 9\n", "", "cpu 1 2 x 4 5 6 7 8\n", "cpu 1 2 3\n"):
        stat.write_text(garbled)
        assert machine.cpu_ticks() is None, f"not the machine's total: {garbled!r}"


def test_machine_line_says_how_much_cpu_time_the_host_stole_while_the_runs_ran(monkeypatch) -> None:
    readings = iter([(10, 1000), (130, 1300)])
    monkeypatch.setattr(harness, "cpu_ticks", lambda: next(readings))
    line = harness.Machine(("torch",)).line("1 thread")
    assert "load average" in line and "; 40% of the CPU time stolen by the host meanwhile;" in line
    monkeypatch.setattr(harness, "cpu_ticks", lambda: None)
    assert "stolen" not in harness.Machine(("torch",)).line("1 thread"), "not measured: not claimed"


SPEED_SCRIPTS = sorted(BENCHMARKS.glob("bench_*.py"))


@pytest.mark.parametrize("script", SPEED_SCRIPTS, ids=lambda p: p.name)
def test_every_speed_benchmark_times_through_the_harness(script: Path) -> None:
    """Each script times its rows with ``interleave`` and writes the machine line."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "harness"
                for alias in node.names}
    assert {"interleave", "Machine"} <= imported, imported
