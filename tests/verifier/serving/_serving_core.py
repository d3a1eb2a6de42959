"""One serving batch's attention, request by request, with the mask rule as a parameter (the corpus's shared core)."""
from __future__ import annotations

from collections.abc import Callable

import torch

Allowed = Callable[[int, int], torch.Tensor]
"""(new tokens, keys) -> which keys each new token may attend (bool, (new tokens, keys))."""


def bottom_right(nq: int, nk: int) -> torch.Tensor:
    """The contract: the new tokens are the last nq positions of a sequence of nk."""
    i = torch.arange(nq)[:, None]
    return torch.arange(nk)[None, :] <= i + (nk - nq)


def per_request(q, k, v, scale, cu_seqlens_q, cu_seqlens_k, allowed: Allowed):  # type: ignore[no-untyped-def]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.zeros(q.shape, dtype=q.dtype)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for q0, q1, k0, k1 in zip(cq, cq[1:], ck, ck[1:]):
        if q1 == q0:
            continue
        s = (q[..., q0:q1, :].float() @ k[..., k0:k1, :].float().transpose(-1, -2)) * scale
        s = s.masked_fill(~allowed(q1 - q0, k1 - k0), float("-inf"))
        p = torch.nan_to_num(torch.softmax(s, dim=-1))  # a row with no key: zeros
        out[..., q0:q1, :] = (p @ v[..., k0:k1, :].float()).to(q.dtype)
    return out
