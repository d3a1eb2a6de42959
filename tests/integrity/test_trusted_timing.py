"""The pieces that keep a bench time honest against a plugin that has read the harness, on small real inputs:
fresh full-rank inputs, fingerprints checked after the fact, state left behind, the parent's stamps.

No test depends on the machine's speed: statuses and sentences, bit-exact regenerated inputs, synthetic spans.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness.bench import state
from harness.bench.fingerprint import choose, fingerprint, projected_error
from harness.bench.fresh import Fresh
from harness.bench.guard import InputSet
from harness.bench.loop import RoundedLoop, timed_loop
from harness.bench.timing import TimingConfig
from harness.contract.capabilities import Capabilities

ONE_ROUND = TimingConfig(warmup_s=0.0, budget_s=0.0, min_samples=6)


def _qkv(t: int = 32, d: int = 16) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, t, d, generator=gen) for _ in range(3)]


def test_every_call_gets_new_inputs_that_differ_by_a_full_rank_change_and_are_regenerated_bit_for_bit() -> None:
    q, k, v = _qkv()
    strided = torch.zeros(1, 2, 32, 32)[..., ::2]  # the implementation's layout is kept
    strided.copy_(q)
    fresh = Fresh(("q", "k", "v"), [strided, k, v])
    fresh.lay_out(11)
    first = strided.clone()
    fresh.lay_out(12)
    change = (strided - first)[0, 0]
    assert torch.linalg.matrix_rank(change.double()) == min(change.shape)  # every element moved independently
    assert torch.equal(fresh.values(12)["q"], strided.double())  # what the check rebuilds is what the call saw
    assert not torch.equal(fresh.values(11)["k"], k.double())
    assert fresh.written() == []
    v.add_(1.0)
    assert fresh.written() == ["v"]


def test_numpy_inputs_are_redrawn_too() -> None:
    x = np.ones((1, 1, 8, 4), dtype=np.float32)
    fresh = Fresh(("q",), [x])
    fresh.lay_out(5)
    assert not np.array_equal(x, np.ones_like(x)) and np.array_equal(fresh.values(5)["q"].numpy(), x)


def test_a_fingerprint_passes_an_honest_output_and_fails_one_wrong_row() -> None:
    q, k, v = _qkv()
    out = F.scaled_dot_product_attention(q, k, v)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    (r,), (f,) = fingerprint(out, seed=3)
    err, bound = projected_error(f, want, r, bound=1e-5)
    assert err <= bound
    out[0, 1, 7] += 1e-2  # one row wrong by far more than the element bound
    (r,), (f,) = fingerprint(out, seed=4)
    err, bound = projected_error(f, want, r, bound=1e-5)
    assert err > bound


def test_the_calls_checked_are_the_first_the_last_and_others_drawn_afterwards() -> None:
    chosen = choose(100, random.Random(1))
    assert chosen[0] == 0 and chosen[-1] == 99 and len(chosen) == 5
    assert choose(100, random.Random(2)) != chosen  # the draw, not a fixed pattern
    assert choose(1, random.Random(1)) == [0]


def _set(call) -> InputSet:  # type: ignore[no-untyped-def]
    q, k, v = _qkv()
    named = [("q", q), ("k", k), ("v", v)]
    fresh = Fresh(("q", "k", "v"), [q, k, v])
    return InputSet(call=lambda: call(q, k, v), named=named, inputs=None, fresh=fresh)


def _problems(call) -> list[str]:  # type: ignore[no-untyped-def]
    loop = timed_loop([_set(call)], ONE_ROUND, "torch")
    return [p.problem for p in loop.kept if p.problem]


def test_an_honest_call_leaves_no_problem_and_every_call_is_fingerprinted() -> None:
    loop = RoundedLoop([_set(F.scaled_dot_product_attention)], ONE_ROUND, "torch")
    loop.round()
    result = loop.result()
    assert len(loop.prints) == 6 and all(p.prints and p.seed is not None for p in loop.prints)
    assert len({p.seed for p in loop.prints}) == 6
    assert [p.index for p in result.kept][0] == 0 and result.kept[-1].index == 5
    assert not [p.problem for p in result.kept if p.problem]


def test_a_call_that_writes_into_its_input_is_named() -> None:
    def zero_q(q, k, v):  # type: ignore[no-untyped-def]
        q.zero_()
        return F.scaled_dot_product_attention(q, k, v)

    assert any("wrote into its input(s) q" in p for p in _problems(zero_q))


def test_a_call_that_leaves_a_torch_function_mode_pushed_is_named() -> None:
    from torch.overrides import TorchFunctionMode

    class Passing(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    pushed: list[TorchFunctionMode] = []

    def push(q, k, v):  # type: ignore[no-untyped-def]
        if not pushed:
            pushed.append(Passing())
            pushed[0].__enter__()
        return F.scaled_dot_product_attention(q, k, v)

    try:
        problems = _problems(push)
    finally:
        pushed[0].__exit__(None, None, None)
    assert any("torch function-mode stack" in p for p in problems)


def test_state_a_call_may_not_change_is_named_and_restored_state_is_not() -> None:
    guard = state.StateGuard()
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        assert any("thread count" in c for c in guard.changed())
    finally:
        torch.set_num_threads(threads)
    from harness.bench import guard as loop_module

    real = loop_module.CLOCK
    loop_module.CLOCK = lambda: 0.0
    try:
        assert "harness.bench.guard.CLOCK" in guard.changed()
    finally:
        loop_module.CLOCK = real
    assert guard.changed() == []


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_the_worker_check_finds_a_wrong_call_among_fresh_inputs(mode: str) -> None:
    """A real implementation through build_set and check_kept: honest passes; every-other-row fails."""
    from harness.bench.audit import build_set, check_kept, draw_sets
    from harness.case.attention import AttentionCase
    from harness.contract.registry import Implementation

    case = AttentionCase(batch=1, heads=2, tq=32, tk=32, d=16)

    def half_rows(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
        out = F.scaled_dot_product_attention(q, k, v, scale=scale)
        return torch.cat([out[..., ::2, :], out[..., ::2, :]], dim=-2).contiguous()

    for fn, wrong in ((F.scaled_dot_product_attention, False), (half_rows, True)):
        impl = Implementation(name="x", declared=Capabilities(backend="torch", grad=True),
                              prepare=lambda q, k, v, _fn=fn, **kw: (lambda: _fn(q, k, v)))
        sets = [build_set(impl, case, mode, inputs, seed, True) for seed, inputs in enumerate(draw_sets(case, 2, "torch"))]
        loop = timed_loop(sets, ONE_ROUND, "torch")
        found = check_kept(loop.kept, sets, case, mode)
        assert bool(found.problems) == wrong, found.problems
        assert len(found.checked) == 5


def test_the_compute_roof_is_the_gemm_read_beside_the_cell_with_its_stated_margin() -> None:
    from harness.bench.roofs import BESIDE_MARGIN, Roofs, physics_floor

    theory = Roofs(gflops={"float32": 600.0}, load_gbps=2000.0, method="test")
    loose = physics_floor(1e9, 1e6, "float32", "cpu", {"gflops": 40.0}, {"read_gbps": 5.0}, theory)
    tight = physics_floor(1e9, 1e6, "float32", "cpu", {"gflops": 40.0}, {"read_gbps": 5.0}, theory, 100.0, 2.0)
    assert loose.compute_roof_gflops == 600.0
    assert tight.compute_roof_gflops == pytest.approx(100.0 * 2.0 * BESIDE_MARGIN)
    assert "beside the cell" in (tight.how or "") and (tight.floor_s or 0) > (loose.floor_s or 0)
    # never above the looser estimate: a probe read high does not loosen the floor
    assert physics_floor(1e9, 1e6, "float32", "cpu", None, None, theory, 1000.0, 2.0).compute_roof_gflops == 600.0


def test_a_kernel_registered_with_the_dispatcher_during_the_calls_is_named() -> None:
    libs: list[torch.library.Library] = []

    def register_kernel(q, k, v):  # type: ignore[no-untyped-def]
        if not libs:
            lib = torch.library.Library("attnbench_redteam_test", "DEF")
            lib.define("fill(Tensor x) -> Tensor")
            lib.impl("fill", lambda x: x.clone(), "CPU")
            libs.append(lib)
        return F.scaled_dot_product_attention(q, k, v)

    assert any("registered dispatcher kernels" in p and "fill" in p for p in _problems(register_kernel))


_SPINNER = """
import os, sys, threading, time
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
if os.fork() == 0:                                           # a child of its own, spinning too
    spin()
print("ready", flush=True)
spin()
"""


def test_a_stopped_tree_burns_no_cpu_and_a_resumed_one_does() -> None:
    """What the parent-driven call stands on: while the parent holds a worker's tree stopped (writing the next
    inputs, reading the last outputs) no thread and no child of it runs, and its CPU clock, which the parent
    reads, stands still; continued, it runs again. A spinning thread and a forked child are the plugin's."""
    import os
    import subprocess
    import sys
    import time

    from harness.runtime.process_tree import Tree, process_cpu_s, tree

    proc = subprocess.Popen([sys.executable, "-c", _SPINNER], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        worker = Tree(proc.pid)
        for _ in range(100):  # the child is up once the tree has two processes
            if len(tree(proc.pid)) == 2:
                break
            time.sleep(0.02)
        worker.stop()
        assert len(worker.pids) == 2  # the child found below the worker, and stopped with it
        held = [process_cpu_s(p) for p in worker.pids]
        time.sleep(0.2)
        assert [process_cpu_s(p) for p in worker.pids] == held  # not one nanosecond while stopped
        worker.resume()
        time.sleep(0.2)
        assert all(process_cpu_s(p) > h for p, h in zip(worker.pids, held))
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()

