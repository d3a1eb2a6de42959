"""Real models' attention as data: the catalogue (``models.json``) and the cases a model's layers make.

Each entry is one open model's attention configuration, read from its own config (``source`` names it):
heads, KV heads, head dims, sliding window and which layers slide, logit soft-cap, attention sinks, the
softmax scale when it is not 1/sqrt(d), RoPE base, context length. :func:`model_cases` turns an entry into
the :class:`~harness.case.attention.AttentionCase` calls its layers make in a *form*: ``prefill`` (a prompt of T
tokens, causal, every layer kind), ``decode`` (one new token per sequence against a KV cache of ragged
lengths, bottom-right aligned) or ``serving`` (a serving engine's mixed batch, :func:`serving_workload`).
``verify --model`` and ``bench --model`` pick the sizes that fit the machine.

A feature the case space cannot express yet (:data:`FEATURES`: soft-cap, sinks, a value head dim of its
own) is left out of the case and said in :attr:`ModelCases.left_out`, so a run never claims to have checked
what it did not.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from harness.case.attention import AttentionCase, CaseFields
from harness.case.decode import decode_fields
from harness.case.dtypes import itemsize
from harness.case.workload import Workload, parse_workloads
from harness.errors import UsageError

FORMS = ("prefill", "decode", "serving")
"""prefill: a prompt of T tokens at once; decode: one new token per sequence against its KV cache; serving: a
batch that mixes a chunk of a prompt, decode steps and a speculative step, in one call."""
POSITIONALS = ("rope", "absolute", "relative_bias", "alibi")

FEATURES: dict[str, str] = {"softcap": "logit soft-cap", "sinks": "attention sinks", "dv": "a value head dim of its own"}
"""Model features and the case field that expresses each; a field :class:`AttentionCase` lacks is left out."""


@dataclass(frozen=True)
class ModelAttention:
    """One model's attention configuration, as its config states it."""

    name: str
    family: str
    heads: int
    kv_heads: int
    head_dim: int
    """The query/key head dim."""
    hidden: int
    layers: int
    source: str
    d_v: int | None = None
    """The value head dim where it differs from ``head_dim`` (DeepSeek's MLA: 192 / 128)."""
    causal: bool = True
    window: int | None = None
    """Keys a query sees in a sliding layer, its own included (transformers' ``sliding_window``)."""
    local_global: tuple[int, int] | None = None
    """(sliding layers, full layers) in the repeating pattern; None with a window: every layer slides."""
    softcap: float | None = None
    """Attention logit soft-cap: scores become ``cap * tanh(scores / cap)`` (Gemma 2: 50)."""
    sinks: bool = False
    """A learned sink logit per head joins each softmax's denominator (gpt-oss)."""
    scale: float | None = None
    """The softmax scale where it is not 1/sqrt(head_dim)."""
    rope_theta: float | None = None
    max_positions: int = 0
    positional: str = "rope"
    forms: tuple[str, ...] = FORMS
    notes: str = ""

    @property
    def v_dim(self) -> int:
        return self.d_v or self.head_dim

    @property
    def windows(self) -> tuple[int | None, ...]:
        """The attention each kind of layer does: a window's width, or None for full attention."""
        if self.window is None:
            return (None,)
        return (self.window,) if self.local_global is None else (self.window, None)

    def features(self) -> dict[str, object]:
        """The features beyond plain attention this model uses, as case field -> value."""
        used: dict[str, object] = {}
        if self.softcap is not None:
            used["softcap"] = self.softcap
        if self.sinks:
            used["sinks"] = True
        if self.d_v is not None and self.d_v != self.head_dim:
            used["dv"] = self.d_v  # AttentionCase's field
        return used

    def left_out(self) -> tuple[str, ...]:
        """A sentence per feature this attnbench's cases cannot express yet (left out of the cases)."""
        known = AttentionCase.__dataclass_fields__
        return tuple(_LEFT_OUT[name](self) for name in self.features() if name not in known)

    def layer_summary(self) -> str:
        if self.window is None:
            return "full"
        if self.local_global is None:
            return f"window {self.window}"
        local, full = self.local_global
        return f"window {self.window} ({local}:{full} with full)"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelAttention:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for name in ("forms", "local_global"):
            if isinstance(fields.get(name), list):
                fields[name] = tuple(fields[name])
        model = cls(**fields)
        model.validate()
        return model

    def validate(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise UsageError(f"model {self.name!r} in the catalogue: {message}")

        for name in ("heads", "kv_heads", "head_dim", "hidden", "layers"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, f"{name} must be an integer >= 1")
        need(self.heads % self.kv_heads == 0, f"heads {self.heads} must be a multiple of kv_heads {self.kv_heads}")
        need(set(self.forms) <= set(FORMS) and bool(self.forms), f"forms {self.forms} must be some of {FORMS}")
        need(self.causal or not {"decode", "serving"} & set(self.forms),
             "an encoder (causal false) has no decode or serving form")
        need(self.positional in POSITIONALS, f"positional {self.positional!r} is not one of {POSITIONALS}")
        need(self.window is None or self.window >= 1, "window must be >= 1")
        need(self.local_global is None or self.window is not None, "local_global needs a window")
        need(bool(self.source), "every entry names its source")


_LEFT_OUT: dict[str, Callable[[ModelAttention], str]] = {
    "softcap": lambda m: f"logit soft-cap {m.softcap:g} left out (the case space has no soft-cap yet)",
    "sinks": lambda m: "attention sinks left out (the case space has no sinks yet)",
    "dv": lambda m: f"value head dim {m.d_v} taken as the q/k head dim {m.head_dim} (the case space has one d yet)",
}


@cache
def catalogue() -> dict[str, ModelAttention]:
    """Every model of the shipped catalogue, by name, in the file's order."""
    text = resources.files("harness.case").joinpath("models.json").read_text(encoding="utf-8")
    return {entry["name"]: ModelAttention.from_json(entry) for entry in json.loads(text)["models"]}


def model_named(name: str) -> ModelAttention:
    """The catalogue entry ``name``; a usage error listing every name when there is none."""
    models = catalogue()
    if name not in models:
        raise UsageError(f"unknown model {name!r}; the catalogue has: {', '.join(models)} "
                         "(`--model list` shows each with its shape and source)")
    return models[name]


@dataclass(frozen=True)
class ModelCases:
    """The cases of one model in one form, and what of the model they leave out."""

    model: str
    form: str
    cases: tuple[AttentionCase, ...]
    left_out: tuple[str, ...] = field(default=())


def model_cases(model: ModelAttention, form: str, *, length: int, batch: int = 1, dtype: str = "float32",
                device: str = "cpu", grad: bool = False) -> ModelCases:
    """The calls ``model``'s layers make in ``form``: ``length`` is the prompt (prefill) or the cache (decode).

    One case per kind of layer (sliding, full); a sliding layer whose window covers every earlier key at
    this length is the full layer's case. Decode caches are ragged across the batch (serving mixes
    sequences of every length), the new token at the end of each.
    """
    if form not in model.forms:
        raise UsageError(f"model {model.name!r} has no {form} form (forms: {', '.join(model.forms)})")
    if form == "serving":
        return _serving_cases(model, serving_workload(length, batch), dtype, device)
    base: CaseFields = {"heads": model.heads, "kv_heads": model.kv_heads, "d": model.head_dim, "dtype": dtype,
                        "device": device}
    if model.scale is not None:
        base["scale"] = model.scale
    known = AttentionCase.__dataclass_fields__
    extra = {name: value for name, value in model.features().items() if name in known}
    cases: dict[str, AttentionCase] = {}
    for window in model.windows:
        if form == "prefill":
            fields: CaseFields = {**base, "batch": batch, "tq": length, "causal": model.causal, "grad": grad}
        else:
            fields = {**base, **decode_fields(batch, model.heads, model.kv_heads, length, d=model.head_dim,
                                              ragged=batch > 1)}
        if window is not None and window < length:  # else the window reaches back to key 0: a full layer
            fields.update({"window": (window - 1, 0), "causal": True})
            if form == "decode":
                fields["causal_align"] = "bottom_right"
        case = AttentionCase(**fields).with_(**extra)
        cases.setdefault(case.id, case)
    return ModelCases(model.name, form, tuple(cases.values()), model.left_out())


def serving_workload(length: int, batch: int = 1) -> Workload:
    """A model's default serving batch at cache length ``length``: one chunk of a prompt (a quarter of it, at most
    512 tokens) against the ``length`` tokens before it, ``batch`` decode steps and one speculative step of 4
    tokens, each against ``length`` cached keys. What a continuous-batching engine's call holds
    (:mod:`harness.case.workload`; vLLM's grammar, ``1chunk256q1k_8s1k_1spec4s1k`` at 1,024)."""
    chunk = max(1, min(512, length // 4))
    return parse_workloads([f"1chunk{chunk}q{length}_{max(1, batch)}s{length}_1spec4s{length}"])[0]


def _serving_cases(model: ModelAttention, workload: Workload, dtype: str, device: str) -> ModelCases:
    """``workload`` as the model's call, one case per kind of layer (a window that reaches back to key 0 of every
    request is a full layer)."""
    call = workload.case(heads=model.heads, d=model.head_dim, dtype=dtype, device=device, kv_heads=model.kv_heads)
    extra = {name: value for name, value in model.features().items() if name in AttentionCase.__dataclass_fields__}
    if model.scale is not None:
        extra["scale"] = model.scale
    longest = max(kv for _, kv in workload.requests)
    cases: dict[str, AttentionCase] = {}
    for window in model.windows:
        case = call.with_(**extra)
        if window is not None and window < longest:
            case = case.with_(window=(window - 1, 0))
        cases.setdefault(case.id, case)
    return ModelCases(model.name, "serving", tuple(cases.values()), model.left_out())


def case_elements(case: AttentionCase) -> tuple[int, int]:
    """(elements of q, k, v and the output; scores) of one call of ``case``."""
    io = case.batch * (case.heads * case.tq * (case.d + case.value_dim) + case.kv_heads * case.tk * (case.d + case.value_dim))
    return io, case.batch * case.heads * case.tq * case.tk


def case_bytes(case: AttentionCase) -> int:
    """Bytes one call of ``case`` may hold: q, k, v, the output and a materialised (Tq, Tk) score matrix
    three times over (scores, weights, a temporary), as a naive implementation does."""
    item = max(4, itemsize(case.dtype))
    io, scores = case_elements(case)
    return io * item + 3 * scores * item


def fitting_length(model: ModelAttention, form: str, candidates: Sequence[int], memory_bytes: float, *,
                   batch: int = 1, dtype: str = "float32", max_elements: int | None = None) -> int:
    """The largest of ``candidates`` within the model's context whose cases fit ``memory_bytes`` and, when
    given, ``max_elements`` (arrays and scores of one call, a bound on its time); else the smallest."""
    allowed = sorted(t for t in candidates if not model.max_positions or t <= model.max_positions)
    if not allowed:
        allowed = [min(candidates)]
    best = allowed[0]
    for t in allowed:
        cases = model_cases(model, form, length=t, batch=batch, dtype=dtype).cases
        if max(case_bytes(c) for c in cases) <= memory_bytes and (
                max_elements is None or max(sum(case_elements(c)) for c in cases) <= max_elements):
            best = t
    return best


def catalogue_rows() -> list[dict[str, object]]:
    """The catalogue as rows for ``--model list`` (and its ``--json``)."""
    rows: list[dict[str, object]] = []
    for m in catalogue().values():
        rows.append({
            "name": m.name, "family": m.family, "heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim,
            "d_v": m.v_dim, "causal": m.causal, "layers": m.layer_summary(), "softcap": m.softcap, "sinks": m.sinks,
            "scale": m.scale, "rope_theta": m.rope_theta, "max_positions": m.max_positions, "forms": list(m.forms),
            "left_out": list(m.left_out()), "source": m.source, "notes": m.notes,
        })
    return rows
