"""Matmul + softmax in eager PyTorch: the formula as people write it in a model, with autograd.

Rows with no allowed key would be NaN after a plain softmax over all -inf; the contract
asks for zeros, so those rows are zeroed explicitly (as SDPA does).
"""

from __future__ import annotations

import torch

from harness import register


@register("torch_eager", backend="torch", memory="quadratic", dtypes=("float64", "float32", "bfloat16", "float16"),
          devices=("cpu", "cuda"), causal=True, mask=True, gqa=True, grad=True, bias=True,
          description="PyTorch matmul + softmax, materialising the T x T matrix; autograd")
def torch_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                mask: torch.Tensor | None = None, scale: float | None = None,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    heads, tq, d = q.shape[1], q.shape[2], q.shape[3]
    tk = k.shape[2]
    groups = heads // k.shape[1]
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    scores = torch.matmul(q * scale, k.transpose(-1, -2))  # scaled first: a float16 q.k past 65,504 stays finite
    if bias is not None:  # additive (ALiBi), broadcastable to (B, H, Tq, Tk)
        scores = scores + bias.to(scores.dtype)
    allowed = None
    if causal:
        allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        allowed = mask if allowed is None else (allowed & mask)
    if allowed is None:
        return torch.matmul(torch.softmax(scores, dim=-1), v)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    any_allowed = allowed.any(dim=-1, keepdim=True)
    weights = torch.where(any_allowed, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))
    return torch.matmul(weights, v)
