"""Hostile strings in every string field of a result file: `index.html` shows them as text (escaped), and
`summary.md` and compare's Markdown carry no link, image, HTML or @mention that the file put there."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from result_documents import bench_document, check_page, page_tags, verify_document, write

from harness.cli import main

HOSTILE = ('<script>alert(1)</script><img src=x onerror=alert(2)>[click](https://e.vil/a)'
           '![pixel](https://e.vil/p.png)@octocat www.e.vil `x` \\[y](https://e.vil/b) | & "q" \'s\'')
KEEP = {"schema", "type", "status", "peak_key", "dtype"}  # the words that say what a value is (statuses, dtypes: enums)


def _hostile(value: Any, key: str = "", counter: list[int] | None = None) -> Any:
    """``value`` with every string (and every key of a name-keyed map) made hostile, each one distinct."""
    counter = counter if counter is not None else [0]
    if isinstance(value, dict):
        names = key in ("implementations", "coverage", "axes")
        return {(_hostile(k, "", counter) if names else k): _hostile(v, k, counter) for k, v in value.items()}
    if isinstance(value, list):
        return [_hostile(v, key, counter) for v in value]
    if isinstance(value, str) and key not in KEEP:
        counter[0] += 1
        return f"{HOSTILE}{counter[0]}"
    return value


def _no_raw_markup(page: str) -> None:
    check_page(page)
    for _, attrs in page_tags(page):
        assert all("e.vil" not in (value or "") and "HOSTILE" not in (value or "") for value in attrs.values()), attrs


def test_every_string_field_is_escaped_in_the_page_and_the_summary(tmp_path: Path) -> None:
    bench = write(tmp_path / "bench.json", _hostile(bench_document()))
    verify = write(tmp_path / "verify.json", _hostile(verify_document()))
    assert "onerror" in bench.read_text() and "onerror" in verify.read_text()
    out = tmp_path / "report"
    assert main(["report", str(bench), str(verify), "--out", str(out)]) in (0, 1)
    page = (out / "index.html").read_text()
    _no_raw_markup(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown as text
    summary = (out / "summary.md").read_text()
    _check_markdown(summary)


def _check_markdown(text: str) -> None:
    assert "<script" not in text and "<img" not in text and "@octocat" not in text
    assert "https://e.vil" not in text and "www.e.vil" not in text
    markdown_it = pytest.importorskip("markdown_it")
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(text)
    assert not re.search(r"<(script|img)\b", rendered), rendered
    links = re.findall(r'<a href="([^"]*)"', rendered)
    assert all(link.startswith("plots/") for link in links), links  # only the report's own plot links


def test_compare_markdown_is_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = bench_document()
    new = _hostile(bench_document())
    for cell, original in zip(new["cells"], base["cells"]):  # the same cells, hostile machine and reasons
        for name in ("implementation", "case_id", "mode"):
            cell[name] = original[name]
    new["environment"]["cpu_model"] = HOSTILE
    paths = write(tmp_path / "base.json", base), write(tmp_path / "new.json", new)
    assert main(["compare", *map(str, paths), "--markdown", str(tmp_path / "c.md")]) in (0, 1)
    summary = (tmp_path / "c.md").read_text()
    assert "warning" in summary
    _check_markdown(summary)
