"""`verify --fuzz N` counts the cases that ran, not the ones it drew: a search that could run fewer than N says how
many, of how many, and why the others could not, and does not pass. Paged caches are drawn with V's own head dim.
In-process and small (the end-to-end searches are tests/verifier/test_fuzz.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness import register
from harness.case.attention import AttentionCase
from harness.case.paging import gather_pages
from harness.reference.tensors import make_inputs
from harness.report.terminal import problems
from harness.results import Status, VerifyCell
from harness.verify import fuzz
from harness.verify.checks import check_output
from harness.verify.fuzz import Search, _cell_of, search


def plain(q, k, v, *, causal=False, mask=None, scale=None):
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def cell_of(found: Search, tmp_path: Path) -> VerifyCell:
    cell = VerifyCell(implementation="x", kind="kernel", case=None, case_id="-", group="fuzz", check="fuzz",
                      status=Status.SKIPPED)
    return _cell_of(cell, found, "x", (), [], tmp_path / "x.json")


@pytest.fixture(autouse=True)
def checks_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks of a case that ran pass without running: what is tested here is the counting."""
    monkeypatch.setattr(fuzz, "failing_checks", lambda impl, case: [])


def test_a_search_that_ran_no_case_says_so_and_does_not_pass(tmp_path: Path) -> None:
    refuses = register("refuses_all", backend="torch", dtypes=("float32",), causal=True,
                       available=lambda case: "its kernel is not built for this machine")(plain).__attnbench__
    found = search(refuses, 5, 0, [])
    assert found.examples == 0 and found.asked == 5 and found.short
    assert found.not_run[0][0] == "its kernel is not built for this machine" and found.not_run[0][1] >= 5
    cell = cell_of(found, tmp_path)
    assert cell.status == Status.FAIL and problems([cell])  # verify's exit status is 1
    assert "ran 0 of the 5 cases asked for" in (cell.reason or "")
    assert "its kernel is not built for this machine" in (cell.reason or "")
    assert cell.metrics["examples"] == 0 and cell.metrics["asked"] == 5 and cell.metrics["not_run"] >= 5


def test_refused_draws_are_replaced_and_counted_apart(tmp_path: Path) -> None:
    """A case the implementation cannot run is no example: the search draws others until N ran."""
    some = register("small_d_only", backend="torch", dtypes=("float32",),
                    available=lambda case: None if case.d <= 16 else "built for d <= 16")(plain).__attnbench__
    found = search(some, 4, 0, [])
    assert found.examples == 4 and not found.short and dict(found.not_run).get("built for d <= 16", 0) > 0
    cell = cell_of(found, tmp_path)
    assert cell.status == Status.PASS and cell.metrics["examples"] == 4 and cell.metrics["not_run"] > 0


def test_fewer_than_asked_without_refusals_is_still_not_a_pass(tmp_path: Path) -> None:
    cell = cell_of(Search(3, asked=10), tmp_path)
    assert cell.status == Status.FAIL and "ran 3 of the 10 cases asked for" in (cell.reason or "")
    assert cell_of(Search(10, asked=10), tmp_path).status == Status.PASS


def paged_value_dim(q, k, v, *, causal=False, mask=None, scale=None, cache_seqlens=None, block_table=None):
    """A paged kernel with V's own head dim: reads each pool through the block table, up to each cache length."""
    tk = block_table.shape[1] * k.shape[2]
    k, v = gather_pages(k, block_table, tk), gather_pages(v, block_table, tk)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    past = torch.arange(tk)[None, :] >= cache_seqlens.to(torch.long)[:, None]  # (B, Tk)
    return torch.softmax(s.masked_fill(past[:, None, None, :], float("-inf")), -1) @ v


def test_a_paged_cache_with_its_own_value_dim_is_drawn_with_v_in_its_head_dim() -> None:
    case = AttentionCase(batch=2, heads=2, tq=1, tk=11, d=8, dv=5, page_size=4, cache_seqlens=(11, 6))
    inputs = make_inputs(case, 3)
    assert inputs.k_pages.shape[-1] == 8 and inputs.v_pages.shape[-1] == 5
    assert torch.equal(gather_pages(inputs.v_pages, inputs.block_table, 11), inputs.v)
    impl = register("paged_value_dim", backend="torch", dtypes=("float32",), value_dim=True,
                    structures=("cache_seqlens", "paged"))(paged_value_dim).__attnbench__
    result = check_output(impl, case, 1)
    assert result.status == "pass", result.reason
