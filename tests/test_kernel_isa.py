"""The compiled kernels choose their instruction set one way: each extension is compiled whole for one level of
``ISAS`` and loaded only where the CPU has that level's features. No compiler needed here."""

from __future__ import annotations

import re

import torch

from implementations._cpp_build import ISAS, KERNELS, Isa, baseline, cpu_runs, missing

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


def test_the_baseline_is_the_best_of_generic_and_avx2_this_cpu_runs() -> None:
    have = torch.cpu.get_capabilities()
    expect = "avx2" if all(have.get(f, False) for f in ISAS["avx2"].features) else "generic"
    assert baseline().name == expect
    for isa in ISAS.values():  # the answer follows torch's cpuinfo, feature by feature
        assert cpu_runs(isa) is all(have.get(f, False) for f in isa.features)
