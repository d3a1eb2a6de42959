"""What an implementation declares it can run, as one frozen, validated record of plain data.

Capabilities are data, as in xformers' ``AttentionOpBase``: the harness never calls an implementation on a
case it declared it cannot run; it asks :meth:`Capabilities.not_supported_reasons` and records the reasons
as ``skipped: <reason>``. The record holds no callable, so it pickles: bench's parent receives it from the
worker that imported the plugins (:mod:`harness.bench.catalogue`) and reads it without running plugin code.

A record validates itself when built (a bad value raises :class:`CapabilityError` saying what is allowed);
:func:`harness.contract.registry.register` adds the plugin's name and source to the message. docs/plugins.md lists
every field (``tests/test_capabilities.py`` checks it against :func:`dataclasses.fields`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from harness.case.devices import DEVICES
from harness.case.dtypes import DTYPES, FP8_DTYPES, KV_DTYPES, NUMPY_DTYPES
from harness.case.quantized import SCALE_LAYOUTS
from harness.case.structures import checked_structures, structure_reasons
from harness.contract.conventions import CONTRACT, Conventions
from harness.errors import PluginError

if TYPE_CHECKING:
    from harness.case.attention import AttentionCase

BACKENDS = ("numpy", "torch")
KINDS = ("kernel", "module")
MEMORY_GROWTH = ("quadratic", "linear")
MODULE_LAYERS = ("mha", "encoder")
ROPE_CONVENTIONS = ("rotate_half", "interleaved")
POSITIONAL_BIASES = ("alibi",)
FLAGS = ("causal", "mask", "gqa", "grad", "bias", "sinks", "softcap", "value_dim", "deterministic", "on_request",
         "kv_cache")
MODULE_ONLY = ("layers", "rope", "kv_cache", "positional_bias", "kernel")
"""The fields only a module declares (:func:`harness.contract.registry.register_module`)."""


class CapabilityError(PluginError):
    """A capability declared with a value it cannot take; the message says which values it can."""


@dataclass(frozen=True)
class Capabilities:
    """Everything an implementation declares about the cases it runs; plain data, validated when built."""

    backend: str
    """The arrays it takes: ``"numpy"`` (``numpy.ndarray``) or ``"torch"`` (``torch.Tensor``)."""
    kind: str = "kernel"
    """``"kernel"``: ``f(q, k, v, ...)`` (docs/plugins.md); ``"module"``: ``f(x, *, heads, weights, ...)``
    (docs/modules.md), set by :func:`~harness.contract.registry.register_module`."""
    dtypes: tuple[str, ...] = ("float32",)
    """The dtypes of q (and of K and V unless ``kv_dtypes`` says otherwise); NumPy has no bfloat16."""
    kv_dtypes: tuple[str, ...] = ()
    """K/V cache dtypes taken beside any of ``dtypes`` for q (a case's ``kv_dtype``); empty: K and V in q's dtype.
    An FP8 type (float8_e4m3fn, float8_e5m2) needs ``kv_scales`` too: K and V then arrive in FP8 with their scales."""
    kv_scales: tuple[str, ...] = ()
    """The FP8 caches' scale layouts it takes (``tensor``, ``head``, ``token``: :mod:`harness.case.quantized`), passed as
    ``k_scale=``, ``v_scale=`` (float32 tensors; the dequantized value is ``stored * scale``). Torch only."""
    devices: tuple[str, ...] = ("cpu",)
    """Where it runs: ``"cpu"``, ``"cuda"``; a numpy implementation runs on the CPU only."""
    causal: bool = False
    """Takes ``causal=True`` (top-left aligned unless ``conventions`` say otherwise)."""
    mask: bool = False
    """Takes a boolean ``mask=`` broadcastable to (B, H, Tq, Tk), True = may attend."""
    gqa: bool = False
    """Takes K and V with fewer heads than q (grouped-query attention)."""
    grad: bool = False
    """Gradients through torch autograd, read from ``.grad`` after ``.backward()`` (torch only)."""
    bias: bool = False
    """Takes an additive ``bias=`` tensor broadcastable to (B, H, Tq, Tk)."""
    sinks: bool = False
    """Takes ``sinks=`` (H,): a learned per-head logit in the softmax's denominator that carries no value (gpt-oss)."""
    softcap: bool = False
    """Takes ``softcap=`` (a float or None): logits become ``cap * tanh(logits / cap)`` before masking (Gemma 2)."""
    value_dim: bool = False
    """Takes V with a head dim other than q's and k's (DeepSeek MLA: 192 / 128); the output has V's."""
    structures: tuple[str, ...] = ()
    """Structures taken natively (:mod:`harness.case.structures`); any other a case uses arrives folded into ``mask=``."""
    memory: str | None = None
    """How peak memory grows with T: "quadratic" (materialises Tq x Tk), "linear" (tiled), None (undeclared)."""
    deterministic: bool = True
    """Two calls on identical inputs give bitwise identical outputs; False: they need only both pass the rule."""
    on_request: bool = False
    """Runs only when named (``--only NAME``): its set-up is too slow for the default suites (a compiler)."""
    conventions: Conventions = CONTRACT
    """The kernel's own layout, causal alignment, head map, empty-row value, mask kind, scale and return value
    (:mod:`harness.contract.conventions`); attnbench adapts its inputs and its comparison to them."""
    block_q: tuple[int, ...] = ()
    """Tile sizes along the queries a property check may pass as ``block_q=`` (declare ``block_k`` too)."""
    block_k: tuple[int, ...] = ()
    """Tile sizes along the keys, passed as ``block_k=``."""
    layers: tuple[str, ...] = ()
    """Module only: the layers it implements (``"mha"``, ``"encoder"``); a module declaring none implements mha."""
    rope: tuple[str, ...] = ()
    """Module only: the RoPE conventions it applies when asked as ``rope=`` (rotate_half, interleaved)."""
    kv_cache: bool = False
    """Module only: takes earlier positions' keys and values as ``past_key=``, ``past_value=``."""
    positional_bias: tuple[str, ...] = ()
    """Module only: positional biases it computes itself, asked as ``positional_bias=`` (alibi)."""
    kernel: str = ""
    """Module only: the name of the kernel inside a lifted module (:func:`harness.modules.lift`)."""

    def __post_init__(self) -> None:
        _check(self)

    def not_supported_reasons(self, case: AttentionCase) -> list[str]:
        """Every reason the declaration rules ``case`` out, empty when it does not: no plugin code runs."""
        reasons = [explain(self, case) for lacks, explain in _GAPS if lacks(self, case)]
        reasons.extend(structure_reasons(self, case))
        if case.kind == "kernel":
            reasons.extend(self.conventions.reasons(case, self.mask, self.structures))
        return reasons

    def describe(self) -> dict[str, Any]:
        """The record as plain data for `attnbench list --json` and result files (unusual fields only if set)."""
        plain: dict[str, Any] = {
            "kind": self.kind, "backend": self.backend, "dtypes": list(self.dtypes),
            "devices": list(self.devices), "causal": self.causal, "mask": self.mask,
            "gqa": self.gqa, "grad": self.grad, "bias": self.bias, "memory": self.memory,
            "deterministic": self.deterministic, "structures": list(self.structures), "on_request": self.on_request,
            "sinks": self.sinks, "softcap": self.softcap, "value_dim": self.value_dim,
        }
        if not self.conventions.is_contract:
            plain["conventions"] = self.conventions.describe()
        if self.kv_dtypes:
            plain["kv_dtypes"] = list(self.kv_dtypes)
        if self.kv_scales:
            plain["kv_scales"] = list(self.kv_scales)
        return plain


def field_names() -> tuple[str, ...]:
    """The record's fields, in declaration order (what docs/plugins.md lists)."""
    return tuple(f.name for f in fields(Capabilities))


def _strings(record: Capabilities, key: str, allowed: tuple[str, ...], empty_ok: bool) -> None:
    value = getattr(record, key)
    items = (value,) if isinstance(value, str) else value
    try:
        items = tuple(items)
    except TypeError:
        raise CapabilityError(f"{key}={value!r} must be a tuple of strings from {allowed}") from None
    bad = [x for x in items if x not in allowed]
    if bad or (not items and not empty_ok):
        raise CapabilityError(f"{key}={items!r} has unknown values {bad}; choose from {allowed}")
    object.__setattr__(record, key, items)  # normalised: a lone string or a list becomes a tuple


def _check(record: Capabilities) -> None:
    """Every field's own values, then the combinations a backend or a kind rules out."""
    _check_values(record)
    _check_backend(record)
    _check_fp8(record)
    _check_kind(record)


def _check_values(record: Capabilities) -> None:
    if record.backend not in BACKENDS:
        raise CapabilityError(f"backend={record.backend!r}; choose one of {BACKENDS}")
    if record.kind not in KINDS:
        raise CapabilityError(f"kind={record.kind!r}; choose one of {KINDS}")
    _strings(record, "dtypes", DTYPES, empty_ok=False)
    _strings(record, "kv_dtypes", KV_DTYPES, empty_ok=True)
    _strings(record, "kv_scales", tuple(SCALE_LAYOUTS), empty_ok=True)
    _strings(record, "devices", DEVICES, empty_ok=False)
    for name in FLAGS:
        if not isinstance(getattr(record, name), bool):
            raise CapabilityError(f"{name}={getattr(record, name)!r} must be True or False")
    if record.memory is not None and record.memory not in MEMORY_GROWTH:
        raise CapabilityError(f"memory={record.memory!r}; choose one of {MEMORY_GROWTH} or leave it out")
    object.__setattr__(record, "structures", checked_structures(record.structures, record.kind, CapabilityError))
    if not isinstance(record.conventions, Conventions):
        raise CapabilityError(f"conventions={record.conventions!r} must be harness.contract.conventions.Conventions(...)")
    for key in ("block_q", "block_k"):
        value = getattr(record, key)
        items = (value,) if isinstance(value, int) else tuple(value)
        if not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in items):
            raise CapabilityError(f"{key}={items!r} must be positive integers (tile sizes)")
        object.__setattr__(record, key, items)
    _strings(record, "layers", MODULE_LAYERS, empty_ok=True)
    _strings(record, "rope", ROPE_CONVENTIONS, empty_ok=True)
    _strings(record, "positional_bias", POSITIONAL_BIASES, empty_ok=True)
    if not isinstance(record.kernel, str):
        raise CapabilityError(f"kernel={record.kernel!r} must be the lifted kernel's name")


def _check_backend(record: Capabilities) -> None:
    if record.backend == "numpy":
        bad = [d for d in record.dtypes if d not in NUMPY_DTYPES]
        if bad:
            raise CapabilityError(f"NumPy has no {bad}; numpy plugins take {NUMPY_DTYPES}")
        if record.devices != ("cpu",):
            raise CapabilityError("a numpy plugin runs on devices=('cpu',) only")
        if record.grad:
            raise CapabilityError("grad=True needs backend='torch' (autograd)")
        if record.kv_scales or any(d in FP8_DTYPES for d in record.kv_dtypes):
            raise CapabilityError("NumPy has no FP8 type: FP8 KV caches (kv_dtypes float8_*, kv_scales) are for "
                                  "backend='torch' plugins")
    if not record.conventions.is_contract and record.backend != "torch":
        raise CapabilityError("conventions= are declared by torch kernels and modules (the adaptations are torch "
                              "operations)")


def _check_fp8(record: Capabilities) -> None:
    """An FP8 cache dtype and the layouts of its scales are declared together."""
    fp8 = [d for d in record.kv_dtypes if d in FP8_DTYPES]
    if fp8 and not record.kv_scales:
        raise CapabilityError(f"kv_dtypes={record.kv_dtypes!r} declares FP8 caches ({', '.join(fp8)}): declare the scale "
                              f"layouts taken too, kv_scales= some of {tuple(SCALE_LAYOUTS)}, and take k_scale=, v_scale=")
    if record.kv_scales and not fp8:
        raise CapabilityError(f"kv_scales={record.kv_scales!r} scale FP8 caches: declare kv_dtypes= with some of "
                              f"{FP8_DTYPES} too (or leave kv_scales out)")


def _check_kind(record: Capabilities) -> None:
    if record.kind == "module" and record.conventions.module_problem():
        raise CapabilityError(f"conventions=: {record.conventions.module_problem()}")
    if bool(record.block_q) != bool(record.block_k):
        raise CapabilityError("declare block_q and block_k together (the tile sizes a property check passes)")
    if record.kind == "kernel":
        declared = [name for name in MODULE_ONLY if getattr(record, name)]
        if declared:
            raise CapabilityError(f"{', '.join(declared)} describe a module: declare it with register_module(...)")


_Check = Any
_GAPS: tuple[tuple[_Check, _Check], ...] = (
    (lambda caps, case: case.kind != caps.kind,
     lambda caps, case: f"a {caps.kind} implementation does not run {case.kind} cases"),
    (lambda caps, case: case.dtype not in caps.dtypes,
     lambda caps, case: f"dtype {case.dtype} not supported (supports {', '.join(caps.dtypes)})"),
    (lambda caps, case: getattr(case, "kv_dtype", None) not in (None, case.dtype, *caps.kv_dtypes),
     lambda caps, case: f"a {case.kv_dtype} KV cache with {case.dtype} queries not supported"
                        + (f" (KV caches: {', '.join(caps.kv_dtypes)})" if caps.kv_dtypes else "")
                        + (" (an FP8 cache: declare kv_dtypes=, kv_scales= and take k_scale=, v_scale=)"
                           if case.kv_dtype in FP8_DTYPES and not caps.kv_scales else "")),
    (lambda caps, case: getattr(case, "kv_scales", None) not in (None, *caps.kv_scales) and bool(caps.kv_scales),
     lambda caps, case: f"{case.kv_scales} scales of an FP8 KV cache not supported (kv_scales: "
                        f"{', '.join(caps.kv_scales)})"),
    (lambda caps, case: case.device not in caps.devices,
     lambda caps, case: f"device {case.device} not supported (supports {', '.join(caps.devices)})"),
    (lambda caps, case: case.causal and not caps.causal, lambda caps, case: "causal masking not supported"),
    (lambda caps, case: case.mask != "none" and not caps.mask,
     lambda caps, case: f"boolean masks not supported (case mask: {case.mask})"),
    (lambda caps, case: case.kv_heads != case.heads and not caps.gqa,
     lambda caps, case: f"grouped-query attention not supported ({case.heads} query / {case.kv_heads} kv heads)"),
    (lambda caps, case: case.grad and not caps.grad, lambda caps, case: "gradients not supported"),
    (lambda caps, case: getattr(case, "bias", "none") not in ("none", *caps.positional_bias) and not caps.bias,
     lambda caps, case: f"additive bias not supported (case bias: {case.bias})"),
    (lambda caps, case: getattr(case, "sinks", False) and not caps.sinks,
     lambda caps, case: "learned attention sinks not supported (declare sinks=True and take sinks=)"),
    (lambda caps, case: getattr(case, "softcap", None) is not None and not caps.softcap,
     lambda caps, case: f"logit soft-capping not supported (case softcap: {case.softcap:g}; declare softcap=True)"),
    (lambda caps, case: getattr(case, "dv", 0) not in (0, getattr(case, "d", 0)) and not caps.value_dim,
     lambda caps, case: f"a value head dim {case.dv} != q/k head dim {case.d} not supported (declare value_dim=True)"),
)
"""(the case needs what the declaration lacks, the reason): the declared capabilities against a case."""
