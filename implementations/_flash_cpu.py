"""FlashAttention-2 on the CPU with torch operations on tiles: forward, log-sum-exp, backward.

Why torch operations and not a compiled extension: on a small CPU the time goes to
the two tile GEMMs (MKL through ``torch.bmm``) and to the exponentials; a tile of a few
hundred rows by a few hundred keys makes each GEMM large enough to run near MKL's speed,
and the Python loop then costs a few microseconds per tile, well under 5% of the work
(profiled: GEMMs about 77%, ``exp2_`` about 7-13%, everything else the rest). A compiled
kernel would share the GEMM cost and could only win part of the remainder.
The choices that matter for speed (measured; see docs/implementations.md "The tiled kernel"):

* Work items (a few heads x one query block; backward: x one key block) run on worker
  threads with single-threaded torch (:mod:`implementations._workers`), not as one
  multi-threaded torch call per tile operation: robust when other processes share the cores.

* ``exp2`` instead of ``exp``: ``scale * log2(e)`` is folded into the one copy of Q we make,
  so scores arrive in base 2 and ``Tensor.exp2_`` (about twice as fast as ``exp_`` in
  PyTorch's CPU kernels) does the softmax. The log-sum-exp is returned in natural log.
* Every per-tile operation writes in place into a buffer reused across tiles (no page
  faults from fresh allocations, no extra passes over the tile).
* GQA without copying K or V: the G query heads that share a kv head are stacked as rows
  of one tile, so one GEMM against the shared K tile serves all of them.
* Causal (either alignment) and sliding windows: key blocks with no allowed pair are never
  visited (a window's work is O(T * window)); only blocks that cross an edge of the band
  build a (block_q x block_k) mask. A user mask is sliced per tile, never
  expanded to (B, H, Tq, Tk).

Layout: a batch-head index ``n`` runs over B * Hkv; a query tile is ``(n, G * rows, d)``.
"""

from __future__ import annotations

import math

import torch

from harness.errors import UsageError
from implementations._workers import run_parallel

LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)


def pick_blocks(tq: int, tk: int, d: int, heads: int | None = None) -> tuple[int, int]:
    """Block sizes for this kind of CPU (2 cores, 1 MiB L2 each, MKL), chosen per shape.

    ``heads`` (B * H) may be passed with the rest of the shape; the rule does not need it,
    because work items already split the heads (see ``_Plan.head_chunks``).

    Measured at d = 64, T = 4096 (B1-H8), on a machine shared with other jobs: 256 x 512 was
    5-30% faster than 128 x 512, 128 x 1024 and 512 x 512 (a 256 x 512 tile is a GEMM big
    enough for MKL to run near its peak, and a work item's score tile stays within a few MiB).
    Larger d makes each tile's GEMMs heavier, so the key
    block shrinks to keep the tile's bytes per core about the same; short sequences use one
    block.
    """
    block_k = 512 if d <= 64 else 256 if d <= 128 else 128
    block_q = 256 if d <= 128 else 128
    return min(block_q, max(tq, 16)), min(block_k, max(tk, 16))


class _Plan:
    """The shared bookkeeping of forward and backward: views, scale, per-tile masks."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 mask: torch.Tensor | None, scale: float | None, block_q: int, block_k: int,
                 window: tuple[int, int] | None = None, causal_align: str = "top_left",
                 softcap: float | None = None) -> None:
        b, h, self.tq, d = q.shape
        hkv, self.tk = k.shape[1], k.shape[2]
        self.g, self.n, self.d = h // hkv, b * hkv, d
        self.q = q
        self.causal, self.block_q, self.block_k = causal, block_q, block_k
        self.scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        self.dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        # (n, Tk, d): a view of contiguous K and V (else one copy in this layout); never
        # repeated per query head, the G heads of a group share it as rows of one tile.
        self.k = k.to(self.dtype).reshape(self.n, self.tk, d)
        self.v = v.to(self.dtype).reshape(self.n, self.tk, d)
        self.q_blocks = [(q0, min(q0 + block_q, self.tq)) for q0 in range(0, self.tq, block_q)]
        self.mask = None
        if mask is not None:  # (B, Hkv, G, Tq, Tk) view with zero strides, sliced per tile
            self.mask = mask.to(torch.bool).expand(b, h, self.tq, self.tk).unflatten(1, (hkv, self.g))
        # structure: query i sees keys j with j - offset <= i (causal), i - left <= j - offset <= i + right (window)
        self.window = window
        self.offset = self.tk - self.tq if causal_align == "bottom_right" else 0
        self.may_empty = mask is not None or window is not None or self.offset != 0
        """Some row may have no allowed key in a tile it visits: the running max is then -inf."""
        self.cap2 = None if softcap is None else float(softcap) * LOG2E
        """The soft-cap in the tiles' base-2 units (scores are logits times log2(e)), or None."""

    def capped(self, s: torch.Tensor, tanh: torch.Tensor | None = None) -> None:
        """Soft-capping in place, before any mask: s = cap * tanh(s / cap) (in base-2 units). ``tanh``, when given,
        keeps tanh(s / cap) for the backward's chain factor 1 - tanh^2."""
        if self.cap2 is None:
            return
        t = torch.div(s, self.cap2, out=tanh) if tanh is not None else s.div_(self.cap2)
        t.tanh_()
        torch.mul(t, self.cap2, out=s)

    def key_range(self, q0: int, q1: int) -> tuple[int, int]:
        """Keys [lo, hi) that some query of rows q0:q1 may attend (lo >= hi: none)."""
        lo, hi = 0, self.tk
        if self.causal:
            hi = min(hi, q1 + self.offset)
        if self.window is not None:
            lo = max(lo, q0 + self.offset - self.window[0])
            hi = min(hi, q1 + self.offset + self.window[1])
        return lo, hi

    def k_blocks(self, q0: int, q1: int) -> list[tuple[int, int]]:
        """The key blocks rows q0:q1 visit: none wholly outside the causal triangle or the window."""
        lo, hi = self.key_range(q0, q1)
        return [(k0, min(k0 + self.block_k, hi)) for k0 in range(lo, hi, self.block_k)]

    def _band(self, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor | None:
        """(rows, keys) True where causality or the window forbids; None when the tile lies inside both."""
        near, far = q0 + self.offset, q1 - 1 + self.offset  # the first and last row, in key coordinates
        inside = not self.causal or k1 - 1 <= near
        if self.window is not None:
            inside = inside and k0 >= far - self.window[0] and k1 - 1 <= near + self.window[1]
        if inside:
            return None
        i = torch.arange(near, far + 1)[:, None]
        j = torch.arange(k0, k1)[None, :]
        out = j > i if self.causal else torch.zeros(q1 - q0, k1 - k0, dtype=torch.bool)
        if self.window is not None:
            out |= (j < i - self.window[0]) | (j > i + self.window[1])
        return out

    def rows(self, x: torch.Tensor, q0: int, q1: int, factor: float | None = None,
             n0: int = 0, n1: int | None = None) -> torch.Tensor:
        """Rows q0:q1 of heads n0:n1 of a (B, H, T, ...) tensor as one (n, G * rows, ...) tile."""
        tile = x.reshape(self.n, self.g, x.shape[2], *x.shape[3:])[n0:n1, :, q0:q1].to(self.dtype)
        tile = tile * factor if factor is not None else tile.contiguous()
        return tile.reshape(tile.shape[0], self.g * (q1 - q0), *x.shape[3:])

    def forbidden(self, n0: int, n1: int, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor | None:
        """(n1-n0, G, rows, keys), or broadcastable to it, True where the tile must not attend;
        None when everything may (the common case: no tensor is built for it)."""
        out = self._band(q0, q1, k0, k1) if self.causal or self.window is not None else None
        if self.mask is not None:
            tile = self.mask[:, :, :, q0:q1, k0:k1].reshape(self.n, self.g, q1 - q0, k1 - k0)[n0:n1]
            out = ~tile if out is None else (out | ~tile)
        return out

    def head_chunks(self, tile: int) -> list[tuple[int, int]]:
        """Split the n batch-heads into work items with a score tile of at most 2 MiB. On 2 cores
        (1 MiB L2 each, 32 MiB L3) 4 heads x 256 x 512 was the best or close to it in each of our
        (noisy) runs; 1 head pays more per-operation overhead, 8 leave few items to balance."""
        per = max(1, min(self.n, (1 << 19) // max(1, self.g * tile)))
        return [(n0, min(n0 + per, self.n)) for n0 in range(0, self.n, per)]


def _buffer(cache: dict, shape: tuple[int, ...], dtype: torch.dtype, tag: int = 0) -> torch.Tensor:
    """A tile buffer reused across tiles of one shape: no fresh pages (and faults) per tile."""
    if (shape, tag) not in cache:
        cache[shape, tag] = torch.empty(shape, dtype=dtype)
    return cache[shape, tag]


def forward(p: _Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """Output (n, G, Tq, d) and natural-log LSE (n, G, Tq) (-inf for rows with no allowed key)."""
    out = torch.empty(p.n, p.g, p.tq, p.d, dtype=p.dtype)
    lse = torch.empty(p.n, p.g, p.tq, dtype=p.dtype)
    items = [(n0, n1, i) for i in range(len(p.q_blocks)) for n0, n1 in p.head_chunks(p.block_q * p.block_k)]
    if p.causal or p.window is not None:  # the longest items first, so the workers finish together
        items.sort(key=lambda item: -len(p.k_blocks(*p.q_blocks[item[2]])))

    def one(item: tuple[int, int, int], cache: dict) -> None:
        n0, n1, i = item
        q0, q1 = p.q_blocks[i]
        n, rows = n1 - n0, p.g * (q1 - q0)
        # Q scaled so that scores come out in base 2; inside the work item, on its own thread: a
        # multi-threaded torch op just before the workers start leaves OpenMP threads spinning.
        qi = p.rows(p.q, q0, q1, p.scale * LOG2E, n0, n1)
        acc = torch.zeros(n, rows, p.d, dtype=p.dtype)
        m = torch.full((n, rows, 1), -math.inf, dtype=p.dtype)
        l = torch.zeros(n, rows, 1, dtype=p.dtype)
        for k0, k1 in p.k_blocks(q0, q1):
            s = _buffer(cache, (n, rows, k1 - k0), p.dtype)
            torch.bmm(qi, p.k[n0:n1, k0:k1].transpose(1, 2), out=s)
            p.capped(s)
            bad = p.forbidden(n0, n1, q0, q1, k0, k1)
            if bad is not None:
                s.view(n, p.g, q1 - q0, k1 - k0).masked_fill_(bad, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_use = m_new
            if p.may_empty:  # rows with nothing allowed so far: subtract 0, not -inf
                m_use = torch.where(m_new == -math.inf, 0.0, m_new)
            s.sub_(m_use).exp2_()
            alpha = (m - m_use).exp2_()
            l.mul_(alpha).add_(s.sum(-1, keepdim=True))
            acc.mul_(alpha).baddbmm_(s, p.v[n0:n1, k0:k1])
            m = m_new
        out[n0:n1, :, q0:q1] = acc.div_(torch.where(l > 0, l, 1.0)).view(n, p.g, q1 - q0, p.d)
        lse[n0:n1, :, q0:q1] = ((m + l.log2()) * LN2).view(n, p.g, q1 - q0)

    run_parallel(items, one)
    return out, lse


def backward(p: _Plan, out: torch.Tensor, lse: torch.Tensor,
             dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention-2 backward: recompute each probability tile from Q, K and the LSE.

    Work items are (heads, key block): dK and dV of a key block accumulate in one small
    buffer; dQ accumulates in one buffer per worker, summed at the end (O(T) each).
    ``out``/``lse`` are forward's results in the (n, G, Tq, ...) layout.
    Returns dq (n, G, Tq, d), dk and dv (n, Tk, d).
    """
    c = p.scale * LOG2E
    lse2 = torch.where(lse == -math.inf, math.inf, lse * LOG2E)  # empty rows: P = exp2(-inf) = 0
    delta = (dout.to(p.dtype).reshape(out.shape) * out).sum(-1)  # D_i = rowsum(dO * O)
    blocks = p.q_blocks
    qs = [p.rows(p.q, q0, q1, c) for q0, q1 in blocks]
    dos = [p.rows(dout, q0, q1) for q0, q1 in blocks]
    lses = [lse2[:, :, q0:q1].reshape(p.n, -1, 1) for q0, q1 in blocks]
    deltas = [delta[:, :, q0:q1].reshape(p.n, -1, 1) for q0, q1 in blocks]
    dk = torch.empty(p.n, p.tk, p.d, dtype=p.dtype)
    dv = torch.empty(p.n, p.tk, p.d, dtype=p.dtype)
    k_blocks = [(k0, min(k0 + p.block_k, p.tk)) for k0 in range(0, p.tk, p.block_k)]
    items = [(n0, n1, k0, k1) for k0, k1 in k_blocks for n0, n1 in p.head_chunks(p.block_q * p.block_k)]

    def one(item: tuple[int, int, int, int], cache: dict) -> None:
        n0, n1, k0, k1 = item
        n = n1 - n0
        kj, vj = p.k[n0:n1, k0:k1], p.v[n0:n1, k0:k1]
        dk_j = torch.zeros(n, k1 - k0, p.d, dtype=p.dtype)
        dv_j = torch.zeros(n, k1 - k0, p.d, dtype=p.dtype)
        if "dq" not in cache:
            cache["dq"] = torch.zeros(p.n, p.g, p.tq, p.d, dtype=p.dtype)
        for i, (q0, q1) in enumerate(blocks):
            lo, hi = p.key_range(q0, q1)
            if max(lo, k0) >= min(hi, k1):
                continue  # causality or the window leaves this query block no key of this block
            rows = p.g * (q1 - q0)
            s = _buffer(cache, (n, rows, k1 - k0), p.dtype, 0)
            dp = _buffer(cache, (n, rows, k1 - k0), p.dtype, 1)
            dq_i = _buffer(cache, (n, rows, p.d), p.dtype, 2)
            qi, doi = qs[i][n0:n1], dos[i][n0:n1]
            torch.bmm(qi, kj.transpose(1, 2), out=s)
            t = None if p.cap2 is None else _buffer(cache, (n, rows, k1 - k0), p.dtype, 3)
            p.capped(s, t)
            bad = p.forbidden(n0, n1, q0, q1, k0, k1)
            if bad is not None:
                s.view(n, p.g, q1 - q0, k1 - k0).masked_fill_(bad, -math.inf)
            s.sub_(lses[i][n0:n1]).exp2_()                            # P
            dv_j.baddbmm_(s.transpose(1, 2), doi)                      # dV += P^T dO
            torch.bmm(doi, vj.transpose(1, 2), out=dp)                 # dP = dO V^T
            dp.sub_(deltas[i][n0:n1]).mul_(s)                          # dS = P (dP - D)
            if t is not None:                                          # soft-cap's chain factor 1 - tanh^2
                dp.mul_(t.mul_(t).neg_().add_(1.0))
            dk_j.baddbmm_(dp.transpose(1, 2), qi, alpha=p.scale / c)   # dK += scale dS^T Q
            torch.bmm(dp, kj, out=dq_i)                                # dQ += scale dS K
            cache["dq"][n0:n1, :, q0:q1].add_(dq_i.view(n, p.g, q1 - q0, p.d), alpha=p.scale)
        dk[n0:n1, k0:k1], dv[n0:n1, k0:k1] = dk_j, dv_j

    caches = run_parallel(items, one)
    dqs = [cache["dq"] for cache in caches if "dq" in cache]
    dq = dqs[0]
    for other in dqs[1:]:
        dq.add_(other)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Autograd wrapper: saves Q, K, V, the output and the LSE (O(T)), recomputes P in backward."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, scale, block_q, block_k, window=None,  # type: ignore[override]
                causal_align="top_left", softcap=None):
        plan = _Plan(q, k, v, causal, mask, scale, block_q, block_k, window, causal_align, softcap)
        out, lse = forward(plan)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (mask, causal, scale, block_q, block_k, window, causal_align, softcap)
        result = out.view(q.shape).to(q.dtype)
        lse = lse.view(q.shape[:-1])
        ctx.mark_non_differentiable(lse)
        return result, lse

    @staticmethod
    def backward(ctx, dout, _dlse):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        mask, causal, scale, block_q, block_k, window, causal_align, softcap = ctx.args
        plan = _Plan(q, k, v, causal, mask, scale, block_q, block_k, window, causal_align, softcap)
        dq, dk, dv = backward(plan, out, lse, dout)
        return (dq.view(q.shape).to(q.dtype), dk.view(k.shape).to(k.dtype), dv.view(v.shape).to(v.dtype),
                None, None, None, None, None, None, None, None)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    mask: torch.Tensor | None = None, scale: float | None = None,
                    block_q: int | None = None, block_k: int | None = None,
                    window: tuple[int, int] | None = None, causal_align: str = "top_left",
                    softcap: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output (B, H, Tq, d) in q's dtype and the natural-log LSE (B, H, Tq).

    Differentiable in q, k and v. Block sizes default to :func:`pick_blocks` for the shape.
    ``window=(left, right)`` and ``causal_align`` as in the contract: tiles outside them are never visited.
    ``softcap``: the scaled logits become ``softcap * tanh(logit / softcap)`` before any mask (Gemma 2).
    """
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if size is not None and (not isinstance(size, int) or size < 1):
            raise UsageError(f"tiled: {name}={size!r}; block sizes are positive integers, e.g. 256")
    auto_q, auto_k = pick_blocks(q.shape[2], k.shape[2], q.shape[3])
    return FlashAttention.apply(q, k, v, mask, causal, scale, block_q or auto_q, block_k or auto_k, window,
                                causal_align, softcap)
