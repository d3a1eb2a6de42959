"""Broken: split-KV decode whose pieces overlap by one key, used only for caches past 2,048 keys.

Flash-decoding cuts a long cache into pieces, attends each, and merges them by log-sum-exp. Here
every piece after the first starts one key early (``start - 1``, a boundary computed for an
exclusive end and used as inclusive), so each boundary key is counted twice: its weight doubles.
Caches of up to 2,048 keys are attended whole and are right. The error is one key's weight per
boundary: small, but far above float32 rounding.
"""

from __future__ import annotations

import torch

from harness import register

WHOLE = 2048
PIECES = 4


def _piece(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    s = (q @ k.transpose(-1, -2)).masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(s, -1, keepdim=True)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    return torch.exp(s - safe) @ v, lse


@register("broken_splitkv_boundary_overlap", backend="torch", dtypes=("float32",), causal=True, gqa=True,
          structures=("bottom_right", "cache_seqlens"))
def broken_splitkv_boundary_overlap(q, k, v, *, causal=False, mask=None, scale=None,  # type: ignore[no-untyped-def]
                                    causal_align="top_left", cache_seqlens=None):
    batch, heads, tq, d = q.shape
    tk = k.shape[2]
    g = heads // k.shape[1]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    out = torch.zeros_like(q)
    for b in range(batch):
        length = tk if cache_seqlens is None else int(cache_seqlens[b])
        if length == 0:
            continue
        shift = length - tq if causal_align == "bottom_right" else 0
        rows = q[b] * scale
        size = length if length <= WHOLE else -(-length // PIECES)
        outs, lses = [], []
        for start in range(0, length, size):
            lo = start - 1 if start > 0 else 0  # the bug: the previous piece's last key again
            stop = min(start + size, length)
            j = torch.arange(lo, stop)[None, :]
            ok = (j <= torch.arange(tq)[:, None] + shift) if causal else torch.ones(tq, stop - lo, dtype=torch.bool)
            o, lse = _piece(rows, k[b, :, lo:stop].repeat_interleave(g, 0), v[b, :, lo:stop].repeat_interleave(g, 0), ok)
            outs.append(o)
            lses.append(lse)
        lse_all = torch.stack(lses)
        top = lse_all.amax(0)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        weights = torch.exp(lse_all - top)
        total = weights.sum(0)
        merged = sum(torch.exp(lse - top) * o for lse, o in zip(lses, outs))
        out[b] = merged / torch.where(total > 0, total, torch.ones_like(total))
    return out
