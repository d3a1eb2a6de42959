"""A declaration checked against its function's signature: the call the harness will make must bind.

As pluggy checks a hook implementation against its spec, :func:`check_signature` reads the function's
parameters when ``register`` runs, so a plugin that would fail on its first case fails at import instead,
with the parameter it lacks, the declaration that asks for it and the call the harness makes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from harness.case.structures import parameters_of
from harness.contract.capabilities import Capabilities
from harness.errors import PluginError


def _base_call(capabilities: Capabilities) -> tuple[int, dict[str, str], str]:
    """(arrays passed positionally, {keyword always passed: why}, the call spelled) of a kernel or module."""
    conventions = capabilities.conventions
    order: tuple[str, ...]
    if capabilities.kind == "kernel":
        arrays, order = 3, ("causal", "mask", "scale")
    else:
        arrays, order = 1, ("heads", "weights", "mask", "causal")
    why = {"scale": "always passed unless Conventions(takes_scale=False)",
           "causal": "always passed unless Conventions(takes_causal=False)"}
    dropped = {name for name, taken in (("scale", conventions.takes_scale), ("causal", conventions.takes_causal))
               if not taken}
    needs = {name: why.get(name, "always passed") for name in order if name not in dropped}
    head = "q, k, v" if arrays == 3 else "x"
    return arrays, needs, f"({head}, *, {', '.join(needs)})"


def _declared_keywords(capabilities: Capabilities) -> dict[str, tuple[str, str]]:
    """{keyword the declaration adds: (the declaration that adds it, its spelling with a default)}."""
    adds: dict[str, tuple[str, str]] = {}
    for flag in ("bias", "sinks", "softcap"):
        if getattr(capabilities, flag):
            adds[flag] = (f"{flag}=True is declared", "")
    for structure in capabilities.structures:
        for parameter, spelled in parameters_of(structure):
            adds[parameter] = (f"structures=({structure!r},) is declared", spelled)
    for field in ("rope", "positional_bias", "block_q", "block_k", "kv_cache"):
        if getattr(capabilities, field):
            spelled = f"{field}=True" if field == "kv_cache" else f"{field}="
            parameters = ("past_key", "past_value") if field == "kv_cache" else (field,)
            adds.update({parameter: (f"{spelled} is declared", "") for parameter in parameters})
    if capabilities.kv_scales:  # an FP8 cache's scales
        adds.update({name: ("kv_scales= is declared", f"{name}=None") for name in ("k_scale", "v_scale")})
    if capabilities.kind == "module" and capabilities.gqa:  # a module splits its packed projection by its KV heads
        adds["kv_heads"] = ("gqa=True is declared", "")
    return adds


def _missing_text(spelled: str, call: str, capabilities: Capabilities, missing: list[str], needs: dict[str, str],
                  adds: dict[str, tuple[str, str]]) -> str:
    """The error for keywords the harness passes that the function does not take: which, why, and the fix."""
    hint = ", ".join(adds[m][1] for m in missing if m in adds and adds[m][1])
    extras = [f for f in ("bias", "sinks", "softcap") if getattr(capabilities, f)]
    with_ = f" with {', '.join(f + '=' for f in extras)}" if extras else ""
    return (f"{spelled} has no parameter {', '.join(f'`{m}` ({needs[m]})' for m in missing)}; the harness calls "
            f"it as {call}{with_}: add the parameter(s){f' (e.g. {hint})' if hint else ''}, or **kwargs")


def check_signature(fn: Callable[..., Any], capabilities: Capabilities, error: Callable[[str], PluginError]) -> None:
    """The call the harness will make must bind to ``fn``: checked now, not when a case first runs."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to read, the call itself will tell
    params = signature.parameters.values()
    arrays, needs, call = _base_call(capabilities)
    adds = _declared_keywords(capabilities)
    needs.update({name: why for name, (why, _) in adds.items()})
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < arrays and not any(p.kind is p.VAR_POSITIONAL for p in params):
        raise error(f"{fn.__name__}{signature} takes {len(positional)} positional argument(s); the harness calls "
                    f"it as {fn.__name__}{call}")
    if not any(p.kind is p.VAR_KEYWORD for p in params):  # **kwargs takes every keyword
        taken = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        missing = sorted(set(needs) - taken)
        if missing:
            raise error(_missing_text(f"{fn.__name__}{signature}", f"{fn.__name__}{call}", capabilities, missing,
                                      needs, adds))
    required = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in needs]
    if required:
        raise error(f"{fn.__name__}{signature} requires keyword(s) {required} that the harness never passes; "
                    f"give them defaults")
