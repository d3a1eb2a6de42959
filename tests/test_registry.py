"""The plugin contract: validation at registration, capabilities as reasons, the prepare form."""

from __future__ import annotations

import pytest

from harness import PluginError, UsageError, register
from harness.case.attention import AttentionCase
from harness.contract.registry import make_implementation


def _fn(q, k, v, *, causal=False, mask=None, scale=None):
    return q


@pytest.mark.parametrize("keywords, words", [
    ({"backend": "torch", "dtype": ("float32",)}, "unknown keyword"),
    ({"dtypes": ("float32",)}, "backend= is required"),
    ({"backend": "jax"}, "backend='jax'"),
    ({"backend": "torch", "dtypes": ("float8",)}, "unknown values ['float8']"),
    ({"backend": "numpy", "dtypes": ("bfloat16",)}, "NumPy has no"),
    ({"backend": "torch", "causal": "yes"}, "causal='yes' must be True or False"),
    ({"backend": "numpy", "grad": True}, "grad=True needs backend='torch'"),
    ({"backend": "torch", "available": "no"}, "available= must be a callable"),
    ({"backend": "torch", "memory": "cubic"}, "memory='cubic'"),
])
def test_bad_registration_names_plugin_and_source(keywords: dict, words: str) -> None:
    with pytest.raises(PluginError) as info:
        make_implementation("broken_one", _fn, **keywords)
    message = str(info.value)
    assert "broken_one" in message and "test_registry.py" in message and words in message


def test_capabilities_become_reasons() -> None:
    impl = make_implementation("plain", _fn, backend="torch")
    case = AttentionCase(heads=4, kv_heads=2, dtype="float16", causal=True, mask="random", grad=True)
    reasons = impl.not_supported_reasons(case)
    text = " | ".join(reasons)
    for words in ("dtype float16", "causal", "boolean masks", "grouped-query", "gradients"):
        assert words in text
    assert impl.not_supported_reasons(AttentionCase()) == []


def test_available_reason_is_reported_and_a_raising_check_is_a_reason() -> None:
    missing = make_implementation("needs_dep", _fn, backend="torch", available=lambda case: "needs foo: pip install foo")
    assert missing.not_supported_reasons(AttentionCase()) == ["needs foo: pip install foo"]

    def broken(case: AttentionCase) -> str | None:
        raise ImportError("libfoo.so: cannot open")

    crashing = make_implementation("check_raises", _fn, backend="torch", available=broken)
    [reason] = crashing.not_supported_reasons(AttentionCase())
    assert "ImportError: libfoo.so" in reason


def test_prepare_form_separates_setup_from_the_call() -> None:
    calls = []

    @register("prepared_example", backend="numpy", prepare=True)
    def prepared(q, k, v, *, causal=False, mask=None, scale=None):
        calls.append("setup")
        return lambda: calls.append("call") or q

    impl = prepared.__attnbench__
    run = impl.prepare(1, 2, 3, causal=False, mask=None, scale=None)
    run()
    run()
    assert calls == ["setup", "call", "call"]


def test_case_ids_are_readable_and_validation_names_the_fix() -> None:
    case = AttentionCase(batch=3, heads=8, kv_heads=2, tq=113, tk=203, d=59, mask="random")
    assert case.id == "B3-H8/2-T113x203-d59-float32-mask=random"
    with pytest.raises(UsageError, match="multiple of kv_heads"):
        AttentionCase(heads=3, kv_heads=2)
    with pytest.raises(UsageError, match="a mask rank needs a mask"):
        AttentionCase(mask_rank="2d")
    assert AttentionCase(tq=4, tk=5, causal=True).id == "B1-H1-T4x5-d16-float32-causal"  # top-left aligned


def test_memory_growth_is_declared_data_for_reports() -> None:
    from harness.contract.discovery import load_registry

    registry = load_registry()
    assert registry.get("numpy_naive").capabilities()["memory"] == "quadratic"
    assert registry.get("tiled").capabilities()["memory"] == "linear"
    assert make_implementation("undeclared", _fn, backend="torch").capabilities()["memory"] is None


def _no_mask(q, k, v, *, causal=False, scale=None):
    return q


def _no_bias(q, k, v, *, causal=False, mask=None, scale=None):
    return q


def _two_arrays(q, k, *, causal=False, mask=None, scale=None):
    return q


def _needs_more(q, k, v, *, causal=False, mask=None, scale=None, tile):
    return q


def _no_tiles(q, k, v, *, causal=False, mask=None, scale=None):
    return q


def _any_keywords(q, k, v, **kwargs):
    return q


@pytest.mark.parametrize("fn, keywords, words", [
    (_no_mask, {"mask": True}, "no parameter `mask` (always passed)"),
    (_no_bias, {"bias": True}, "no parameter `bias` (bias=True is declared)"),
    (_two_arrays, {}, "takes 2 positional argument(s)"),
    (_needs_more, {}, "requires keyword(s) ['tile']"),
    (_no_tiles, {"block_q": (16,), "block_k": (16,)}, "`block_k` (block_k= is declared)"),
    (_any_keywords, {"tiles": (16,)}, "unknown keyword(s) ['tiles']"),
    (_any_keywords, {"block_q": (0,), "block_k": (8,)}, "must be positive integers"),
], ids=["mask", "bias", "positional", "required-keyword", "tiles", "unknown-keyword", "bad-tile"])
def test_the_signature_is_checked_against_the_declaration_at_registration(fn, keywords, words) -> None:
    """As pluggy checks a hook implementation: a mismatch fails when the decorator runs, not when a case first calls."""
    with pytest.raises(PluginError) as info:
        register("mismatched", backend="torch", **keywords)(fn)
    message = str(info.value)
    assert "'mismatched'" in message and "test_registry.py" in message and words in message, message


def test_register_is_keyword_only_and_returns_the_function() -> None:
    with pytest.raises(PluginError, match=r"unknown keyword\(s\) \['cuasal'\]"):
        register("typo", backend="torch", cuasal=True)(_any_keywords)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        register("positional", "torch")(_any_keywords)  # type: ignore[misc]
    decorated = register("fine", backend="torch", causal=True, mask=True)(_any_keywords)
    assert decorated is _any_keywords and decorated.__attnbench__.name == "fine"


def test_a_plugin_file_with_a_mismatch_fails_to_load_naming_the_file(tmp_path) -> None:
    from harness.contract.discovery import load_registry

    plugin = tmp_path / "mine.py"
    plugin.write_text("from harness import register\n\n"
                      "@register('mine', backend='torch', mask=True)\n"
                      "def mine(q, k, v, *, causal=False, scale=None):\n    return q\n")
    registry = load_registry([str(plugin)], builtins=False, entry_points=False)
    (error,) = registry.fatal_errors
    assert "mine.py" in str(error) and "'mine'" in str(error) and "`mask`" in str(error), error
