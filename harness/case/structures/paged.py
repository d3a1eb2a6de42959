"""A paged KV cache (vLLM, FlashAttention's ``block_table``): K and V in shuffled pages of ``page_size`` keys.

A layout, not a mask: an implementation that declares ``structures=("paged",)`` receives the page pools and
the block table (:mod:`harness.case.paging` builds them), any other the same keys contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from harness.case.structures.base import CallArrays, Structure, StructureKeywords
from harness.case.structures.cache import CACHE_WITH_VARLEN


@dataclass(frozen=True)
class Paged(Structure):
    """``case.page_size``: keys per page."""

    page_size: int

    name: ClassVar[str] = "paged"
    description: ClassVar[str] = (
        "a paged KV cache: k and v arrive as page pools (num_pages, Hkv, page_size, d) with block_table= "
        "((B, pages per sequence) int32 tensor / int64 array; None and contiguous k, v when not paged) and "
        "always cache_seqlens= (needs 'cache_seqlens' declared too)")
    parameters: ClassVar[tuple[str, ...]] = ("block_table",)
    defaults: ClassVar[tuple[str, ...]] = ("block_table=None",)
    requires: ClassVar[tuple[str, ...]] = ("cache_seqlens",)
    requires_reason: ClassVar[str] = ("a paged cache's pages may hold more keys than the sequence, so a paged call "
                                      "always passes cache_seqlens= (FlashAttention's convention)")
    field: ClassVar[str | None] = "page_size"
    layout: ClassVar[bool] = True
    within: ClassVar[frozenset[str]] = frozenset()
    sparse: ClassVar[bool] = False

    def problem(self, case: Any) -> str | None:
        page = self.page_size
        if not isinstance(page, int) or isinstance(page, bool) or page < 1:
            return f"page_size {page!r} must be an integer >= 1"
        if case.varlen is not None:
            return CACHE_WITH_VARLEN
        if case.grad or case.self_attention:
            return "a paged KV cache is forward-only and never self-attention"
        return None

    def id_parts(self) -> tuple[str, ...]:
        return (f"paged={self.page_size}",)

    @classmethod
    def native_kwargs(cls, case: Any, arrays: CallArrays, folded: bool) -> dict[str, object]:
        """The block table; a paged call always says its lengths (its pages may hold more keys than the sequence)."""
        kwargs = {"block_table": arrays.block_table}
        if arrays.k_pages is not None and case.cache_seqlens is None:
            kwargs["cache_seqlens"] = arrays.index_array((case.tk,) * case.batch, case)
        if arrays.k_pages is not None and arrays.k_scale_pages is not None:  # an FP8 cache's per-token scales
            kwargs.update(k_scale=arrays.k_scale_pages, v_scale=arrays.v_scale_pages)
        return kwargs

    @classmethod
    def native_arrays(cls, inputs: Any) -> tuple[Any, Any, Any] | None:
        return None if inputs.k_pages is None else (inputs.q, inputs.k_pages, inputs.v_pages)

    def oracle_kwargs(self) -> StructureKeywords:
        return {}  # the oracle reads the pages gathered back (harness.case.paging.gather_pages)

    def draw(self, inputs: Any, case: Any, k: Any, v: Any, generator: Any, backend: str) -> None:
        """The page pools and block table; the oracle's K and V become the pages gathered back through the table,
        so it reads what a paged kernel reads (an FP8 cache's dequantized, its per-token scales paged as its keys)."""
        import numpy as np
        import torch

        from harness.case.layouts import QKV_SWAP, in_layout, numpy_layout, torch_layout
        from harness.case.paging import gather_pages, make_pages

        k_pages, v_pages, table = make_pages(k, v, self.page_size, generator)
        k_scales = v_scales = None
        if inputs.quantized is not None:  # an FP8 cache (torch only: NumPy has none)
            inputs.k64, inputs.v64, k_scales, v_scales = inputs.quantized.paged(k_pages, v_pages, table, case.tk,
                                                                                generator)
        else:
            inputs.k64 = gather_pages(k_pages.to(torch.float64), table, case.tk)
            inputs.v64 = gather_pages(v_pages.to(torch.float64), table, case.tk)
        if k_scales is not None and v_scales is not None:  # per-token scales, as the pages
            inputs.k_scale_pages, inputs.v_scale_pages = (in_layout(x.to(case.device), case.layout_of("scale"))
                                                          for x in (k_scales, v_scales))
        pools: list[Any]
        block_table: Any
        if backend == "torch":
            pools = [torch_layout(x.to(case.device), case.layout_of(n), QKV_SWAP) for n, x in (("k", k_pages), ("v", v_pages))]
            block_table = table.to(case.device)
        else:
            pools = [numpy_layout(x.numpy(), case.layout_of(n), QKV_SWAP) for n, x in (("k", k_pages), ("v", v_pages))]
            block_table = table.numpy().astype(np.int64)
        inputs.k_pages, inputs.v_pages = pools
        table_layout = case.layout_of("index")
        inputs.block_table = block_table if table_layout == "contiguous" else in_layout(block_table, table_layout)
