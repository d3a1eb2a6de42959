"""Structure-aware damage for result files (Hypothesis strategies), shared by the fuzz test and
``benchmarks/fuzz_result_files.py``: a valid document (bench, verify or pytest-benchmark) with one to four
of its values replaced by any JSON value (hostile strings, NaN, huge integers, deep nesting, wrong types),
removed, or with a key added; and the checks every outcome must pass."""

from __future__ import annotations

import copy
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from result_documents import bench_document, check_page, pytest_benchmark_document, verify_document, write

HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(2)>", "[a](https://e.vil)", "![i](https://e.vil/p)",
           "@octocat", "\" onmouseover=\"alert(3)", "</td></table><script>", "{c.covered}", "%s%n", "\u202e", "\x00",
           "a|b", "`x`", "NaN", "Infinity", "3", "float32", "ok", "fwd", "torch_sdpa"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10**4), st.integers(), st.sampled_from([10**30, -(10**30), 2**64]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1e-3]),
    st.sampled_from(HOSTILE), st.text(max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.sampled_from(HOSTILE) | st.text(max_size=8),
                                                                       inner, max_size=4)), max_leaves=12)
DEEP = st.integers(30, 200).map(lambda n: _nest(n))
BASES = {"bench": bench_document, "verify": verify_document, "pytest-benchmark": pytest_benchmark_document}


def _nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:3]):  # the first few items of a list: cells are alike
            out += _paths(item, (*path, i))
    return out


ODD_NUMBERS = [0, -1, -(2**63), 2**63, 1, 3]
ODD_FLOATS = [0.0, -0.0, -1.0, -1e-3, 1e-300, 1e300, math.nan, math.inf, -math.inf, 5e-324]


def _alike(value: Any) -> st.SearchStrategy[Any]:
    """Another value of ``value``'s JSON type, chosen to be odd: hostile text, zero, negative, huge, NaN."""
    if isinstance(value, bool):
        return st.just(not value)
    if isinstance(value, int):
        return st.sampled_from(ODD_NUMBERS) | st.integers(-(2**63), 2**63)
    if isinstance(value, float):
        return st.sampled_from(ODD_FLOATS) | st.floats()
    if isinstance(value, str):
        return st.sampled_from(HOSTILE) | st.text(max_size=30)
    if isinstance(value, list):
        return st.lists(st.sampled_from(value) if value else VALUES, max_size=6) | st.just([])
    if isinstance(value, dict):
        return st.just({}) | st.just(value)
    return VALUES


@st.composite
def damaged_documents(draw: st.DrawFn) -> tuple[str, Any]:
    """(the base document's kind, a damaged copy)."""
    kind = draw(st.sampled_from(sorted(BASES)))
    document = BASES[kind]()
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(document) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "replace", "alike", "alike", "alike", "remove", "add", "deep"]))
        current = parent[path[-1]]
        if action == "alike":  # a value of the same type: past the type checks, into what reads the value
            parent[path[-1]] = draw(_alike(current))
        elif action == "remove":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(HOSTILE) | st.text(max_size=8))] = draw(VALUES)
        else:
            parent[path[-1]] = draw(DEEP if action == "deep" else VALUES)
    return kind, copy.deepcopy(document)


def check_summary(text: str) -> None:
    assert "<script" not in text and "<img" not in text and "@octocat" not in text and "](https://e.vil" not in text


def run_both(document: Any, main: Any) -> tuple[int, int]:
    """``report`` and ``compare`` (both ways) on the damaged document: their exit codes, every outcome checked."""
    with tempfile.TemporaryDirectory() as d:
        path = write(Path(d) / "damaged.json", document)
        good = write(Path(d) / "good.json", bench_document())
        out = Path(d) / "report"
        report = main(["report", str(path), "--out", str(out)])
        assert report in (0, 1, 2), report
        if (out / "index.html").exists():
            check_page((out / "index.html").read_text())
            check_summary((out / "summary.md").read_text())
        codes = [main(["compare", str(good), str(path), "--markdown", str(Path(d) / "c.md")]),
                 main(["compare", str(path), str(good)])]
        assert all(code in (0, 1, 2) for code in codes), codes
        if (Path(d) / "c.md").exists():
            check_summary((Path(d) / "c.md").read_text())
        return report, max(codes)
