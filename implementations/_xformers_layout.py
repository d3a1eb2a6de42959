"""xformers' layout and biases for the contract's tensors (:mod:`implementations.xformers_memeff`), in
plain torch so they are tested on a machine where xformers has no kernel: (B, H, T, d) to xformers'
(B, T, H, d) or 5-D GQA form, the structure to xformers' own bias classes, a boolean mask (or a
structure no class expresses) to an additive bias, and the output back with empty rows zeroed.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import logging
from typing import Any

import torch

from harness.reference.oracle import allowed_keys
from implementations.flex_attention import key_ranges


@functools.lru_cache(maxsize=1)
def _import_fmha() -> tuple[Any, str | None]:
    """(xformers.ops.fmha or None, reason). Silences xformers' import-time warning: we report it."""
    logger = logging.getLogger("xformers")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        fmha = importlib.import_module("xformers.ops.fmha")
    except ImportError as exc:
        return None, f"xformers is not installed ({exc}); pip install 'attnbench[xformers]'"
    finally:
        logger.setLevel(level)
    cpp = importlib.import_module("xformers._cpp_lib")
    failure = getattr(cpp, "_cpp_library_load_exception", None)
    if failure is not None:
        lines = [line.strip() for line in str(failure).splitlines()]
        built_for = ", ".join(line for line in lines if line.startswith(("PyTorch", "Python")))
        return fmha, f"xformers' C++/CUDA extensions did not load (built for {built_for or str(failure)})"
    return fmha, None


Structure = dict[str, Any]
"""``window``, ``causal_align`` and ``varlen`` ((query length, key length) per packed sequence) of a case."""


def structure_bias(fmha: Any, tq: int, tk: int, causal: bool, window: tuple[int, int] | None = None,
                   causal_align: str = "top_left", varlen: tuple[tuple[int, int], ...] | None = None) -> Any:
    """xformers' own bias class for the structure, or None where none expresses it (then the caller
    passes an additive tensor). Windows: xformers' local masks take (left, right) when not causal
    and a window size (left + 1) when causal; top-left and bottom-right agree when Tq == Tk."""
    ab = fmha.attn_bias
    aligned_br = causal_align == "bottom_right" or (tq == tk and varlen is None)
    try:
        if varlen is not None:
            q_lens, k_lens = [a for a, _ in varlen], [b for _, b in varlen]
            if not causal:
                return ab.BlockDiagonalMask.from_seqlens(q_lens, k_lens) if window is None else None
            br = causal_align == "bottom_right"
            bias = (ab.BlockDiagonalCausalFromBottomRightMask if br else ab.BlockDiagonalCausalMask).from_seqlens(q_lens, k_lens)
            if window is None:
                return bias
            local = ab.BlockDiagonalCausalLocalAttentionFromBottomRightMask if br else ab.BlockDiagonalCausalLocalAttentionMask
            return local(q_seqinfo=bias.q_seqinfo, k_seqinfo=bias.k_seqinfo, _window_size=window[0] + 1)
        if causal and window is None:
            return ab.LowerTriangularFromBottomRightMask() if causal_align == "bottom_right" else ab.LowerTriangularMask()
        if window is not None and aligned_br:
            return (ab.LowerTriangularFromBottomRightLocalAttentionMask(window[0] + 1) if causal
                    else ab.LocalAttentionFromBottomRightMask(window_left=window[0], window_right=window[1]))
    except (ValueError, RuntimeError):  # xformers refuses e.g. a causal bottom-right block with fewer keys than
        return None                     # queries, or a sequence whose window leaves a query no key
    return None


def to_xformers(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                mask: torch.Tensor | None = None, **structure: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """Contract tensors (B, H, T, d) to xformers' layout, plus its ``attn_bias`` (``structure``: see :data:`Structure`)."""
    b, h, tq, _ = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    qx, kx, vx = (x.transpose(1, 2) for x in (q, k, v))  # (B, T, H, d) views
    if hkv != h:  # 5-D (B, T, G, H/G, d): group g holds query heads g*H/G ... (g+1)*H/G - 1
        group = h // hkv
        qx = qx.reshape(b, tq, hkv, group, -1)
        kx = kx.unsqueeze(3).expand(b, tk, hkv, group, -1)
        vx = vx.unsqueeze(3).expand(b, tk, hkv, group, -1)
    structured = any(structure.get(key) not in (None, "top_left") for key in ("window", "causal_align", "varlen"))
    if mask is None and not (not causal and not structured):
        fmha, _ = _import_fmha()
        bias = None if fmha is None else structure_bias(fmha, tq, tk, causal, **structure)
        if bias is not None:
            return qx, kx, vx, bias
    elif mask is None:
        return qx, kx, vx, None
    return qx, kx, vx, additive_bias(b, h, hkv, tq, tk, causal=causal, mask=mask, dtype=q.dtype, device=q.device,
                                     **structure)


def additive_bias(b: int, h: int, hkv: int, tq: int, tk: int, *, causal: bool, mask: torch.Tensor | None,
                  dtype: torch.dtype, device: torch.device, **structure: Any) -> torch.Tensor:
    """0 where a query may attend, -inf elsewhere; (B, H, Tq, Tk) or 5-D (B, G, H/G, Tq, Tk) for GQA."""
    allowed = torch.ones(b, h, tq, tk, dtype=torch.bool, device=device)
    rule = allowed_keys(tq, tk, causal=causal, mask=mask, device=device, **structure)
    if rule is not None:
        allowed &= rule
    padded = torch.empty(b, h, tq, -(-tk // 8) * 8, dtype=dtype, device=device)[..., :tk]
    padded.copy_(torch.zeros((), dtype=dtype, device=device).masked_fill(~allowed, float("-inf")))
    return padded if hkv == h else padded.reshape(b, hkv, h // hkv, tq, tk)


def from_xformers(out: torch.Tensor, q: torch.Tensor, *, causal: bool, mask: torch.Tensor | None,
                  tk: int | None = None, **structure: Any) -> torch.Tensor:
    """xformers' output back to (B, H, Tq, d); rows with no allowed key set to zero (the contract)."""
    b, h, tq, d = q.shape
    out = out.reshape(b, tq, h, d).transpose(1, 2)
    structured = any(structure.get(key) not in (None, "top_left") for key in ("window", "causal_align", "varlen"))
    if mask is None and not structured:
        return out
    tk = mask.shape[-1] if tk is None and mask is not None else tk
    assert tk is not None, "from_xformers needs tk= with a structure"
    if mask is None:  # the structure alone: a row has a key when its key range is not empty, O(T)
        seqs = structure.get("varlen")
        cu_q, cu_k = (None, None) if seqs is None else ([0, *itertools.accumulate(p[i] for p in seqs)] for i in (0, 1))
        lo, hi = key_ranges(tq, tk, causal, structure.get("window"), structure.get("causal_align", "top_left"), cu_q, cu_k)
        rows = (lo < hi).to(q.device)[:, None]
    else:
        allowed = allowed_keys(tq, tk, causal=causal, mask=mask, device=q.device, **structure)
        assert allowed is not None
        rows = allowed.expand(b, h, tq, tk).any(-1, keepdim=True)
    return torch.where(rows, out, torch.zeros((), dtype=out.dtype, device=out.device))
