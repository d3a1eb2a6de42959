"""The plugin contract: `register` declares an attention implementation and its capabilities.

Capabilities are data (as in xformers' ``ops/fmha``): the harness never calls an
implementation on a case it declared it cannot run; it asks
:meth:`Implementation.not_supported_reasons` and records the reasons as a skip.

``register`` keeps no registry, global or hidden: it checks the declaration against the
function's signature (as pluggy checks a hook implementation against its spec), attaches
the :class:`Implementation` to the function as ``__attnbench__`` and returns the function.
Discovery (:mod:`harness.discovery`) finds declarations as a module's attributes, so a
module imported before is read the same way, and every error names the plugin's source.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from harness.conventions import CONTRACT, Conventions, adapt, adapt_module
from harness.devices import DEVICES
from harness.dtypes import DTYPES, NUMPY_DTYPES
from harness.errors import PluginError
from harness.structures import checked_structures, parameters_of, structure_reasons

if TYPE_CHECKING:
    from harness.cases import AttentionCase

BACKENDS = ("numpy", "torch")
KINDS = ("kernel", "module")

#: A zero-argument closure that performs one timed call and returns the output.
Call = Callable[[], Any]

_DECLARED: dict[str, list[Implementation]] = {}


Option = str | tuple[str | int, ...]
"""A declared option's value once checked: the kernel's name, or the values it takes (tile sizes, layers)."""


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
    sinks: bool = False
    """Takes ``sinks=`` (H,): a learned per-head logit in the softmax's denominator that carries no value (gpt-oss)."""
    softcap: bool = False
    """Takes ``softcap=`` (a float or None): logits become ``cap * tanh(logits / cap)`` before masking (Gemma 2)."""
    value_dim: bool = False
    """Takes V with a head dim other than q's and k's (DeepSeek MLA: 192 / 128); the output has V's."""
    kind: str = "kernel"
    kv_dtypes: tuple[str, ...] = ()
    """K/V cache dtypes taken beside any of ``dtypes`` for q (a case's ``kv_dtype``); empty: K and V in q's dtype."""
    structures: tuple[str, ...] = ()
    """Structures taken natively (:mod:`harness.structures`); any other a case uses arrives folded into ``mask=``."""
    memory: str | None = None
    """How peak memory grows with T: "quadratic" (materialises Tq x Tk), "linear" (tiled), None (undeclared)."""
    deterministic: bool = True
    """Two calls on identical inputs give bitwise identical outputs; False: they need only both pass the rule."""
    available: Callable[..., str | None] | None = None
    on_request: bool = False
    """Runs only when named (``--only NAME``): its set-up is too slow for the default suites (a compiler)."""
    description: str = ""
    source: str = "?"
    set_up: bool = False
    """Registered with ``prepare=True``: its set-up may read the inputs, so bench only rotates them."""
    conventions: Conventions = CONTRACT
    """The kernel's own conventions (:mod:`harness.conventions`): ``prepare`` is already adapted to the contract's."""
    options: Mapping[str, Option] = field(default_factory=dict)
    """Declared extras, each checked at registration (see :data:`OPTIONS`): tile sizes a property
    check may pass to ``prepare``, a module's layers and RoPE conventions, a lifted module's kernel."""

    def __call__(self, q: Any, k: Any, v: Any, **kwargs: Any) -> Any:
        """Run once, set-up included: the plain-function form of the contract."""
        return self.prepare(q, k, v, **kwargs)()

    def availability(self) -> str | None:
        """None when the implementation can run on this machine, else the reason it cannot."""
        return _availability(self)

    @property
    def available_per_case(self) -> bool:
        """Its ``available=`` check takes the case (asked per case; otherwise once per process)."""
        return _takes_case(self.available)

    def not_supported_reasons(self, case: AttentionCase) -> list[str]:
        """Every reason this implementation cannot run ``case``; empty when it can. Calls the plugin's own
        ``available=`` check: the command's process asks :func:`harness.availability.unsupported` instead."""
        reasons = self.declared_gaps(case)
        if not reasons:
            reason = self.availability() if not _takes_case(self.available) else _call_available(self, case)
            if reason:
                reasons.append(reason)
        return reasons

    def declared_gaps(self, case: AttentionCase) -> list[str]:
        """The reasons this implementation cannot run ``case`` read from its declaration alone (no plugin code
        runs): the capabilities it declared, the case kind's own requirements, a CUDA device."""
        reasons = [explain(self, case) for lacks, explain in _CAPABILITY_GAPS if lacks(self, case)]
        reasons.extend(structure_reasons(self, case))
        if case.kind == "kernel":
            reasons.extend(self.conventions.reasons(case, self.mask, self.structures))
        extra = getattr(case, "unsupported_by", None)  # a case kind's own requirements (module layers, RoPE)
        if case.kind == self.kind and callable(extra):
            reasons.extend(extra(self))
        if case.device == "cuda" and not _cuda_available():
            reasons.append(f"needs a CUDA device; torch.cuda.is_available() is False here ({_torch_build()})")
        return reasons

    def capabilities(self) -> dict[str, Any]:
        """The declared capabilities, as plain data for `attnbench list --json` and result files."""
        return {
            "kind": self.kind, "backend": self.backend, "dtypes": list(self.dtypes),
            "devices": list(self.devices), "causal": self.causal, "mask": self.mask,
            "gqa": self.gqa, "grad": self.grad, "bias": self.bias, "memory": self.memory,
            "deterministic": self.deterministic, "structures": list(self.structures), "on_request": self.on_request,
            "sinks": self.sinks, "softcap": self.softcap, "value_dim": self.value_dim,
            **({"conventions": self.conventions.describe()} if not self.conventions.is_contract else {}),
            **({"kv_dtypes": list(self.kv_dtypes)} if self.kv_dtypes else {}),
        }


_Check = Callable[[Implementation, Any], Any]
_CAPABILITY_GAPS: tuple[tuple[_Check, _Check], ...] = (
    (lambda impl, case: case.kind != impl.kind,
     lambda impl, case: f"a {impl.kind} implementation does not run {case.kind} cases"),
    (lambda impl, case: case.dtype not in impl.dtypes,
     lambda impl, case: f"dtype {case.dtype} not supported (supports {', '.join(impl.dtypes)})"),
    (lambda impl, case: getattr(case, "kv_dtype", None) not in (None, case.dtype, *impl.kv_dtypes),
     lambda impl, case: f"a {case.kv_dtype} KV cache with {case.dtype} queries not supported"
                        + (f" (KV caches: {', '.join(impl.kv_dtypes)})" if impl.kv_dtypes else "")),
    (lambda impl, case: case.device not in impl.devices,
     lambda impl, case: f"device {case.device} not supported (supports {', '.join(impl.devices)})"),
    (lambda impl, case: case.causal and not impl.causal, lambda impl, case: "causal masking not supported"),
    (lambda impl, case: case.mask != "none" and not impl.mask,
     lambda impl, case: f"boolean masks not supported (case mask: {case.mask})"),
    (lambda impl, case: case.kv_heads != case.heads and not impl.gqa,
     lambda impl, case: f"grouped-query attention not supported ({case.heads} query / {case.kv_heads} kv heads)"),
    (lambda impl, case: case.grad and not impl.grad, lambda impl, case: "gradients not supported"),
    (lambda impl, case: getattr(case, "bias", "none") not in ("none", *impl.options.get("positional_bias", ()))
                        and not impl.bias,
     lambda impl, case: f"additive bias not supported (case bias: {case.bias})"),
    (lambda impl, case: getattr(case, "sinks", False) and not impl.sinks,
     lambda impl, case: "learned attention sinks not supported (declare sinks=True and take sinks=)"),
    (lambda impl, case: getattr(case, "softcap", None) is not None and not impl.softcap,
     lambda impl, case: f"logit soft-capping not supported (case softcap: {case.softcap:g}; declare softcap=True)"),
    (lambda impl, case: getattr(case, "dv", 0) not in (0, getattr(case, "d", 0)) and not impl.value_dim,
     lambda impl, case: f"a value head dim {case.dv} != q/k head dim {case.d} not supported (declare value_dim=True)"),
)
"""(the case needs what the implementation lacks, the reason): the declared capabilities against a case."""

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


F = TypeVar("F", bound=Callable[..., Any])

_FLAGS = ("causal", "mask", "gqa", "grad", "bias", "sinks", "softcap", "value_dim")
MEMORY_GROWTH = ("quadratic", "linear")
#: The keys ``options=`` may hold, and what each means.
OPTIONS = {
    "block_q": "tile sizes along the queries a property check may pass as prepare(..., block_q=)",
    "block_k": "tile sizes along the keys, passed as block_k=",
    "layers": "module implementations: the layers they implement (mha, encoder)",
    "rope": "module implementations: the RoPE conventions they apply (rotate_half, interleaved)",
    "kernel": "a lifted module: the name of the kernel inside it",
    "kv_cache": "module implementations: True when they take earlier positions' keys and values (past_key=, past_value=)",
    "positional_bias": "module implementations: the positional biases they compute themselves from heads and "
                       "positions (alibi), asked for as positional_bias= instead of a bias= tensor",
}
_MODULE_LAYERS = ("mha", "encoder")
_ROPE_CONVENTIONS = ("rotate_half", "interleaved")
_POSITIONAL_BIASES = ("alibi",)


def register(
    name: str, /, *, backend: str, dtypes: Sequence[str] = ("float32",), devices: Sequence[str] = ("cpu",),
    causal: bool = False, mask: bool = False, gqa: bool = False, grad: bool = False, bias: bool = False,
    kind: str = "kernel", memory: str | None = None, deterministic: bool = True,
    available: Callable[..., str | None] | None = None, description: str = "", prepare: bool = False,
    options: Mapping[str, object] | None = None, structures: Sequence[str] = (), on_request: bool = False,
    kv_dtypes: Sequence[str] = (), sinks: bool = False, softcap: bool = False, value_dim: bool = False,
    conventions: Conventions | None = None, **unknown: NoReturn,
) -> Callable[[F], F]:
    """Declare an attention implementation.

    ``@register("my_attention", backend="torch", dtypes=("float32",), causal=True)`` on
    ``def f(q, k, v, *, causal=False, mask=None, scale=None)``. With ``prepare=True`` the
    function instead does its set-up and returns a zero-argument closure: only the closure
    is timed. The declaration is checked when the decorator runs, against the values allowed
    and against the function's signature; a keyword that is not a parameter here is an
    error too (and a type error to mypy), each naming the plugin and its source file.
    ``on_request=True``: the implementation runs only when named (``--only NAME``), never in the
    default selection of verify, bench and run (a set-up that compiles for a minute, say).
    ``sinks``, ``softcap``, ``value_dim``: the 2025 case space (learned attention sinks, logit soft-capping, a
    value head dim of its own). ``conventions=Conventions(...)`` declares a kernel's own layout, causal
    alignment, GQA head map, empty-row value, mask kind, scale and return value (:mod:`harness.conventions`):
    attnbench adapts its inputs and its comparison to them.
    """
    keywords: dict[str, object] = dict(
        backend=backend, dtypes=dtypes, devices=devices, causal=causal, mask=mask, gqa=gqa, grad=grad, bias=bias,
        kind=kind, memory=memory, deterministic=deterministic, available=available, description=description,
        prepare=prepare, options=options, structures=structures, on_request=on_request, sinks=sinks, softcap=softcap,
        value_dim=value_dim, **unknown)
    if kv_dtypes:
        keywords["kv_dtypes"] = kv_dtypes
    if conventions is not None:
        keywords["conventions"] = conventions

    def decorate(fn: F) -> F:
        impl = make_implementation(name, fn, **keywords)
        fn.__attnbench__ = impl  # type: ignore[attr-defined]
        return fn

    return decorate


_KEYWORDS = {"backend", "dtypes", "devices", "available", "description", "prepare", "kind", "options", "memory",
             "deterministic", "structures", "on_request", "kv_dtypes", "conventions", *_FLAGS}


def make_implementation(name: str, fn: Callable[..., Any], **keywords: Any) -> Implementation:
    """Validate the keywords of :func:`register` against their allowed values and ``fn``'s
    signature, and build the :class:`Implementation` (``register`` without the decorator)."""
    source = _source_of(fn)

    def error(text: str) -> PluginError:
        return PluginError(f"plugin {name!r} ({source}): {text}")

    if not isinstance(name, str) or not name.isidentifier():
        raise error("the name must be an identifier such as 'my_attention'")
    unknown = sorted(set(keywords) - _KEYWORDS)
    if unknown:
        raise error(f"unknown keyword(s) {unknown}; register accepts {sorted(_KEYWORDS)}")
    if keywords.get("backend") is None:
        raise error(f"backend= is required (one of {BACKENDS})")
    backend = keywords["backend"]
    if backend not in BACKENDS:
        raise error(f"backend={backend!r}; choose one of {BACKENDS}")
    dtypes = _as_tuple(name, "dtypes", keywords.get("dtypes", ("float32",)), DTYPES, source)
    if backend == "numpy":
        bad = [d for d in dtypes if d not in NUMPY_DTYPES]
        if bad:
            raise error(f"NumPy has no {bad}; numpy plugins take {NUMPY_DTYPES}")
    kv_dtypes = _as_tuple(name, "kv_dtypes", keywords["kv_dtypes"], DTYPES, source) if keywords.get("kv_dtypes") else ()
    devices = _as_tuple(name, "devices", keywords.get("devices", ("cpu",)), DEVICES, source)
    if backend == "numpy" and devices != ("cpu",):
        raise error("a numpy plugin runs on devices=('cpu',) only")
    flags = {}
    for flag in _FLAGS:
        value = keywords.get(flag, False)
        if not isinstance(value, bool):
            raise error(f"{flag}={value!r} must be True or False")
        flags[flag] = value
    if flags["grad"] and backend != "torch":
        raise error("grad=True needs backend='torch' (autograd)")
    kind = keywords.get("kind", "kernel")
    if kind not in KINDS:
        raise error(f"kind={kind!r}; choose one of {KINDS}")
    available = keywords.get("available")
    if available is not None and not callable(available):
        raise error("available= must be a callable returning None or a reason")
    description = keywords.get("description", "") or (inspect.getdoc(fn) or "").split("\n")[0]
    if not isinstance(description, str):
        raise error("description= must be a string")
    if not callable(fn):
        raise error("register decorates a function")
    memory = keywords.get("memory")
    if memory is not None and memory not in MEMORY_GROWTH:
        raise error(f"memory={memory!r}; choose one of {MEMORY_GROWTH} or leave it out")
    deterministic, on_request = keywords.get("deterministic", True), keywords.get("on_request", False)
    for key, value in (("deterministic", deterministic), ("on_request", on_request)):
        if not isinstance(value, bool):
            raise error(f"{key}={value!r} must be True or False")
    options = _checked_options(keywords.get("options") or {}, error)
    structures = checked_structures(keywords.get("structures", ()), kind, error)
    conventions = keywords.get("conventions") or CONTRACT
    if not isinstance(conventions, Conventions):
        raise error(f"conventions={conventions!r} must be harness.conventions.Conventions(...)")
    if not conventions.is_contract and backend != "torch":
        raise error("conventions= are declared by torch kernels and modules (the adaptations are torch operations)")
    if kind == "module" and conventions.module_problem():
        raise error(f"conventions=: {conventions.module_problem()}")
    _check_signature(fn, kind, flags, options, error, structures, conventions)
    if keywords.get("prepare", False):
        prepare = fn
    else:
        def prepare(*args: Any, **kwargs: Any) -> Call:  # (q, k, v) for kernels, (x,) for modules
            return lambda: fn(*args, **kwargs)
    keeps_align = "bottom_right" in structures
    if conventions.causal_align == "bottom_right" and not keeps_align:
        structures = (*structures, "bottom_right")  # bottom-right cases pass as they are; adapt() reads causal_align
    prepare = adapt(prepare, conventions, keeps_align) if kind == "kernel" else adapt_module(prepare, conventions)
    return Implementation(
        name=name, backend=backend, prepare=prepare, dtypes=dtypes, devices=devices,
        kind=kind, memory=memory, available=available, description=description, source=source,
        set_up=bool(keywords.get("prepare", False)), options=options, deterministic=deterministic,
        structures=structures, on_request=on_request, kv_dtypes=kv_dtypes, conventions=conventions, **flags,
    )


def _checked_options(options: Any, error: Callable[[str], PluginError]) -> dict[str, Option]:
    if not isinstance(options, Mapping):
        raise error(f"options= must be a dict with keys from {sorted(OPTIONS)}")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise error(f"options has unknown key(s) {unknown}; known: " + "; ".join(f"{k}: {v}" for k, v in OPTIONS.items()))
    checked: dict[str, Option] = {}
    for key, value in options.items():
        if key == "kernel":
            if not isinstance(value, str):
                raise error(f"options['kernel']={value!r} must be the kernel's name")
            checked[key] = value
            continue
        if key == "kv_cache":
            if not isinstance(value, bool):
                raise error(f"options['kv_cache']={value!r} must be True or False")
            if value:
                checked[key] = ("past_key", "past_value")
            continue
        items = (value,) if isinstance(value, (str, int)) else tuple(value)
        allowed = {"layers": _MODULE_LAYERS, "rope": _ROPE_CONVENTIONS, "positional_bias": _POSITIONAL_BIASES}.get(key)
        if allowed is not None and (not items or not set(items) <= set(allowed)):
            raise error(f"options[{key!r}]={items!r}; choose from {allowed}")
        if allowed is None and not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in items):
            raise error(f"options[{key!r}]={items!r} must be positive integers (tile sizes)")
        checked[key] = items
    return checked


def _check_signature(fn: Callable[..., Any], kind: str, flags: Mapping[str, bool], options: Mapping[str, Option],
                     error: Callable[[str], PluginError], structures: tuple[str, ...] = (),
                     conventions: Conventions = CONTRACT) -> None:
    """The call the harness will make must bind to ``fn``: checked now, not when a case first runs."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to read, the call itself will tell
    params = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        keywords_taken: set[str] | None = None  # **kwargs takes every keyword
    else:
        keywords_taken = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_rest = any(p.kind is p.VAR_POSITIONAL for p in params)
    if kind == "kernel":
        needs, arrays = {"causal", "mask", "scale"}, 3
        needs -= {"scale"} if not conventions.takes_scale else set()
        needs -= {"causal"} if not conventions.takes_causal else set()
        call = f"(q, k, v, *, {', '.join(sorted(needs))})"
    else:
        needs, arrays = {"heads", "weights", "mask", "causal"}, 1
        needs -= {"causal"} if not conventions.takes_causal else set()
        call = f"(x, *, {', '.join(n for n in ('heads', 'weights', 'mask', 'causal') if n in needs)})"
    declared = {"scale": "always passed unless Conventions(takes_scale=False)",
                "causal": "always passed unless Conventions(takes_causal=False)"}
    for flag in ("bias", "sinks", "softcap"):
        if flags.get(flag):
            needs.add(flag)
            declared[flag] = f"{flag}=True is declared"
    defaults: dict[str, str] = {}
    for structure in structures:
        for parameter, spelled in parameters_of(structure):
            needs.add(parameter)
            declared[parameter] = f"structures=({structure!r},) is declared"
            defaults[parameter] = spelled
    for option in ("rope", "positional_bias", "block_q", "block_k"):
        if options.get(option):
            needs.add(option)
            declared[option] = f"options[{option!r}] is declared"
    for cache_parameter in options.get("kv_cache", ()):  # a module's KV cache: past_key, past_value
        needs.add(str(cache_parameter))
        declared[str(cache_parameter)] = "options['kv_cache'] is declared"
    if kind == "module" and flags.get("gqa"):  # a module splits its packed projection by the KV heads it is given
        needs.add("kv_heads")
        declared["kv_heads"] = "gqa=True is declared"
    if len(positional) < arrays and not takes_rest:
        raise error(f"{fn.__name__}{signature} takes {len(positional)} positional argument(s); the harness calls "
                    f"it as {fn.__name__}{call}")
    missing = sorted(needs - keywords_taken) if keywords_taken is not None else []
    if missing:
        reasons = [f"`{m}` ({declared.get(m, 'always passed')})" for m in missing]
        hint = ", ".join(defaults[m] for m in missing if m in defaults)
        hint = f" (e.g. {hint})" if hint else ""
        extras = [f for f in ("bias", "sinks", "softcap") if flags.get(f)]
        with_ = f" with {', '.join(f + '=' for f in extras)}" if extras else ""
        raise error(f"{fn.__name__}{signature} has no parameter {', '.join(reasons)}; the harness calls it as "
                    f"{fn.__name__}{call}{with_}: add the parameter(s){hint}, or **kwargs")
    required = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in needs]
    if required:
        raise error(f"{fn.__name__}{signature} requires keyword(s) {required} that the harness never passes; "
                    f"give them defaults")
