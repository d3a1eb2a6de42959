"""The plugin contract as data: the Capabilities record, register_module, available(case); earlier spellings refused."""

from __future__ import annotations

import dataclasses
import pickle
import re
import textwrap
from pathlib import Path

import pytest

from harness import Capabilities, Conventions, PluginError, register, register_module
from harness.case.attention import AttentionCase
from harness.contract.capabilities import CapabilityError, field_names
from harness.contract.registry import make_implementation
from harness.modules.cases import ModuleCase

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def _kernel(q, k, v, *, causal=False, mask=None, scale=None):
    return q


def _tiled(q, k, v, *, causal=False, mask=None, scale=None, block_q=None, block_k=None):
    return q


def _module(x, *, heads, weights, mask=None, causal=False):
    return x


def test_every_field_is_documented_in_the_plugins_page() -> None:
    text = DOCS.read_text()
    section = text.split("## The `Capabilities` record", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)` \|", section, flags=re.M))
    assert listed == set(field_names()) == {f.name for f in dataclasses.fields(Capabilities)}


def test_the_record_is_frozen_plain_data_that_pickles() -> None:
    caps = Capabilities(backend="torch", dtypes=["float32", "bfloat16"], causal=True, kv_dtypes="float16",
                        conventions=Conventions(layout="BTHD"), block_q=16, block_k=(16, 32))
    assert caps.dtypes == ("float32", "bfloat16") and caps.kv_dtypes == ("float16",)  # normalised to tuples
    assert caps.block_q == (16,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.causal = False  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(caps)) == caps


@pytest.mark.parametrize("fields, words", [
    ({"backend": "jax"}, "backend='jax'; choose one of ('numpy', 'torch')"),
    ({"backend": "torch", "dtypes": ("float8",)}, "unknown values ['float8']"),
    ({"backend": "torch", "dtypes": ()}, "dtypes=()"),
    ({"backend": "torch", "causal": 1}, "causal=1 must be True or False"),
    ({"backend": "numpy", "devices": ("cuda",)}, "devices=('cpu',) only"),
    ({"backend": "numpy", "grad": True}, "grad=True needs backend='torch'"),
    ({"backend": "torch", "memory": "cubic"}, "memory='cubic'"),
    ({"backend": "torch", "block_q": (16,)}, "declare block_q and block_k together"),
    ({"backend": "torch", "block_q": (0,), "block_k": (16,)}, "must be positive integers"),
    ({"backend": "torch", "layers": ("mha",)}, "layers describe a module: declare it with register_module"),
    ({"backend": "torch", "kind": "module", "rope": ("sideways",)}, "rope=('sideways',) has unknown values"),
    ({"backend": "numpy", "conventions": Conventions(layout="BTHD")}, "conventions= are declared by torch"),
    ({"backend": "torch", "structures": ("spiral",)}, "unknown value(s) ['spiral']"),
])
def test_a_bad_value_says_what_is_allowed(fields: dict, words: str) -> None:
    with pytest.raises(CapabilityError) as info:
        Capabilities(**fields)
    assert words in str(info.value)


def test_reasons_come_from_the_record_alone() -> None:
    caps = Capabilities(backend="torch", dtypes=("float32",))
    case = AttentionCase(heads=4, kv_heads=2, dtype="float16", causal=True, mask="random", grad=True)
    text = " | ".join(caps.not_supported_reasons(case))
    for words in ("dtype float16", "causal", "boolean masks", "grouped-query", "gradients"):
        assert words in text
    assert caps.not_supported_reasons(AttentionCase()) == []
    everything = dataclasses.replace(caps, dtypes=("float16",), causal=True, mask=True, gqa=True, grad=True)
    assert everything.not_supported_reasons(case) == []


def test_a_record_declares_a_kernel_and_the_keywords_build_the_same_record() -> None:
    record = Capabilities(backend="torch", causal=True, mask=True, block_q=(16,), block_k=(16,))
    whole = register("whole_record", record)(_tiled).__attnbench__
    assert whole.declared == record
    spelled = make_implementation("spelled", _kernel, backend="torch", causal=True, mask=True)
    assert spelled.declared == Capabilities(backend="torch", causal=True, mask=True)
    assert spelled.capabilities() == spelled.declared.describe()


def test_a_record_and_keywords_together_is_an_error_naming_the_source() -> None:
    with pytest.raises(PluginError) as info:
        make_implementation("twice", _kernel, Capabilities(backend="torch"), causal=True)
    assert "twice" in str(info.value) and "test_capabilities.py" in str(info.value)
    assert "move them into the record" in str(info.value)
    with pytest.raises(TypeError, match="second argument is a harness.Capabilities"):
        register("positional", "torch")  # type: ignore[arg-type]


def test_the_signature_is_checked_against_the_record() -> None:
    with pytest.raises(PluginError) as info:
        register("no_tiles", Capabilities(backend="torch", block_q=(16,), block_k=(16,)))(_kernel)
    assert "`block_k` (block_k= is declared)" in str(info.value) and "test_capabilities.py" in str(info.value)


def test_register_module_declares_a_module_without_switching_register() -> None:
    impl = register_module("plain_module", backend="numpy", causal=True, mask=True, layers=("mha",),
                           rope=("rotate_half",))(
        lambda x, *, heads, weights, mask=None, causal=False, rope=None: x).__attnbench__
    assert impl.declared.kind == "module" and impl.declared.layers == ("mha",) and impl.declared.rope == ("rotate_half",)
    from_record = register_module("record_module", Capabilities(backend="numpy", causal=True))(_module).__attnbench__
    assert from_record.declared.kind == "module"
    reasons = impl.not_supported_reasons(AttentionCase())
    assert reasons and "module implementation does not run kernel cases" in reasons[0]
    assert impl.not_supported_reasons(ModuleCase(dtype="float32")) == []
    with pytest.raises(PluginError, match="kv_cache=True is declared"):
        register_module("no_cache", backend="numpy", kv_cache=True)(_module)
    with pytest.raises(PluginError, match="takes 1 positional"):
        register("module_shaped", backend="numpy")(_module)


def test_available_takes_the_case() -> None:
    seen: list[object] = []

    def small_only(case) -> str | None:
        seen.append(case)
        return "too long for this kernel" if case.tk > 64 else None

    impl = make_implementation("small_only", _kernel, backend="torch", available=small_only)
    assert impl.not_supported_reasons(AttentionCase(tq=16, tk=16)) == []
    assert impl.not_supported_reasons(AttentionCase(tq=16, tk=128)) == ["too long for this kernel"]
    assert [c.tk for c in seen] == [16, 128]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("declare", "fix"), [
    (lambda: register("old_kind", backend="numpy", kind="module")(_module), "@register_module(...)"),  # type: ignore[call-arg]
    (lambda: register("old_options", backend="torch", options={"block_q": (8,), "block_k": (8,)})(_tiled),  # type: ignore[call-arg]
     "declare block_q=, block_k="),
    (lambda: register_module("old_options", backend="numpy", options={"layers": ("mha",)})(_module), "layers="),
    (lambda: register("old_check", backend="torch", available=lambda: None)(_kernel),  # type: ignore[arg-type]
     "available=lambda case: ..."),
])
def test_an_earlier_spelling_is_refused_with_what_to_write_instead(declare, fix: str) -> None:
    with pytest.raises(PluginError) as info:
        declare()
    message = str(info.value)
    assert "test_capabilities.py" in message and "old_" in message and fix in message


def test_bench_catalogue_ships_the_record_as_plain_data(tmp_path: Path) -> None:
    from harness.bench.catalogue import catalogue_task

    plugin = tmp_path / "shipped.py"
    plugin.write_text(textwrap.dedent("""
        from harness import Capabilities, register

        @register("shipped", Capabilities(backend="torch", causal=True, block_q=(8,), block_k=(8,)),
                  available=lambda case: "too long" if case.tk > 64 else None)
        def shipped(q, k, v, *, causal=False, mask=None, scale=None, block_q=None, block_k=None):
            return q
    """))
    records = catalogue_task([str(plugin)])
    shipped = pickle.loads(pickle.dumps(records.get("shipped")))  # what the worker sends bench's parent
    assert shipped.declared == Capabilities(backend="torch", causal=True, block_q=(8,), block_k=(8,))
    assert shipped.available is not None
    assert shipped.declared_gaps(AttentionCase(grad=True)) == ["gradients not supported"]


def test_a_keyword_equal_to_its_default_but_of_another_type_is_still_checked() -> None:
    with pytest.raises(PluginError, match="causal=0 must be True or False"):
        register("zero", backend="torch", causal=0)(_kernel)  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="capabilities given twice"):
        register("record_and_keyword", Capabilities(backend="torch"), causal=True)(_kernel)
