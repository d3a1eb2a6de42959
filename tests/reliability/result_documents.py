"""Small valid result documents (bench and verify, every record present) for the damaged-file tests and the
fuzzer: each test damages a copy and writes it to disk; and the check that a report page built from a damaged
or hostile one shows its strings as text."""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from harness.case.attention import AttentionCase
from harness.results import Run
from harness.results.cells import BenchCell, VerifyCell, cell_to_json

IMPLEMENTATIONS = ("torch_sdpa", "tiled")
SIZES = (64, 128, 256)


def _bench_cells(slow: float = 1.0) -> list[dict[str, Any]]:
    cells = []
    for i, name in enumerate(IMPLEMENTATIONS):
        for t in SIZES:
            case = AttentionCase(heads=2, tq=t, d=16)
            base = 1e-5 * (t / 64) ** 2 * (1 + i) * slow
            samples = tuple(base * (1 + 0.01 * k) for k in range(7))
            cells.append(cell_to_json(BenchCell(
                implementation=name, case=case.to_dict(), case_id=case.id, mode="fwd", status="ok",
                samples_s=samples, stats={"median": samples[3], "iqr": base * 0.03, "min": samples[0],
                                          "mean": samples[3], "stdev": base * 0.02, "iqr_over_median": 0.03, "n": 7},
                flops=4.0 * 2 * t * t * 16, gflops=1.0, peak_key="float32/cpu", threads=1, bytes=4.0 * 4 * 2 * t * 16,
                memory={"peak_extra_bytes": 4 * t * t, "output_bytes": 8 * t * 16, "method": "tracemalloc"},
                integrity={"clock": "perf_counter", "checked": [{"sample": 0, "rows": "0:4", "max_abs_err": 1e-7,
                                                                   "bound": 1e-5}]},
                profile=(("aten::bmm", 0.9),))))
    return cells


def bench_document(slow: float = 1.0) -> dict[str, Any]:
    run = Run(run_id="bench-run", command="bench", complete=True,
              environment={"cpu_model": "test CPU", "cores": 2, "threads": 1, "torch": "2.x", "git_commit": "abc",
                           "time": "2026-01-01T00:00:00+00:00", "command_line": "attnbench bench"},
              config={"suite": "quick", "only": [], "plugins": [], "timeout_s": 300.0, "threads": 1},
              implementations={name: {"description": f"the {name} kernel", "memory": "linear"}
                               for name in IMPLEMENTATIONS},
              peaks={"float32/cpu": {"gflops": 100.0, "method": "torch.mm", "first_gflops": 99.0,
                                     "confirmed_gflops": 100.0}},
              bandwidth={"cpu/threads=1": {"read_gbps": 20.0, "copy_gbps": 10.0, "method": "torch.sum"}},
              cells=tuple())
    document = run.to_json()
    document["cells"] = _bench_cells(slow)
    document["fits"] = [{"implementation": "tiled", "slope": 2.0}]
    return document


def verify_document() -> dict[str, Any]:
    cells = []
    for name in IMPLEMENTATIONS:
        for t in SIZES:
            case = AttentionCase(heads=2, tq=t, d=16, causal=t == 128)
            for check, status in (("output", "pass"), ("error_growth", "pass"), ("property:slices", "fail")):
                cells.append(cell_to_json(VerifyCell(
                    implementation=name, case=case.to_dict(), case_id=case.id, check=check, status=status,
                    reason=None if status == "pass" else "the slice differs", group="causal" if t == 128 else "default",
                    metrics={"max_abs_err": 1e-6, "rel_l2": 1e-7, "ratio": 0.5, "bound": 2e-6, "base_err": 1e-6,
                             "floor": 1e-7, "T": t}, seconds=0.01)))
    run = Run(run_id="verify-run", command="verify", complete=True,
              environment={"cpu_model": "test CPU", "cores": 2, "threads": 1, "torch": "2.x"},
              config={"suite": "quick"},
              coverage={name: {"covered": 10, "total": 20, "fraction": 0.5, "axes": {"dtype": 2}, "suite": "quick"}
                        for name in IMPLEMENTATIONS})
    document = run.to_json()
    document["cells"] = cells
    return document


def pytest_benchmark_document() -> dict[str, Any]:
    return {"machine_info": {"cpu": {"brand_raw": "test CPU"}, "python_version": "3.12"},
            "datetime": "2026-01-01T00:00:00",
            "benchmarks": [{"name": f"test_attention[{name}-{t}]", "param": f"{name}-{t}",
                            "params": {"implementation": name},
                            "extra_info": {"implementation": name, "T": t, "d": 16, "heads": 2, "batch": 1},
                            "stats": {"median": 1e-4 * t, "iqr": 1e-6, "min": 1e-4 * t, "mean": 1e-4 * t,
                                      "stddev": 1e-6, "rounds": 5, "data": [1e-4 * t] * 5}}
                           for name in IMPLEMENTATIONS for t in SIZES]}


def write(path: Path, document: Any) -> Path:
    """``document`` as JSON (Python's encoder: NaN and Infinity written bare, as a damaged file may hold)."""
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return path


def damaged(document: dict[str, Any], *path: Any, value: Any) -> dict[str, Any]:
    """A copy of ``document`` with the value at ``path`` (keys and indices) replaced by ``value``."""
    out = copy.deepcopy(document)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


INTERNAL_LINKS = ("#set-aside",)
"""The only links a report page has: to a section of its own, an id the report names (never a file's string)."""


class _Tags(HTMLParser):
    """Every element and attribute of a page, as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def page_tags(page: str) -> list[tuple[str, dict[str, str | None]]]:
    """Every (element, attributes) of ``page`` in document order."""
    parser = _Tags()
    parser.feed(page)
    return parser.tags


def check_page(page: str) -> None:
    """No element, attribute or link that a result file put there: every string of it was escaped."""
    for tag, attrs in page_tags(page):
        assert tag not in ("script", "iframe", "object", "embed", "style") or (tag == "style" and not attrs), tag
        assert tag != "a" or (set(attrs) == {"href"} and (attrs["href"] or "") in INTERNAL_LINKS), attrs
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert tag != "img" or (attrs.get("src") or "").startswith("data:image/png;base64,"), attrs
    for raw in ("<script", "<img src=x", "</td></table><script>"):
        assert raw not in page, raw
