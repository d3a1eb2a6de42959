"""FP8 KV caches as case data: the storage type, the layout of the scales, and the rules a declaration obeys.

Serving engines store KV caches in FP8 (vLLM's and FlashInfer's ``kv_cache_dtype="fp8"``): half the bytes of a
bfloat16 cache, so twice the decode steps per second on a step bound by reading it. Each stored value means
``stored * scale``, with a float32 scale shared by a group of values; which group is the scale layout:

- ``tensor``: one scale for all of K and one for all of V, each of shape (1,) (vLLM's ``k_scale``, ``v_scale``);
- ``head``: one per kv head, shape (Hkv,);
- ``token``: one per cached token and kv head, shape (B, Hkv, Tk), laid out as the cache's rows are; a paged
  cache's as its pages, (num_pages, Hkv, page_size).

An implementation receives K and V stored in FP8 and the scales as ``k_scale=``, ``v_scale=`` (float32 tensors).
The scales are computed from the cache as it is written, the largest magnitude of each group over the largest
FP8 value (vLLM's dynamic quantisation), unless the case gives them (``kv_scale_values``: a checkpoint's calibrated
static scales, tensor and head layouts only); a value past the FP8 range then saturates, as it does in an engine.

This module holds no torch: the vocabulary, the rules a case breaks (:func:`kv_cache_problems`), the case id's part
and the scales' bytes. :mod:`harness.reference.quantize` quantises; docs/decode.md says what verify checks.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from typing import Any

from harness.case.dtypes import DTYPES, FP8_DTYPES, FP8_TABLE, KV_DTYPES

SCALE_LAYOUTS: dict[str, str] = {
    "tensor": "one float32 scale for K and one for V, each of shape (1,)",
    "head": "one float32 scale per kv head, shape (Hkv,)",
    "token": "one float32 scale per cached token and kv head, shape (B, Hkv, Tk) (a paged cache's: "
             "(num_pages, Hkv, page_size), as its pages)",
}
"""The scale layouts (``kv_scales``), each with the shape its ``k_scale`` and ``v_scale`` have."""
STATIC_LAYOUTS = ("tensor", "head")
"""The layouts ``kv_scale_values`` may give (per-token scales are computed as each token is written)."""


def is_fp8(case: Any) -> bool:
    """Whether ``case`` stores its KV cache in an FP8 type."""
    return getattr(case, "kv_dtype", None) in FP8_TABLE


def largest(kv_dtype: str) -> float:
    """The largest finite value of an FP8 storage type (448 for float8_e4m3fn, 57,344 for float8_e5m2)."""
    return FP8_TABLE[kv_dtype].largest


def scale_shape(layout: str, batch: int, kv_heads: int, keys: int) -> tuple[int, ...]:
    """The shape of ``k_scale`` (and ``v_scale``) in ``layout`` for a contiguous cache (B, Hkv, keys, d)."""
    return {"tensor": (1,), "head": (kv_heads,), "token": (batch, kv_heads, keys)}[layout]


def scale_count(case: Any, keys: int) -> int:
    """Scales of K (as many of V) a call must read when it reads ``keys`` cached keys per kv head, summed over the
    batch (per-token scales: one per key read)."""
    return int({"tensor": 1, "head": case.kv_heads, "token": case.kv_heads * keys}[case.kv_scales])


def kv_cache_problems(case: Any) -> Iterator[str]:
    """Each rule the KV cache's declaration breaks (``kv_dtype``, ``kv_scales``, ``kv_scale_values``), in order:
    what is wrong and how to fix it."""
    kv, layout, values = case.kv_dtype, case.kv_scales, case.kv_scale_values
    if kv is not None and kv not in KV_DTYPES:
        yield (f"kv_dtype {kv!r} is not a type a KV cache is stored in: choose one of {DTYPES} other than dtype, or an "
               f"FP8 type {FP8_DTYPES} with kv_scales= (one of {tuple(SCALE_LAYOUTS)})")
        return
    if kv is not None and kv == case.dtype:
        yield f"kv_dtype {kv!r} equals dtype: a cache in q's own dtype is the plain case (leave kv_dtype unset)"
    if kv is not None and (case.grad or case.self_attention):
        yield "a KV cache in another dtype is forward-only, never self"
    if kv in FP8_TABLE and layout is None:
        yield (f"an FP8 KV cache ({kv}) needs kv_scales=, the layout of its float32 scales: "
               + "; ".join(f"{name!r}: {what}" for name, what in SCALE_LAYOUTS.items()))
    elif layout is not None and layout not in SCALE_LAYOUTS:
        yield f"kv_scales {layout!r} is not a scale layout: choose one of {tuple(SCALE_LAYOUTS)}"
    elif layout is not None and kv not in FP8_TABLE:
        yield (f"kv_scales={layout!r} scales an FP8 cache, and kv_dtype is {kv!r}: set kv_dtype to one of {FP8_DTYPES}, "
               "or leave kv_scales unset")
    elif values is not None:
        yield from _static_problems(case)


def _static_problems(case: Any) -> Iterator[str]:
    """The rules ``kv_scale_values`` breaks: the layout takes static scales, one per group, each finite and > 0."""
    layout, values = case.kv_scales, case.kv_scale_values
    if layout is None:
        yield (f"kv_scale_values are the scales of an FP8 cache: set kv_dtype to one of {FP8_DTYPES} and kv_scales to "
               f"one of {STATIC_LAYOUTS} (or leave kv_scale_values unset)")
        return
    if layout not in STATIC_LAYOUTS:
        yield (f"kv_scale_values with kv_scales={layout!r}: per-token scales are computed from each token as it is "
               f"written; static scales are for {' and '.join(STATIC_LAYOUTS)} scales (or leave kv_scale_values unset)")
        return
    want = scale_shape(layout, case.batch, case.kv_heads, case.tk)[0]
    if not (isinstance(values, tuple) and len(values) == 2 and all(isinstance(v, tuple) for v in values)):
        yield (f"kv_scale_values {values!r} must be two tuples, K's scales and V's: "
               f"((k_0, ...), (v_0, ...)), {want} value(s) each for kv_scales={layout!r}")
        return
    for name, scales in zip("KV", values):
        if len(scales) != want:
            yield (f"kv_scale_values gives {len(scales)} {name} scale(s) for kv_scales={layout!r}"
                   f"{f' with kv_heads={case.kv_heads}' if layout == 'head' else ''}: give {want} "
                   f"({SCALE_LAYOUTS[layout]})")
            return
        bad = [s for s in scales if not (isinstance(s, (int, float)) and not isinstance(s, bool)
                                         and math.isfinite(s) and s > 0)]
        if bad:
            yield (f"kv_scale_values holds {bad[0]!r} among {name}'s scales: a scale must be a finite number > 0 "
                   "(each stored value is multiplied by it)")
            return


def id_part(case: Any) -> str:
    """The case id's part for the KV cache's dtype: ``kv=bfloat16``, ``kv=float8_e4m3fn/head``, and given scales
    spelled out when there are two (``kv=float8_e5m2/tensor=0.02,0.05``), else a digest of them."""
    if case.kv_scales is None:
        return f"kv={case.kv_dtype}"
    part = f"kv={case.kv_dtype}/{case.kv_scales}"
    values = case.kv_scale_values
    if values is None:
        return part
    if not (isinstance(values, tuple) and all(isinstance(v, tuple) for v in values)):
        return f"{part}=?"  # malformed: the validation names it, in a message that starts with this id
    flat = [f"{x:g}" if isinstance(x, (int, float)) else repr(x) for scales in values for x in scales]
    if len(flat) <= 2:
        return f"{part}={','.join(flat)}"
    return f"{part}=#{zlib.crc32(','.join(flat).encode()) & 0xFFFFFF:06x}"
