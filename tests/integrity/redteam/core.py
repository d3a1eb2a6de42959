"""Cheats written against the parent-driven core (harness/bench/driven.py), by one who read it.

The core's promises, one cheat each: the output is read when the worker says done (so work after it is not in
the output), and the inputs are written while the worker is stopped (so work before the call has nothing new to
work on). The parent trusts nothing the worker describes: descriptor.py and layout.py (a module each, as each
patches the harness when it is imported).
"""

import threading

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
