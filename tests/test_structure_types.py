"""Structures are types: a new one (chunked-local attention) is defined here, in the test, and runs through the
case id, validation, the native keywords, the dense mask, FLOPs, reasons, result files and the oracle without a
line of the harness changed."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import torch

from harness.case.attention import AttentionCase
from harness.case.structures import Structure, register_structure, unregister_structure
from harness.contract.registry import make_implementation
from harness.errors import UsageError
from harness.reference.flops import batch_pairs, work_g
from harness.reference.oracle import reference_attention
from harness.reference.tensors import make_inputs
from harness.verify.checks import check_output


@dataclass(frozen=True)
class ChunkedLocal(Structure):
    """Chunked local attention (as Llama 4's local layers): query i sees only keys in its own chunk of ``chunk``
    positions (aligned as causal masking is: bottom-right alignment shifts the chunks with the diagonal)."""

    chunk: int

    name: ClassVar[str] = "chunked_local"
    description: ClassVar[str] = "chunked local attention, passed as chunk=<positions per chunk> or None"
    parameters: ClassVar[tuple[str, ...]] = ("chunk",)

    def problem(self, case: Any) -> str | None:
        if isinstance(self.chunk, int) and not isinstance(self.chunk, bool) and self.chunk >= 1:
            return None
        return f"chunk {self.chunk!r} must be an integer >= 1 (positions per chunk)"

    def key_range(self, i: Any) -> tuple[Any, Any]:
        start = (i // self.chunk) * self.chunk
        return start, start + self.chunk


@pytest.fixture
def chunked() -> Iterator[type[ChunkedLocal]]:
    """The new structure, known by name for the duration of one test (declarations and result files)."""
    register_structure(ChunkedLocal)
    yield ChunkedLocal
    unregister_structure(ChunkedLocal)


def _brute(tq: int, tk: int, chunk: int, causal: bool, align: str, segments: list[tuple[int, int]]) -> torch.Tensor:
    """The definition, one pair at a time, block-diagonal over packed ``segments``."""
    out = torch.zeros(tq, tk, dtype=torch.bool)
    q0 = k0 = 0
    for lq, lk in segments:
        shift = lk - lq if align == "bottom_right" else 0
        for i, j in itertools.product(range(lq), range(lk)):
            jj = j - shift
            out[q0 + i, k0 + j] = i // chunk == jj // chunk and (not causal or jj <= i)
        q0, k0 = q0 + lq, k0 + lk
    return out


def _naive(q: Any, k: Any, v: Any, *, causal: bool = False, mask: Any = None, scale: Any = None,
           chunk: int | None = None) -> torch.Tensor:
    """A plain implementation: top-left causal and a boolean mask; a chunk when it is given one."""
    tq, tk = q.shape[-2], k.shape[-2]
    allowed = torch.ones(tq, tk, dtype=torch.bool)
    i, j = torch.arange(tq)[:, None], torch.arange(tk)[None, :]
    if causal:
        allowed &= j <= i
    if chunk is not None:
        allowed = allowed & (i // chunk == j // chunk)
    if mask is not None:
        allowed = allowed & mask.to(torch.bool)
    scores = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    return weights @ v


def test_a_new_structure_has_an_id_part_and_validates_itself() -> None:
    case = AttentionCase(tq=10, causal=True, extra_structures=(ChunkedLocal(4),))
    assert case.id == "B1-H1-T10-d16-float32-causal-chunked_local=4"
    assert case.structures == {"chunked_local"}
    with pytest.raises(UsageError, match="chunk 0 must be an integer >= 1"):
        AttentionCase(tq=10, extra_structures=(ChunkedLocal(0),))
    with pytest.raises(UsageError, match="must hold harness.case.structures.Structure instances"):
        AttentionCase(tq=10, extra_structures=("chunk",))  # type: ignore[arg-type]
    # bottom-right alignment needs something to align: a new mask structure counts
    aligned = AttentionCase(tq=5, tk=9, causal_align="bottom_right", extra_structures=(ChunkedLocal(3),))
    assert aligned.id == "B1-H1-T5x9-d16-float32-bottom_right-chunked_local=3"


@pytest.mark.parametrize("fields,segments", [
    ({"tq": 10}, None),
    ({"tq": 6, "tk": 11, "causal": True, "causal_align": "bottom_right"}, None),
    ({"tq": 9, "tk": 12, "causal": True, "varlen": ((4, 7), (5, 5))}, [(4, 7), (5, 5)]),
])
def test_folded_into_a_dense_mask_it_is_the_definition_and_so_are_the_oracle_and_flops(
        fields: dict[str, Any], segments: list[tuple[int, int]] | None) -> None:
    case = AttentionCase(extra_structures=(ChunkedLocal(3),), **fields)
    want = _brute(case.tq, case.tk, 3, case.causal, case.causal_align, segments or [(case.tq, case.tk)])
    inputs = make_inputs(case, seed=0)
    kwargs = inputs.kwargs(case, ())  # declares nothing: every structure arrives in mask=
    folded_causal = case.causal and (case.varlen is not None or case.causal_align == "bottom_right")
    assert kwargs["causal"] == (case.causal and not folded_causal)  # top-left causal still passed as causal=
    passed = kwargs["mask"].expand_as(want) & (torch.ones_like(want).tril() if kwargs["causal"] else True)
    assert torch.equal(passed, want)
    oracle = reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case))
    plain = reference_attention(inputs.q64, inputs.k64, inputs.v64, mask=want, scale=case.scale)
    assert torch.allclose(oracle, plain, rtol=0, atol=1e-12)
    assert batch_pairs(case) == int(want.sum()) and work_g(case) == int(want.sum()) * case.d


def test_an_implementation_takes_it_natively_or_as_a_mask_and_both_pass_the_oracle(chunked: type) -> None:
    native = make_implementation("chunked_native", _naive, backend="torch", causal=True, mask=True,
                                 structures=("chunked_local",))
    folded = make_implementation("chunked_folded", _naive, backend="torch", causal=True, mask=True)
    case = AttentionCase(heads=2, tq=13, causal=True, extra_structures=(ChunkedLocal(4),))
    inputs = make_inputs(case, seed=1)
    assert inputs.kwargs(case, native.declared.structures)["chunk"] == 4 and inputs.kwargs(case, native.declared.structures)["mask"] is None
    for impl in (native, folded):
        assert impl.not_supported_reasons(case) == []
        assert check_output(impl, case, trials=1)["status"] == "pass", impl.name
    # under bottom-right alignment a kernel that does not take the alignment gets the chunks folded too
    shifted = AttentionCase(tq=5, tk=11, causal=True, causal_align="bottom_right", extra_structures=(ChunkedLocal(4),))
    kwargs = make_inputs(shifted, seed=1).kwargs(shifted, native.declared.structures)
    assert kwargs["chunk"] is None and kwargs["causal"] is False and kwargs["mask"] is not None
    assert check_output(native, shifted, trials=1)["status"] == "pass"
    wrong = make_implementation("chunk_ignored", lambda q, k, v, *, causal=False, mask=None, scale=None, chunk=None:
                                _naive(q, k, v, causal=causal, mask=mask, scale=scale), backend="torch", causal=True,
                                mask=True, structures=("chunked_local",))
    assert check_output(wrong, case, trials=1)["status"] == "fail"


def test_reasons_declarations_and_result_files_know_it_by_name(chunked: type) -> None:
    case = AttentionCase(tq=8, extra_structures=(ChunkedLocal(2),))
    no_mask = make_implementation("no_mask", _naive, backend="torch")
    assert no_mask.not_supported_reasons(case) == [
        "chunked_local not supported: declare structures=('chunked_local',) or mask=True (the harness then passes it "
        "as a dense mask)"]
    with pytest.raises(Exception, match="has no parameter `chunk`"):
        make_implementation("no_chunk", lambda q, k, v, *, causal=False, mask=None, scale=None: q, backend="torch",
                            structures=("chunked_local",))
    stored = json.loads(json.dumps(case.to_dict()))
    assert stored["extra_structures"] == [{"structure": "chunked_local", "chunk": 2}]
    assert AttentionCase.from_dict(stored) == case
    assert "extra_structures" not in AttentionCase(tq=8).to_dict()  # result files of built-in cases are unchanged
