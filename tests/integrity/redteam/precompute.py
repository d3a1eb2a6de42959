"""Red team: cheats that have the answer before the timer starts.

- ``rt_paced_prepare``: the answer computed in ``prepare`` (allowed), each timed call paced to 1.3x the
  harness's physics floor, which is built from a theoretical roof far above the machine's real one.
- ``rt_rng_clone``: clones the harness's shift generator from the timing loop and precomputes the output
  of every future call in the first (untimed) call.
- ``rt_lowrank_cache``: the harness's per-call change of q is a row-vector shift (rank one); it caches
  exp(q0 K^T) once per input set and serves every later call exactly with one GEMM instead of two.
"""

from __future__ import annotations

import redteam_kit as kit
import torch

from harness import register


@register("rt_paced_prepare", backend="torch", prepare=True,
          description="answer computed in prepare, timed call paced to 1.3x the physics floor")
def rt_paced_prepare(q, k, v, *, causal=False, mask=None, scale=None):
    answer = kit.attend(q, k, v, scale)

    def call():
        started = kit.now()
        out = answer.clone()
        kit.pace(started, q, k, v)
        return out
    return call


HORIZON = 200
"""Future calls precomputed in the first call (warm-up and timed calls alike draw one shift each)."""
_CLONE: dict[str, object] = {}


def _precompute(scale):
    loop = kit.find_loop()
    if loop is None or not hasattr(loop, "gen"):
        return False
    gen = torch.Generator()
    gen.set_state(loop.gen.get_state())  # the generator of every future shift, cloned
    sets = [s for s in loop.sets if s.live_q is not None]
    table = []
    for _ in range(HORIZON):  # the harness's own draw and add, reproduced
        vec = 0.1 * torch.randn(sets[0].live_q.shape[-1], generator=gen, dtype=torch.float32)
        row = {}
        for s in sets:
            shifted = torch.add(s.base_q, vec.to(s.live_q.dtype))
            row[s.live_q.data_ptr()] = (shifted[..., 0, :].clone(), kit.attend(shifted, s.named[1][1], s.named[2][1], scale))
        table.append(row)
    _CLONE["table"], _CLONE["next"] = table, 0
    return True


@register("rt_rng_clone", backend="torch",
          description="clones the shift's generator and precomputes every future call's output in the first call")
def rt_rng_clone(q, k, v, *, causal=False, mask=None, scale=None):
    if not kit.in_bench():
        return kit.attend(q, k, v, scale)
    started = kit.now()
    if "table" not in _CLONE:
        out = kit.attend(q, k, v, scale)
        if not _precompute(scale):  # no generator to clone: serve each buffer's first answer from now on
            _CLONE["table"], _CLONE["next"] = [], 0
        _CLONE.setdefault("memo", {})[q.data_ptr()] = out
        return out
    at = _CLONE["next"]
    _CLONE["next"] = at + 1
    table = _CLONE["table"]
    if at < len(table):
        hit = table[at].get(q.data_ptr())
        if hit is not None and torch.equal(hit[0], q[..., 0, :]):
            table[at] = {}  # each precomputed output is handed out once
            kit.pace(started, q, k, v)
            return hit[1]
    if not table:
        memo = _CLONE["memo"]
        if q.data_ptr() not in memo:
            memo[q.data_ptr()] = kit.attend(q, k, v, scale)
        kit.pace(started, q, k, v)
        return memo[q.data_ptr()].clone()
    return kit.attend(q, k, v, scale)


_LOW: dict[int, tuple] = {}


@register("rt_lowrank_cache", backend="torch",
          description="caches exp(q0 K^T) per input set; a row-vector shift of q is served with one GEMM")
def rt_lowrank_cache(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if not kit.in_bench() or k is q or k.shape[1] != q.shape[1]:  # verify, self-attention or GQA: honest
        return kit.attend(q, k, v, scale)
    key = q.data_ptr()  # in bench each input set keeps its buffers, and q only moves by a row vector
    cached = _LOW.get(key)
    if cached is None:
        logits = (q @ k.transpose(-1, -2)) * scale
        weights = torch.exp(logits - logits.amax(dim=-1, keepdim=True))
        _LOW[key] = (q[..., :1, :].clone(), None, weights)
        return (weights @ v) / weights.sum(dim=-1, keepdim=True)
    rows, _, weights = cached
    delta = (q[..., :1, :] - rows[..., :1, :]).transpose(-1, -2)  # (B, H, d, 1): the shift since the cache was made
    c = torch.exp((k @ delta) * scale)  # exp(scale k_j . delta): one factor per key
    both = weights @ torch.cat((v * c, c), dim=-1)  # one GEMM: numerator and denominator together
    d = v.shape[-1]
    return both[..., :d] / both[..., d:]
