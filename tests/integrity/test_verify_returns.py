"""verify's cheap integrity checks: an exact array of its own, no thread of the call left working."""

from __future__ import annotations

import threading
from pathlib import Path

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.reference.integrity import live_threads, result_problem, thread_problem
from harness.verify.checks import check_output

HERE = Path(__file__).parent


def _impl(name: str):  # type: ignore[no-untyped-def]
    return load_registry([str(HERE / "cheats.py")]).get(name)


def test_returning_v_itself_when_tk_is_1_fails_verify() -> None:
    case = AttentionCase(batch=1, heads=2, tq=1, tk=1, d=8)
    result = check_output(_impl("returns_v"), case, trials=1)
    assert result["status"] == "fail"
    assert "shares memory with the input v" in result["reason"]


def test_a_lazy_tensor_subclass_fails_verify() -> None:
    case = AttentionCase(batch=1, heads=2, tq=16, d=8)
    result = check_output(_impl("lazy_subclass"), case, trials=1)
    assert result["status"] == "fail"
    assert "not an exact torch.Tensor" in result["reason"]


def test_honest_plugins_pass_verify_with_the_new_checks() -> None:
    case = AttentionCase(batch=1, heads=2, tq=16, d=8)
    for name in ("honest_sdpa", "honest_prepared", "honest_pool"):
        for _ in range(2):  # the second call is the one whose threads are checked
            assert check_output(_impl(name), case, trials=2)["status"] == "pass", name


def test_a_thread_working_after_return_is_seen_and_an_idle_one_is_not() -> None:
    import torch

    before = live_threads()
    stop = threading.Event()
    busy = threading.Thread(target=lambda: [None for _ in iter(lambda: stop.is_set(), True)], daemon=True)
    busy.start()
    try:
        assert "still working" in (thread_problem(before, wait_s=0.02) or "")
    finally:
        stop.set()
        busy.join()
    idle_gate = threading.Event()
    idle = threading.Thread(target=idle_gate.wait, daemon=True)
    idle.start()
    assert thread_problem(before, wait_s=0.02) is None
    idle_gate.set()
    idle.join()
    q = torch.zeros(2, 3)
    assert "shares memory with the input q" in (result_problem(q[0], [("q", q)], "torch") or "")
    assert result_problem(q.clone(), [("q", q)], "torch") is None
