"""Cheats written against the parent-driven core (harness/bench/driven.py), by one who read it.

The core's promises, one cheat each: the output is read when the worker says done (so work after it is not in
the output), and the inputs are written while the worker is stopped (so work before the call has nothing new to
work on). The parent trusts nothing the worker describes: descriptor.py and layout.py (a module each, as each
patches the harness when it is imported).
"""

import threading

import torch
import torch.nn.functional as F

import harness.bench.driven as driven
from harness import register


def _attend(q, k, v, scale):
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


# --- work after done: say done first, then copy the output into shared memory

_publish = driven.Server._publish


def _done_first(self, sock, parts):
    if self.out_views and len(parts) == len(self.out_views):
        sock.send(driven.DONE)  # the parent's clock stops here...
        for p, view in zip(parts, self.out_views):  # ...and the copy runs on, off the clock
            if p is not None:
                view.copy_(p)
        return None
    return _publish(self, sock, parts)


@register("rt_done_before_copy", backend="torch",
          description="patches the worker's publisher: sends done, then copies the output into shared memory")
def rt_done_before_copy(q, k, v, *, causal=False, mask=None, scale=None):
    driven.Server._publish = _done_first
    return _attend(q, k, v, scale)


# --- work before go: a thread that keeps computing on whatever the shared inputs hold

_LATEST: dict[str, object] = {}


def _keep_computing(q, k, v, scale):
    while True:
        _LATEST["out"] = _attend(q, k, v, scale)


@register("rt_ahead_thread", backend="torch",
          description="a thread computes on the shared inputs all the time; each call returns its latest result")
def rt_ahead_thread(q, k, v, *, causal=False, mask=None, scale=None):
    if "thread" not in _LATEST:
        _LATEST["out"] = _attend(q, k, v, scale)
        _LATEST["thread"] = threading.Thread(target=_keep_computing, args=(q, k, v, scale), daemon=True)
        _LATEST["thread"].start()
    return _LATEST["out"].clone()


# --- CPU the clock does not see: most rows computed in a child forked for the call, ended and reaped before done

_SHARED: dict[tuple, object] = {}


def _rows_in_numpy(q, k, v, scale):
    import numpy as np

    s = (q @ np.swapaxes(k, -1, -2)) * scale
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return (s / s.sum(axis=-1, keepdims=True)) @ v


@register("rt_forked_rows", backend="torch",
          description="each call forks a child that computes 7/8 of the rows into shared memory and exits before done")
def rt_forked_rows(q, k, v, *, causal=False, mask=None, scale=None):
    import os

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    key = (tuple(q.shape), q.dtype)
    if key not in _SHARED:
        _SHARED[key] = q.new_empty(q.shape).share_memory_()
    out = _SHARED[key]
    split = q.shape[-2] // 8
    pid = os.fork()
    if pid == 0:  # the child: most of the work, on a process clock the worker's own never holds
        try:
            rows = _rows_in_numpy(q[..., split:, :].numpy(), k.numpy(), v.numpy(), scale)
            out[..., split:, :].copy_(torch.from_numpy(rows))
        finally:
            os._exit(0)
    out[..., :split, :] = _attend(q[..., :split, :], k, v, scale)
    os.waitpid(pid, 0)
    return out.clone()
