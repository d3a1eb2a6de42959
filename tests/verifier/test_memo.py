"""The reference memo: reused only on equal inputs, never changed by what a caller does with an answer."""

from __future__ import annotations

import torch

from harness.case.attention import AttentionCase
from harness.reference.tensors import make_inputs
from harness.verify.checks import SEED_BASE, _oracle_and_base, logit_max, oracle_and_base
from harness.verify.memo import ReferenceMemo

CASE = AttentionCase(batch=1, heads=2, kv_heads=2, tq=8, tk=8, d=4, dtype="float32", causal=True)


def test_a_repeat_on_equal_inputs_is_reused_and_a_changed_input_is_recomputed() -> None:
    memo, calls = ReferenceMemo(), []
    x = torch.arange(6.0)

    def compute() -> torch.Tensor:
        calls.append(1)
        return x * 2

    first = memo.get("f", CASE, (x,), compute)
    assert torch.equal(memo.get("f", CASE, (x.clone(),), compute), first) and len(calls) == 1
    x[0] = 100.0  # written in place: the memo kept its own copy of what it was asked about
    assert float(memo.get("f", CASE, (x,), compute)[0]) == 200.0 and len(calls) == 2
    assert len(memo.get("f", CASE.with_(tq=9), (x,), compute)) == 6 and len(calls) == 3  # another case


def test_an_answer_changed_by_its_caller_does_not_change_the_next() -> None:
    memo = ReferenceMemo()
    memo.get("f", CASE, (torch.ones(3),), lambda: torch.zeros(3)).fill_(7.0)
    assert float(memo.get("f", CASE, (torch.ones(3),), lambda: torch.zeros(3)).abs().max()) == 0.0


def test_the_memoised_reference_equals_a_fresh_one_and_follows_a_changed_v() -> None:
    inputs = make_inputs(CASE, SEED_BASE, "torch")
    fresh = _oracle_and_base(CASE, inputs, inputs.v64, inputs.k64, None)
    for _ in range(2):
        got = oracle_and_base(CASE, make_inputs(CASE, SEED_BASE, "torch"))
        assert all(torch.equal(a, b) for a, b in zip(got, fresh))
    inputs.v64 = torch.full_like(inputs.v64, 0.75)  # convex_hull's constant V
    oracle, _ = oracle_and_base(CASE, inputs)
    assert float((oracle - 0.75).abs().max()) < 1e-12
    assert logit_max(CASE, inputs) == logit_max(CASE, make_inputs(CASE, SEED_BASE, "torch"))
