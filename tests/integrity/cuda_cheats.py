"""CUDA plugins for bench's integrity checks on a GPU (scripts/gpu_check.sh, step ``integrity``): cheats that a
CUDA cell must flag, and honest kernels it must pass, one of them finishing its work on a side stream.

``EXPECTED`` maps each to the verdicts that count as right (docs/integrity.md, "On a GPU").
"""

import torch
import torch.nn.functional as F

from harness import register

EXPECTED = {
    "cuda_honest": ("ok",),
    "cuda_side_stream": ("ok",),  # its time must include the side stream's work: the device-wide synchronize
    "cuda_memo_pointer": ("wrong", "implausible"),
    "cuda_replay": ("wrong", "implausible"),
    "cuda_wrong_rows": ("wrong", "implausible"),  # an eighth of the work can also fall under the floor
    "cuda_lazy": ("violation",),
}
CUDA = {"devices": ("cuda",), "dtypes": ("float32", "bfloat16", "float16"), "backend": "torch"}


def attend(q, k, v, scale=None):
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


@register("cuda_honest", **CUDA)
def cuda_honest(q, k, v, *, causal=False, mask=None, scale=None):
    return attend(q, k, v, scale)


_SIDE = {}


@register("cuda_side_stream", **CUDA)
def cuda_side_stream(q, k, v, *, causal=False, mask=None, scale=None):
    """Queues the work on a stream of its own and returns at once, without waiting for it."""
    side = _SIDE.setdefault("stream", torch.cuda.Stream())
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = attend(q, k, v, scale)
    out.record_stream(torch.cuda.current_stream())
    return out


_MEMO = {}


@register("cuda_memo_pointer", **CUDA)
def cuda_memo_pointer(q, k, v, *, causal=False, mask=None, scale=None):
    """Memoises on the inputs' device pointers and shapes."""
    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape))
    if key not in _MEMO:
        _MEMO[key] = attend(q, k, v, scale)
    return _MEMO[key].clone()


_LAST = {"shape": None, "count": 0, "out": None}


@register("cuda_replay", **CUDA)
def cuda_replay(q, k, v, *, causal=False, mask=None, scale=None):
    """Replays (a copy of) the last output once three calls in a row had the same shapes."""
    shape = tuple(q.shape) + tuple(k.shape)
    _LAST["count"] = _LAST["count"] + 1 if _LAST["shape"] == shape else 1
    _LAST["shape"] = shape
    if _LAST["count"] > 3 and _LAST["out"] is not None:
        return _LAST["out"].clone()
    _LAST["out"] = attend(q, k, v, scale)
    return _LAST["out"]


@register("cuda_wrong_rows", **CUDA)
def cuda_wrong_rows(q, k, v, *, causal=False, mask=None, scale=None):
    """Computes every 8th query row and copies it to the next 7."""
    rows = attend(q[..., ::8, :].contiguous(), k, v, scale)
    return rows.repeat_interleave(8, dim=-2)[..., :q.shape[-2], :].contiguous()


class Lazy(torch.Tensor):
    """A subclass that would compute when read: bench must refuse it as a result."""


@register("cuda_lazy", **CUDA)
def cuda_lazy(q, k, v, *, causal=False, mask=None, scale=None):
    return Lazy._make_subclass(Lazy, attend(q, k, v, scale))
