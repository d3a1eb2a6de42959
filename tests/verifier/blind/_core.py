"""The correct attention every plugin of this set starts from, in pieces (the leading underscore keeps this file
out of the set): each plugin is these pieces with one of them replaced or one line changed around them."""
from __future__ import annotations

import torch


def repeat_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V with each kv head repeated for its group of query heads (as they are without GQA)."""
    g = q.shape[1] // k.shape[1]
    if g > 1:
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return k, v


def cached(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache_seqlens: torch.Tensor | None):
    """Each batch element's (b, L_b, K_b, V_b): its first L_b keys (every key without cache lengths), each kv
    head repeated for its group of query heads."""
    g = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        length = k.shape[2] if cache_seqlens is None else int(cache_seqlens[b])
        yield b, length, k[b, :, :length].repeat_interleave(g, 0), v[b, :, :length].repeat_interleave(g, 0)


def causal_and_mask(tq: int, tk: int, causal: bool, mask: torch.Tensor | None,
                    device: torch.device | None = None) -> torch.Tensor | None:
    """The allowed keys (top-left causal, and the boolean mask), or None where every key is."""
    allowed = torch.ones(tq, tk, dtype=torch.bool, device=device).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    return allowed


def band(tq: int, tk: int, causal: bool, window: tuple[int, int] | None, align: str) -> torch.Tensor:
    """(Tq, Tk) booleans of the causal and sliding-window structure, top-left or bottom-right aligned."""
    i = torch.arange(tq)[:, None]
    j = torch.arange(tk)[None, :] - ((tk - tq) if align == "bottom_right" else 0)
    ok = torch.ones(tq, tk, dtype=torch.bool)
    if causal:
        ok &= j <= i
    if window is not None:
        ok &= (j >= i - window[0]) & (j <= i + window[1])
    return ok


def weigh(s: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the keys of the allowed scores; a row with no allowed key weighs nothing (zeros)."""
    if allowed is None:
        return torch.softmax(s, -1)
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    return torch.where(allowed.any(-1, keepdim=True), p, torch.zeros((), dtype=p.dtype))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
           allowed: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T * scale over the allowed keys) v, K and V with as many heads as q."""
    return weigh((q @ k.transpose(-1, -2)) * scale, allowed) @ v
