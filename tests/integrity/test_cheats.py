"""Every cheating plugin is flagged by bench with its reason, and no honest one (built-ins included) is.

One bench run times all of them (fresh workers per implementation, as always) at T = 512, H = 2:
large enough that the physics floor (about 0.2 ms here) is far above a cached answer's microseconds,
small enough to take seconds per implementation. The assertions are on statuses and reasons, which
do not depend on the machine's speed: a cheat's fastest call is hundreds of times under the floor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

HERE = Path(__file__).parent
CHEATS = {
    # implementation: (status, words the reason must contain); a cheat that does real work (a fraction of the
    # rows, a lower precision) is "wrong", and also under the floor ("implausible", which wins) on a fast machine
    "memo_pointer": ("implausible", ["physics floor", "timed sample", "max|err|"]),
    "replay_after_three": ("implausible", ["physics floor", "max|err|"]),
    "lazy_subclass": ("implausible", ["physics floor", "not an exact torch.Tensor"]),
    # returns at once, a thread fills the output later: the parent stops the worker's tree when the call returns and
    # reads the output then, so the output it reads is unfinished; or, faster than that, under the floor
    "background_fill": ("wrong|implausible", ["max|err| OR physics floor"]),
    "side_stream": ("wrong|implausible", ["max|err| OR physics floor"]),
    "precomputed": ("implausible", ["physics floor"]),
    "every_eighth_row": ("wrong|implausible", ["timed sample", "rows", "max|err|"]),
    "half_precision": ("wrong|implausible", ["timed sample", "max|err|"]),
}
HONEST = ("honest_sdpa", "honest_prepared", "honest_pool", "tiled_fused", "torch_sdpa")


def bench(attnbench: Any, tmp: Path, plugin: Path, only: list[str], *extra: str) -> dict[str, list[dict[str, Any]]]:
    out = tmp / "run.json"
    proc = attnbench("bench", "--plugin", str(plugin), "--only", ",".join(only), "--T", "512", "--heads", "2", "--d", "64",
                     "--budget", "0.05", "--min-samples", "3", "--no-memory", "--value-probe", "off",  # judged by the cells' checks
                     "--quiet", "--out", str(out), *extra,
                     timeout=900)
    cells: dict[str, list[dict[str, Any]]] = {}
    for cell in json.loads(out.read_text())["cells"]:
        cells.setdefault(cell["implementation"], []).append(cell)
    cells["_exit"] = [{"code": proc.returncode, "stderr": proc.stderr}]
    return cells


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, attnbench: Any) -> dict[str, list[dict[str, Any]]]:
    return bench(attnbench, tmp_path_factory.mktemp("cheats"), HERE / "cheats.py", [*CHEATS, *HONEST], "--mode", "fwd", "fwd+bwd")


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_each_cheat_is_flagged_with_its_reason(run: dict[str, list[dict[str, Any]]], name: str) -> None:
    (cell,) = [c for c in run[name] if c["mode"] == "fwd"]
    status, words = CHEATS[name]
    assert cell["status"] in status.split("|"), cell["reason"]
    for word in words:  # "a OR b": either
        assert any(w in cell["reason"] for w in word.split(" OR ")), (word, cell["reason"])
    assert cell["integrity"]["floor"]["floor_s"] > 0


def test_background_and_side_stream_work_is_seen_after_the_call(run: dict[str, list[dict[str, Any]]]) -> None:
    """Beyond the floor: the copy taken as the call returned is not the answer (its rows are unfilled)."""
    for name in ("background_fill", "side_stream"):
        (cell,) = [c for c in run[name] if c["mode"] == "fwd"]
        assert "max|err|" in cell["reason"] or "still working" in cell["reason"], cell["reason"]


@pytest.mark.parametrize("name", HONEST)
def test_honest_implementations_are_never_flagged(run: dict[str, list[dict[str, Any]]], name: str) -> None:
    for cell in run[name]:
        assert cell["status"] in ("ok", "skipped"), (cell["mode"], cell["reason"])
        if cell["status"] == "ok":
            record = cell["integrity"]
            assert record["input_sets"] == 3 and len(record["checked"]) >= 2
            assert all(c["max_abs_err"] <= c["bound"] for c in record["checked"] if "bound" in c)


def test_fused_forward_and_backward_run_checked(run: dict[str, list[dict[str, Any]]]) -> None:
    (cell,) = [c for c in run["tiled_fused"] if c["mode"] == "fwd+bwd"]
    assert cell["status"] == "ok", cell["reason"]
    assert cell["integrity"]["checked"][0]["rows"] == "all rows"


def test_the_run_fails_and_the_profile_discloses_delegation(run: dict[str, list[dict[str, Any]]]) -> None:
    assert run["_exit"][0]["code"] == 1
    (sdpa,) = [c for c in run["honest_sdpa"] if c["mode"] == "fwd"]
    top_name, top_share = sdpa["profile"][0]
    assert top_name.startswith("aten::_scaled_dot_product") and top_share > 0.5


def test_a_patched_clock_in_the_worker_moves_no_time(tmp_path: Path, attnbench: Any) -> None:
    # the plugin's module slows the worker's perf_counter 4x; the parent's clock measures the calls, so the cell
    # reads as long as the same work timed beside it in the same rounds (a 4x discount would read 0.25)
    # one thread: the cells are on the CPU clock, which a busy machine does not stretch on one side of a round only
    cells = bench(attnbench, tmp_path, HERE / "clock_cheat.py", ["clock_patcher", "torch_sdpa"], "--mode", "fwd",
                  "--threads", "1")
    (cell,), (sdpa,) = cells["clock_patcher"], cells["torch_sdpa"]
    assert cell["status"] == "ok", cell["reason"]
    # the per-round ratio to torch_sdpa timed beside it in the same rounds (robust to a load that comes and goes)
    ratio = (cell.get("rounds") or {}).get("ratio") or cell["stats"]["median"] / sdpa["stats"]["median"]
    assert ratio >= 0.5, (cell.get("rounds"), cell["stats"], sdpa["stats"])
