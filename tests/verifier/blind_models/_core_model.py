"""A blockwise online-softmax attention with knobs, and the contract's allowed-key mask (the leading underscore keeps
this file out of the set). Each plugin of the set is this kernel with one knob turned or one line changed."""
from __future__ import annotations

import torch


def allowed_keys(tq, tk, *, batch, causal=False, mask=None, causal_align="top_left", cache_seqlens=None,
                 cu_seqlens_q=None, cu_seqlens_k=None, device="cpu"):
    """(B or 1, H or 1, Tq, Tk) booleans, or None when every key is allowed."""
    if cu_seqlens_q is not None:
        cq, ck = [int(x) for x in cu_seqlens_q.tolist()], [int(x) for x in cu_seqlens_k.tolist()]
        out = torch.zeros(tq, tk, dtype=torch.bool, device=device)
        for s in range(len(cq) - 1):
            a, b = cq[s + 1] - cq[s], ck[s + 1] - ck[s]
            out[cq[s]:cq[s + 1], ck[s]:ck[s + 1]] = band(a, b, causal, causal_align, device)
        out = out[None, None]
    elif cache_seqlens is not None:
        lengths = [int(n) for n in cache_seqlens.tolist()]
        out = torch.zeros(batch, 1, tq, tk, dtype=torch.bool, device=device)
        for b, n in enumerate(lengths):
            out[b, 0, :, :n] = band(tq, n, causal, causal_align, device)
    elif causal:
        out = band(tq, tk, True, causal_align, device)[None, None]
    else:
        out = None
    if mask is not None:
        mask = mask.to(torch.bool)
        out = mask if out is None else out & mask
    return out


def band(tq, tk, causal, causal_align, device="cpu"):
    if not causal:
        return torch.ones(tq, tk, dtype=torch.bool, device=device)
    shift = tk - tq if causal_align == "bottom_right" else 0
    i = torch.arange(tq, device=device)[:, None]
    j = torch.arange(tk, device=device)[None, :]
    return j <= i + shift


def online(q, k, v, allowed, scale, *, block=128, start=float("-inf"), acc=None, sum_dtype=None, guard=True,
           bias=None):
    """Online softmax over key blocks. ``start``: the running max's initial value; ``acc``: accumulator dtype
    (float32, float64 for float64 inputs); ``sum_dtype``: the denominator's dtype; ``guard``: keep a block whose
    every key is masked from producing exp(-inf - -inf)."""
    b, h, tq, d = q.shape
    tk = k.shape[-2]
    g = h // k.shape[1]
    if g > 1:
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    acc = acc or (torch.float64 if q.dtype == torch.float64 else torch.float32)
    sum_dtype = sum_dtype or acc
    scale = d ** -0.5 if scale is None else float(scale)
    if allowed is None:
        allowed = torch.ones(1, 1, tq, tk, dtype=torch.bool, device=q.device)
    allowed = allowed.expand(b, h, tq, tk)
    qa = q.to(acc)
    top = torch.full((b, h, tq, 1), start, dtype=acc, device=q.device)
    total = torch.zeros(b, h, tq, 1, dtype=sum_dtype, device=q.device)
    out = torch.zeros(b, h, tq, d, dtype=acc, device=q.device)
    for lo in range(0, tk, block):
        keys = slice(lo, min(lo + block, tk))
        s = (qa @ k[:, :, keys].to(acc).transpose(-1, -2)) * scale
        if bias is not None:
            s = s + bias.to(acc).expand(b, h, tq, tk)[..., keys]
        s = s.masked_fill(~allowed[..., keys], float("-inf"))
        new = torch.maximum(top, s.amax(-1, keepdim=True))
        ref = torch.where(torch.isfinite(new), new, torch.zeros_like(new)) if guard else new
        p = torch.exp(s - ref)
        fix = torch.exp(top - ref) if not guard else torch.where(torch.isfinite(top), torch.exp(top - ref),
                                                                   torch.zeros_like(top))
        total = (total.to(acc) * fix).to(sum_dtype) + p.sum(-1, keepdim=True).to(sum_dtype)
        out = out * fix + p @ v[:, :, keys].to(acc)
        top = new
    total = total.to(acc)
    out = torch.where(total > 0, out / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(out))
    return out.to(q.dtype)


def plain(q, k, v, allowed, scale, *, bias=None, score_dtype=None):
    """softmax(q k^T * scale + bias) v, masked, with scores formed in ``score_dtype`` (default: float32 or
    float64), rows with no key 0."""
    g = q.shape[1] // k.shape[1]
    if g > 1:
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    acc = score_dtype or (torch.float64 if q.dtype == torch.float64 else torch.float32)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    s = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias.to(acc)
    if allowed is not None:
        allowed = allowed.expand(s.shape)
        s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s.float() if acc != torch.float64 else s, -1)
    if allowed is not None:
        p = torch.where(allowed.any(-1, keepdim=True), p, torch.zeros_like(p))
    return (p.to(v.dtype if acc == torch.float64 else torch.float32) @ v.to(p.dtype)).to(q.dtype)
