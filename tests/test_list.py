"""`attnbench list`: a table that stays readable, the full reasons in --json and in `list NAME`."""

from __future__ import annotations

import json
import re

import pytest

from harness.cli.list_cmd import SHORT_REASON, short_reason

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

LONG = "x" * 30 + " is not supported because: " + "y" * 300 + "; and another reason"


def test_short_reason_keeps_the_start_and_marks_the_cut() -> None:
    assert short_reason("needs a CUDA device") == "needs a CUDA device"
    cut = short_reason(LONG)
    assert len(cut) <= SHORT_REASON and cut.endswith("…") and LONG.startswith(cut[:-1])
    assert short_reason("short; second") == "short…"


def canonical(text: str) -> str:
    """Whitespace collapsed and `{a, b}` sets sorted: xformers prints its dtype sets in per-process hash order."""
    text = re.sub(r"\{([^{}]*)\}", lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", text)
    return " ".join(text.split())


def test_the_table_holds_short_reasons_and_the_views_the_full_ones(attnbench) -> None:
    table = attnbench("list")
    assert table.returncode == 0, table.stderr
    entries = {e["name"]: e for e in json.loads(attnbench("list", "--json").stdout)["implementations"]}
    unavailable = [name for name, e in entries.items() if not e["available"]]
    assert unavailable, "this machine has no GPU: some built-in must be unavailable"
    longest = max(unavailable, key=lambda name: len(entries[name]["reason"]))
    for line in table.stdout.splitlines():
        if " no: " in line:
            assert len(line.split(" no: ", 1)[1]) <= SHORT_REASON
    assert "attnbench list NAME" in table.stdout
    view = attnbench("list", longest)
    assert view.returncode == 0 and canonical(view.stdout).count(canonical(entries[longest]["reason"]))
    one = json.loads(attnbench("list", longest, "--json").stdout)["implementations"]
    assert [e["name"] for e in one] == [longest] and canonical(one[0]["reason"]) == canonical(entries[longest]["reason"])
    unknown = attnbench("list", "no_such_implementation")
    assert unknown.returncode == 2 and "no implementation named 'no_such_implementation'" in unknown.stderr
