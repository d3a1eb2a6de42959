"""Fresh inputs for every timed call: a full-rank perturbation no plugin can predict or absorb.

Before every timed call of an implementation without its own set-up (``prepare=False``), each of
q, k and v it receives is rewritten in place, in its own memory layout, as its pristine values plus
uniform noise in [-:data:`NOISE`, :data:`NOISE`) drawn element by element from a generator seeded
with a fresh draw from the system's entropy (``os.urandom``), taken just before the inputs are laid
out: the seed of call i exists nowhere before call i is about to run, so no call can learn a later
one's inputs. Every element moves independently, so the change is full rank: a cache of
exp(QK^T), of K V, or of any product of an earlier call's inputs does not give the next call's
answer with less work than computing it (a low-rank change, a sign flip or a row-vector shift
would: ``(q + 1 s^T) K^T = QK^T + 1 (K s)^T``).

Each set also keeps a *shadow*: the values the call must see, never handed to the plugin. After the
call, the live inputs are compared with it: a call that wrote into an input is a violation, even
though the next call's perturbation would erase the write. The float64 check of a call regenerates
that call's inputs from its seed (:meth:`Fresh.values`), bit for bit the values it saw, instead of
trusting what the inputs hold afterwards.

The noise is NumPy's SFC64 uniform float32 stream (about 2 ns an element, a tenth of a normal draw),
added in the inputs' dtype; on CUDA it is drawn on the host and copied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from harness.reference.tensors import to_float64

NOISE = 0.5
"""Half-width of the uniform noise added to every element: the inputs stay in the range of the case's draw."""


def _noise(gen: np.random.Generator, like: Any) -> Any:
    """Noise shaped and typed as ``like`` (a torch tensor: on its device; a NumPy array: NumPy)."""
    flat = gen.random(int(np.prod(like.shape)), dtype=np.float32)
    flat -= 0.5
    flat *= 2 * NOISE
    if isinstance(like, torch.Tensor):
        return torch.from_numpy(flat).view(like.shape).to(like.device, like.dtype)
    return flat.reshape(like.shape).astype(like.dtype, copy=False)


@dataclass
class Fresh:
    """The arrays of one input set that are redrawn before every timed call."""

    names: tuple[str, ...]
    live: list[Any]
    """What the call reads (in the implementation's layout)."""
    base: list[Any] = field(default_factory=list)
    """Pristine contiguous copies."""
    shadow: list[Any] = field(default_factory=list)
    """What ``live`` must hold while the call runs."""

    def __post_init__(self) -> None:
        self.base = [_copy(x) for x in self.live]
        self.shadow = [_copy(x) for x in self.live]

    def _fill(self, seed: int, into: list[Any]) -> None:
        gen = np.random.Generator(np.random.SFC64(seed))
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # an OpenMP region stalls for milliseconds on a busy machine; an add need not
        try:
            with torch.no_grad():
                for base, out in zip(self.base, into):
                    if isinstance(base, torch.Tensor):
                        torch.add(base, _noise(gen, base), out=out)
                    else:
                        np.add(base, _noise(gen, base), out=out)
        finally:
            torch.set_num_threads(threads)

    def lay_out(self, seed: int, shaped: Callable[[dict[str, Any], np.random.Generator], None] | None = None) -> None:
        """The inputs of the call about to run: base + noise(seed), into the shadow and then the live arrays.
        ``shaped`` reshapes the shadow's values first (by name, in place, with a generator of the same seed): the
        value probe's distributions (:mod:`harness.bench.values`), fresh on every call all the same."""
        self._fill(seed, self.shadow)
        if shaped is not None:
            shaped(dict(zip(self.names, self.shadow)), np.random.Generator(np.random.SFC64(seed ^ 0x5A5A)))
        with torch.no_grad():
            for live, shadow in zip(self.live, self.shadow):
                if isinstance(live, torch.Tensor):
                    live.copy_(shadow)
                else:
                    np.copyto(live, shadow)

    def written(self) -> list[str]:
        """The inputs the call wrote into (the live array no longer equals its shadow)."""
        out = []
        for name, live, shadow in zip(self.names, self.live, self.shadow):
            same = np.array_equal(_host(live), _host(shadow))
            if not same:
                out.append(name)
        return out

    def values(self, seed: int) -> dict[str, torch.Tensor]:
        """The inputs call ``seed`` saw, regenerated bit for bit, as float64 CPU tensors by name."""
        fresh = [_copy(x) for x in self.base]
        self._fill(seed, fresh)
        return {name: to_float64(x) for name, x in zip(self.names, fresh)}


def _host(x: Any) -> Any:
    """``x`` for a comparison: a CPU tensor NumPy can view is read in place (no torch operator runs, and NumPy's
    comparison is several times faster than ``torch.equal``); anything else as torch compares it."""
    if isinstance(x, np.ndarray):
        return x
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64, torch.float16):
        return x.detach().numpy()
    return x.detach().to("cpu", torch.float64).numpy()


def _copy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone(memory_format=torch.contiguous_format)
    return np.array(x, copy=True, order="C")


def fresh_for(named: list[tuple[str, Any]], inputs: Any) -> Fresh | None:
    """The :class:`Fresh` of a set whose call receives ``named`` (q, k, v first): each of q, k, v that is the
    case's plain array (not a page pool, which the oracle reads through the plain k and v, nor an FP8 cache, to
    which torch adds no noise: q's noise alone makes every call's answer new), once when they are one array
    (self-attention)."""
    names, live, seen = [], [], set()
    plain = {"q": getattr(inputs, "q", None), "k": getattr(inputs, "k", None), "v": getattr(inputs, "v", None)}
    for name, x in named[:3]:
        if id(x) in seen or plain.get(name) is None or not _same_array(x, plain[name]) or _fp8(x):
            continue
        seen.add(id(x))
        names.append(name)
        live.append(x)
    return Fresh(tuple(names), live) if names else None


def _fp8(x: Any) -> bool:
    """An array stored in a one-byte float type (an FP8 KV cache)."""
    return isinstance(x, torch.Tensor) and x.dtype.is_floating_point and x.element_size() == 1


def _same_array(x: Any, plain: Any) -> bool:
    """``x`` is ``plain`` or a leaf made from it (a backward's ``detach().requires_grad_()``)."""
    if x is plain:
        return True
    if isinstance(x, torch.Tensor) and isinstance(plain, torch.Tensor):
        return x.data_ptr() == plain.data_ptr() and x.shape == plain.shape and x.stride() == plain.stride()
    return False
