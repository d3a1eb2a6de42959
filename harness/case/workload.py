"""Serving batches: prefill, chunked-prefill, decode and speculative requests in one attention call.

A serving engine's attention call holds a batch of requests, each with its own new query tokens against its
own cached keys: a prompt (q == kv), a chunk of a long prompt against the prefix cached before it (q < kv), a
decode step (q 1) and a speculative-verification step (q 2-8). Each request's queries are the last q positions
of its sequence (bottom-right causal). Such a batch is one case: packed sequences (``varlen``) of (q, kv) per
request, causal, ``causal_align="bottom_right"``; the float64 oracle checks each request on its own keys.

Two spellings give a batch:

- vLLM's attention-benchmark grammar: segments joined by ``_``, each ``[COUNT]q<Q>[k][s<KV>[k]]`` (also
  ``kv<KV>``), ``[COUNT]s<KV>[k]`` (decode), ``[COUNT]spec<Q>s<KV>[k]`` (speculative) or
  ``[COUNT]chunk<C>q<KV>[k]`` (the last C tokens of a KV-token prompt); ``k`` multiplies by 1024. So
  ``2q2k_32q1s1k`` is 2 prompts of 2,048 tokens and 32 decode steps on 1,024 cached keys.
- A JSON trace (a file ending ``.json``): ``{"requests": [{"q": 512, "kv": 4096}, ...]}``, or
  ``{"batches": [{"requests": [...]}, ...]}`` for several calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from harness.case.attention import AttentionCase
from harness.errors import UsageError

GRAMMAR = ("[COUNT]q<Q>[k][s<KV>[k]], [COUNT]s<KV>[k], [COUNT]spec<Q>s<KV>[k] or [COUNT]chunk<C>q<KV>[k], "
           "joined by _ (k: x1024), e.g. 2q2k_32q1s1k; or a .json trace")
_SEGMENT = re.compile(
    r"(?P<count>\d+)?(?:"
    r"chunk(?P<chunk>\d+)(?P<chunkk>k)?q(?P<prompt>\d+)(?P<promptk>k)?"
    r"|spec(?P<spec>\d+)(?:s|kv)(?P<skv>\d+)(?P<skvk>k)?"
    r"|q(?P<q>\d+)(?P<qk>k)?(?:(?:s|kv)(?P<kv>\d+)(?P<kvk>k)?)?"
    r"|s(?P<decode>\d+)(?P<decodek>k)?)",
    re.IGNORECASE)
MAX_REQUESTS = 4096
"""Requests one batch may hold: a typo (``20000s1k``) is an error, not an hour of work."""


def request_kind(q: int, kv: int) -> str:
    """What a request of ``q`` new tokens on ``kv`` keys is, as serving engines name it."""
    if q == 1:
        return "decode"
    if q == kv:
        return "prefill"
    if q <= 8:
        return "speculative"
    return "chunked prefill"


@dataclass(frozen=True)
class Workload:
    """One batch: (query tokens, keys) per request, in order; ``spec`` as given."""

    spec: str
    requests: tuple[tuple[int, int], ...]

    def case(self, heads: int = 8, d: int = 64, dtype: str = "float32", device: str = "cpu",
             kv_heads: int | None = None) -> AttentionCase:
        """The batch as one attention call: packed sequences, bottom-right causal."""
        return AttentionCase(batch=1, heads=heads, kv_heads=kv_heads or heads, d=d, dtype=dtype, device=device,
                             tq=sum(q for q, _ in self.requests), tk=sum(kv for _, kv in self.requests),
                             varlen=self.requests, causal=True, causal_align="bottom_right")

    def kinds(self) -> dict[str, int]:
        """How many requests of each kind, in the order they first appear."""
        out: dict[str, int] = {}
        for q, kv in self.requests:
            kind = request_kind(q, kv)
            out[kind] = out.get(kind, 0) + 1
        return out


def _n(digits: str | None, k: str | None) -> int:
    return int(digits or 0) * (1024 if k else 1)


def _segment(text: str, spec: str) -> list[tuple[int, int]]:
    m = _SEGMENT.fullmatch(text)
    if m is None or not text:
        raise UsageError(f"--workload {spec}: {text!r} is not a request; write {GRAMMAR}")
    g = m.groupdict()
    if g["chunk"] is not None:
        q, kv = _n(g["chunk"], g["chunkk"]), _n(g["prompt"], g["promptk"])
    elif g["spec"] is not None:
        q, kv = int(g["spec"]), _n(g["skv"], g["skvk"])
    elif g["q"] is not None:
        q = _n(g["q"], g["qk"])
        kv = q if g["kv"] is None else _n(g["kv"], g["kvk"])
    else:
        q, kv = 1, _n(g["decode"], g["decodek"])
    count = int(g["count"]) if g["count"] is not None else 1
    if count < 1:
        raise UsageError(f"--workload {spec}: {text!r} asks for no request; a count is at least one")
    if q < 1:
        raise UsageError(f"--workload {spec}: {text!r} has no query token; every request has at least one")
    if kv < q:
        raise UsageError(f"--workload {spec}: {text!r} has {q} new tokens on {kv} keys; the keys hold the new tokens "
                         "too (kv >= q)")
    return [(q, kv)] * count


def _checked(spec: str, requests: list[tuple[int, int]]) -> Workload:
    if not requests:
        raise UsageError(f"--workload {spec}: no request; write {GRAMMAR}")
    if len(requests) > MAX_REQUESTS:
        raise UsageError(f"--workload {spec}: {len(requests)} requests in one batch; at most {MAX_REQUESTS}")
    return Workload(spec, tuple(requests))


def _trace(path: Path) -> list[Workload]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"--workload {path}: cannot be read ({exc.strerror or exc}); give a JSON trace file") from None
    except ValueError as exc:
        raise UsageError(f"--workload {path}: not JSON ({exc}); write {{\"requests\": [{{\"q\": 512, \"kv\": 4096}}]}}") \
            from None
    batches = data.get("batches") if isinstance(data, dict) and "batches" in data else [data]
    if not isinstance(batches, list):
        raise UsageError(f"--workload {path}: \"batches\" must be a list of {{\"requests\": [...]}}")
    out = []
    for i, batch in enumerate(batches):
        requests = batch.get("requests") if isinstance(batch, dict) else None
        where = f"--workload {path}: batch {i}"
        if not isinstance(requests, list):
            raise UsageError(f"{where} has no \"requests\" list; write {{\"requests\": [{{\"q\": 512, \"kv\": 4096}}]}}")
        pairs = []
        for j, r in enumerate(requests):
            q, kv = (r.get("q"), r.get("kv", r.get("q"))) if isinstance(r, dict) else (None, None)
            if not (isinstance(q, int) and isinstance(kv, int) and not isinstance(q, bool) and 1 <= q <= kv):
                raise UsageError(f"{where}, request {j}: {json.dumps(r)[:80]} needs integers q >= 1 and kv >= q")
            pairs.append((q, kv))
        out.append(_checked(f"{path}#{i}", pairs))
    return out


def parse_workloads(specs: list[str]) -> list[Workload]:
    """Each ``--workload`` value as its batches: a spec is one batch, a JSON trace one per call it records."""
    out: list[Workload] = []
    for spec in specs:
        if spec.endswith(".json"):
            out += _trace(Path(spec))
        else:
            out.append(_checked(spec, [p for part in spec.split("_") for p in _segment(part, spec)]))
    return out
