"""Commands map their flags once into the library's settings, with the library's defaults.

``attnbench run`` builds the same requests ``verify``, ``bench`` and ``report`` build from their own
flags; a flag left out means the settings record's default, never a second copy of it.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench.settings import ABSettings, BenchSettings
from harness.bench.sweeps import SUITE_CELL_BUDGET_S, SUITE_TIMING
from harness.cli import ab_cmd, bench_cmd, build_parser, report_cmd, verify_cmd
from harness.cli.common import default_of
from harness.errors import UsageError
from harness.report import DEFAULT_BASELINE, ReportSettings
from harness.verify import VerifySettings

ROOT = Path(__file__).resolve().parents[1]


def _parse(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(list(argv))


def test_verify_flags_left_out_are_the_settings_defaults(tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    request = verify_cmd.request_from_args(_parse("verify", "--json", str(out)))
    library = VerifySettings(fuzz_database=tmp_path / ".hypothesis")
    assert request.settings == library
    assert request.out == out and not request.to_stdout


def test_verify_flags_given_reach_the_settings(tmp_path: Path) -> None:
    request = verify_cmd.request_from_args(_parse(
        "verify", "--json", str(tmp_path / "v.json"), "--suite", "small", "--trials", "5", "--jobs", "1",
        "--timeout", "7", "--only", "a,b"))
    settings = request.settings
    assert (settings.suite, settings.trials, settings.jobs, settings.timeout_s, settings.only) == \
        ("small", 5, 1, 7.0, ("a,b",))


def test_run_maps_verify_as_verify_maps_its_own_flags(tmp_path: Path) -> None:
    out = tmp_path / "run-verify.json"
    by_hand = verify_cmd.request_from_args(_parse("verify", "--suite", "quick", "--json", str(out), "--only", "x"))
    in_run = verify_cmd.request_for(VerifySettings(suite="quick", only=("x",)), str(out))
    assert in_run == by_hand


@pytest.mark.parametrize("suite", ["quick", "full", "decode"])
def test_bench_flags_left_out_are_the_suites_and_the_settings_defaults(suite: str) -> None:
    settings = bench_cmd.settings_from_args(_parse("bench", "--suite", suite, "--threads", "1"))
    assert settings.timing == dataclasses.replace(SUITE_TIMING[suite], clock="cpu")  # auto: cpu with one thread
    assert settings.cell_budget_s == SUITE_CELL_BUDGET_S[suite]
    assert settings.timeout_s == default_of(BenchSettings, "timeout_s")
    assert settings.memory_budget_bytes is None  # worked out once, by the session, when the run starts
    assert settings == bench_cmd.settings_for(suite, threads=1)


def test_run_maps_bench_as_bench_maps_its_own_flags() -> None:
    by_hand = bench_cmd.settings_from_args(_parse("bench", "--suite", "quick", "--threads", "2", "--only", "x,y",
                                                   "--plugin", "p.py"))
    in_run = bench_cmd.settings_for("quick", only=["x,y"], plugins=["p.py"], threads=2)
    assert in_run == by_hand


def test_bench_timing_flags_replace_only_what_they_name() -> None:
    settings = bench_cmd.settings_from_args(_parse("bench", "--threads", "1", "--budget", "2", "--rounds", "3",
                                                   "--memory-budget", "0.5", "--T", "64,128", "256"))
    assert settings.timing == dataclasses.replace(SUITE_TIMING["quick"], budget_s=2.0, rounds=3, clock="cpu")
    assert settings.memory_budget_bytes == 0.5 * 2**30
    assert settings.overrides == {"T": [64, 128, 256]}
    assert settings.cell_budget_s is None  # cells named by an axis flag are never skipped for time


def test_roof_budget_reaches_each_roof_reading_and_keeps_three_calls() -> None:
    from harness.bench.bandwidth import BANDWIDTH_TIMING
    from harness.bench.peak import PEAK_TIMING
    from harness.bench.timing import ROOF_MIN_SAMPLES, roof_timing

    settings = bench_cmd.settings_from_args(_parse("bench", "--threads", "1", "--roof-budget", "0.05"))
    assert settings.timing == dataclasses.replace(SUITE_TIMING["quick"], roof_budget_s=0.05, clock="cpu")
    for default in (PEAK_TIMING, BANDWIDTH_TIMING):
        assert roof_timing(default, "cpu", None) == dataclasses.replace(default, clock="cpu")  # not given: as before
        quick = roof_timing(default, "wall", 0.05)
        assert (quick.budget_s, quick.clock, quick.min_samples) == (0.05, "wall", ROOF_MIN_SAMPLES)
        assert quick.warmup_s <= 0.05


def test_ab_reads_the_case_flags_as_bench_does(tmp_path: Path) -> None:
    plugin = tmp_path / "p.py"
    plugin.write_text("")
    flags = ("--T", "64", "128", "--causal", "both", "--dtype", "float64", "--mode", "fwd")
    ab = ab_cmd.settings_from_args(_parse("ab", str(plugin), str(plugin), *flags))
    bench = bench_cmd.settings_from_args(_parse("bench", "--threads", "1", *flags))
    assert ab.overrides == bench.overrides == {"T": [64, 128], "causal": [False, True], "dtype": ["float64"],
                                               "mode": ["fwd"]}
    plain = ab_cmd.settings_from_args(_parse("ab", str(plugin), str(plugin)))
    for name in ("suite", "rounds", "calls", "threads", "timeout_s", "device"):
        assert getattr(plain, name) == default_of(ABSettings, name), name


def test_report_request_defaults(tmp_path: Path) -> None:
    request = report_cmd.request_from_args(_parse("report", str(tmp_path / "run-1.json")))
    assert request == report_cmd.ReportRequest(ReportSettings((tmp_path / "run-1.json",), Path("reports") / "run-1"))
    assert request.settings.baseline == DEFAULT_BASELINE
    history = report_cmd.request_from_args(_parse("report", "--history", str(tmp_path / "b.json")))
    assert history.settings.out == Path("reports") / "history-b" and history.history


def test_report_settings_refuse_no_result_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no result files given"):
        ReportSettings((), tmp_path / "out")


def test_default_of_refuses_a_field_without_default() -> None:
    assert default_of(BenchSettings, "overrides") == {}
    with pytest.raises(TypeError, match="ABSettings.base has no default"):
        default_of(ABSettings, "base")


def test_the_parser_reads_defaults_without_importing_torch() -> None:
    """``--help`` answers at once: the settings records the flags' defaults come from are light to import."""
    code = "import sys; from harness.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "False"
