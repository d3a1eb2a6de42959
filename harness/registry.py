"""The plugin contract: `register` declares an attention implementation and its capabilities.

Capabilities are data (as in xformers' ``ops/fmha``): the harness never calls an
implementation on a case it declared it cannot run; it asks
:meth:`Implementation.not_supported_reasons` and records the reasons as a skip.

``register`` does not touch a global registry. It attaches an :class:`Implementation`
to the function and files it under the defining module, so that discovery (see
:mod:`harness.discovery`) can gather what a module declared even when the module was
imported before, and can name the module's source in every error.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.errors import PluginError

if TYPE_CHECKING:
    from harness.cases import AttentionCase

BACKENDS = ("numpy", "torch")
DTYPES = ("float64", "float32", "float16", "bfloat16")
DEVICES = ("cpu", "cuda")
KINDS = ("kernel", "module")
NUMPY_DTYPES = ("float64", "float32", "float16")

#: A zero-argument closure that performs one timed call and returns the output.
Call = Callable[[], Any]

_DECLARED: dict[str, list[Implementation]] = {}


@dataclass(frozen=True)
class Implementation:
    """One registered implementation: its callable, its capabilities and where it came from."""

    name: str
    backend: str
    prepare: Callable[..., Call]
    """``prepare(q, k, v, *, causal, mask, scale[, bias])`` does set-up and returns the timed call."""
    dtypes: tuple[str, ...] = ("float32",)
    devices: tuple[str, ...] = ("cpu",)
    causal: bool = False
    mask: bool = False
    gqa: bool = False
    grad: bool = False
    bias: bool = False
    kind: str = "kernel"
    memory: str | None = None
    """How peak memory grows with T: "quadratic" (materialises Tq x Tk), "linear" (tiled), None (undeclared)."""
    deterministic: bool = True
    """Two calls on identical inputs give bitwise identical outputs; False: they need only both pass the rule."""
    available: Callable[..., str | None] | None = None
    description: str = ""
    source: str = "?"
    options: dict[str, Any] = field(default_factory=dict)
    """Free-form keyword arguments a test may pass to ``prepare`` (e.g. tile sizes)."""

    def __call__(self, q: Any, k: Any, v: Any, **kwargs: Any) -> Any:
        """Run once, set-up included: the plain-function form of the contract."""
        return self.prepare(q, k, v, **kwargs)()

    def availability(self) -> str | None:
        """None when the implementation can run on this machine, else the reason it cannot."""
        return _availability(self)

    def not_supported_reasons(self, case: AttentionCase) -> list[str]:
        """Every reason this implementation cannot run ``case``; empty when it can."""
        reasons: list[str] = []
        if case.kind != self.kind:
            reasons.append(f"a {self.kind} implementation does not run {case.kind} cases")
        if case.dtype not in self.dtypes:
            reasons.append(f"dtype {case.dtype} not supported (supports {', '.join(self.dtypes)})")
        if case.device not in self.devices:
            reasons.append(f"device {case.device} not supported (supports {', '.join(self.devices)})")
        if case.causal and not self.causal:
            reasons.append("causal masking not supported")
        if case.mask != "none" and not self.mask:
            reasons.append(f"boolean masks not supported (case mask: {case.mask})")
        if case.kv_heads != case.heads and not self.gqa:
            reasons.append(f"grouped-query attention not supported ({case.heads} query / {case.kv_heads} kv heads)")
        if case.grad and not self.grad:
            reasons.append("gradients not supported")
        if getattr(case, "bias", "none") != "none" and not self.bias:
            reasons.append(f"additive bias not supported (case bias: {case.bias})")
        extra = getattr(case, "unsupported_by", None)  # a case kind's own requirements (module layers, RoPE)
        if case.kind == self.kind and callable(extra):
            reasons.extend(extra(self))
        if case.device == "cuda" and not _cuda_available():
            reasons.append(f"needs a CUDA device; torch.cuda.is_available() is False here ({_torch_build()})")
        if not reasons:
            reason = self.availability() if not _takes_case(self.available) else _call_available(self, case)
            if reason:
                reasons.append(reason)
        return reasons

    def capabilities(self) -> dict[str, Any]:
        """The declared capabilities, as plain data for `attnbench list --json` and result files."""
        return {
            "kind": self.kind, "backend": self.backend, "dtypes": list(self.dtypes),
            "devices": list(self.devices), "causal": self.causal, "mask": self.mask,
            "gqa": self.gqa, "grad": self.grad, "bias": self.bias, "memory": self.memory,
            "deterministic": self.deterministic,
        }


_AVAILABILITY_CACHE: dict[tuple[str, str], str | None] = {}


def _takes_case(fn: Callable[..., Any] | None) -> bool:
    if fn is None:
        return False
    try:
        return len(inspect.signature(fn).parameters) >= 1
    except (TypeError, ValueError):
        return False


def _call_available(impl: Implementation, *args: Any) -> str | None:
    assert impl.available is not None
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a plugin's prints never reach the command's answer
            reason = impl.available(*args)
    except Exception as exc:  # noqa: BLE001 - the check itself broke: that is the reason, stated in full
        return f"availability check raised {type(exc).__name__}: {exc}"
    if reason is not None and not isinstance(reason, str):
        return f"availability check returned {reason!r}; expected None or a reason string"
    return reason or None


def _availability(impl: Implementation) -> str | None:
    if impl.available is None:
        return None
    if _takes_case(impl.available):
        return None  # decided per case in not_supported_reasons
    key = (impl.name, impl.source)
    if key not in _AVAILABILITY_CACHE:
        _AVAILABILITY_CACHE[key] = _call_available(impl)
    return _AVAILABILITY_CACHE[key]


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _torch_build() -> str:
    import torch

    return f"torch {torch.__version__}"


def _source_of(fn: Callable[..., Any]) -> str:
    try:
        path = inspect.getsourcefile(fn) or "?"
        line = inspect.getsourcelines(fn)[1]
        return f"{path}:{line}"
    except (TypeError, OSError):
        return getattr(fn, "__module__", "?")


def _as_tuple(name: str, key: str, value: Any, allowed: tuple[str, ...], source: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise PluginError(f"plugin {name!r} ({source}): {key}={value!r} must be a tuple of strings") from None
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise PluginError(
            f"plugin {name!r} ({source}): {key}={items!r} has unknown values {bad}; choose from {allowed}"
        )
    return items


def register(name: str, /, **keywords: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare an attention implementation.

    ``@register("my_attention", backend="torch", dtypes=("float32",), causal=True)`` on
    ``def f(q, k, v, *, causal=False, mask=None, scale=None)``. With ``prepare=True`` the
    function instead does its set-up and returns a zero-argument closure: only the closure
    is timed. Keywords: backend (required), dtypes, devices, causal, mask, gqa, grad, bias,
    kind, available, description, prepare, options. Anything else is an error that names
    the plugin and its source file.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        impl = make_implementation(name, fn, **keywords)
        _DECLARED.setdefault(fn.__module__, []).append(impl)
        fn.__attnbench__ = impl  # type: ignore[attr-defined]
        return fn

    return decorate


_FLAGS = ("causal", "mask", "gqa", "grad", "bias")
_KEYWORDS = {"backend", "dtypes", "devices", "available", "description", "prepare", "kind", "options", "memory",
             "deterministic", *_FLAGS}
MEMORY_GROWTH = ("quadratic", "linear")


def make_implementation(name: str, fn: Callable[..., Any], **keywords: Any) -> Implementation:
    """Validate the keywords of :func:`register` and build the :class:`Implementation`."""
    source = _source_of(fn)
    if not isinstance(name, str) or not name.isidentifier():
        raise PluginError(f"plugin {name!r} ({source}): the name must be an identifier such as 'my_attention'")
    unknown = sorted(set(keywords) - _KEYWORDS)
    if unknown:
        raise PluginError(
            f"plugin {name!r} ({source}): unknown keyword(s) {unknown}; register accepts {sorted(_KEYWORDS)}"
        )
    if "backend" not in keywords:
        raise PluginError(f"plugin {name!r} ({source}): backend= is required (one of {BACKENDS})")
    backend = keywords["backend"]
    if backend not in BACKENDS:
        raise PluginError(f"plugin {name!r} ({source}): backend={backend!r}; choose one of {BACKENDS}")
    dtypes = _as_tuple(name, "dtypes", keywords.get("dtypes", ("float32",)), DTYPES, source)
    if backend == "numpy":
        bad = [d for d in dtypes if d not in NUMPY_DTYPES]
        if bad:
            raise PluginError(f"plugin {name!r} ({source}): NumPy has no {bad}; numpy plugins take {NUMPY_DTYPES}")
    devices = _as_tuple(name, "devices", keywords.get("devices", ("cpu",)), DEVICES, source)
    if backend == "numpy" and devices != ("cpu",):
        raise PluginError(f"plugin {name!r} ({source}): a numpy plugin runs on devices=('cpu',) only")
    flags = {}
    for flag in _FLAGS:
        value = keywords.get(flag, False)
        if not isinstance(value, bool):
            raise PluginError(f"plugin {name!r} ({source}): {flag}={value!r} must be True or False")
        flags[flag] = value
    if flags["grad"] and backend != "torch":
        raise PluginError(f"plugin {name!r} ({source}): grad=True needs backend='torch' (autograd)")
    kind = keywords.get("kind", "kernel")
    if kind not in KINDS:
        raise PluginError(f"plugin {name!r} ({source}): kind={kind!r}; choose one of {KINDS}")
    available = keywords.get("available")
    if available is not None and not callable(available):
        raise PluginError(f"plugin {name!r} ({source}): available= must be a callable returning None or a reason")
    description = keywords.get("description", "") or (inspect.getdoc(fn) or "").split("\n")[0]
    if not isinstance(description, str):
        raise PluginError(f"plugin {name!r} ({source}): description= must be a string")
    if not callable(fn):
        raise PluginError(f"plugin {name!r} ({source}): register decorates a function")
    memory = keywords.get("memory")
    if memory is not None and memory not in MEMORY_GROWTH:
        raise PluginError(f"plugin {name!r} ({source}): memory={memory!r}; choose one of {MEMORY_GROWTH} or leave it out")
    deterministic = keywords.get("deterministic", True)
    if not isinstance(deterministic, bool):
        raise PluginError(f"plugin {name!r} ({source}): deterministic={deterministic!r} must be True or False")
    options = keywords.get("options", {})
    if not isinstance(options, dict):
        raise PluginError(f"plugin {name!r} ({source}): options= must be a dict")
    if keywords.get("prepare", False):
        prepare = fn
    else:
        def prepare(*args: Any, **kwargs: Any) -> Call:  # (q, k, v) for kernels, (x,) for modules
            return lambda: fn(*args, **kwargs)
    return Implementation(
        name=name, backend=backend, prepare=prepare, dtypes=dtypes, devices=devices,
        kind=kind, memory=memory, available=available, description=description, source=source,
        options=options, deterministic=deterministic, **flags,
    )


def declared_in(module_name: str) -> list[Implementation]:
    """The implementations that module ``module_name`` registered when it was imported."""
    return list(_DECLARED.get(module_name, []))
