"""``attnbench verify --fuzz N``: search random cases inside what an implementation declares, and
shrink the first failure to a minimal case printed as a Python reproducer.

Hypothesis draws cases (batch, heads and the GQA group up to 32, Tq, Tk, d up to 256, dtype, scale,
causal, mask kind and rank, bias, inputs, the layout of q, k, v and of every other array, gradients,
learned sinks, a soft-cap and V's own head dim (where declared),
and every structure the implementation can express: windows, alignment, packed sequences, cache
lengths, pages, with their parameters) from the declared capabilities only, checks each
with the output, gradient and stateful checks (one seeded trial), and on a failure shrinks
toward the smallest B, H, T, d and the simplest mask, layout and inputs (each axis's first
value is its simplest). The search is seeded (``--fuzz-seed``), so a run reproduces. Hypothesis
keeps no database under a fixed seed, so attnbench keeps its own: every minimal failure goes
to ``results/.hypothesis/<implementation>.json`` and is checked first next time, before any
search (a fixed bug shows as a pass there, a regression at once).

Only cases that ran are examples: a drawn case the implementation cannot run here is replaced by another draw and
counted by reason, and a search that ran fewer cases than asked for does not pass (:meth:`Search.shortfall`).

The whole search for one implementation runs in one worker process (:mod:`harness.runtime.isolation`):
a crash or a hang costs that implementation's search, recorded as such.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.case.attention import INPUTS, LAYOUTS, MASK_RANKS, AttentionCase, CaseFields
from harness.contract.registry import Implementation
from harness.results import CellCase, ResultWriter, Status, VerifyCell
from harness.verify.outcome import CheckResult
from harness.verify.pairwise import tensor_layouts
from harness.verify.reproducer import reproducer
from harness.verify.structured import (
    BATCH_ONE,
    FORWARD_ONLY,
    NEEDS_CAUSAL,
    apply_structure,
    expressible,
    masks_taken,
    structure_kinds,
)

DATABASE_DIR = Path("results") / ".hypothesis"
MASKS_SIMPLEST_FIRST = ("none", "key_padding", "random", "key_padding_left", "key_padding_holes", "one_masked",
                        "empty_rows", "key_padding_late", "first_block")


def case_strategy(impl: Implementation) -> Any:
    """Hypothesis strategy of kernel cases ``impl`` declares, simplest values first (so they shrink there):
    every declared capability and every structure it can express (:mod:`harness.verify.structured`),
    with the structure's parameters drawn too (window sides, packed lengths, cache lengths, page sizes)."""
    from hypothesis import strategies as st

    kinds = structure_kinds(impl)
    can = expressible(impl)
    masks, ranks = masks_taken(impl, MASKS_SIMPLEST_FIRST, MASK_RANKS)
    grad_ok = impl.declared.grad and impl.declared.backend == "torch"

    @st.composite
    def cases(draw: Any) -> AttentionCase:
        kv_heads = draw(st.integers(1, 3))
        group = draw(st.one_of(st.integers(1, 8), st.sampled_from((16, 32)))) if impl.declared.gqa else 1
        kind = draw(st.sampled_from(kinds))
        causal = draw(st.booleans()) if impl.declared.causal else False
        causal = causal or kind in NEEDS_CAUSAL
        grad = draw(st.booleans()) if grad_ok and kind not in FORWARD_ONLY else False
        batch = 1 if kind in BATCH_ONE else draw(st.integers(1, 3))
        tq = draw(st.integers(1, 160))
        tk = draw(st.one_of(st.just(tq), st.integers(1, 160), st.sampled_from((600, 1100))))  # past a 512-key block
        mask = draw(st.sampled_from(masks)) if impl.declared.mask else "none"
        fields: CaseFields = dict(
            batch=batch, heads=kv_heads * group, kv_heads=kv_heads, tq=tq, tk=tk,
            d=draw(st.one_of(st.integers(1, 128), st.sampled_from((160, 192, 255, 256)))),
            dtype=draw(st.sampled_from(impl.declared.dtypes)), device="cpu" if "cpu" in impl.declared.devices else impl.declared.devices[0],
            causal=causal, mask=mask, mask_rank=draw(st.sampled_from(ranks)) if mask != "none" else "full",
            scale=draw(st.sampled_from((None, 0.3, 1.0))), inputs=draw(st.sampled_from(INPUTS)),
            layout=draw(st.sampled_from(LAYOUTS)), grad=grad,
            bias=draw(st.sampled_from(("none", "alibi"))) if impl.declared.bias else "none",
            aux_layout=draw(st.sampled_from(LAYOUTS)))
        _models_2025(draw, st, impl, fields)
        odd = draw(st.sampled_from(tensor_layouts(impl)))  # one array in a layout of its own
        if odd != "none" and (odd != "dout" or grad):
            fields["layouts"] = ((odd, draw(st.sampled_from(LAYOUTS))),)
        return AttentionCase(**_structure(draw, st, kind, fields, can))

    return cases()


def _models_2025(draw: Any, st: Any, impl: Implementation, fields: CaseFields) -> None:
    """Sinks, a soft-cap and V's own head dim, where declared; the simplest (none) first, so they shrink away."""
    if impl.declared.sinks:
        fields["sinks"] = draw(st.booleans())
    if impl.declared.softcap and fields.get("bias", "none") == "none":
        fields["softcap"] = draw(st.sampled_from((None, 5.0, 30.0, 0.5)))
    if impl.declared.value_dim:
        fields["dv"] = draw(st.one_of(st.just(0), st.integers(1, 128), st.sampled_from((128, 192))))


def _structure(draw: Any, st: Any, kind: str, fields: CaseFields, can: frozenset[str]) -> CaseFields:
    """``fields`` with structure ``kind``, its parameters drawn (the recipe's values first, to shrink to)."""
    fields = apply_structure(kind, fields, can)
    tq, tk, batch = fields["tq"], fields["tk"], fields["batch"]
    if fields.get("window") is not None:
        fields["window"] = (draw(st.integers(0, tk + 2)), 0 if kind == "window_left" else draw(st.integers(0, tk + 2)))
    if fields.get("varlen") is not None:
        count = draw(st.integers(1, 5))
        cuts_q = sorted(draw(st.lists(st.integers(0, tq), min_size=count - 1, max_size=count - 1)))
        cuts_k = sorted(draw(st.lists(st.integers(0, tk), min_size=count - 1, max_size=count - 1)))
        qs = [b - a for a, b in zip([0, *cuts_q], [*cuts_q, tq])]
        ks = [b - a for a, b in zip([0, *cuts_k], [*cuts_k, tk])]
        fields["varlen"] = tuple(zip(qs, ks))
    if fields.get("cache_seqlens") is not None:
        lengths = st.one_of(st.just(tk), st.integers(0, tk), st.just(max(tk - 1, 0)), st.just(0))
        fields["cache_seqlens"] = tuple(draw(st.lists(lengths, min_size=batch, max_size=batch)))
    if fields.get("page_size") is not None:
        fields["page_size"] = draw(st.one_of(st.just(fields["page_size"]), st.integers(1, 33)))
    return fields


def failing_checks(impl: Implementation, case: AttentionCase) -> list[CheckResult]:
    """The output, gradient and stateful checks of one case (one trial); the ones that did not pass."""
    from harness.verify.checks import check_grad, check_output, guarded
    from harness.verify.lse import check_lse, checks_lse
    from harness.verify.restructured import applies as restructured_applies
    from harness.verify.restructured import restructured
    from harness.verify.stateful import stateful

    results = [guarded("output", lambda: check_output(impl, case, 1))]
    if checks_lse(impl):
        results.append(guarded("lse", lambda: check_lse(impl, case, 1)))
    if case.grad:
        results.append(guarded("grad", lambda: check_grad(impl, case, 1)))
    else:
        results.append(guarded("property:stateful", lambda: stateful(impl, case)))
    if restructured_applies(case):  # two calls, two packings (or cache lengths), the same totals
        results.append(guarded("property:restructured", lambda: restructured(impl, case)))
    return [r for r in results if r.status not in ("pass", "skipped")]


@dataclass(frozen=True)
class Search:
    """What one implementation's search found: a pass over ``examples`` cases that ran, or the minimal failing
    case with the check it failed (``replayed``: a saved failure, found again before any search). ``asked``: the
    cases asked for; ``not_run``: each reason a drawn case could not run here, with how many it stopped."""

    examples: int
    case: AttentionCase | None = None
    result: CheckResult | None = None
    replayed: bool = False
    asked: int = 0
    not_run: tuple[tuple[str, int], ...] = ()

    @property
    def short(self) -> bool:
        """Whether fewer cases ran than were asked for, with no failure found: the search proved less than asked."""
        return self.case is None and self.examples < self.asked

    def shortfall(self) -> str:
        """The sentence that says how many ran, of how many, and the main reason the others could not."""
        drawn = sum(count for _, count in self.not_run)
        text = f"the search ran {self.examples} of the {self.asked} cases asked for"
        if not self.not_run:
            return f"{text}; the search drew no more"
        reason, count = self.not_run[0]
        return f"{text}; {drawn} drawn case(s) could not run here, most often ({count} of them): {reason}"


def fuzz_task(source: str, name: str, examples: int, seed: int, saved: list[dict[str, Any]]) -> Search:
    """In a worker: the saved minimal failures first, then ``examples`` searched cases; the minimal
    failure (case, check, reason) or a pass."""
    from harness.verify.worker import _worker_impl

    impl, _ = _worker_impl(source, name, 1)
    return search(impl, examples, seed, saved)


def search(impl: Implementation, examples: int, seed: int, saved: list[dict[str, Any]]) -> Search:
    """The saved minimal failures first, then a search for ``examples`` cases ``impl`` runs. A drawn case it cannot
    run here (its capabilities allow it, its ``available`` does not) is no example: Hypothesis draws another, up
    to its limit on rejected draws, and the reasons are counted."""
    from collections import Counter

    from hypothesis import HealthCheck, assume, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import Unsatisfiable

    for fields in saved:
        case = AttentionCase.from_dict(fields)
        bad = [] if impl.not_supported_reasons(case) else failing_checks(impl, case)
        if bad:
            return Search(0, case, bad[0], replayed=True, asked=examples)
    last: dict[str, tuple[AttentionCase, CheckResult]] = {}
    ran = {"n": 0}
    not_run: Counter[str] = Counter()

    @hypothesis_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              print_blob=False)
    @given(case=case_strategy(impl))
    def draw(case: AttentionCase) -> None:
        reasons = impl.not_supported_reasons(case)
        if reasons:  # declared but not runnable here (a backend's own limit): not a failure, and no example
            not_run[reasons[0]] += 1
        assume(not reasons)
        ran["n"] += 1
        bad = failing_checks(impl, case)
        if bad:
            last["found"] = (case, bad[0])
            raise AssertionError(bad[0].reason)

    try:
        draw()
    except AssertionError:  # Hypothesis replays the minimal example last: ``last`` holds it
        return Search(ran["n"], *last["found"], asked=examples, not_run=tuple(not_run.most_common()))
    except Unsatisfiable:  # every draw rejected, up to Hypothesis's limit: what ran (none) is reported
        pass
    return Search(min(ran["n"], examples), asked=examples, not_run=tuple(not_run.most_common()))


def _load_saved(path: Path) -> list[dict[str, Any]]:
    from harness.errors import UsageError
    from harness.results.paths import read_text  # a regular file under the size cap, read without blocking

    try:
        saved = json.loads(read_text(path))
    except (OSError, ValueError, UsageError):
        return []
    return saved if isinstance(saved, list) else []


def run_fuzz(impls: list[Implementation], plugins: tuple[str, ...], sources: Mapping[str, str], examples: int,
             seed: int, timeout: float, writer: ResultWriter, database: Path = DATABASE_DIR) -> list[VerifyCell]:
    """The parent side: one worker per implementation runs its search (loading only ``sources[name]``);
    a verify cell per implementation. ``plugins`` go into the printed reproducer."""
    database.mkdir(parents=True, exist_ok=True)
    for impl in impls:
        writer.add(_fuzz_impl(impl, plugins, sources[impl.name], examples, seed, timeout, database))
    return [c for c in writer.cells if isinstance(c, VerifyCell)]


def _fuzz_impl(impl: Implementation, plugins: tuple[str, ...], source: str, examples: int, seed: int,
               timeout: float, database: Path) -> VerifyCell:
    """One implementation's search, in a worker: its verify cell (check "fuzz")."""
    import sys

    from harness.runtime.isolation import OK, Task, WorkerPool

    cell = VerifyCell(implementation=impl.name, kind=impl.declared.kind, case=None, case_id="-", group="fuzz", check="fuzz",
                      status=Status.SKIPPED)
    if impl.declared.kind != "kernel":
        return replace(cell, reason=f"--fuzz searches kernel cases; {impl.name} is a {impl.declared.kind} implementation")
    print(f"attnbench verify: fuzzing {impl.name} ({examples} cases, seed {seed})", file=sys.stderr)
    saved_path = database / f"{impl.name}.json"
    saved = _load_saved(saved_path)
    with WorkerPool(timeout=timeout * 10 + 5.0 * examples, start_method="forkserver") as pool:
        outcome = pool.run(Task(impl.name, fuzz_task, (source, impl.name, examples, seed, saved)))
    cell = replace(cell, seconds=round(outcome.seconds, 3))
    if outcome.status != OK:
        return replace(cell, status=Status(outcome.status), reason=f"the search's worker: {outcome.error}")
    found: Search = outcome.value
    return _cell_of(cell, found, impl.name, plugins, saved, saved_path)


def _cell_of(cell: VerifyCell, found: Search, name: str, plugins: tuple[str, ...], saved: list[dict[str, Any]],
             saved_path: Path) -> VerifyCell:
    """The verify cell of one search: a pass only when every case asked for ran and passed."""
    import sys

    from harness.results import write_json_atomic

    counts = {"examples": found.examples, "asked": found.asked,
              "not_run": sum(count for _, count in found.not_run),
              "not_run_reasons": [{"reason": reason, "count": count} for reason, count in found.not_run]}
    if found.case is None or found.result is None:
        if found.short:
            print(f"attnbench verify: {name}: {found.shortfall()}", file=sys.stderr)
            return replace(cell, status=Status.FAIL, reason=f"{found.shortfall()}; no failure among them, but the "
                           "search proved less than it was asked to", metrics=counts)
        return replace(cell, status=Status.PASS, metrics=counts)
    metrics = {**found.result.metrics, **counts}
    stored = found.case.to_dict()
    text = reproducer(name, plugins, stored, found.result.check)
    if stored not in saved:
        write_json_atomic(saved_path, [*saved, stored])
    print(f"\n{name}: minimal failing case {found.case.id}, reproduce with:\n\n{text}", file=sys.stderr)
    return replace(cell, status=Status(found.result.status), case=CellCase.of(found.case), case_id=found.case.id,
                   reason=f"minimal failing case ({found.result.check}): {found.result.reason}",
                   metrics={**metrics, "reproducer": text, "replayed": found.replayed})
