"""The compiled kernels choose their instruction set one way: each extension is compiled whole for one level of
``ISAS`` and loaded only where the CPU has that level's features; code shared across instruction sets is a
template over a traits type. No compiler needed here."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

from harness.errors import UsageError
from implementations._cpp_build import CAP, ISAS, KERNELS, Isa, baseline, cpu_runs, missing

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)

# Every way a source could pick an instruction set by itself, beside its extension's flags.
SELF_SELECTION = re.compile(r"#\s*pragma\s+GCC\s+target|__attribute__\s*\(\(\s*target|__builtin_cpu_supports|"
                            r"target_clones")


def test_no_kernel_source_selects_an_instruction_set_itself() -> None:
    sources = sorted(KERNELS.glob("*.cpp")) + sorted(KERNELS.glob("*.h"))
    assert len(sources) > 10
    offenders = [f"{path.name}:{line}" for path in sources
                 for line, text in enumerate(path.read_text().splitlines(), 1)
                 if SELF_SELECTION.search(text.split("//")[0])]  # code, not the comments that explain
    assert offenders == []


def test_each_level_holds_the_one_below_it() -> None:
    levels = list(ISAS.values())
    assert [isa.name for isa in levels] == ["generic", "avx2", "avx512f", "avx512_bf16"]
    for lower, higher in zip(levels, levels[1:]):
        assert set(lower.flags) < set(higher.flags) and set(lower.features) < set(higher.features)
    assert all(flag.startswith("-m") and flag != "-march=native" for isa in levels for flag in isa.flags)


def test_a_level_this_cpu_lacks_is_refused_with_the_missing_features_named() -> None:
    future = Isa("future", ("-mfuture",), ("avx2", "no_such_feature_x"))
    assert cpu_runs(future) is False
    reason = missing(future)
    assert reason is not None and "no_such_feature_x" in reason and "future" in reason
    assert missing(ISAS["generic"]) is None and cpu_runs(ISAS["generic"])


def _capped_at(name: str | None) -> set[str]:
    """The features a CPU capped at level ``name`` (None: uncapped) offers: the hardware's, within the cap's."""
    have = {f for f, on in torch.cpu.get_capabilities().items() if on}
    return have if name is None else have & set(ISAS[name].features)


def test_the_baseline_is_the_best_of_generic_and_avx2_this_cpu_runs() -> None:
    own = _capped_at(os.environ.get(CAP) or None)  # CI runs this under a cap too
    assert baseline().name == ("avx2" if set(ISAS["avx2"].features) <= own else "generic")
    for isa in ISAS.values():  # the answer follows torch's cpuinfo, feature by feature, within the cap
        assert cpu_runs(isa) is (set(isa.features) <= own)


@pytest.mark.parametrize("level", ["generic", "avx2"])
def test_the_cap_makes_every_higher_level_not_run_and_names_itself(level: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAP, level)
    own = _capped_at(level)
    assert baseline().name == ("avx2" if set(ISAS["avx2"].features) <= own else "generic")
    for isa in ISAS.values():
        assert cpu_runs(isa) is (set(isa.features) <= own)
        reason = missing(isa)
        if reason is not None and set(isa.features) <= _capped_at(None):  # the hardware has it: the cap said no
            assert f"{CAP}={level}" in reason and isa.name in reason
    assert missing(ISAS["generic"]) is None


def test_an_unknown_cap_is_a_usage_error_naming_the_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAP, "sse9")
    with pytest.raises(UsageError, match="sse9.*generic, avx2"):
        cpu_runs(ISAS["avx2"])


def _code(path: Path) -> str:
    """A source's code without its ``//`` comments (which may name what the code must not do)."""
    return "\n".join(line.split("//")[0] for line in path.read_text().splitlines())


def test_every_kernel_header_is_included_once_and_no_macro_generates_code() -> None:
    """An instruction set or a vector width is a type the shared code is a template over (a lane or kernel
    traits struct), never a header included twice under another macro value nor a macro that writes code."""
    headers = sorted(KERNELS.glob("*.h"))
    assert len(headers) > 5
    assert [h.name for h in headers if "#pragma once" not in _code(h)] == []
    defines = [f"{p.name}:{n}" for p in [*headers, *KERNELS.glob("*.cpp")]
               for n, text in enumerate(_code(p).splitlines(), 1) if re.match(r"\s*#\s*define\b", text)]
    assert defines == []


@pytest.mark.parametrize(("skeleton", "kernels"), [
    ("_flash_backward.h", ["_flash_backward.cpp", "_flash_avx2_backward.cpp", "_flash_bf16_backward.cpp"]),
    ("_flash_forward.h", ["_flash_avx2.cpp", "_flash_f32.cpp", "_flash_bf16.cpp"]),
])
def test_each_kernel_instantiates_the_one_skeleton_and_writes_no_loop_of_its_own(skeleton: str,
                                                                                 kernels: list[str]) -> None:
    """The loop over query heads and row blocks (backward) or key blocks (forward) is the skeleton's alone; a
    kernel supplies its traits and instantiates it."""
    entry = "backward_item<Kernel>" if "backward" in skeleton else "forward_item<Kernel>"
    assert re.search(r"for \(int64_t (h|kb) = ", _code(KERNELS / skeleton))
    for name in kernels:
        code = _code(KERNELS / name)
        assert f'#include "{skeleton}"' in code and entry in code, name
        assert not re.search(r"for \(int64_t (h|q0|kb) = ", code), f"{name} loops over heads or blocks itself"
