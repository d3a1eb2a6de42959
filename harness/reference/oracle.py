"""The float64 reference: the contract's semantics, written once, shared by nobody else.

No plugin code is imported here. The oracle is differentiable (torch autograd in
float64), so gradients are checked against the same formula.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def structure_allowed(
    tq: int, tk: int, *, causal: bool, window: tuple[int, int] | None = None, causal_align: str = "top_left",
    device: torch.device | str = "cpu", rows: torch.Tensor | None = None, key_ranges: Sequence[Any] = (),
) -> torch.Tensor | None:
    """Boolean (Tq, Tk) of the keys causal masking and a sliding window leave each query, or None (all).

    Query i sees key j when, with j' = j - (Tk - Tq) for bottom-right alignment and j' = j for top-left,
    ``j' <= i`` (causal) and ``i - left <= j' <= i + right`` (window ``(left, right)``).
    ``rows`` (int64 query indices) restricts the answer to those rows: (len(rows), Tk). ``key_ranges`` are
    further structures, each giving the half-open range [lo, hi) of j' query i may see (``key_range(i)``).
    """
    if not causal and window is None and not key_ranges:
        return None
    if causal_align not in ("top_left", "bottom_right"):
        raise ValueError(f"causal_align={causal_align!r}; choose 'top_left' or 'bottom_right'")
    offset = tk - tq if causal_align == "bottom_right" else 0
    i = (torch.arange(tq, device=device) if rows is None else rows.to(device))[:, None]
    j = torch.arange(tk, device=device)[None, :] - offset  # j'
    allowed = torch.ones(i.shape[0], tk, dtype=torch.bool, device=device)
    if causal:
        allowed &= j <= i
    if window is not None:
        left, right = window
        allowed &= (j >= i - left) & (j <= i + right)
    for structure in key_ranges:
        lo, hi = structure.key_range(i)
        allowed &= (j >= lo) & (j < hi)
    return allowed


def packed_allowed(
    seqlens: tuple[tuple[int, int], ...], *, causal: bool, window: tuple[int, int] | None = None,
    causal_align: str = "top_left", device: torch.device | str = "cpu", key_ranges: Sequence[Any] = (),
) -> torch.Tensor:
    """Boolean (sum Tq, sum Tk) of packed sequences: block-diagonal, each block (a sequence's own
    queries and keys) under :func:`structure_allowed`; a sequence with no key leaves its queries none."""
    tq, tk = sum(a for a, _ in seqlens), sum(b for _, b in seqlens)
    allowed = torch.zeros(tq, tk, dtype=torch.bool, device=device)
    q0 = k0 = 0
    for lq, lk in seqlens:
        if lq and lk:
            block = structure_allowed(lq, lk, causal=causal, window=window, causal_align=causal_align, device=device,
                                      key_ranges=key_ranges)
            allowed[q0:q0 + lq, k0:k0 + lk] = True if block is None else block
        q0, k0 = q0 + lq, k0 + lk
    return allowed


def cache_allowed(
    cache_seqlens: tuple[int, ...], tq: int, tk: int, *, causal: bool, window: tuple[int, int] | None = None,
    causal_align: str = "top_left", device: torch.device | str = "cpu", key_ranges: Sequence[Any] = (),
) -> torch.Tensor:
    """Boolean (B, 1, Tq, Tk) of a KV cache with ragged lengths: element b's queries see its keys j < L_b,
    under :func:`structure_allowed` of (Tq, L_b) (bottom-right: the queries are the last L_b positions)."""
    allowed = torch.zeros(len(cache_seqlens), 1, tq, tk, dtype=torch.bool, device=device)
    for b, n in enumerate(cache_seqlens):
        if n:
            block = structure_allowed(tq, n, causal=causal, window=window, causal_align=causal_align, device=device,
                                      key_ranges=key_ranges)
            allowed[b, 0, :, :n] = True if block is None else block
    return allowed


def allowed_keys(
    tq: int, tk: int, *, causal: bool, mask: torch.Tensor | None, device: torch.device | str = "cpu",
    window: tuple[int, int] | None = None, causal_align: str = "top_left",
    varlen: tuple[tuple[int, int], ...] | None = None, cache_seqlens: tuple[int, ...] | None = None,
    key_ranges: Sequence[Any] = (),
) -> torch.Tensor | None:
    """Boolean (…, Tq, Tk) of the keys each query may attend to, or None when all are allowed.

    Causal is top-left aligned by default (SDPA's ``is_causal``): query i sees keys j <= i; see
    :func:`structure_allowed` for bottom-right alignment and sliding windows, :func:`packed_allowed`
    for packed sequences (``varlen``).
    """
    if cache_seqlens is not None:
        allowed: torch.Tensor | None = cache_allowed(cache_seqlens, tq, tk, causal=causal, window=window,
                                                     causal_align=causal_align, device=device, key_ranges=key_ranges)
    elif varlen is not None:
        allowed = packed_allowed(varlen, causal=causal, window=window, causal_align=causal_align, device=device,
                                 key_ranges=key_ranges)
    else:
        allowed = structure_allowed(tq, tk, causal=causal, window=window, causal_align=causal_align, device=device,
                                    key_ranges=key_ranges)
    if mask is not None:
        mask = mask.to(device=device, dtype=torch.bool)
        allowed = mask if allowed is None else (allowed & mask)
    return allowed


def expand_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Repeat kv heads so that query head h reads kv head h // (H / Hkv) (SDPA's enable_gqa)."""
    groups = heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def grouped_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a`` (B, H, R, x) @ ``b`` (B, Hkv, x, y) where query head h reads kv head h // (H / Hkv), as
    ``a @ expand_kv(b, H)`` computes it, without repeating ``b``: the H / Hkv query heads of a group are stacked
    as rows of one product with their kv head. A GQA cache is read once instead of copied H / Hkv times (a
    decode step's float64 cache copied 4x is hundreds of MB)."""
    heads, kv_heads = a.shape[1], b.shape[1]
    if kv_heads == heads or a.dim() != 4 or b.dim() != 4:
        return torch.matmul(a, b)
    batch, rows = max(a.shape[0], b.shape[0]), a.shape[2]
    stacked = a.expand(batch, *a.shape[1:]).reshape(batch, kv_heads, (heads // kv_heads) * rows, a.shape[-1])
    return torch.matmul(stacked, b).reshape(batch, heads, rows, b.shape[-1])


def reference_attention(
    q: Any, k: Any, v: Any, *, causal: bool = False, mask: Any = None,
    scale: float | None = None, bias: Any = None, window: tuple[int, int] | None = None,
    causal_align: str = "top_left", varlen: tuple[tuple[int, int], ...] | None = None,
    cache_seqlens: tuple[int, ...] | None = None, key_ranges: Sequence[Any] = (), sinks: Any = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale + bias, masked) v in float64; rows with no allowed key are zero.

    The 2025 case space, each as its public reference computes it (transformers 4.57,
    ``models/gpt_oss/modeling_gpt_oss.py`` and ``models/gemma2/modeling_gemma2.py``, ``eager_attention_forward``;
    ``models/deepseek_v3/modeling_deepseek_v3.py``, ``DeepseekV3Attention``):
    ``softcap``: the scaled logits become ``softcap * tanh(logits / softcap)`` before the mask (Gemma 2);
    ``sinks`` (H,): per query head a logit joins the softmax's denominator and is dropped before the product
    with V (gpt-oss: ``cat([logits, sinks])``, softmax, ``probs[..., :-1]``), so a row with no allowed key is
    zero; V may have its own head dim (DeepSeek-V3's ``v_head_dim`` 128 beside ``qk_head_dim`` 192, scaled by
    ``qk_head_dim ** -0.5``): the output has V's.

    ``window`` and ``causal_align`` are the structure of :func:`structure_allowed`; ``varlen`` the
    (query length, key length) of packed sequences (:func:`packed_allowed`); ``cache_seqlens`` the valid
    keys per batch element of a KV cache (:func:`cache_allowed`; a paged cache is gathered first,
    :func:`harness.case.paging.gather_pages`); ``key_ranges`` further structures that bound each query's keys
    (:meth:`harness.case.structures.Structure.key_range`).
    Inputs may be torch tensors (kept on their device, autograd preserved) or arrays.
    """
    q, k, v = (_as_f64(x) for x in (q, k, v))
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"query heads {q.shape[1]} must be a multiple of kv heads {k.shape[1]}")
    d = q.shape[-1]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    scores = capped(grouped_matmul(q, k.transpose(-1, -2)) * scale, softcap)
    if bias is not None:
        scores = scores + _as_f64(bias)
    mask_t = None if mask is None else torch.as_tensor(mask)
    allowed = allowed_keys(q.shape[-2], k.shape[-2], causal=causal, mask=mask_t, device=q.device, window=window,
                           causal_align=causal_align, varlen=varlen, cache_seqlens=cache_seqlens,
                           key_ranges=key_ranges)
    return _masked_softmax_v(scores, None if allowed is None else allowed.expand(scores.shape), v, sinks)


def reference_lse(
    q: Any, k: Any, *, causal: bool = False, mask: Any = None, scale: float | None = None, bias: Any = None,
    window: tuple[int, int] | None = None, causal_align: str = "top_left",
    varlen: tuple[tuple[int, int], ...] | None = None, cache_seqlens: tuple[int, ...] | None = None,
    key_ranges: Sequence[Any] = (), sinks: Any = None, softcap: float | None = None,
    rows: torch.Tensor | None = None, dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """(B, H, Tq) (of ``rows`` only, when given) natural log of each row's softmax denominator: logsumexp over
    the allowed keys of the logits :func:`reference_attention` takes the softmax of (scaled, soft-capped, biased),
    the sink's logit included (gpt-oss); -inf for a row with no allowed key and no sink. What a kernel returning
    ``(out, lse)`` (FlashAttention's ``softmax_lse``, xformers' ``lse``) returns. Computed in ``dtype``
    throughout: float64 (the oracle), or the case's dtype (the rule's baseline)."""
    q, k = (_as_f64(x).to(dtype) for x in (q, k))
    tq, tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    where = dict(causal=causal, mask=None if mask is None else torch.as_tensor(mask), device=q.device, window=window,
                 causal_align=causal_align, varlen=varlen, cache_seqlens=cache_seqlens, key_ranges=key_ranges)
    if rows is not None:
        rows = torch.as_tensor(rows, dtype=torch.long)
        q = q[..., rows.to(q.device), :]
        bias = None if bias is None else _as_f64(bias).expand(*_as_f64(bias).shape[:-2], tq, tk)[..., rows, :]
    scores = capped(grouped_matmul(q, k.transpose(-1, -2)) * scale, softcap)  # GQA: each kv head read once
    if bias is not None:
        scores = scores + _as_f64(bias).to(dtype)
    allowed = allowed_keys(tq, tk, **where) if rows is None else allowed_rows(rows, tq, tk, **where)  # type: ignore[arg-type]
    if allowed is not None:
        scores = scores.masked_fill(~allowed.expand(scores.shape), float("-inf"))
    if sinks is not None:
        column = _as_f64(sinks).to(dtype=dtype, device=scores.device).reshape(1, -1, 1, 1)
        scores = torch.cat([scores, column.expand(*scores.shape[:-1], 1)], dim=-1)
    return torch.logsumexp(scores, dim=-1)


def capped(scores: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """Gemma 2's logit soft-capping, ``softcap * tanh(scores / softcap)``; unchanged when ``softcap`` is None."""
    return scores if softcap is None else torch.tanh(scores / softcap) * softcap


def allowed_rows(
    rows: torch.Tensor, tq: int, tk: int, *, causal: bool, mask: torch.Tensor | None, device: torch.device | str = "cpu",
    window: tuple[int, int] | None = None, causal_align: str = "top_left",
    varlen: tuple[tuple[int, int], ...] | None = None, cache_seqlens: tuple[int, ...] | None = None,
    key_ranges: Sequence[Any] = (),
) -> torch.Tensor | None:
    """:func:`allowed_keys` of the query rows ``rows`` only: (…, len(rows), Tk), at O(rows x Tk) cost."""
    rows = rows.to(device=device, dtype=torch.long)
    if cache_seqlens is not None:
        allowed: torch.Tensor | None = torch.zeros(len(cache_seqlens), 1, len(rows), tk, dtype=torch.bool, device=device)
        assert allowed is not None
        for b, n in enumerate(cache_seqlens):
            if n:
                block = structure_allowed(tq, n, causal=causal, window=window, causal_align=causal_align,
                                          device=device, rows=rows, key_ranges=key_ranges)
                allowed[b, 0, :, :n] = True if block is None else block
    elif varlen is not None:
        allowed = torch.zeros(len(rows), tk, dtype=torch.bool, device=device)
        q0 = k0 = 0
        for lq, lk in varlen:
            inside = (rows >= q0) & (rows < q0 + lq)
            if lk and bool(inside.any()):
                local = rows[inside] - q0
                block = structure_allowed(lq, lk, causal=causal, window=window, causal_align=causal_align,
                                          device=device, rows=local, key_ranges=key_ranges)
                allowed[inside, k0:k0 + lk] = True if block is None else block
            q0, k0 = q0 + lq, k0 + lk
    else:
        allowed = structure_allowed(tq, tk, causal=causal, window=window, causal_align=causal_align, device=device,
                                    rows=rows, key_ranges=key_ranges)
    if mask is not None:
        mask = torch.as_tensor(mask).to(device=device, dtype=torch.bool)
        mask = mask.expand(*mask.shape[:-2], tq, tk)[..., rows, :]
        allowed = mask if allowed is None else (allowed & mask)
    return allowed


def sample_rows(tq: int, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``count`` distinct query rows (all when Tq <= count), always with the first and last: sorted int64."""
    if tq <= count:
        return torch.arange(tq)
    picked = torch.randperm(tq - 2, generator=generator)[:max(count - 2, 0)] + 1
    return torch.cat([torch.tensor([0, tq - 1]), picked]).sort().values


def reference_rows(
    q: Any, k: Any, v: Any, rows: torch.Tensor, *, causal: bool = False, mask: Any = None,
    scale: float | None = None, bias: Any = None, window: tuple[int, int] | None = None,
    causal_align: str = "top_left", varlen: tuple[tuple[int, int], ...] | None = None,
    cache_seqlens: tuple[int, ...] | None = None, key_ranges: Sequence[Any] = (), sinks: Any = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """:func:`reference_attention` of the query rows ``rows`` only, exactly, in float64: (B, H, len(rows), d).

    Costs O(B H rows Tk d): how a case too large for the whole oracle is still checked exactly, on a
    random sample of its rows (:func:`sample_rows`). Compare with ``out[:, :, rows]``.
    """
    q, k, v = (_as_f64(x) for x in (q, k, v))
    rows = torch.as_tensor(rows, dtype=torch.long)
    tq, tk = q.shape[-2], k.shape[-2]
    sub_bias = None if bias is None else _as_f64(bias).expand(*_as_f64(bias).shape[:-2], tq, tk)[..., rows, :]
    mask_t = None if mask is None else torch.as_tensor(mask)
    allowed = allowed_rows(rows, tq, tk, causal=causal, mask=mask_t, device=q.device, window=window,
                           causal_align=causal_align, varlen=varlen, cache_seqlens=cache_seqlens,
                           key_ranges=key_ranges)
    d = q.shape[-1]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    scores = capped(grouped_matmul(q[..., rows.to(q.device), :], k.transpose(-1, -2)) * scale, softcap)
    if sub_bias is not None:
        scores = scores + sub_bias
    return _masked_softmax_v(scores, None if allowed is None else allowed.expand(scores.shape), v, sinks)


def _masked_softmax_v(scores: torch.Tensor, allowed: torch.Tensor | None, v: torch.Tensor,
                      sinks: Any = None) -> torch.Tensor:
    if allowed is None and sinks is None:
        return grouped_matmul(torch.softmax(scores, dim=-1), v)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    sink = None if sinks is None else _as_f64(sinks).to(scores.device).reshape(1, -1, 1, 1)
    if sink is not None:
        row_max = torch.maximum(row_max, sink.expand(row_max.shape))
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)).detach()
    weights = torch.exp(scores - row_max)
    total = weights.sum(dim=-1, keepdim=True)
    if sink is not None:
        total = total + torch.exp(sink - row_max)  # the sink's share of the denominator; it carries no value
    weights = weights / torch.where(total > 0, total, torch.ones_like(total))
    return grouped_matmul(weights, v)


def _as_f64(x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(torch.float64)
    return torch.as_tensor(x).to(torch.float64)
