"""FlashAttention in NumPy, written to be read: the textbook algorithm, one tile at a time.

The naive formula builds the whole (Tq, Tk) score matrix. FlashAttention never does: it
walks the keys in blocks and keeps, for every query row,

* ``m``: the largest score seen so far (so ``exp`` never overflows),
* ``l``: the sum of ``exp(score - m)`` over the keys seen so far,
* ``acc``: the sum of ``exp(score - m) * value`` over the keys seen so far.

When a new block raises the maximum from ``m`` to ``m_new``, everything accumulated so far
was computed relative to the old maximum; multiplying ``l`` and ``acc`` by
``exp(m - m_new)`` re-expresses it relative to the new one. After the last block,
``acc / l`` is exactly ``softmax(scores) @ V``. Memory: one (block_q, block_k) tile plus
O(block_q * d) state, whatever T is. The fast torch version is ``implementations.tiled``.
"""

from __future__ import annotations

import numpy as np

from harness import register

BLOCKS = (16, 32, 64, 128, 256)


def attention_one_head(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray | None,
                       causal: bool, scale: float, block_q: int, block_k: int,
                       window: tuple[int, int] | None = None, offset: int = 0) -> np.ndarray:
    """softmax(q k^T * scale) v for one head: q (Tq, d), k and v (Tk, d); allowed (Tq, Tk) or None.

    Query i sees key j when j - offset <= i (causal) and i - left <= j - offset <= i + right (window);
    ``offset`` is Tk - Tq for bottom-right alignment, else 0.
    """
    tq, tk = q.shape[0], k.shape[0]
    out = np.zeros_like(q)
    for q0 in range(0, tq, block_q):
        q1 = min(q0 + block_q, tq)
        q_tile = q[q0:q1] * q.dtype.type(scale)
        m = np.full((q1 - q0, 1), -np.inf, dtype=q.dtype)   # running max per row
        l = np.zeros((q1 - q0, 1), dtype=q.dtype)           # running sum of exp(score - m)
        acc = np.zeros((q1 - q0, q.shape[1]), dtype=q.dtype)  # running sum of exp(score - m) * v
        # the keys some row of this block may see: blocks outside the triangle or the window are skipped
        first_key, last_key = 0, min(tk, q1 + offset) if causal else tk
        if window is not None:
            first_key, last_key = max(0, q0 + offset - window[0]), min(last_key, q1 + offset + window[1])
        for k0 in range(first_key, last_key, block_k):
            k1 = min(k0 + block_k, last_key)
            scores = q_tile @ k[k0:k1].T
            rows, keys = np.arange(q0, q1)[:, None] + offset, np.arange(k0, k1)[None, :]
            if causal and k1 - 1 > q0 + offset:  # only blocks crossing the diagonal have keys to hide
                scores = np.where(keys <= rows, scores, -np.inf)
            if window is not None:
                scores = np.where((keys >= rows - window[0]) & (keys <= rows + window[1]), scores, -np.inf)
            if allowed is not None:
                scores = np.where(allowed[q0:q1, k0:k1], scores, -np.inf)
            m_new = np.maximum(m, scores.max(axis=1, keepdims=True))
            # A row with no allowed key so far has m_new = -inf: measure from 0 instead, so
            # that exp(-inf - 0) = 0 rather than exp(-inf + inf) = NaN.
            m_safe = np.where(np.isfinite(m_new), m_new, 0).astype(q.dtype)
            p = np.exp(scores - m_safe)
            rescale = np.exp(m - m_safe)          # how much the old state shrinks
            l = l * rescale + p.sum(axis=1, keepdims=True)
            acc = acc * rescale + p @ v[k0:k1]
            m = m_new
        out[q0:q1] = acc / np.where(l > 0, l, 1)  # rows with no allowed key stay zero
    return out


@register("tiled_numpy", backend="numpy", memory="linear", dtypes=("float32", "float64"),
          causal=True, mask=True, gqa=True, block_q=BLOCKS, block_k=BLOCKS,
          structures=("window", "bottom_right", "varlen"),
          description="textbook FlashAttention in NumPy: online softmax over key blocks, O(T) memory")
def tiled_numpy(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False,
                mask: np.ndarray | None = None, scale: float | None = None,
                block_q: int = 64, block_k: int = 64, window: tuple[int, int] | None = None,
                causal_align: str = "top_left", cu_seqlens_q: np.ndarray | None = None,
                cu_seqlens_k: np.ndarray | None = None) -> np.ndarray:
    """Packed sequences (``cu_seqlens_*``): each sequence is attended alone, its structure inside it."""
    batch, heads, tq, d = q.shape
    kv_heads, tk = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    allowed = None if mask is None else np.broadcast_to(mask, (batch, heads, tq, tk))  # a view
    out = np.zeros(q.shape, dtype=q.dtype)
    cu_q = [0, tq] if cu_seqlens_q is None else [int(x) for x in cu_seqlens_q]
    cu_k = [0, tk] if cu_seqlens_k is None else [int(x) for x in cu_seqlens_k]
    for q0, q1, k0, k1 in zip(cu_q, cu_q[1:], cu_k, cu_k[1:]):
        if q1 == q0 or k1 == k0:
            continue  # no query, or no key: the rows stay zero
        offset = (k1 - k0) - (q1 - q0) if causal_align == "bottom_right" else 0
        for b in range(batch):
            for h in range(heads):
                kv = h // group  # GQA: query head h reads kv head h // (H / Hkv); nothing is copied
                out[b, h, q0:q1] = attention_one_head(
                    q[b, h, q0:q1], k[b, kv, k0:k1], v[b, kv, k0:k1],
                    None if allowed is None else allowed[b, h, q0:q1, k0:k1],
                    causal, scale, block_q, block_k, window, offset)
    return out
