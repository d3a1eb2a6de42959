"""The model catalogue (harness/case/models.json) and ``--model`` in verify and bench: real shapes as data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bench.model_sweeps import model_plan, model_sweep
from harness.case.attention import AttentionCase
from harness.case.models import FEATURES, case_bytes, catalogue, fitting_length, model_cases, model_named
from harness.case.workload import request_kind
from harness.cli import main
from harness.errors import UsageError
from harness.verify.model_cases import model_plan_of

HAS = AttentionCase.__dataclass_fields__


def test_every_entry_names_its_source_and_a_consistent_shape() -> None:
    models = catalogue()
    assert len(models) >= 20
    for m in models.values():
        assert m.source.startswith("https://"), m.name
        assert m.heads % m.kv_heads == 0 and m.max_positions >= 512
        assert m.causal or m.forms == ("prefill",)  # an encoder has no decode step


@pytest.mark.parametrize(("name", "heads", "kv_heads", "d", "d_v"), [
    ("llama-3.1-8b", 32, 8, 128, 128), ("llama-3.1-70b", 64, 8, 128, 128), ("llama-3.1-405b", 128, 8, 128, 128),
    ("qwen2.5-7b", 28, 4, 128, 128), ("qwen2.5-72b", 64, 8, 128, 128), ("deepseek-v3", 128, 128, 192, 128),
    ("gpt-oss-120b", 64, 8, 64, 64), ("bert-base", 12, 12, 64, 64), ("gpt2", 12, 12, 64, 64),
])
def test_shapes_of_well_known_models(name: str, heads: int, kv_heads: int, d: int, d_v: int) -> None:
    m = model_named(name)
    assert (m.heads, m.kv_heads, m.head_dim, m.v_dim) == (heads, kv_heads, d, d_v)


def test_the_features_of_2025_models_are_data() -> None:
    mistral, gemma2, gpt_oss = model_named("mistral-7b"), model_named("gemma-2-9b"), model_named("gpt-oss-20b")
    assert mistral.windows == (4096,)  # every layer slides
    assert gemma2.windows == (4096, None) and gemma2.softcap == 50.0  # sliding and full layers alternate
    assert gpt_oss.windows == (128, None) and gpt_oss.sinks
    assert model_named("gemma-2-27b").scale == pytest.approx(144 ** -0.5)  # query_pre_attn_scalar 144, not d = 128
    assert model_named("t5-base").scale == 1.0
    assert model_named("deepseek-v3").features() == {"dv": 128}


def test_prefill_makes_one_case_per_layer_kind_with_the_models_window() -> None:
    cases = model_cases(model_named("gpt-oss-20b"), "prefill", length=512).cases
    assert [c.window for c in cases] == [(127, 0), None]
    assert all((c.heads, c.kv_heads, c.d, c.tq, c.causal) == (64, 8, 64, 512, True) for c in cases)
    # a window that reaches back to key 0 at this length is full attention: one case, no window
    mistral = model_cases(model_named("mistral-7b"), "prefill", length=4096).cases
    assert [c.window for c in mistral] == [None]
    assert [c.window for c in model_cases(model_named("mistral-7b"), "prefill", length=4097).cases] == [(4095, 0)]


def test_decode_is_one_query_per_sequence_against_a_ragged_cache_bottom_right() -> None:
    window, full = model_cases(model_named("gemma-3-1b"), "decode", length=2048, batch=4).cases
    for case in (window, full):
        assert (case.batch, case.tq, case.tk, case.heads, case.kv_heads) == (4, 1, 2048, 4, 1)
        assert case.cache_seqlens is not None and max(case.cache_seqlens) == 2048 and len(set(case.cache_seqlens)) > 1
    assert window.window == (511, 0) and window.causal_align == "bottom_right"
    with pytest.raises(UsageError, match="bert-base.*no decode form"):
        model_cases(model_named("bert-base"), "decode", length=512)


def test_serving_is_a_mixed_batch_with_the_models_heads_window_and_features() -> None:
    """A decoder's default serving batch: a prompt's chunk on its cached prefix, decode steps and a speculative
    step, packed in one bottom-right causal call, one case per layer kind, the model's features kept."""
    window, full = model_cases(model_named("gpt-oss-20b"), "serving", length=1024, batch=8).cases
    assert window.varlen == full.varlen == ((256, 1024),) + ((1, 1024),) * 8 + ((4, 1024),)
    assert (full.heads, full.kv_heads, full.d, full.causal_align) == (64, 8, 64, "bottom_right")
    assert window.window == (127, 0) and full.window is None
    if "sinks" in HAS:
        assert window.sinks and full.sinks
    with pytest.raises(UsageError, match="bert-base.*no serving form"):
        model_cases(model_named("bert-base"), "serving", length=512)


def test_a_feature_the_case_space_lacks_is_left_out_and_said() -> None:
    gemma = model_named("gemma-2-9b")
    case = model_cases(gemma, "prefill", length=256).cases[0]
    if "softcap" in HAS:
        assert case.softcap == 50.0 and not any("soft-cap" in s for s in gemma.left_out())  # type: ignore[attr-defined]
    else:
        assert any("soft-cap 50 left out" in s for s in gemma.left_out())
    for name, field, said in (("gpt-oss-20b", "sinks", "attention sinks left out"),
                              ("deepseek-v3", "dv", "value head dim 128 taken as the q/k head dim 192")):
        assert field in FEATURES
        assert (field in HAS) != any(said in s for s in model_named(name).left_out())
    assert model_named("llama-3.1-8b").left_out() == ()


def test_lengths_fit_the_memory_budget_and_the_models_context() -> None:
    llama = model_named("llama-3.1-405b")
    big = fitting_length(llama, "prefill", (512, 1024, 2048, 4096), 64 * 2**30)
    small = fitting_length(llama, "prefill", (512, 1024, 2048, 4096), 2 * 2**30)
    assert big == 4096 and small == 1024
    assert case_bytes(model_cases(llama, "prefill", length=small).cases[0]) <= 2 * 2**30
    assert fitting_length(model_named("bert-base"), "prefill", (512, 1024, 2048), 64 * 2**30) == 512  # 512 positions
    plan = model_plan_of(model_named("bert-base"), memory_bytes=64 * 2**30)
    assert (plan.prefill_length, plan.decode_length) == (512, None)


def test_bench_sweep_of_a_model() -> None:
    pairs = model_sweep(model_named("gpt2"))
    prefill = sorted({c.tq for c, _ in pairs if c.cache_seqlens is None and c.tq == c.tk})
    assert prefill == [256, 512, 1024]  # GPT-2's context is 1,024 positions
    decode = [c for c, _ in pairs if c.tq == 1]
    assert {c.batch for c in decode} == {1, 8} and {c.tk for c in decode} == {1024}
    long = model_sweep(model_named("gpt2"), suite="full")
    assert sorted({c.tq for c, _ in long if c.tq == c.tk}) == [512, 1024]
    with pytest.raises(UsageError, match="short or long sweep"):
        model_sweep(model_named("gpt2"), suite="decode")


def test_every_fit_of_a_model_sweep_has_three_points() -> None:
    """The quick sweep fits prefill time along T and a decode step's along its cache length, each on at least
    three lengths; a batch above one is a single point beside them (no fit), and the long sweep fits every batch."""
    for suite in ("quick", "full"):
        pairs = model_sweep(model_named("llama-3.1-8b"), suite=suite)
        prefill = sorted(c.tq for c, _ in pairs if c.tq == c.tk)
        caches: dict[int, list[int]] = {}
        for c, _ in pairs:
            if c.tq == 1:
                caches.setdefault(c.batch, []).append(c.tk)
        assert len(prefill) >= 3 and len(caches[1]) >= 3
        assert all(len(lengths) in (1, 3) for lengths in caches.values())
        assert (max(len(v) for b, v in caches.items() if b > 1) == 3) == (suite == "full")
    trained = model_sweep(model_named("llama-3.1-8b"), {"T": [512], "mode": ["fwd+bwd"]})
    assert [(c.tq, m) for c, m in trained] == [(512, "fwd+bwd")]  # decode steps are forward only
    with pytest.raises(UsageError, match="fixes d, heads"):
        model_sweep(model_named("gpt2"), {"d": [32], "heads": [4]})
    cells = model_plan("bert-base", ["a", "b"], {"T": [512]})
    assert [(c.implementation, c.case.tq) for c in cells] == [("a", 512), ("b", 512)]


def test_quick_suite_holds_the_commonest_real_shapes() -> None:
    from harness.contract.discovery import load_registry
    from harness.verify.suites import kernel_cases

    ids = {c.id for c in kernel_cases(load_registry([]).get("torch_sdpa"), "quick")}
    assert "B1-H32/8-T300-d128-float32-causal" in ids  # Llama 3.1 8B's prefill
    assert any(i.startswith("B4-H64/8-T1x1030-d64-float32-causal-window=127,0-bottom_right-cache=") for i in ids)


def test_model_list_and_bad_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--model", "list"]) == 0
    out = capsys.readouterr().out
    assert "gpt-oss-120b" in out and "192/128" in out and "window 4096 (1:1 with full)" in out
    assert main(["bench", "--model", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["models"]
    assert {r["name"] for r in rows} == set(catalogue()) and all(r["source"] for r in rows)
    for command in ("verify", "bench"):
        assert main([command, "--model", "llama-9"]) == 2
        err = capsys.readouterr().err
        assert "unknown model 'llama-9'" in err and "llama-3.1-8b" in err and "gpt2" in err


PLUGIN = '''
import torch
import torch.nn.functional as F
from harness import register


@register("small_sdpa", backend="torch", causal=True, mask=True, gqa=True)
def small_sdpa(q, k, v, *, causal=False, mask=None, scale=None):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                         enable_gqa=k.shape[1] != q.shape[1])
    return out.nan_to_num(0.0)
'''


@pytest.mark.slow
def test_verify_runs_a_model_on_a_small_plugin(tmp_path: Path) -> None:
    plugin = tmp_path / "small_sdpa.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "gpt2.json"
    assert main(["verify", "--model", "gpt2", "--plugin", str(plugin), "--only", "small_sdpa", "--trials", "1",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["model"] == "gpt2" and data["config"]["model_source"].startswith("https://huggingface.co/")
    ids = {c["case_id"] for c in data["cells"]}
    prefill = f"B1-H12-T{data['config']['model_prefill_length']}-d64-float32-causal"
    assert prefill in ids and any(i.startswith("B4-H12-T1x") and "cache=" in i for i in ids)
    statuses = {(c["case_id"], c["status"]) for c in data["cells"]}
    assert (prefill, "pass") in statuses and {s for _, s in statuses} == {"pass", "skipped"}  # grad: not declared


def test_the_manual_lists_every_model() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "models.md").read_text()
    missing = [name for name in catalogue() if f"`{name}`" not in text]
    assert not missing, f"docs/models.md does not list {missing}"


def test_module_implementations_get_the_models_layer() -> None:
    from harness.contract.discovery import load_registry
    from harness.modules.cases import ModuleCase
    from harness.verify.model_cases import model_cases_for, model_module_cases

    registry = load_registry([])
    plan = model_plan_of(model_named("llama-3.2-1b"), memory_bytes=64 * 2**30)
    cases, reason = model_cases_for(registry.get("torch_mha"), plan)
    assert reason is None
    prefill, decode = cases
    assert isinstance(prefill, ModuleCase) and isinstance(decode, ModuleCase)
    assert (prefill.d_model, prefill.heads, prefill.kv_heads, prefill.rope, prefill.causal) == (2048, 32, 8, "rotate_half", True)
    assert (decode.seq, decode.past) == (1, plan.decode_length - 1)  # type: ignore[operator]
    big = model_plan_of(model_named("llama-3.1-405b"), memory_bytes=64 * 2**30)
    assert "needs" in (model_module_cases(registry.get("torch_mha"), big, memory_bytes=8 * 2**30)[1] or "")
    assert "one head dim" in (model_cases_for(registry.get("torch_mha"), model_plan_of(model_named("deepseek-v3")))[1] or "")


@pytest.mark.parametrize("name", list(catalogue()))
def test_every_model_plans_verify_and_bench(name: str) -> None:
    from harness.contract.discovery import load_registry
    from harness.verify.model_cases import model_kernel_cases

    model = model_named(name)
    plan = model_plan_of(model, memory_bytes=16 * 2**30)
    cases = model_kernel_cases(load_registry([]).get("torch_sdpa"), plan)
    serving = [c for c in cases if c.varlen is not None]
    past = [c for c in cases if model.window is not None and c.varlen is None and c.tk > model.window >= plan.decode_length]
    assert cases and all((c.heads, c.kv_heads, c.d) == (model.heads, model.kv_heads, model.head_dim)
                         for c in cases if c not in past)
    # past a window the planned lengths do not pass: one KV head and its group of query heads, keys dropped
    assert all((c.heads, c.kv_heads, c.d) == (model.heads // model.kv_heads, 1, model.head_dim) for c in past)
    assert all(c.window == (model.window - 1, 0) and c.causal_align == "bottom_right" for c in past)
    assert all(_longest(c) <= model.max_positions for c in cases)
    # a decoder's serving batch: a prompt's chunk, decode steps and a speculative step, bottom-right causal
    assert bool(serving) == ("serving" in model.forms) and (model.causal or not serving)
    assert all({kind for q, kv in c.varlen or () for kind in [request_kind(q, kv)]} == {"chunked prefill", "decode", "speculative"}
               and c.causal_align == "bottom_right" for c in serving)
    pairs = model_sweep(model)
    assert pairs and all(_longest(c) <= model.max_positions for c, _ in pairs)
    assert any(c.varlen is not None for c, _ in pairs) == ("serving" in model.forms)


def _longest(case: AttentionCase) -> int:
    """The most keys one sequence of ``case`` attends over (a serving batch packs several)."""
    return max(kv for _, kv in case.varlen) if case.varlen else case.tk


@pytest.mark.slow
def test_bench_runs_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gpt-oss.json"
    assert main(["bench", "--model", "gpt-oss-20b", "--only", "torch_sdpa", "--T", "256", "--batch", "1",
                 "--roof-budget", "0.01", "--budget", "0.02", "--min-samples", "3", "--no-memory", "--threads", "1", "--quiet",
                 "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    config = data["config"]
    assert config["model"] == "gpt-oss-20b" and config["model_source"].endswith("gpt-oss-20b/blob/main/config.json")
    if "sinks" not in HAS:
        assert any("sinks" in note for note in config["model_left_out"])
        assert "attention sinks left out" in capsys.readouterr().err
    ids = {c["case_id"] for c in data["cells"] if c["status"] == "ok"}
    if "sinks" in HAS:  # gpt-oss's layers take sinks; torch_sdpa has none: every cell skipped, saying so
        skipped = [c for c in data["cells"] if c["status"] == "skipped"]
        assert skipped and not ids and all("sinks" in str(c.get("reason")) for c in skipped)
        assert all(c["case_id"].endswith("-sinks") for c in skipped)
        return
    serving = {c.id for c in model_cases(model_named("gpt-oss-20b"), "serving", length=256, batch=8).cases}
    assert len(serving) == 2 and ids == {
        "B1-H64/8-T256-d64-float32-causal-window=127,0", "B1-H64/8-T256-d64-float32-causal",
        "B1-H64/8-T1x256-d64-float32-causal-window=127,0-bottom_right", "B1-H64/8-T1x256-d64-float32", *serving}


def test_a_window_the_planned_lengths_do_not_pass_is_tested_past_its_size() -> None:
    """Gemma 2's and Mistral's 4,096-key windows are wider than the longest planned cache: their own cases reach
    past them (the soft-cap with them, Gemma 2's local layer as it runs), and a model whose planned lengths pass
    its window (gpt-oss: 128) needs none."""
    from harness.contract.discovery import load_registry
    from harness.verify.model_cases import PAST_WINDOW_KEYS, model_kernel_cases

    eager = load_registry([]).get("torch_eager")
    gemma = model_named("gemma-2-9b")
    cases = [c for c in model_kernel_cases(eager, model_plan_of(gemma, memory_bytes=16 * 2**30)) if c.window]
    past = {(c.tq, c.dtype) for c in cases if c.tk == 4096 + PAST_WINDOW_KEYS}
    assert past == {(1, "float32"), (64, "float32"), (1, "bfloat16"), (64, "bfloat16")}
    assert all(c.softcap == 50.0 and c.window == (4095, 0) for c in cases if c.tk > 4096)
    oss = model_named("gpt-oss-20b")
    assert all((c.heads, c.kv_heads) == (oss.heads, oss.kv_heads)
               for c in model_kernel_cases(eager, model_plan_of(oss, memory_bytes=16 * 2**30)))


WIDE_WINDOW_BUG = '''
import torch
from harness import register


@register("wide_window_dropped", backend="torch", causal=True, mask=True, gqa=True, structures=("window", "bottom_right"))
def wide_window_dropped(q, k, v, *, causal=False, mask=None, scale=None, window=None, causal_align="top_left"):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    tq, tk = s.shape[-2:]
    i = torch.arange(tq)[:, None] + (tk - tq if causal_align == "bottom_right" else 0)
    j = torch.arange(tk)[None, :]
    allowed = torch.ones(tq, tk, dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if window is not None and window[0] < 4095:  # BUG: a window of 4,096 keys or more taken as full attention
        allowed &= (j >= i - window[0]) & (j <= i + window[1])
    if mask is not None:
        allowed = allowed & mask
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    return p @ v
'''


@pytest.mark.slow
def test_verify_of_a_model_catches_a_window_dropped_past_the_planned_lengths(tmp_path: Path) -> None:
    plugin = tmp_path / "wide_window.py"
    plugin.write_text(WIDE_WINDOW_BUG)
    out = tmp_path / "mistral.json"
    assert main(["verify", "--model", "mistral-7b", "--plugin", str(plugin), "--only", "wide_window_dropped",
                 "--trials", "1", "--json", str(out)]) == 1
    failed = {c["case_id"] for c in json.loads(out.read_text())["cells"] if c["status"] == "fail"}
    assert failed and all("x4161-" in i and "window=4095,0" in i for i in failed), failed
