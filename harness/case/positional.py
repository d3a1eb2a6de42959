"""Positional variants applied as case options: ALiBi biases and rotary embeddings (RoPE).

RoPE rotates pairs of features of q and k by an angle ``pos * base^(-2i/d)``. Two pairings
are in use and they are NOT interchangeable (same weights, different outputs):

- ``"rotate_half"``: feature i pairs with i + d/2 (GPT-NeoX, Hugging Face LLaMA's
  ``rotate_half``);
- ``"interleaved"``: feature 2i pairs with 2i+1 (RoFormer, GPT-J, and the
  ``rotary-embedding-torch`` package, whose helper is confusingly also named ``rotate_half``).

One is the other after a fixed permutation of the features (:func:`rope_permutation`).
"""

from __future__ import annotations

import torch


def alibi_slopes(heads: int) -> torch.Tensor:
    """Per-head slopes, float64, as ALiBi's reference code (Press et al.), BLOOM and MPT compute them.

    For H a power of two, 2^(-8 i / H), i = 1..H. Otherwise the H' = 2^floor(log2 H) slopes of the closest power
    of two, then every other slope of 2 H' (2^(-8 i / 2H'), i = 1, 3, 5, ...) for the H - H' heads left: for 6
    heads 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3. The geometric sequence 2^(-8 i / H) for every H is a different
    (and wrong) set of slopes for a layer that computes its own.
    """
    if heads < 1:
        raise ValueError(f"ALiBi needs at least one head, got {heads}")
    closest = 1 << (heads.bit_length() - 1)  # the largest power of two <= heads

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * i / n) for i in range(1, n + 1)]

    slopes = geometric(closest) + geometric(2 * closest)[0::2][: heads - closest]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(heads: int, tq: int, tk: int) -> torch.Tensor:
    """Additive bias (1, H, Tq, Tk): -slope_h * |i - j|, float64 (queries and keys aligned at 0)."""
    distance = (torch.arange(tq, dtype=torch.float64)[:, None] - torch.arange(tk, dtype=torch.float64)[None, :]).abs()
    return -alibi_slopes(heads)[None, :, None, None] * distance


ROPE_CONVENTIONS = ("rotate_half", "interleaved")
ROPE_BASE = 10000.0


def rope_angles(t: int, d: int, *, base: float = ROPE_BASE, offset: int = 0) -> torch.Tensor:
    """(T, d/2) float64 angles ``(offset + pos) * base^(-2i/d)``: pair i turns at frequency i."""
    if d % 2:
        raise ValueError(f"RoPE needs an even head dimension, got d={d}")
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return torch.arange(offset, offset + t, dtype=torch.float64)[:, None] * inv_freq[None, :]


def rope_permutation(d: int) -> torch.Tensor:
    """Feature order taking the interleaved layout to the rotate-half one: x_half = x_inter[..., perm]."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def apply_rope(x: torch.Tensor, convention: str, *, base: float = ROPE_BASE, offset: int = 0) -> torch.Tensor:
    """Rotate x (..., T, d) by position along dim -2; computed in float64, returned in x's dtype.

    Written as complex multiplication (pair (a, b) -> (a + ib) e^{i angle}) so that it is an
    independent formula from the implementations' cos/sin-and-swap code.
    """
    if convention not in ROPE_CONVENTIONS:
        raise ValueError(f"unknown RoPE convention {convention!r}; choose one of {ROPE_CONVENTIONS}")
    t, d = x.shape[-2], x.shape[-1]
    angles = rope_angles(t, d, base=base, offset=offset).to(x.device)
    x64 = x.to(torch.float64)
    if convention == "interleaved":
        pairs = torch.view_as_complex(x64.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    else:
        pairs = torch.complex(x64[..., : d // 2], x64[..., d // 2:])
    turned = pairs * torch.polar(torch.ones_like(angles), angles)
    if convention == "interleaved":
        out = torch.view_as_real(turned).reshape(x.shape)
    else:
        out = torch.cat([turned.real, turned.imag], dim=-1)
    return out.to(x.dtype)


def rope_tables(t: int, d: int, convention: str, *, base: float = ROPE_BASE) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, d) float64 cos and sin tables laid out for ``x*cos + swap(x)*sin`` in that convention.

    Module implementations use these (or their own) and must match :func:`apply_rope`.
    """
    angles = rope_angles(t, d, base=base)
    if convention == "interleaved":
        full = angles.repeat_interleave(2, dim=-1)
    elif convention == "rotate_half":
        full = torch.cat([angles, angles], dim=-1)
    else:
        raise ValueError(f"unknown RoPE convention {convention!r}; choose one of {ROPE_CONVENTIONS}")
    return full.cos(), full.sin()
