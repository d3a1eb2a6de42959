"""A correct torch attention the broken plugins below start from (the leading underscore keeps it out of the suite)."""
import torch


def repeat_kv(q, k, v):
    """K and V with each kv head repeated for its group of query heads (GQA as plain multi-head attention)."""
    g = q.shape[1] // k.shape[1]
    return k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)


def masked_scores(q, k, *, causal=False, mask=None, scale=None):
    """q k^T * scale (1/sqrt(d) when None), the logits that causal or the mask forbid at -inf: where the plugins
    that break the softmax itself start (an empty row is all -inf here; what becomes of it is theirs)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    return s if allowed is None else s.masked_fill(~allowed, float("-inf"))


def attend(q, k, v, *, causal=False, mask=None, scale=None, fill=float("-inf")):
    """softmax(q k^T * scale, masked) v with the contract's semantics; ``fill`` is what masked logits become."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is None:
        return torch.softmax(s, -1) @ v
    allowed = allowed.expand(s.shape)
    p = torch.softmax(s.masked_fill(~allowed, fill), -1)
    return (p @ v).masked_fill(~allowed.any(-1, keepdim=True), 0.0)


def band(tq, tk, *, causal, window, causal_align, device="cpu", left_shift=0, use_right=True, align=True):
    """(Tq, Tk) booleans of a causal mask and sliding window, with knobs the broken plugins turn:
    ``left_shift`` moves the window's left edge, ``use_right=False`` treats right as 0, ``align=False``
    ignores bottom-right alignment. With the defaults this is the contract's structure."""
    offset = tk - tq if align and causal_align == "bottom_right" else 0
    i = torch.arange(tq, device=device)[:, None]
    j = torch.arange(tk, device=device)[None, :] - offset
    allowed = torch.ones(tq, tk, dtype=torch.bool, device=device)
    if causal:
        allowed &= j <= i
    if window is not None:
        left, right = window
        allowed &= (j >= i - left + left_shift) & (j <= i + (right if use_right else 0))
    return allowed


def attend_structured(q, k, v, *, causal, mask, scale, window, causal_align, **knobs):
    """``attend`` with the structure given natively, built by ``band`` with ``knobs``."""
    allowed = band(q.shape[-2], k.shape[-2], causal=causal, window=window, causal_align=causal_align,
                   device=q.device, **knobs)
    return attend(q, k, v, mask=allowed if mask is None else allowed & mask, scale=scale)


def gather(pages, block_table, tk):
    """A paged cache (num_pages, Hkv, page, d) as the contiguous (B, Hkv, Tk, d) it stands for."""
    b, per_seq = block_table.shape
    _, hkv, page, d = pages.shape
    out = pages[block_table.long().reshape(-1)].view(b, per_seq, hkv, page, d).transpose(1, 2)
    return out.reshape(b, hkv, per_seq * page, d)[:, :, :tk]


def cache_allowed(tq, tk, lengths, *, causal, causal_align, extra=0):
    """What a plugin taking ``cache_seqlens`` natively attends: ``band`` without lengths, else ``cache_band``."""
    if lengths is None:
        return band(tq, tk, causal=causal, window=None, causal_align=causal_align)
    return cache_band(tq, tk, lengths, causal=causal, window=None, causal_align=causal_align, extra=extra)


def cache_band(tq, tk, lengths, *, causal, window, causal_align, device="cpu", extra=0):
    """(B, 1, Tq, Tk) booleans of ragged cache lengths with the structure inside each element's L_b keys;
    ``extra`` lets the broken plugins attend keys past the end."""
    out = torch.zeros(len(lengths), 1, tq, tk, dtype=torch.bool, device=device)
    for b, n in enumerate(lengths):
        n = min(int(n) + extra, tk)
        if n:
            out[b, 0, :, :n] = band(tq, n, causal=causal, window=window, causal_align=causal_align, device=device)
    return out
