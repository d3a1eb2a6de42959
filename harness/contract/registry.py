"""The plugin contract: ``register`` declares a kernel, ``register_module`` a module, each with a record.

What an implementation runs is a :class:`~harness.contract.capabilities.Capabilities` record (as in xformers'
``AttentionOpBase``, capabilities are data): the harness never calls an implementation on a case it
declared it cannot run; it asks :meth:`Implementation.not_supported_reasons` (the record's reasons, then
the plugin's own ``available(case)``) and records them as a skip.

``register`` keeps no registry, global or hidden: it builds the record (given whole, or from keywords),
checks it against the function's signature (:mod:`harness.contract.signatures`), attaches the
:class:`Implementation` to the function as ``__attnbench__`` and returns the function. Discovery
(:mod:`harness.contract.discovery`) finds declarations as a module's attributes, so a module imported before is
read the same way, and every error names the plugin's source. One module because
:class:`Implementation` holds the record (every runner reads it, as ``impl.declared.causal``) and the
declaration is checked here, beside the signature it belongs to; spellings of an earlier contract
(``kind=``, ``options=``, a check without the case) are refused with what to write instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from harness.contract.adaptation import adapt, adapt_module
from harness.contract.capabilities import (
    BACKENDS,
    Capabilities,
    CapabilityError,
    field_names,
)
from harness.contract.conventions import Conventions
from harness.contract.signatures import check_signature
from harness.errors import PluginError

if TYPE_CHECKING:
    from harness.case.attention import AttentionCase

#: A zero-argument closure that performs one timed call and returns the output.
Call = Callable[[], Any]

Check = Callable[[Any], "str | None"]
"""``available(case)``: None when the implementation can run ``case`` on this machine, else the reason."""


@dataclass(frozen=True)
class Implementation:
    """One registered implementation: its callable, its declared :class:`Capabilities` and where it came from."""

    name: str
    prepare: Callable[..., Call]
    """``prepare(q, k, v, *, causal, mask, scale[, bias])`` does set-up and returns the timed call."""
    declared: Capabilities
    """What it runs, as plain data: the harness reads this record, never the plugin's code, to skip a case."""
    available: Check | None = None
    """The plugin's own ``available(case)`` check, run in a worker (:mod:`harness.contract.availability`)."""
    description: str = ""
    source: str = "?"
    set_up: bool = False
    """Registered with ``prepare=True``: ``prepare`` is its set-up, and returns the call that is timed. Set-up sees
    a first set of values; bench writes every timed call's new values into the same arrays."""

    def __call__(self, q: Any, k: Any, v: Any, **kwargs: Any) -> Any:
        """Run once, set-up included: the plain-function form of the contract."""
        return self.prepare(q, k, v, **kwargs)()

    def not_supported_reasons(self, case: AttentionCase) -> list[str]:
        """Every reason this implementation cannot run ``case``; empty when it can. Calls the plugin's own
        ``available(case)`` check: the command's process asks :func:`harness.contract.availability.unsupported` instead."""
        reasons = self.declared_gaps(case)
        if not reasons and self.available is not None:
            reason = _call_available(self, case)
            if reason:
                reasons.append(reason)
        return reasons

    def declared_gaps(self, case: AttentionCase) -> list[str]:
        """The reasons this implementation cannot run ``case`` read from its declaration alone (no plugin code
        runs): the capabilities it declared, the case kind's own requirements, a CUDA device."""
        reasons = self.declared.not_supported_reasons(case)
        extra = getattr(case, "unsupported_by", None)  # a case kind's own requirements (module layers, RoPE)
        if case.kind == self.declared.kind and callable(extra):
            reasons.extend(extra(self))
        if case.device == "cuda" and not _cuda_available():
            reasons.append(f"needs a CUDA device; torch.cuda.is_available() is False here ({_torch_build()})")
        return reasons

    def capabilities(self) -> dict[str, Any]:
        """The declared capabilities, as plain data for `attnbench list --json` and result files."""
        return self.declared.describe()


def _takes_case(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` can be called with the case, the contract's one signature."""
    try:
        inspect.signature(fn).bind(None)
    except TypeError:
        return False
    except ValueError:  # a builtin with no signature to read: called with the case
        return True
    return True


def _call_available(impl: Implementation, case: AttentionCase) -> str | None:
    assert impl.available is not None
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a plugin's prints never reach the command's answer
            reason = impl.available(case)
    except Exception as exc:  # noqa: BLE001 - the check itself broke: that is the reason, stated in full
        return f"availability check raised {type(exc).__name__}: {exc}"
    if reason is not None and not isinstance(reason, str):
        return f"availability check returned {reason!r}; expected None or a reason string"
    return reason or None


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


F = TypeVar("F", bound=Callable[..., Any])

_CALL_KEYWORDS = ("available", "description", "prepare")
"""register's keywords about the call, not the capabilities: everything else is a :class:`Capabilities` field."""


def register(
    name: str, capabilities: Capabilities | None = None, /, *, backend: str | None = None,
    dtypes: Sequence[str] = ("float32",), devices: Sequence[str] = ("cpu",),
    causal: bool = False, mask: bool = False, gqa: bool = False, grad: bool = False, bias: bool = False,
    memory: str | None = None, deterministic: bool = True,
    available: Check | None = None, description: str = "", prepare: bool = False,
    structures: Sequence[str] = (), on_request: bool = False,
    kv_dtypes: Sequence[str] = (), kv_scales: Sequence[str] = (), sinks: bool = False, softcap: bool = False,
    value_dim: bool = False, conventions: Conventions | None = None, block_q: Sequence[int] = (),
    block_k: Sequence[int] = (),
    **unknown: NoReturn,
) -> Callable[[F], F]:
    """Declare an attention kernel ``f(q, k, v, *, causal, mask, scale)``.

    ``@register("my_attention", Capabilities(backend="torch", causal=True))`` declares the capabilities as one
    record; ``@register("my_attention", backend="torch", causal=True)`` spells the same fields as keywords.
    ``available(case)`` returns None or the reason this machine cannot run ``case``; with ``prepare=True``
    the function does its set-up and returns a zero-argument closure, and only the closure is timed. The
    declaration is checked when the decorator runs, against the values allowed and against the function's
    signature, and every error names the plugin and its source file. Modules: :func:`register_module`.
    """
    _check_record_argument(name, capabilities)
    keywords: dict[str, object] = {
        key: value for key, value in dict(
            backend=backend, dtypes=dtypes, devices=devices, causal=causal, mask=mask, gqa=gqa, grad=grad,
            bias=bias, memory=memory, deterministic=deterministic, structures=structures, on_request=on_request,
            kv_dtypes=kv_dtypes, kv_scales=kv_scales, sinks=sinks, softcap=softcap, value_dim=value_dim,
            conventions=conventions,
            block_q=block_q, block_k=block_k,
        ).items() if not _is_default(key, value)}
    keywords.update(unknown)

    def decorate(fn: F) -> F:
        if "kind" in keywords:  # a record field register sets itself
            raise PluginError(f"plugin {name!r} ({_source_of(fn)}): register declares a kernel; kind= was removed: "
                              "declare a module with @register_module(...) (docs/modules.md)")
        impl = make_implementation(name, fn, capabilities, available=available, description=description,
                                   prepare=prepare, **keywords)
        fn.__attnbench__ = impl  # type: ignore[attr-defined]
        return fn

    return decorate


def register_module(
    name: str, capabilities: Capabilities | None = None, /, *, available: Check | None = None,
    description: str = "", prepare: bool = False, **fields: Any,
) -> Callable[[F], F]:
    """Declare a module-level implementation ``f(x, *, heads, weights, mask, causal)`` (docs/modules.md).

    The capabilities are a :class:`Capabilities` record or its fields as keywords; ``kind`` is "module"
    here, and the module-only fields (``layers``, ``rope``, ``kv_cache``, ``positional_bias``) may be set.
    """
    _check_record_argument(name, capabilities)
    if capabilities is not None:
        capabilities = dataclasses.replace(capabilities, kind="module")
    else:
        fields = {"kind": "module", **fields}

    def decorate(fn: F) -> F:
        impl = make_implementation(name, fn, capabilities, available=available, description=description,
                                   prepare=prepare, **fields)
        fn.__attnbench__ = impl  # type: ignore[attr-defined]
        return fn

    return decorate


def _is_default(key: str, value: object) -> bool:
    """Left at its default (``causal=0`` is not ``causal=False``: the record rejects it, naming it)."""
    default = _DEFAULTS.get(key)
    return type(value) is type(default) and value == default


def _check_record_argument(name: str, capabilities: object) -> None:
    if capabilities is not None and not isinstance(capabilities, Capabilities):
        raise TypeError(f"register({name!r}, {capabilities!r}): the second argument is a harness.Capabilities(...) "
                        f"record; every other field is a keyword, e.g. register({name!r}, backend='torch')")


_DEFAULTS: dict[str, object] = {f.name: f.default for f in dataclasses.fields(Capabilities)
                                if f.default is not dataclasses.MISSING}
_DEFAULTS["conventions"] = None  # register's spelling of "the contract's"


def make_implementation(name: str, fn: Callable[..., Any], capabilities: Capabilities | None = None, /, *,
                        available: Check | None = None, description: str = "",
                        prepare: bool = False, **keywords: Any) -> Implementation:
    """Validate a declaration (a :class:`Capabilities` record, or its fields as keywords) against ``fn``'s
    signature and build the :class:`Implementation` (``register`` without the decorator)."""
    source = _source_of(fn)

    def error(text: str) -> PluginError:
        return PluginError(f"plugin {name!r} ({source}): {text}")

    if not isinstance(name, str) or not name.isidentifier():
        raise error("the name must be an identifier such as 'my_attention'")
    if not callable(fn):
        raise error("register decorates a function")
    declared = _declared(capabilities, keywords, error)
    if available is not None and not callable(available):
        raise error("available= must be a callable available(case) returning None or a reason")
    if available is not None and not _takes_case(available):
        raise error("available= takes the case: available=lambda case: ... (None, or the reason this machine "
                    "cannot run it; docs/plugins.md)")
    description = description or (inspect.getdoc(fn) or "").split("\n")[0]
    if not isinstance(description, str):
        raise error("description= must be a string")
    if not isinstance(prepare, bool):
        raise error(f"prepare={prepare!r} must be True or False")
    check_signature(fn, declared, error)
    if prepare:
        call = fn
    else:
        def call(*args: Any, **kwargs: Any) -> Call:  # (q, k, v) for kernels, (x,) for modules
            return lambda: fn(*args, **kwargs)
    structures = declared.structures
    keeps_align = "bottom_right" in structures
    if declared.conventions.causal_align == "bottom_right" and not keeps_align:
        # bottom-right cases pass as they are; adapt() reads causal_align
        declared = dataclasses.replace(declared, structures=(*structures, "bottom_right"))
    if declared.kind == "kernel":
        call = adapt(call, declared.conventions, keeps_align)
    else:
        call = adapt_module(call, declared.conventions)
    return Implementation(name=name, prepare=call, declared=declared, available=available,
                          description=description, source=source, set_up=prepare)


def _declared(capabilities: Capabilities | None, keywords: dict[str, Any],
              error: Callable[[str], PluginError]) -> Capabilities:
    """The record a declaration makes: given whole, or built from its keywords."""
    names = set(field_names())
    if "options" in keywords:
        raise error("options= was removed: declare block_q=, block_k=, layers=, rope=, kv_cache=, positional_bias=, "
                    "kernel= as record fields (docs/plugins.md)")
    if capabilities is not None:
        if not isinstance(capabilities, Capabilities):
            raise error(f"the second argument must be harness.Capabilities(...), not {type(capabilities).__name__}")
        extra = sorted(keywords)
        if extra:
            raise error(f"capabilities given twice: as a Capabilities record and as keyword(s) {extra}; "
                        "move them into the record")
        return capabilities
    unknown = sorted(set(keywords) - names)
    if unknown:
        raise error(f"unknown keyword(s) {unknown}; register accepts "
                    f"{sorted(names - {'kind'} | set(_CALL_KEYWORDS))} "
                    f"(each documented in docs/plugins.md)")
    if keywords.get("backend") is None:
        raise error(f"backend= is required (one of {BACKENDS})")
    fields = {key: value for key, value in keywords.items() if key in names}
    if fields.get("conventions") is None:
        fields.pop("conventions", None)
    try:
        return Capabilities(**fields)
    except CapabilityError as exc:
        raise error(str(exc)) from None
    except TypeError as exc:  # a record field given a value of the wrong shape
        raise error(str(exc)) from None
