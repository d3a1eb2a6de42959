"""Triton kernels for FlashAttention-2: forward (with LSE), backward dK/dV and backward dQ.

Imported only when a kernel is about to run: Triton decides at ``@triton.jit`` time whether a
kernel is compiled for a GPU or run by its interpreter (``TRITON_INTERPRET=1``), so this
module must be imported after that variable is set. Scores are kept in base 2
(``qk_scale = scale * log2(e)``, then ``exp2``); the stored LSE is in natural log.
Masked scores are ``-inf``; a row with no allowed key measures from 0 instead of ``-inf``
so that nothing becomes NaN, ends with ``l = 0`` and is written as zeros (LSE ``-inf``).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _allowed(offs_m, offs_n, tq, tk, mask_ptr, smq, smk, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr):
    """(M, N) True where query offs_m may attend key offs_n (in range, causal, user mask)."""
    ok = (offs_m[:, None] < tq) & (offs_n[None, :] < tk)
    if CAUSAL:
        ok = ok & (offs_n[None, :] <= offs_m[:, None])
    if HAS_MASK:
        user = tl.load(mask_ptr + offs_m[:, None] * smq + offs_n[None, :] * smk, mask=ok, other=0)
        ok = ok & (user != 0)
    return ok


@triton.jit
def fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, mask_ptr,
               sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
               sob, soh, som, sod, smb, smh, smq, smk,
               heads, group, tq, tk, d, qk_scale,
               CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = bh // heads, bh % heads
    kvh = h // group  # GQA: the kv head is found by index, K and V are never copied
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q = tl.load(q_ptr + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
                mask=(offs_m[:, None] < tq) & (offs_d[None, :] < d), other=0.0)
    k_base = k_ptr + b * skb + kvh * skh
    v_base = v_ptr + b * svb + kvh * svh
    mask_base = mask_ptr + b * smb + h * smh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    end = tl.minimum(tk, (start_m + 1) * BLOCK_M) if CAUSAL else tk  # causal: skip blocks above
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + offs_n0
        kv_ok = (offs_n[:, None] < tk) & (offs_d[None, :] < d)
        k = tl.load(k_base + offs_n[:, None] * skn + offs_d[None, :] * skd, mask=kv_ok, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * svn + offs_d[None, :] * svd, mask=kv_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        s = tl.where(_allowed(offs_m, offs_n, tq, tk, mask_base, smq, smk, CAUSAL, HAS_MASK), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(o_ptr + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :] * sod,
             out.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < tq) & (offs_d[None, :] < d))
    lse = tl.where(l_i > 0, (m_i + tl.log2(tl.where(l_i > 0, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(lse_ptr + bh * tq + offs_m, lse, mask=offs_m < tq)


@triton.jit
def bwd_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, mask_ptr, dq_ptr, dk_ptr, dv_ptr,
               sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
               sdb, sdh, sdm, sdd, smb, smh, smq, smk,
               heads, group, tq, tk, d, qk_scale, scale,
               CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, FOR_DQ: tl.constexpr, PRECISION: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """FOR_DQ: one program per query block, loops over keys, writes dQ. Otherwise one
    program per key block, loops over queries, writes this query head's dK and dV
    (contiguous (B, H, Tk, d) float32; the caller sums the heads of a GQA group)."""
    start = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = bh // heads, bh % heads
    kvh = h // group
    offs_d = tl.arange(0, BLOCK_D)
    q_base = q_ptr + b * sqb + h * sqh
    do_base = do_ptr + b * sdb + h * sdh
    k_base = k_ptr + b * skb + kvh * skh
    v_base = v_ptr + b * svb + kvh * svh
    mask_base = mask_ptr + b * smb + h * smh
    if FOR_DQ:
        offs_m = start * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = (offs_m[:, None] < tq) & (offs_d[None, :] < d)
        q = tl.load(q_base + offs_m[:, None] * sqm + offs_d[None, :] * sqd, mask=row_ok, other=0.0)
        do = tl.load(do_base + offs_m[:, None] * sdm + offs_d[None, :] * sdd, mask=row_ok, other=0.0)
        lse2 = tl.load(lse2_ptr + bh * tq + offs_m, mask=offs_m < tq, other=float("inf"))
        delta = tl.load(delta_ptr + bh * tq + offs_m, mask=offs_m < tq, other=0.0)
        dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        end = tl.minimum(tk, (start + 1) * BLOCK_M) if CAUSAL else tk
        for start_n in range(0, end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            kv_ok = (offs_n[:, None] < tk) & (offs_d[None, :] < d)
            k = tl.load(k_base + offs_n[:, None] * skn + offs_d[None, :] * skd, mask=kv_ok, other=0.0)
            v = tl.load(v_base + offs_n[:, None] * svn + offs_d[None, :] * svd, mask=kv_ok, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
            ok = _allowed(offs_m, offs_n, tq, tk, mask_base, smq, smk, CAUSAL, HAS_MASK)
            p = tl.where(ok, tl.exp2(s - lse2[:, None]), 0.0)
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
            ds = p * (dp - delta[:, None])
            dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
        tl.store(dq_ptr + bh * tq * d + offs_m[:, None] * d + offs_d[None, :], dq * scale, mask=row_ok)
    else:
        offs_n = start * BLOCK_N + tl.arange(0, BLOCK_N)
        kv_ok = (offs_n[:, None] < tk) & (offs_d[None, :] < d)
        k = tl.load(k_base + offs_n[:, None] * skn + offs_d[None, :] * skd, mask=kv_ok, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * svn + offs_d[None, :] * svd, mask=kv_ok, other=0.0)
        dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        lo = (start * BLOCK_N // BLOCK_M) * BLOCK_M if CAUSAL else 0  # causal: skip queries above
        for start_m in range(lo, tq, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            row_ok = (offs_m[:, None] < tq) & (offs_d[None, :] < d)
            q = tl.load(q_base + offs_m[:, None] * sqm + offs_d[None, :] * sqd, mask=row_ok, other=0.0)
            do = tl.load(do_base + offs_m[:, None] * sdm + offs_d[None, :] * sdd, mask=row_ok, other=0.0)
            lse2 = tl.load(lse2_ptr + bh * tq + offs_m, mask=offs_m < tq, other=float("inf"))
            delta = tl.load(delta_ptr + bh * tq + offs_m, mask=offs_m < tq, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
            ok = _allowed(offs_m, offs_n, tq, tk, mask_base, smq, smk, CAUSAL, HAS_MASK)
            p = tl.where(ok, tl.exp2(s - lse2[:, None]), 0.0)
            dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=PRECISION)
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
            ds = p * (dp - delta[:, None])
            dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=PRECISION)
        out = bh * tk * d + offs_n[:, None] * d + offs_d[None, :]
        tl.store(dk_ptr + out, dk * scale, mask=kv_ok)
        tl.store(dv_ptr + out, dv, mask=kv_ok)
