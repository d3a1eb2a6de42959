"""`attnbench list`: a table that stays readable, the full reasons in --json and in `list NAME`; each plugin asked
about a case of its own kind; every declared feature in the supports column; no reason recommending a removed
spelling."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from harness import register, register_module
from harness.case.attention import AttentionCase
from harness.cli.list_cmd import SHORT_REASON, probe_case, short_reason, supports
from harness.contract.discovery import load_registry
from harness.modules.cases import ModuleCase
from harness.modules.lift import lift

ROOT = Path(__file__).resolve().parent.parent

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


@pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop
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


def kernel(q, k, v, *, causal=False, mask=None, scale=None, sinks=None, softcap=None):
    return v


def module(x, *, heads, weights, mask=None, causal=False):
    return x


def test_each_plugin_is_asked_about_a_case_of_its_own_kind() -> None:
    """A module's available(case) gets a module case, a kernel's a kernel case: never the other kind's."""
    asked: list[object] = []

    def remember(case: object) -> None:
        asked.append(case)

    kernel_impl = register("k_probe", backend="torch", available=remember)(kernel).__attnbench__
    module_impl = register_module("m_probe", backend="torch", layers=("encoder",), available=remember)(module).__attnbench__
    for impl in (kernel_impl, module_impl, lift(kernel_impl)):
        assert impl.not_supported_reasons(probe_case(impl)) == []
    # the lifted module maps its module case to its kernel's call: the kernel is asked about a kernel case
    assert [type(case) for case in asked] == [AttentionCase, ModuleCase, AttentionCase]
    assert all(case.kind == "kernel" for case in asked if isinstance(case, AttentionCase))
    assert probe_case(module_impl).layer == "encoder"  # a layer the module implements
    for impl in load_registry():  # every built-in module answers its own probe (on request: a slow import)
        assert isinstance(probe_case(impl), ModuleCase if impl.declared.kind == "module" else AttentionCase)
        if impl.declared.kind == "module" and not impl.declared.on_request:
            impl.not_supported_reasons(probe_case(impl))


def test_the_supports_column_names_sinks_softcap_and_a_value_dim_of_its_own() -> None:
    impl = register("k_supports", backend="torch", causal=True, sinks=True, softcap=True,
                    value_dim=True)(kernel).__attnbench__
    assert supports(impl) == "causal,sinks,softcap,value_dim"
    assert supports(register("k_plain", backend="torch")(kernel).__attnbench__) == "-"


REMOVED = re.compile(r"options\s*=|options\[|available\s*=\s*lambda\s*:|register\([^)]*kind\s*=")
"""Spellings of an earlier contract: only the contract, which refuses them and says what to write instead, may
name them."""


def test_no_message_recommends_a_removed_spelling() -> None:
    """Every string in the harness (reasons, errors, docstrings) outside the contract, and the kv-cache skip reason."""
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path.parent.name == "contract":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and REMOVED.search(node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:80]!r}")
    assert not found, found
    mha = register_module("m_no_cache", backend="torch")(module).__attnbench__
    [reason] = ModuleCase(past=4, causal=True).unsupported_by(mha)
    assert "kv_cache=True" in reason and not REMOVED.search(reason)
