"""CORRECT, unusual: split-KV decode straight from a page pool. Takes paged caches natively; cuts each sequence's
pages into up to 3 splits (uneven: the last may be one page or part of one), computes each split's max, sum and
unnormalised output in float32, and merges the splits through their log-sum-exp."""
import math
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import band


@register("correct_model_splitkv_pool", backend="torch", dtypes=("float32", "bfloat16"), causal=True, gqa=True,
          structures=("bottom_right", "cache_seqlens", "paged"))
def correct_model_splitkv_pool(q, k, v, *, causal=False, mask=None, scale=None, causal_align="top_left",
                           cache_seqlens=None, block_table=None):
    b, h, tq, d = q.shape
    if block_table is None:  # contiguous cache: one page per sequence, the whole cache
        page, tk = k.shape[2], k.shape[2]
        k_pool, v_pool = k.reshape(b * k.shape[1], 1, tk, d), v.reshape(b * v.shape[1], 1, tk, d)
        hkv = k.shape[1]
        table = torch.arange(b * hkv).reshape(b, hkv)
        pages_of = lambda i, hh: [int(table[i, hh])]
        pool_head = lambda hh: 0
    else:
        page, hkv = k.shape[2], k.shape[1]
        tk = block_table.shape[1] * page
        k_pool, v_pool = k, v
        pages_of = lambda i, hh: [int(p) for p in block_table[i].tolist()]
        pool_head = lambda hh: hh
    g = h // hkv
    scale = d ** -0.5 if scale is None else float(scale)
    out = torch.zeros(b, h, tq, d)
    for i in range(b):
        length = tk if cache_seqlens is None else int(cache_seqlens[i])
        length = min(length, tk)
        allowed = band(tq, length, causal, causal_align)
        for hh in range(hkv):
            pages = pages_of(i, hh)
            n_pages = max(1, math.ceil(length / page))
            per = max(1, math.ceil(n_pages / 3))
            parts = []
            for first in range(0, n_pages, per):
                lo, hi = first * page, min((first + per) * page, length)
                if hi <= lo:
                    continue
                kk = torch.cat([k_pool[p, pool_head(hh)] for p in pages[first:first + per]])[: hi - lo].float()
                vv = torch.cat([v_pool[p, pool_head(hh)] for p in pages[first:first + per]])[: hi - lo].float()
                qq = q[i, hh * g:(hh + 1) * g].float()
                s = (qq @ kk.T) * scale
                s = s.masked_fill(~allowed[:, lo:hi], float("-inf"))
                m = s.amax(-1, keepdim=True)
                safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
                p = torch.exp(s - safe)
                parts.append((m, p.sum(-1, keepdim=True), p @ vv))
            if not parts:
                continue
            top = torch.stack([m for m, _, _ in parts]).amax(0)
            safe = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
            total = sum(torch.where(torch.isfinite(m), torch.exp(m - safe), torch.zeros_like(m)) * l for m, l, _ in parts)
            acc = sum(torch.where(torch.isfinite(m), torch.exp(m - safe), torch.zeros_like(m)) * o for m, _, o in parts)
            out[i, hh * g:(hh + 1) * g] = torch.where(total > 0, acc / total.clamp_min(1e-38), torch.zeros_like(acc))
    return out.to(q.dtype)
