"""Rows with no allowed key under declared conventions (:mod:`harness.contract.conventions`).

The contract gives such a row zeros; a kernel may declare the mean of V, NaN, or no specified value. The output
check compares those rows to the declared value (:func:`by_empty_row_convention`); the properties, which are
about everything else, see them as the contract's zeros (:func:`as_contract_rows`).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.case.attention import AttentionCase
from harness.contract.conventions import Conventions, empty_rows
from harness.contract.registry import Implementation
from harness.reference.oracle import allowed_keys, allowed_rows, expand_kv
from harness.reference.tensors import Inputs


def empty_query_rows(case: AttentionCase, inputs: Inputs, rows: torch.Tensor | None = None) -> torch.Tensor | None:
    """Boolean (B, H, Tq) (of ``rows`` only, when given) of the query rows with no allowed key, or None."""
    kwargs = inputs.oracle_kwargs(case)
    where = dict(causal=case.causal, mask=kwargs["mask"], **case.structure_kwargs())
    allowed = allowed_keys(case.tq, case.tk, **where) if rows is None else allowed_rows(rows, case.tq, case.tk, **where)
    count = case.tq if rows is None else len(rows)
    return empty_rows(allowed, (case.batch, case.heads, count))


def as_contract_rows(impl: Implementation, case: AttentionCase, inputs: Inputs, out: Any) -> Any:
    """``out`` with the rows that have no allowed key set to the contract's zeros when the conventions declare another
    value there: the properties (state across calls, the hull of V, slices) are about everything else, and the
    output check holds those rows to the declared value."""
    if impl.declared.conventions.empty_row == "zeros" or case.sinks or not isinstance(out, torch.Tensor):
        return out
    mask = inputs.mask64 if inputs.mask64 is not None or inputs.mask is None else torch.as_tensor(inputs.mask).cpu()
    allowed = allowed_keys(case.tq, case.tk, causal=case.causal, mask=mask, **case.structure_kwargs())
    empty = empty_rows(allowed, (case.batch, case.heads, case.tq))  # of this call's own mask (a slice's, say)
    return out if empty is None else out.masked_fill(empty.to(out.device)[..., None], 0.0)


def by_empty_row_convention(conv: Conventions, got: torch.Tensor, oracle: torch.Tensor, v64: torch.Tensor,
                            empty: torch.Tensor | None, has_sinks: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """(output, oracle) with the rows that have no allowed key compared as ``conv.empty_row`` declares, and what
    was assumed: the mean of V expected there (``mean_v``), NaN required and then set aside (``nan``), or the rows
    set aside unchecked (``unspecified``). With sinks a row with no key is zero in every convention (the sink
    takes all the weight), as the contract's own zeros need nothing either."""
    if empty is None or conv.empty_row == "zeros" or has_sinks:
        return got, oracle, {}
    count = int(empty.sum())
    if conv.empty_row == "mean_v":
        mean = expand_kv(v64.mean(dim=-2, keepdim=True), got.shape[1]).expand(oracle.shape)  # per kv head, then copied
        return got, torch.where(empty[..., None], mean, oracle), {"empty_rows": count, "empty_row_expected": "mean_v"}
    if conv.empty_row == "nan":
        not_nan = int((~torch.isnan(got[empty])).any(dim=-1).sum())
        if not_nan:
            raise ValueError(f"{not_nan} of {count} rows with no allowed key are not NaN, though the "
                             "conventions declare empty_row='nan'")
    got = torch.where(empty[..., None], oracle, got)
    note = ("skipped: empty-row value unspecified" if conv.empty_row == "unspecified"
            else "NaN as declared; not compared further")
    return got, oracle, {"empty_rows": count, "empty_rows_skipped": note}
