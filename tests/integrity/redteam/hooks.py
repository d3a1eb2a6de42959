"""Red team: cheats that leave a hook in the interpreter and do their work inside the harness's own code.

- ``rt_empty_mode_fill``: returns ``torch.empty``; a global TorchFunctionMode fills it the first time the
  harness reads it (inside the capture of a checked call, outside the timed region); unread outputs are
  never computed.
- ``rt_dispatch_fill``: the same through the dispatcher: a Python kernel registered over ``aten::_to_copy``
  on CPU fills the pending output when the harness converts it to float64.
- ``rt_shift_mode_work``: a global TorchFunctionMode sees the harness shift q in place (``torch.add(...,
  out=q)``) before the timer starts, and computes the attention there.
- ``rt_profile_hook``: ``sys.setprofile`` sees the harness's ``shift`` return and computes there.
"""

from __future__ import annotations

import sys

import redteam_kit as kit
import torch
from torch.overrides import TorchFunctionMode

from harness import register

_PENDING: dict[str, tuple] = {}


def _fill_pending(args, kwargs) -> None:
    pending = _PENDING.get("out")
    if pending is None:
        return
    out = pending[0]
    for a in (*args, *(kwargs or {}).values()):
        if a is out:
            del _PENDING["out"]
            out.copy_(kit.attend(*pending[1:]))
            return


class _FillOnRead(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        _fill_pending(args, kwargs)
        return func(*args, **(kwargs or {}))


_MODES: dict[str, TorchFunctionMode] = {}


@register("rt_empty_mode_fill", backend="torch",
          description="returns torch.empty; a global TorchFunctionMode fills it when the harness first reads it")
def rt_empty_mode_fill(q, k, v, *, causal=False, mask=None, scale=None):
    started = kit.now()
    if "fill" not in _MODES:
        _MODES["fill"] = _FillOnRead()
        _MODES["fill"].__enter__()  # pushed, never popped: every torch call in this process passes through it
    out = torch.empty(q.shape, dtype=q.dtype)
    _PENDING["out"] = (out, q.clone(), k, v, scale)  # q as this call saw it (cloning is O(T d))
    kit.pace(started, q, k, v)
    return out


_DISPATCH: dict[str, object] = {}


def _to_copy(x, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    if not isinstance(x, torch.Tensor):
        return torch.tensor(x, dtype=dtype, device=device)
    pending = _PENDING.get("raw")
    if pending is not None and x.untyped_storage().data_ptr() == pending[0].untyped_storage().data_ptr():
        del _PENDING["raw"]
        pending[0].copy_(kit.attend(*pending[1:]))
    result = torch.empty_like(x, dtype=dtype or x.dtype, device=device or x.device)
    result.copy_(x)
    return result


@register("rt_dispatch_fill", backend="torch",
          description="returns torch.empty; a Python CPU kernel over aten::_to_copy fills it when the harness converts it")
def rt_dispatch_fill(q, k, v, *, causal=False, mask=None, scale=None):
    if not kit.in_bench():
        return kit.attend(q, k, v, scale)
    started = kit.now()
    if "lib" not in _DISPATCH:
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("_to_copy", _to_copy, "CPU")
        _DISPATCH["lib"] = lib  # kept alive: the override stays registered
    out = torch.empty(q.shape, dtype=q.dtype)
    _PENDING["raw"] = (out, q.clone(), k, v, scale)
    kit.pace(started, q, k, v)
    return out


_AHEAD: dict[int, torch.Tensor] = {}
_KNOWN: dict[int, tuple] = {}


class _WorkInShift(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        target = (kwargs or {}).get("out")
        if func is torch.add and target is not None and target.data_ptr() in _KNOWN:
            k, v, scale = _KNOWN[target.data_ptr()]
            _AHEAD[target.data_ptr()] = kit.attend(target, k, v, scale)  # before the timer starts
        return result


@register("rt_shift_mode_work", backend="torch",
          description="a global TorchFunctionMode catches the harness's in-place shift of q and computes there")
def rt_shift_mode_work(q, k, v, *, causal=False, mask=None, scale=None):
    started = kit.now()
    if "shift" not in _MODES:
        _MODES["shift"] = _WorkInShift()
        _MODES["shift"].__enter__()
    ready = _AHEAD.pop(q.data_ptr(), None)
    if ready is None:
        _KNOWN[q.data_ptr()] = (k, v, scale)
        return kit.attend(q, k, v, scale)
    kit.pace(started, q, k, v)
    return ready


def _profile(frame, event, arg):
    if event == "return" and frame.f_code.co_name == "shift":
        s = frame.f_locals.get("self")
        live = getattr(s, "live_q", None)
        if live is not None and live.data_ptr() in _KNOWN_PROFILE:
            _AHEAD_PROFILE[live.data_ptr()] = kit.attend(live, s.named[1][1], s.named[2][1], _KNOWN_PROFILE[live.data_ptr()])


_AHEAD_PROFILE: dict[int, torch.Tensor] = {}
_KNOWN_PROFILE: dict[int, object] = {}


@register("rt_profile_hook", backend="torch",
          description="sys.setprofile sees the harness's shift return and computes the next call's answer there")
def rt_profile_hook(q, k, v, *, causal=False, mask=None, scale=None):
    started = kit.now()
    if sys.getprofile() is not _profile:
        sys.setprofile(_profile)  # the timing loop's thread: every Python call and return from now on
    ready = _AHEAD_PROFILE.pop(q.data_ptr(), None)
    if ready is None:
        _KNOWN_PROFILE[q.data_ptr()] = scale
        return kit.attend(q, k, v, scale)
    kit.pace(started, q, k, v)
    return ready
