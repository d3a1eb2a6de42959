"""pytest-benchmark over the available implementations x a small shape set, shipped in the package.

``pytest --pyargs harness.performance --benchmark-json out.json`` benchmarks (from any directory: nothing
of a source checkout is needed; ``--attnbench-plugin FILE`` and ``--attnbench-only NAMES`` select
implementations); ``attnbench compare base.json head.json`` judges two such files. Tables are grouped by
shape (``benchmark.group`` is the case id), so each compares implementations at one shape.
``extra_info`` carries the shape, the FLOPs of one call and the achieved GFLOP/s (median).
Set-up (inputs, the implementation's ``prepare``) happens before the timed function. The
timer synchronises CUDA before reading the clock (:func:`harness.bench.timing.synchronized_perf_counter`).
For the full treatment (peak, memory, fits, isolation) use ``attnbench bench``.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.bench.timing import synchronized_perf_counter
from harness.case.attention import AttentionCase
from harness.pytest_plugin import selected_implementations
from harness.reference.flops import attention_flops
from harness.reference.tensors import make_inputs

SHAPES = (
    AttentionCase(batch=1, heads=4, tq=256, d=64),
    AttentionCase(batch=1, heads=8, tq=1024, d=64),
    AttentionCase(batch=1, heads=8, tq=512, d=64, causal=True),
)

pytestmark = pytest.mark.benchmark(timer=synchronized_perf_counter, disable_gc=True, warmup=True)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "impl" in metafunc.fixturenames:
        impls = selected_implementations(metafunc.config)
        params = [pytest.param(impl, case, id=f"{case.id}-{impl.name}") for case in SHAPES for impl in impls]
        metafunc.parametrize(("impl", "case"), params)


def test_attention(benchmark: Any, impl: Any, case: AttentionCase) -> None:
    reasons = impl.not_supported_reasons(case)
    if reasons:
        pytest.skip("; ".join(reasons))
    inputs = make_inputs(case, seed=0, backend=impl.declared.backend)
    call = impl.prepare(*inputs.arrays(impl.declared.structures), **inputs.kwargs(case, impl.declared.structures))
    flops = attention_flops(case, "fwd")
    benchmark.group = case.id
    benchmark.extra_info.update(shape=case.to_dict(), case_id=case.id, implementation=impl.name, flops=flops)
    out = benchmark(call)
    assert tuple(out.shape) == (case.batch, case.heads, case.tq, case.d)
    if benchmark.stats is not None:
        benchmark.extra_info["gflops"] = flops / benchmark.stats.stats.median / 1e9
