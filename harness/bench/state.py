"""No state left behind: what a timed call may not change in the interpreter it runs in.

A plugin that has read the harness can reach it through interpreter-wide state instead of its inputs:
push a torch function or dispatch mode that runs when the harness next touches the output (work done
outside the timer), replace a function or attribute the harness calls (its clock, its random source,
a torch op it perturbs inputs with), install a trace, profile or monitoring hook, a global module or
saved-tensor hook, an interval timer that runs code on a signal, or change the thread count. Each is
read right after every timed call returns, before any harness torch op touches the output, and
compared with the state when this module was imported (before any plugin was; thread count, grad
mode, default dtype, interval timers and signal handlers: with the state when the timed loop began,
after the harness pinned them and before the first call, warm-up included).
Any difference is a violation that names what changed. Reading all of it costs a few microseconds.

What cannot be read here is listed in docs/integrity.md (audit hooks, memory written through ctypes).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from typing import Any

import numpy as np
import torch
import torch.nn.modules.module as _module

_HOOK_DICTS = tuple(name for name in dir(_module) if name.startswith("_global_") and name.endswith("hooks"))
_TIMERS = tuple(getattr(signal, n) for n in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF") if hasattr(signal, n))
_SIGNALS = tuple(getattr(signal, n) for n in ("SIGALRM", "SIGVTALRM", "SIGPROF", "SIGIO", "SIGUSR1", "SIGUSR2", "SIGCHLD")
                 if hasattr(signal, n))
_WATCHED: list[tuple[str, tuple[Any, ...], str, Any]] = []
"""(label, where to look, attribute, its value at import) of every function and attribute the harness relies on:
a module's dict, or a class's dicts along its MRO down to the one that defines it (a subclass's own shadows it)."""


def _dicts(owner: Any, name: str) -> tuple[Any, ...]:
    if not isinstance(owner, type):
        return (vars(owner),)
    chain = []
    for klass in owner.__mro__:
        chain.append(klass.__dict__)
        if name in klass.__dict__:
            break
    return tuple(chain)


def _now(dicts: tuple[Any, ...], name: str) -> Any:
    for space in dicts[:-1]:
        if name in space:
            return space[name]
    return dicts[-1].get(name)


def watch(label: str, owner: Any, *names: str) -> None:
    """Add ``owner.name`` for each of ``names`` to what a call may not replace (its value now is the reference)."""
    for name in names:
        dicts = _dicts(owner, name)
        _WATCHED.append((f"{label}.{name}", dicts, name, _now(dicts, name)))


watch("time", time, "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time", "thread_time",
      "time", "sleep")
watch("os", os, "urandom", "listdir", "getpid")
watch("random.SystemRandom", random.SystemRandom, "getrandbits", "random", "randrange")
watch("torch", torch, "add", "matmul", "equal", "from_numpy", "empty", "get_num_threads", "set_num_threads", "isfinite")
watch("torch.Tensor", torch.Tensor, "copy_", "to", "numpy", "__matmul__", "detach", "abs", "max", "sum", "view", "reshape",
      "__torch_function__", "__torch_dispatch__")
watch("numpy", np, "add", "copyto", "array_equal", "asarray")
watch("numpy.random", np.random, "Generator", "SFC64")
watch("sys", sys, "settrace", "setprofile", "gettrace", "getprofile")


def watch_module(module: Any) -> None:
    """Every function, class and module in ``module``'s globals (a harness module the timed loop uses)."""
    names = [n for n, v in vars(module).items() if not n.startswith("__") and (callable(v) or type(v).__name__ == "module")]
    watch(module.__name__, module, *names)


def _stacks() -> tuple[int, int]:
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


def _hooks() -> tuple[int, ...]:
    return tuple(len(getattr(_module, name)) for name in _HOOK_DICTS)


def _monitoring() -> tuple[Any, ...]:
    tools = getattr(sys, "monitoring", None)
    return () if tools is None else tuple(tools.get_tool(i) for i in range(6))


def _saved_tensor_hooks() -> Any:
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    try:
        return None if top is None else top(True)
    except TypeError:
        return top()  # type: ignore[misc]


def _traces() -> tuple[Any, ...]:
    return sys.gettrace(), sys.getprofile(), threading.gettrace(), threading.getprofile()


def _timers() -> tuple[Any, ...]:
    """Whether each interval timer is armed, and the handler of each signal a timer or a device can raise."""
    return tuple(signal.getitimer(t)[0] > 0 for t in _TIMERS) + tuple(signal.getsignal(s) for s in _SIGNALS)


_IMPORTED = (_stacks(), _hooks(), _monitoring(), _saved_tensor_hooks(), _traces())


_KEYS = ("CPU", "CUDA", "AutogradCPU", "AutogradCUDA", "CompositeExplicitAutograd", "CompositeImplicitAutograd",
         "Python", "BackendSelect")


def kernels() -> frozenset[tuple[str, str]]:
    """(dispatch key, operator) of every kernel registered with torch's dispatcher for the keys a CPU or CUDA
    call goes through. Milliseconds: read when the loop begins and after its last call, not after every call."""
    listed = torch._C._dispatch_get_registrations_for_dispatch_key
    return frozenset((key, op) for key in _KEYS for op in listed(key))


class StateGuard:
    """The interpreter's state a timed call may not change; :meth:`changed` after each call names what did.
    ``attributes`` are (label, owner, name) the caller relies on too (the loop's own timer), as they are now."""

    def __init__(self, attributes: tuple[tuple[str, Any, str], ...] = ()) -> None:
        self.settings = self._settings()
        self.timers = _timers()
        self.kernels = kernels()
        self.attributes = [(label, owner, name, getattr(owner, name, None)) for label, owner, name in attributes]

    @staticmethod
    def _settings() -> tuple[int, bool, Any]:
        return torch.get_num_threads(), torch.is_grad_enabled(), torch.get_default_dtype()

    def changed(self) -> list[str]:
        """What differs now from the reference states, one phrase each (empty: nothing)."""
        found = []
        stacks, hooks, monitors, saved, traces = _IMPORTED
        now = _stacks()
        if now[0] != stacks[0]:
            found.append(f"the torch function-mode stack ({stacks[0]} -> {now[0]} modes)")
        if now[1] != stacks[1]:
            found.append(f"the torch dispatch-mode stack ({stacks[1]} -> {now[1]} modes)")
        if _hooks() != hooks:
            found.append("a global torch.nn.Module hook")
        if _saved_tensor_hooks() != saved:
            found.append("autograd's saved-tensor hooks")
        if _monitoring() != monitors:
            found.append("a sys.monitoring tool")
        if any(a is not b for a, b in zip(_traces(), traces)):
            found.append("a trace or profile hook (sys.settrace / setprofile)")
        if any(a is not b and a != b for a, b in zip(_timers(), self.timers)):
            found.append("an interval timer or a signal handler (signal.setitimer / signal.signal)")
        threads, grad, dtype = self._settings()
        if threads != self.settings[0]:
            found.append(f"torch's thread count ({self.settings[0]} -> {threads})")
        if grad != self.settings[1] or dtype != self.settings[2]:
            found.append("torch's grad mode or default dtype")
        found += [label for label, dicts, name, ref in _WATCHED if _now(dicts, name) is not ref]
        found += [label for label, owner, name, ref in self.attributes if getattr(owner, name, None) is not ref]
        return found

    def kernel_problem(self) -> str | None:
        """A sentence when a kernel was registered with torch's dispatcher since the loop began (a Python kernel
        over an operator the harness calls on the output would run the plugin's work inside the harness)."""
        new = sorted(kernels() - self.kernels)
        if not new:
            return None
        shown = ", ".join(f"{op} ({key})" for key, op in new[:4])
        return (f"the calls registered dispatcher kernels (torch.library): {shown}{' ...' if len(new) > 4 else ''}: "
                "a call may not override operators")

    def problem(self) -> str | None:
        """A sentence when the call left state changed, else None."""
        found = self.changed()
        if not found:
            return None
        return (f"the call left interpreter state changed: {', '.join(found[:6])}"
                f"{' ...' if len(found) > 6 else ''} (a call may not change what the harness or later calls rely on)")
