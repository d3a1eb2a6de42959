"""Split-KV decoding (flash-decoding) in NumPy, written to be read: the merge by log-sum-exp, step by step.

A decode step has a few new queries and a long cache. Reading the cache is the work, so:

1. **One tile per kv head.** Query head h reads kv head ``h // G`` (G = H / Hkv). The G query heads of
   a group and the Tq new queries become the ``G * Tq`` rows of one tile, so every K and V row is read
   once for all of them.
2. **Split the keys.** A sequence's keys are cut into pieces (so several threads can share one long
   sequence). Each piece ``s`` is plain attention over its own keys and remembers two things per row:
   its normalised output ``o_s`` and its log-sum-exp ``lse_s = log(sum_j exp(score_j))`` over the
   piece's keys (-inf when the row may attend none of them).
3. **Merge.** The softmax over all keys weighs piece ``s`` by the share of the total mass it holds,
   ``exp(lse_s) / sum_t exp(lse_t)``; computed from the largest ``lse`` so nothing overflows:

       M   = max_s lse_s
       w_s = exp(lse_s - M)
       o   = sum_s w_s * o_s / sum_s w_s

   This is exact: ``exp(lse_s) * o_s`` is the piece's unnormalised sum of ``exp(score) * v``.

Ragged cache lengths (``cache_seqlens``: element b has keys ``0 .. L_b - 1``) and a paged cache
(``block_table``: key j of element b is slot ``j % page`` of page ``block_table[b, j // page]``) are
both just where a piece's keys come from. ``tiled_decode`` is the same algorithm compiled.

The rows of a tile are taken ROWS at a time: a decode step has a handful, but the same function runs a
square prefill (Tq = Tk = T), where all T rows against a piece of T / 4 keys would hold T^2 / 4 scores.
A chunk of rows holds ROWS x T / 4, so the extra memory grows as T, as ``memory="linear"`` declares.
"""

from __future__ import annotations

import numpy as np

from harness import register

PIECE = 64
"""Keys per piece at least (small, so that the tests' short caches are split too); a long cache is cut into
at most MAX_PIECES pieces, as a split-KV kernel cuts it for its threads."""
MAX_PIECES = 4
ROWS = 64
"""Query rows (of one tile) whose scores are held at once."""


def keys_of(k: np.ndarray, b: int, h: int, start: int, stop: int, block_table: np.ndarray | None) -> np.ndarray:
    """Rows start..stop-1 of element b, kv head h: a slice of the contiguous cache, or gathered from pages."""
    if block_table is None:
        return k[b, h, start:stop]
    page = k.shape[2]
    keys = np.arange(start, stop)
    return k[block_table[b, keys // page], h, keys % page]


def piece(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Attention of rows q (R, d) over one piece's keys: (normalised output (R, d), log-sum-exp (R,))."""
    scores = np.where(allowed, q @ k.T, -np.inf)
    top = scores.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)  # a row with no key in this piece: exp(-inf) = 0, not NaN
    p = np.exp(scores - top)
    total = p.sum(axis=1, keepdims=True)
    out = (p @ v) / np.where(total > 0, total, 1.0)
    with np.errstate(divide="ignore"):
        lse = np.log(total[:, 0]) + top[:, 0]  # log(0) = -inf: the piece has nothing for this row
    return out, lse


def merge(outs: list[np.ndarray], lses: list[np.ndarray]) -> np.ndarray:
    """Combine pieces by log-sum-exp: sum_s exp(lse_s - M) o_s / sum_s exp(lse_s - M), M = max_s lse_s."""
    lse = np.stack(lses)  # (S, R)
    top = lse.max(axis=0)
    top = np.where(np.isfinite(top), top, 0.0)
    weight = np.exp(lse - top)  # (S, R); 0 where a piece had no key
    total = weight.sum(axis=0)
    merged = sum(w[:, None] * o for w, o in zip(weight, outs))
    return merged / np.where(total > 0, total, 1.0)[:, None]  # rows no piece could attend stay 0


@register("decode_numpy", backend="numpy", memory="linear", dtypes=("float32", "float64"), causal=True, gqa=True,
          structures=("window", "bottom_right", "cache_seqlens", "paged"),
          description="split-KV decoding (flash-decoding) in NumPy: GQA groups as tile rows, pieces merged by LSE")
def decode_numpy(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False, mask: None = None,
                 scale: float | None = None, window: tuple[int, int] | None = None, causal_align: str = "top_left",
                 cache_seqlens: np.ndarray | None = None, block_table: np.ndarray | None = None) -> np.ndarray:
    batch, heads, tq, d = q.shape
    kv_heads = k.shape[1]
    g = heads // kv_heads
    tk = k.shape[2] * block_table.shape[1] if block_table is not None else k.shape[2]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    out = np.zeros(q.shape, dtype=q.dtype)
    for b in range(batch):
        length = tk if cache_seqlens is None else int(cache_seqlens[b])
        # query t sits at position t + offset among the keys (bottom-right: the last Tq of the L_b)
        offset = length - tq if causal_align == "bottom_right" else 0
        pos = np.tile(np.arange(tq), g)[:, None] + offset  # (R, 1): rows are (head in group, query)
        for h in range(kv_heads):
            tile = q[b, h * g:(h + 1) * g].reshape(g * tq, d)
            keys = keys_of(k, b, h, 0, length, block_table).astype(np.float64)  # this (b, h)'s cache, once
            values = keys_of(v, b, h, 0, length, block_table).astype(np.float64)
            size = max(PIECE, -(-length // MAX_PIECES))
            for r0 in range(0, g * tq, ROWS):
                rows = tile[r0:r0 + ROWS].astype(np.float64) * scale
                at = pos[r0:r0 + ROWS]
                outs, lses = [], []
                for start in range(0, length, size):
                    stop = min(start + size, length)
                    key = np.arange(start, stop)[None, :]
                    allowed = np.ones((len(rows), stop - start), dtype=bool)
                    if causal:
                        allowed &= key <= at
                    if window is not None:
                        allowed &= (key >= at - window[0]) & (key <= at + window[1])
                    o, lse = piece(rows, keys[start:stop], values[start:stop], allowed)
                    outs.append(o)
                    lses.append(lse)
                if outs:
                    r = np.arange(r0, r0 + len(rows))  # tile row r is query r % tq of head h * g + r // tq
                    out[b, h * g + r // tq, r % tq] = merge(outs, lses).astype(q.dtype)
    return out
