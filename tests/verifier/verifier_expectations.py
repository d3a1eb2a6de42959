"""What `attnbench verify` must find in each plugin of ``plugins/``, and the run that finds it.

The plugins are verified in :data:`SHARDS` shards, one verify run each (``test_verifier.py``'s tests are
parametrised by shard), so that the test processes share the work; :func:`shard` splits them. The runs stop a
broken plugin after :data:`MAXFAIL` failing cases (``--maxfail``, as a plugin author iterating would), except the
last shard's (:data:`WHOLE`): plugins whose expected cell comes after more failing cases than that.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.cli import main

PLUGINS = sorted(p for p in (Path(__file__).parent / "plugins").glob("*.py") if not p.name.startswith("_"))
BROKEN = [p.stem for p in PLUGINS if p.stem.startswith("broken_")]
UNUSUAL = [p.stem for p in PLUGINS if p.stem.startswith("unusual_")]
TIMEOUT_S = 8

# plugin -> (status of at least one problem cell, check or None for any, a phrase of its reason)
EXPECTED: dict[str, tuple[str, str | None, str]] = {
    "broken_wrong_scale": ("fail", "output", "max|err|"),
    "broken_softmax_axis": ("fail", "output", "max|err|"),
    "broken_causal_off_by_one": ("fail", "output", "max|err|"),
    "broken_causal_flipped": ("fail", "output", "max|err|"),
    "broken_mask_inverted": ("fail", "output", "max|err|"),
    "broken_no_max_subtraction": ("fail", "output", "NaN/Inf"),
    "broken_tiled_no_rescale": ("fail", "output", "max|err|"),
    "broken_tiled_drops_last_block": ("fail", "output", "max|err|"),
    "broken_gqa_mapping": ("fail", "output", "max|err|"),
    "broken_batch_mixup": ("fail", "output", "max|err|"),
    "broken_mutates_inputs": ("fail", "output", "modified its input(s) q"),
    "broken_cached_output": ("fail", "output", "trial 1"),
    "broken_wrong_grad": ("fail", "grad", "dq max|err|"),
    "broken_wrong_dtype": ("fail", "output", "output dtype float32, expected float64"),
    "broken_wrong_layout": ("fail", "output", "output shape"),
    "broken_numpy_promotes": ("fail", "output", "output dtype float64, expected float32"),
    "broken_nan_empty_rows": ("fail", "output", "NaN/Inf"),
    "broken_half_accumulate": ("fail", "output", "max|err|"),
    "broken_zeros": ("fail", "output", "max|err|"),
    "broken_crash": ("crash", "output", "SIGABRT"),
    "broken_hang": ("timeout", "output", f"no answer within {TIMEOUT_S} s"),
    # bugs that need two conditions at once, or state across calls (the covering array and the stateful check)
    "broken_scale_ignored_with_mask": ("fail", "output", "max|err|"),
    "broken_gqa_power_of_two": ("fail", "output", "max|err|"),
    "broken_mask_rank": ("fail", "output", "max|err|"),
    "broken_right_padding_only": ("fail", "output", "max|err|"),
    "broken_finite_mask_fill": ("fail", "output", "max|err|"),
    "broken_causal_bottom_right": ("fail", "output", "max|err|"),
    "broken_pointer_cache": ("fail", "property:stateful", "written into the same buffers"),
    "broken_storage_offset": ("fail", "output", "max|err|"),
    "broken_nondeterministic": ("fail", "property:stateful", "differ bitwise"),
    "broken_max_only_in_float32": ("fail", "output", "NaN/Inf"),
    "broken_grad_ignores_mask": ("fail", "grad", "max|err|"),
    "broken_grad_default_scale": ("fail", "grad", "max|err|"),
    "broken_query_tail_from_keys": ("fail", "output", "max|err|"),
    # bf16 running sums: fine on short rows, caught where the error grows with T (the error-growth sweep)
    "broken_bf16_accumulate": ("fail", "error_growth", "max|err|"),
    # bf16 computed through float16: as precise, far narrower; only values past 65504 show it
    "broken_bf16_through_fp16": ("fail", "output", "NaN/Inf"),
    # structures taken natively (docs/structures.md)
    "broken_window_left_off_by_one": ("fail", "output", "max|err|"),
    "broken_window_ignores_right": ("fail", "output", "max|err|"),
    "broken_bottom_right_as_top_left": ("fail", "output", "max|err|"),
    "broken_varlen_global_causal": ("fail", "output", "max|err|"),
    # decode with a KV cache (docs/structures.md, "Decode with a KV cache")
    "broken_cache_len_off_by_one": ("fail", "output", "max|err|"),
    "broken_split_merge_no_rescale": ("fail", "output", "max|err|"),
    "broken_paged_wrong_page": ("fail", "output", "max|err|"),
    # every array that crosses the boundary, in every layout; results that stay valid; memory not its own
    "broken_mask_assumes_contiguous": ("fail", "output", "max|err|"),
    "broken_cache_lengths_ignore_offset": ("fail", "output", "max|err|"),
    "broken_upstream_grad_contiguous": ("fail", "grad", "max|err|"),
    "broken_reused_output_buffer": ("fail", "property:stateful", "changed"),
    "broken_scratch_in_input_gaps": ("fail", "output", "buffer behind input(s) q"),
    # right on every common shape, wrong past a size threshold real models reach (the edge cases)
    "broken_head_dim_over_128": ("fail", "output", "max|err|"),
    "broken_long_keys_split": ("fail", None, "max|err|"),
    "broken_gqa_group_over_8": ("fail", "output", "max|err|"),
}
MASKED = "mask=|window=|bottom_right|varlen=|cache="
"""Cases that reach a plugin with a mask: its own, or a structure it does not declare, folded into a dense one."""
COMBINATIONAL = {  # the case feature(s) each of these bugs needs, read from the failing cases' ids
    "broken_scale_ignored_with_mask": ("scale=", MASKED),
    "broken_mask_rank": ("/3d",),
    "broken_causal_bottom_right": ("causal",),
    "broken_storage_offset": ("offset",),
    "broken_max_only_in_float32": ("float16|bfloat16",),  # a|b: either
    "broken_grad_ignores_mask": (MASKED,),
    "broken_grad_default_scale": ("scale=",),
    "broken_bf16_accumulate": ("bfloat16",),
    "broken_bf16_through_fp16": ("bfloat16-", "in=wide|in=huge"),  # V or logits past float16's range
    "broken_window_left_off_by_one": ("window=",),
    "broken_window_ignores_right": ("window=",),
    "broken_bottom_right_as_top_left": ("bottom_right",),
    "broken_varlen_global_causal": ("varlen=",),
    "broken_cache_len_off_by_one": ("cache=",),
    "broken_paged_wrong_page": ("paged=",),
    "broken_mask_assumes_contiguous": ("aux=transposed|aux=strided|mask:transposed|mask:strided",),
    "broken_cache_lengths_ignore_offset": ("aux=", "cache="),
    "broken_upstream_grad_contiguous": ("aux=transposed|aux=strided|dout:transposed|dout:strided",),
    "broken_scratch_in_input_gaps": ("strided",),
    "broken_head_dim_over_128": ("d160|d192|d255|d256",),
    "broken_gqa_group_over_8": ("H32/2|H16/1",),
}


MAXFAIL = 4
"""``--maxfail`` of every shard but the last: enough for the crash and the hang (each one case) to be followed by
passing cases, and for the expected cell of each plugin not in :data:`WHOLE`."""
WHOLE = ("broken_mask_assumes_contiguous", "broken_storage_offset")
"""Plugins verified without ``--maxfail``: the slices property catches each on many cases before any case with its
trigger (a mask or an input in a strided layout) reaches the output check that :data:`EXPECTED` names."""


def verify(tmp: Path, names: list[str], *extra: str, suite: str = "quick") -> tuple[int, dict[str, Any]]:
    out = tmp / "verify.json"
    argv = ["verify", *[a for p in PLUGINS for a in ("--plugin", str(p))], "--only", ",".join(names),
            "--suite", suite, "--trials", "2", "--timeout", str(TIMEOUT_S), "--json", str(out), *extra]
    code = main(argv)
    return code, json.loads(out.read_text())




SHARDS = 3
"""Verify runs the plugins are split into (test_verifier.py's tests are parametrised by shard): two with
``--maxfail`` and the :data:`WHOLE` one."""
_STOPPED = [n for n in BROKEN + UNUSUAL if n not in WHOLE]


def shard(index: int) -> list[str]:
    """One shard's plugins: every other one of those stopped at :data:`MAXFAIL` (alternating, so each run has
    crashes, hangs and slow plugins), then :data:`WHOLE`."""
    return list(WHOLE) if index == SHARDS - 1 else _STOPPED[index::SHARDS - 1]


def shard_flags(index: int) -> list[str]:
    """The shard's own flags: ``--maxfail`` but for the last one."""
    return [] if index == SHARDS - 1 else ["--maxfail", str(MAXFAIL)]


def shard_of(name: str) -> int:
    """The shard whose run verifies the plugin ``name``."""
    return SHARDS - 1 if name in WHOLE else _STOPPED.index(name) % (SHARDS - 1)


def cells_of(run: tuple[int, dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [c for c in run[1]["cells"] if c["implementation"] == name]


def assert_rejected(run: tuple[int, dict[str, Any]], name: str) -> None:
    status, check, phrase = EXPECTED[name]
    cells = cells_of(run, name)
    assert cells, f"{name} was not verified at all"
    hits = [c for c in cells if c["status"] == status and (check is None or c["check"] == check)
            and phrase in (c["reason"] or "")]
    problems = [(c["case_id"], c["check"], c["status"], c["reason"]) for c in cells if c["status"] != "pass"]
    assert hits, f"{name}: no {status} {check} cell mentioning {phrase!r}; problems: {problems[:5]}"
    if "max|err|" in phrase:  # the numbers recorded agree with the verdict
        assert all(h["metrics"]["max_abs_err"] > h["metrics"]["bound"] for h in hits)
    if name == "broken_mask_inverted":  # its bug needs a mask: unmasked cases must pass
        assert all(any(f in h["case_id"] for f in MASKED.split("|")) for h in hits)
        assert any(c["status"] == "pass" and not any(f in c["case_id"] for f in MASKED.split("|")) for c in cells)
    for feature in COMBINATIONAL.get(name, ()):  # caught where its condition holds, not by accident
        assert all(any(f in h["case_id"] for f in feature.split("|")) for h in hits), \
            (feature, [h["case_id"] for h in hits])
    if name in ("broken_crash", "broken_hang"):  # the cases after a crash or a timeout still run
        statuses = [c["status"] for c in cells]
        assert 1 <= statuses.count(status) <= 2, statuses  # only the T = 97 cases of one head dim
        assert "pass" in statuses[statuses.index(status) + 1:], f"{name}: no case ran after the {status}"


def assert_accepted(run: tuple[int, dict[str, Any]], name: str) -> None:
    cells = cells_of(run, name)
    bad = [(c["case_id"], c["check"], c["reason"]) for c in cells if c["status"] not in ("pass", "skipped")]
    assert cells and not bad
    assert sum(c["status"] == "pass" for c in cells) >= 20


def assert_complete(run: tuple[int, dict[str, Any]]) -> None:
    """A run with problem cells exits 1 and still writes every cell, typed, in a complete file."""
    code, data = run
    assert code == 1
    assert data["complete"] is True and data["command"] == "verify"
    assert data["config"]["output_m"] == 2 and data["config"]["floors"]["float32"] > 0
    for cell in data["cells"]:
        assert cell["type"] == "verify" and cell["status"] in ("pass", "fail", "error", "crash", "timeout", "skipped")
        assert cell["case"]["batch"] >= 1 and cell["case_id"] and cell["group"]
