"""The plugin contract: ``register`` declares a kernel, ``register_module`` a module, each with a record.

What an implementation runs is a :class:`~harness.contract.capabilities.Capabilities` record (as in xformers'
``AttentionOpBase``, capabilities are data): the harness never calls an implementation on a case it
declared it cannot run; it asks :meth:`Implementation.not_supported_reasons` (the record's reasons, then
the plugin's own ``available(case)``) and records them as a skip.

``register`` keeps no registry, global or hidden: it builds the record (given whole, or from keywords,
the deprecated ``kind=``, ``options=`` and zero-argument ``available`` mapped into it with a warning that
names the fix), checks it against the function's signature (:mod:`harness.contract.signatures`), attaches the
:class:`Implementation` to the function as ``__attnbench__`` and returns the function. Discovery
(:mod:`harness.contract.discovery`) finds declarations as a module's attributes, so a module imported before is
read the same way, and every error names the plugin's source. One module because
:class:`Implementation` reads each record field through (every runner reads ``impl.causal``) and the
deprecated spellings are mapped here, beside the signature they belong to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from harness.contract.adaptation import adapt, adapt_module
from harness.contract.capabilities import (
    BACKENDS,
    Capabilities,
    CapabilityError,
    Option,
    field_names,
    fields_from_options,
    options_of,
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
    available_per_case: bool = True
    """False for a deprecated zero-argument check: asked once per process, its answer kept for every case."""
    description: str = ""
    source: str = "?"
    set_up: bool = False
    """Registered with ``prepare=True``: its set-up may read the inputs, so bench only rotates them."""

    # The record's fields, read through the implementation (as every caller did before the record existed).
    @property
    def backend(self) -> str:
        return self.declared.backend

    @property
    def kind(self) -> str:
        return self.declared.kind

    @property
    def dtypes(self) -> tuple[str, ...]:
        return self.declared.dtypes

    @property
    def kv_dtypes(self) -> tuple[str, ...]:
        return self.declared.kv_dtypes

    @property
    def devices(self) -> tuple[str, ...]:
        return self.declared.devices

    @property
    def causal(self) -> bool:
        return self.declared.causal

    @property
    def mask(self) -> bool:
        return self.declared.mask

    @property
    def gqa(self) -> bool:
        return self.declared.gqa

    @property
    def grad(self) -> bool:
        return self.declared.grad

    @property
    def bias(self) -> bool:
        return self.declared.bias

    @property
    def sinks(self) -> bool:
        return self.declared.sinks

    @property
    def softcap(self) -> bool:
        return self.declared.softcap

    @property
    def value_dim(self) -> bool:
        return self.declared.value_dim

    @property
    def structures(self) -> tuple[str, ...]:
        return self.declared.structures

    @property
    def memory(self) -> str | None:
        return self.declared.memory

    @property
    def deterministic(self) -> bool:
        return self.declared.deterministic

    @property
    def on_request(self) -> bool:
        return self.declared.on_request

    @property
    def conventions(self) -> Conventions:
        return self.declared.conventions


    @property
    def options(self) -> dict[str, Option]:
        """The record's tile sizes and module fields in the shape of the deprecated ``options=`` mapping."""
        return options_of(self.declared)

    def __call__(self, q: Any, k: Any, v: Any, **kwargs: Any) -> Any:
        """Run once, set-up included: the plain-function form of the contract."""
        return self.prepare(q, k, v, **kwargs)()

    def availability(self) -> str | None:
        """None when the implementation can run on this machine, else the reason: a deprecated zero-argument
        check's answer; None for an ``available(case)`` check, which is asked per case."""
        return _availability(self)

    def not_supported_reasons(self, case: AttentionCase) -> list[str]:
        """Every reason this implementation cannot run ``case``; empty when it can. Calls the plugin's own
        ``available(case)`` check: the command's process asks :func:`harness.contract.availability.unsupported` instead."""
        reasons = self.declared_gaps(case)
        if not reasons and self.available is not None:
            reason = _call_available(self, case) if self.available_per_case else self.availability()
            if reason:
                reasons.append(reason)
        return reasons

    def declared_gaps(self, case: AttentionCase) -> list[str]:
        """The reasons this implementation cannot run ``case`` read from its declaration alone (no plugin code
        runs): the capabilities it declared, the case kind's own requirements, a CUDA device."""
        reasons = self.declared.not_supported_reasons(case)
        extra = getattr(case, "unsupported_by", None)  # a case kind's own requirements (module layers, RoPE)
        if case.kind == self.kind and callable(extra):
            reasons.extend(extra(self))
        if case.device == "cuda" and not _cuda_available():
            reasons.append(f"needs a CUDA device; torch.cuda.is_available() is False here ({_torch_build()})")
        return reasons

    def capabilities(self) -> dict[str, Any]:
        """The declared capabilities, as plain data for `attnbench list --json` and result files."""
        return self.declared.describe()


_AVAILABILITY_CACHE: dict[tuple[str, str], str | None] = {}


def _takes_case(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` can be called with the case (the contract's one signature) or only with nothing (deprecated)."""
    try:
        inspect.signature(fn).bind(None)
    except TypeError:
        return False
    except ValueError:  # a builtin with no signature to read: called with the case
        return True
    return True


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
    if impl.available is None or impl.available_per_case:
        return None  # decided per case in not_supported_reasons
    key = (impl.name, impl.source)
    if key not in _AVAILABILITY_CACHE:
        _AVAILABILITY_CACHE[key] = _call_available(impl, None)
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


F = TypeVar("F", bound=Callable[..., Any])

_CALL_KEYWORDS = ("available", "description", "prepare")
"""register's keywords about the call, not the capabilities: everything else is a :class:`Capabilities` field."""
_LEGACY_KEYWORDS = ("kind", "options")
"""Still accepted, deprecated: ``kind="module"`` (use :func:`register_module`) and ``options=`` (record fields)."""


def register(
    name: str, capabilities: Capabilities | None = None, /, *, backend: str | None = None,
    dtypes: Sequence[str] = ("float32",), devices: Sequence[str] = ("cpu",),
    causal: bool = False, mask: bool = False, gqa: bool = False, grad: bool = False, bias: bool = False,
    kind: str = "kernel", memory: str | None = None, deterministic: bool = True,
    available: Callable[..., str | None] | None = None, description: str = "", prepare: bool = False,
    options: Mapping[str, object] | None = None, structures: Sequence[str] = (), on_request: bool = False,
    kv_dtypes: Sequence[str] = (), sinks: bool = False, softcap: bool = False, value_dim: bool = False,
    conventions: Conventions | None = None, block_q: Sequence[int] = (), block_k: Sequence[int] = (),
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
            kv_dtypes=kv_dtypes, sinks=sinks, softcap=softcap, value_dim=value_dim, conventions=conventions,
            block_q=block_q, block_k=block_k,
        ).items() if not _is_default(key, value)}
    if kind != "kernel":
        keywords["kind"] = kind
    if options is not None:
        keywords["options"] = options
    keywords.update(unknown)

    def decorate(fn: F) -> F:
        _warn_deprecated(name, fn, keywords, available)
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


def _warn_deprecated(name: str, fn: Callable[..., Any], keywords: Mapping[str, object],
                     available: Callable[..., Any] | None) -> None:
    """The deprecated spellings still load; each says, once per plugin, what to write instead."""
    where = f"plugin {name!r} ({_source_of(fn)})"
    fixes = []
    if keywords.get("kind") == "module":
        fixes.append("kind='module' -> @register_module(...)")
    if keywords.get("options") is not None:
        fixes.append("options={...} -> the Capabilities fields of the same names (block_q=, block_k=, layers=, "
                     "rope=, kv_cache=, positional_bias=)")
    if available is not None and callable(available) and not _takes_case(available):
        fixes.append("available=lambda: ... -> available=lambda case: ... (one signature, given the case)")
    if fixes:
        warnings.warn(f"{where}: deprecated declaration: {'; '.join(fixes)} (docs/plugins.md#deprecated-spellings)",
                      DeprecationWarning, stacklevel=3)


def make_implementation(name: str, fn: Callable[..., Any], capabilities: Capabilities | None = None, /, *,
                        available: Callable[..., str | None] | None = None, description: str = "",
                        prepare: bool = False, **keywords: Any) -> Implementation:
    """Validate a declaration (a :class:`Capabilities` record, or its fields and the deprecated ``kind=`` and
    ``options=`` as keywords) against ``fn``'s signature and build the :class:`Implementation`
    (``register`` without the decorator)."""
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
    description = description or (inspect.getdoc(fn) or "").split("\n")[0]
    if not isinstance(description, str):
        raise error("description= must be a string")
    if not isinstance(prepare, bool):
        raise error(f"prepare={prepare!r} must be True or False")
    per_case = available is None or _takes_case(available)
    if available is not None and not per_case:
        available = _ignoring_case(available)
    check_signature(fn, declared, error, via_options="options" in keywords)
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
                          available_per_case=per_case, description=description, source=source, set_up=prepare)


def _declared(capabilities: Capabilities | None, keywords: dict[str, Any],
              error: Callable[[str], PluginError]) -> Capabilities:
    """The record a declaration makes: given whole, or built from its keywords (deprecated ones mapped)."""
    names = set(field_names())
    if capabilities is not None:
        if not isinstance(capabilities, Capabilities):
            raise error(f"the second argument must be harness.Capabilities(...), not {type(capabilities).__name__}")
        extra = sorted(keywords)
        if extra:
            raise error(f"capabilities given twice: as a Capabilities record and as keyword(s) {extra}; "
                        "move them into the record")
        return capabilities
    unknown = sorted(set(keywords) - names - set(_LEGACY_KEYWORDS))
    if unknown:
        raise error(f"unknown keyword(s) {unknown}; register accepts {sorted(names | set(_CALL_KEYWORDS))} "
                    f"(each documented in docs/plugins.md)")
    if keywords.get("backend") is None:
        raise error(f"backend= is required (one of {BACKENDS})")
    fields = {key: value for key, value in keywords.items() if key in names}
    if fields.get("conventions") is None:
        fields.pop("conventions", None)
    for key, value in fields_from_options(keywords.get("options"), error).items():
        if key in fields:
            raise error(f"{key} declared twice: as {key}= and in options=; keep {key}= alone")
        fields[key] = value
    try:
        return Capabilities(**fields)
    except CapabilityError as exc:
        raise error(str(exc)) from None
    except TypeError as exc:  # a record field given a value of the wrong shape
        raise error(str(exc)) from None


def _ignoring_case(check: Callable[[], str | None]) -> Check:
    """A deprecated zero-argument check in the contract's one signature (asked once: ``available_per_case``)."""
    def available(case: Any) -> str | None:
        return check()

    return available
