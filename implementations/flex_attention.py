"""FlexAttention (``torch.nn.attention.flex_attention``), compiled with ``torch.compile``, behind the contract.

Compiling is the cost (with torch 2.13 on a CPU, tens of seconds for a first compile and seconds more for a new
head dim, dtype, mask or GQA variant; bench records it as each cell's ``setup_s``), so the strategy keeps it to one graph per variant:

* one compiled function with dynamic shapes: a new T, batch or head count reuses the graph (one more
  graph where T first exceeds one 128-key block: dynamo specialises a size of 1); the head
  dim is padded with zeros to 32, 64, 128 or 256 (it is compiled in; not 16: see below) and the scale folded into Q
  (a float argument is compiled in too: seconds per new value);
* structure as data: every case's allowed keys are a range per query row, ``[lo[i], hi[i])`` (causal
  in either alignment, a window, packed sequences), in two int32 tensors that one module-level
  ``mask_mod`` reads (with the case's boolean mask, if any): one graph serves every structure;
* the block mask is built from the same ``mask_mod`` in set-up, and the first call (the compile) is
  made in set-up too: never timed (bench records the set-up as the cell's ``setup_s``);
* inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``): a new process reuses compiled kernels in ~3 s;
* declared ``on_request``: left out of verify, bench and run unless named (``--only flex_attention``).

Gemma 2's soft-cap is a ``score_mod`` (FlexAttention applies it to the scaled scores, before the block mask), the
cap read from the state as a tensor, so a new cap value is no new graph. gpt-oss's sinks are one more key:
K and V get a row of zeros at index Tk that every query may see, and a ``score_mod`` gives that key the head's
sink logit as its score (after the cap, which the sink does not take), so the sink joins each row's
denominator and carries no value, and a row with no other key is zero. (Rescaling the output by the sink's
share through ``return_lse`` would need no extra key, but PyTorch's compiled CPU FlexAttention refuses
``return_lse``.) Gradients with sinks would flow to them through a tensor the score_mod reads, which no verify
here has checked: they are refused with that reason.

PyTorch 2.13 has no FlexAttention backward on CPU: gradient cases get PyTorch's own error as the reason.
Nor does its CPU template compile a mask_mod that reads a boolean (B, H, Tq, Tk) mask under dynamic shapes
(a C++ error, ``'cur_kvSplitSize9' was not declared``): cases with a mask get that reason on the CPU, and so
do cases whose cache lengths or pages would reach the plugin as such a mask (structures it does not take).

The head dim is padded to at least 32, never 16: PyTorch 2.13's CPU FlexAttention template, compiled for
AVX2 (the vector width inductor picks on a CPU without AVX-512, or with ``ATEN_CPU_CAPABILITY=avx2``),
returns wrong rows or NaN at head dim 16 whenever the last key block's length is 8 mod 16 (Tk = 8, 24,
40, 136, ...), with or without a mask_mod, static or dynamic shapes; head dims 32 to 256 are exact there, and
the AVX-512 code is exact at 16. Measured with ``benchmarks/flex_cpu_isa_check.py``. An inductor cache
filled on an AVX-512 machine hides it on an AVX2 one, which is why it shows on cold caches.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from harness import register

if TYPE_CHECKING:
    from harness.case.attention import AttentionCase

_STATE: dict[str, torch.Tensor] = {}
"""The running case's ``lo``, ``hi`` (and ``mask``): read by the mask_mods, so no graph holds a case."""


def _banded(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    return (kv_idx >= _STATE["lo"][q_idx]) & (kv_idx < _STATE["hi"][q_idx])


def _masked(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    return _banded(b, h, q_idx, kv_idx) & _STATE["mask"][b, h, q_idx, kv_idx]


def _with_sink(allowed: Any, kv_idx: Any) -> Any:
    return allowed | (kv_idx == _STATE["sink_at"])


def _banded_sink(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    return _with_sink(_banded(b, h, q_idx, kv_idx), kv_idx)


def _masked_sink(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    return _with_sink(_masked(b, h, q_idx, kv_idx), kv_idx)


def _capped(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    """Gemma 2's soft-cap of a scaled score, the cap a 0-d tensor of the state (one graph for every cap)."""
    cap = _STATE["softcap"]
    return torch.tanh(score / cap) * cap


def _sink_scored(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    """The sink key's score is query head h's sink logit; every other key keeps its own."""
    return torch.where(kv_idx == _STATE["sink_at"], _STATE["sink"][h], score)


def _capped_sink_scored(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    return _sink_scored(_capped(score, b, h, q_idx, kv_idx), b, h, q_idx, kv_idx)


SCORE_MODS = {(False, False): None, (True, False): _capped, (False, True): _sink_scored, (True, True): _capped_sink_scored}
"""The score_mod of (soft-capped, with sinks)."""


def key_ranges(tq: int, tk: int, causal: bool, window: tuple[int, int] | None, causal_align: str,
               cu_q: list[int] | None, cu_k: list[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per query row, the first allowed key and one past the last (docs/structures.md)."""
    lo, hi = torch.zeros(tq, dtype=torch.int64), torch.zeros(tq, dtype=torch.int64)
    spans = [(0, tq, 0, tk)] if cu_q is None or cu_k is None else list(zip(cu_q, cu_q[1:], cu_k, cu_k[1:]))
    for q0, q1, k0, k1 in spans:
        diagonal = torch.arange(q0, q1) + (k0 - q0) + ((k1 - k0) - (q1 - q0) if causal_align == "bottom_right" else 0)
        first, last = torch.full((q1 - q0,), k0), torch.full((q1 - q0,), k1)
        if causal:
            last = torch.minimum(last, diagonal + 1)
        if window is not None:
            first = torch.maximum(first, diagonal - window[0])
            last = torch.minimum(last, diagonal + window[1] + 1)
        lo[q0:q1], hi[q0:q1] = first, torch.maximum(first, last)
    return lo.to(torch.int32), hi.to(torch.int32)


@functools.cache
def _compiled() -> Any:
    from torch.nn.attention.flex_attention import flex_attention

    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):  # one graph per variant; verify quick holds over 64 variants
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 1024))
    import torch.fx.experimental._config as shapes

    shapes.use_duck_shape = False  # Tq == Tk in one case must not specialise the graph to equal lengths
    if hasattr(config, "fail_on_recompile_limit_hit"):
        config.fail_on_recompile_limit_hit = True  # never fall back to eager in silence
    return torch.compile(flex_attention, dynamic=True)


@functools.cache
def _cpu_backward_reason() -> str | None:
    """PyTorch's own answer to a tiny eager FlexAttention call with gradients on the CPU."""
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.zeros(1, 1, 8, 16, requires_grad=True)
    try:
        flex_attention(q, q, q)
    except NotImplementedError as exc:
        return f"PyTorch {torch.__version__}: {exc}"
    return None


PADDED_D = (32, 64, 128, 256)
STRUCTURES = ("window", "bottom_right", "varlen")
CPU_MASK_REASON = ("PyTorch {}'s CPU FlexAttention template does not compile a mask_mod reading a boolean mask tensor "
                   "under dynamic shapes (C++ error: 'cur_kvSplitSize9' was not declared in this scope)")


def _available(case: AttentionCase) -> str | None:
    try:
        import torch.nn.attention.flex_attention
    except ImportError as exc:
        return f"PyTorch {torch.__version__} has no FlexAttention ({exc}); it needs torch >= 2.5"
    if case.d > PADDED_D[-1]:
        return f"head dim {case.d} > {PADDED_D[-1]}: FlexAttention's templates take at most {PADDED_D[-1]}"
    if case.device == "cpu" and (case.mask != "none" or case.structures - set(STRUCTURES)):
        return CPU_MASK_REASON.format(torch.__version__)
    if case.grad and case.device == "cpu":
        return _cpu_backward_reason()
    if case.grad and case.sinks:
        return ("sinks reach FlexAttention as a tensor its score_mod reads; the gradient through it is not "
                "verified, so gradients with sinks are not offered")
    return None


@register("flex_attention", backend="torch", memory="linear", dtypes=("float32", "bfloat16", "float16"),
          devices=("cpu", "cuda"), causal=True, mask=True, gqa=True, grad=True, sinks=True, softcap=True,
          prepare=True, on_request=True,
          structures=STRUCTURES, available=_available,
          description="torch.nn.attention.flex_attention compiled (one dynamic-shape graph; structure as data)")
def flex_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                   mask: torch.Tensor | None = None, scale: float | None = None,
                   window: tuple[int, int] | None = None, causal_align: str = "top_left",
                   cu_seqlens_q: torch.Tensor | None = None, cu_seqlens_k: torch.Tensor | None = None,
                   sinks: torch.Tensor | None = None, softcap: float | None = None) -> Any:
    """Set-up (the key ranges, the block mask, the compile) here; returns the timed call."""
    from torch.nn.attention.flex_attention import create_block_mask

    b, h, tq, d = q.shape
    tk = k.shape[2]
    cu_q, cu_k = (None if c is None else [int(x) for x in c] for c in (cu_seqlens_q, cu_seqlens_k))
    lo, hi = key_ranges(tq, tk, causal, window, causal_align, cu_q, cu_k)
    state = {"lo": lo.to(q.device), "hi": hi.to(q.device)}
    if mask is not None:
        state["mask"] = mask.to(device=q.device, dtype=torch.bool).expand(b, h, tq, tk)
    if softcap is not None:
        state["softcap"] = torch.tensor(float(softcap), dtype=torch.float32, device=q.device)
    if sinks is not None:  # one more key, at index tk, scored as the sink and carrying zeros
        state["sink"] = sinks.to(device=q.device, dtype=torch.float32).detach()
        state["sink_at"] = torch.tensor(tk, dtype=torch.int32, device=q.device)
        if "mask" in state:
            state["mask"] = torch.nn.functional.pad(state["mask"], (0, 1), value=True)
        k, v = (torch.cat([x, x.new_zeros(*x.shape[:2], 1, x.shape[3])], dim=2) for x in (k, v))
    _STATE.clear()
    _STATE.update(state)
    mask_mod = {(False, False): _banded, (True, False): _masked, (False, True): _banded_sink,
                (True, True): _masked_sink}[(mask is not None, sinks is not None)]
    blocks = create_block_mask(mask_mod, b if mask is not None else None, h if mask is not None else None, tq,
                               k.shape[2], device=q.device)
    pad = next(p for p in PADDED_D if p >= d) - d  # zeros: the scores are unchanged, the output columns dropped
    factor = (1.0 / d ** 0.5 if scale is None else scale) * (d + pad) ** 0.5  # flex's own scale is 1/sqrt(d + pad)
    if factor != 1.0:
        q = (q.float() * factor).to(q.dtype)
    q, k, v = (torch.nn.functional.pad(x, (0, pad)).contiguous() for x in (q, k, v))
    flex, gqa = _compiled(), h != k.shape[1]
    score_mod = SCORE_MODS[(softcap is not None, sinks is not None)]

    def call() -> torch.Tensor:
        _STATE.clear()
        _STATE.update(state)
        out = flex(q, k, v, score_mod=score_mod, block_mask=blocks, enable_gqa=gqa)
        return out[..., :d] if pad else out

    call()  # the compile (or a load from inductor's cache), in set-up
    return call
