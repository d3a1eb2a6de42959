"""Plugins that game a timer, one per pattern, and honest fast ones: bench must flag every cheat and no honest one.

Each cheat passes a correctness check on fresh inputs of a verify-sized case, and games bench's timing
in its own way (public write-ups on benchmark hacking list these patterns).
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

from harness import register


def attend(q, k, v, scale=None):
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


_MEMO = {}


@register("memo_pointer", backend="torch")
def memo_pointer(q, k, v, *, causal=False, mask=None, scale=None):
    """Memoises on the inputs' data pointers and shapes."""
    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape))
    if key not in _MEMO:
        _MEMO[key] = attend(q, k, v, scale)
    return _MEMO[key]


_LAST = {"shape": None, "count": 0, "out": None}


@register("replay_after_three", backend="torch")
def replay_after_three(q, k, v, *, causal=False, mask=None, scale=None):
    """Replays the last output once three calls in a row had the same shapes."""
    shape = tuple(q.shape) + tuple(k.shape)
    _LAST["count"] = _LAST["count"] + 1 if _LAST["shape"] == shape else 1
    _LAST["shape"] = shape
    if _LAST["count"] > 3 and _LAST["out"] is not None:
        return _LAST["out"]
    _LAST["out"] = attend(q, k, v, scale)
    return _LAST["out"]


class Lazy(torch.Tensor):
    """Computes when first read: the timed call returns before any work is done."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        args = [a.materialise() if isinstance(a, Lazy) else a for a in args]
        return func(*args, **kwargs)

    def materialise(self):
        out = torch.Tensor._make_subclass(torch.Tensor, self)
        with torch._C.DisableTorchFunctionSubclass():
            if not getattr(self, "_done", False):
                out.copy_(attend(*self._inputs))
                self._done = True
        return out


@register("lazy_subclass", backend="torch")
def lazy_subclass(q, k, v, *, causal=False, mask=None, scale=None):
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.empty(q.shape, dtype=q.dtype)
    lazy = Lazy._make_subclass(Lazy, out)
    lazy._inputs = (q, k, v, scale)
    return lazy


@register("background_fill", backend="torch")
def background_fill(q, k, v, *, causal=False, mask=None, scale=None):
    """Returns an empty tensor and fills it from a thread that outlives the call."""
    out = torch.empty(q.shape, dtype=q.dtype)
    threading.Thread(target=lambda: out.copy_(attend(q, k, v, scale)), daemon=True).start()
    return out


_SIDE = ThreadPoolExecutor(1)
_SIDE.submit(lambda: None).result()  # the "stream": a worker that exists before any call


@register("side_stream", backend="torch")
def side_stream(q, k, v, *, causal=False, mask=None, scale=None):
    """Queues the work on a thread that already existed (CPU's stream injection) and returns at once."""
    out = torch.empty(q.shape, dtype=q.dtype)
    _SIDE.submit(lambda: out.copy_(attend(q, k, v, scale)))
    return out


@register("every_eighth_row", backend="torch")
def every_eighth_row(q, k, v, *, causal=False, mask=None, scale=None):
    """Exact on small cases; above T = 256 computes every 8th query row and copies it to the next 7."""
    if q.shape[-2] <= 256:
        return attend(q, k, v, scale)
    rows = attend(q[..., ::8, :].contiguous(), k, v, scale)
    return rows.repeat_interleave(8, dim=-2)[..., :q.shape[-2], :].contiguous()


@register("half_precision", backend="torch")
def half_precision(q, k, v, *, causal=False, mask=None, scale=None):
    """Computes in bfloat16 and hands back float32."""
    return attend(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), scale).to(q.dtype)


@register("precomputed", backend="torch", prepare=True)
def precomputed(q, k, v, *, causal=False, mask=None, scale=None):
    """Computes the answer in its set-up; the timed call hands it back."""
    out = attend(q, k, v, scale)
    return lambda: out


@register("returns_v", backend="torch")
def returns_v(q, k, v, *, causal=False, mask=None, scale=None):
    """With one key the output is v: returned as is (exact, but the caller's output is its input)."""
    return v if k.shape[-2] == 1 else attend(q, k, v, scale)


# ---------------------------------------------------------------- honest


@register("honest_sdpa", backend="torch")
def honest_sdpa(q, k, v, *, causal=False, mask=None, scale=None):
    return attend(q, k, v, scale)


@register("honest_prepared", backend="torch", prepare=True)
def honest_prepared(q, k, v, *, causal=False, mask=None, scale=None):
    """Plans its layout in set-up (a transposed-key buffer, an output buffer allocated once); fills them in the call."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    kt = torch.empty(k.shape[:-2] + (k.shape[-1], k.shape[-2]), dtype=k.dtype)
    out = torch.empty(q.shape, dtype=q.dtype)

    def call():
        torch.mul(k.transpose(-1, -2), scale, out=kt)
        torch.matmul(torch.softmax(q @ kt, dim=-1), v, out=out)
        return out
    return call


_POOL = ThreadPoolExecutor(2)


@register("honest_pool", backend="torch")
def honest_pool(q, k, v, *, causal=False, mask=None, scale=None):
    """Heads in parallel on a persistent thread pool, joined before returning."""
    out = torch.empty(q.shape, dtype=q.dtype)

    def head(h):
        out[:, h] = attend(q[:, h], k[:, h], v[:, h], scale)
    list(_POOL.map(head, range(q.shape[1])))
    return out
