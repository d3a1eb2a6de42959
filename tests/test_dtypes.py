"""One dtype table at the bottom floor: its sizes and precisions are the array libraries' own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.case.dtypes import DTYPES, ITEMSIZE, NUMPY_DTYPES, TABLE
from harness.contract.registry import make_implementation
from harness.reference.tensors import TORCH_DTYPES

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)


@pytest.mark.parametrize("name", DTYPES)
def test_each_row_agrees_with_torch_and_numpy(name: str) -> None:
    row = TABLE[name]
    assert row.torch() is TORCH_DTYPES[name] is getattr(torch, name)
    assert ITEMSIZE[name] == row.itemsize == torch.empty(0, dtype=row.torch()).element_size()
    assert row.eps == torch.finfo(row.torch()).eps
    if name in NUMPY_DTYPES:
        assert row.numpy_dtype() == np.dtype(name) and np.dtype(name).itemsize == row.itemsize
    else:
        with pytest.raises(ValueError, match=f"NumPy has no {name}"):
            row.numpy_dtype()


def test_the_plugin_contract_takes_its_vocabulary_from_the_table() -> None:
    with pytest.raises(Exception, match="NumPy has no"):
        make_implementation("np_bf16", lambda q, k, v, *, causal=False, mask=None, scale=None: q, backend="numpy",
                            dtypes=("bfloat16",))
