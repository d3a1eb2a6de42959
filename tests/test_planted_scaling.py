"""Planted bad plugins through bench and report: an O(T^3) kernel and a memory="linear" one that materialises
T x T are flagged; torch_sdpa, timed beside them, is not.

The memory verdict rests on byte counts (exact), held against one head's T x T score matrix: the planted kernel
holds it, torch_sdpa's tiles (which grow with T at these tiny sizes) a tenth of it. The time verdict rests on the planted kernel's time over
torch_sdpa's in interleaved rounds at each T: its extra T x T x T product makes that ratio grow as T (8x over
the sweep), which the flag needs only to exceed T^0.5 with the rounds' intervals: a wide band, whatever the load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main

pytestmark = pytest.mark.slow

PLUGIN = '''
import torch
import torch.nn.functional as F
from harness import register


@register("planted_cubic", backend="torch", memory="quadratic")
def planted_cubic(q, k, v, *, causal=False, mask=None, scale=None):
    out = F.scaled_dot_product_attention(q, k, v, scale=scale)
    s = q @ k.transpose(-1, -2)
    waste = (s @ s).sum()  # a T x T x T product per head: the cost of a bug, O(T^3)
    return out + 0.0 * torch.tanh(waste)


@register("planted_memory", backend="torch", memory="linear")
def planted_memory(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v  # T x T scores, declared linear
'''


def test_planted_cubic_time_and_quadratic_memory_are_flagged(tmp_path: Path) -> None:
    from harness.report.builder import build_report
    from harness.report.settings import ReportSettings

    plugin = tmp_path / "planted.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "run.json"
    code = main(["bench", "--plugin", str(plugin), "--only", "planted_cubic,planted_memory,torch_sdpa",
                 "--T", "128", "256", "512", "1024", "--d", "8", "--heads", "1", "--roof-budget", "0.01", "--budget", "0.05",
                 "--threads", "1", "--quiet", "--out", str(out)])
    assert code == 0
    report = build_report(ReportSettings((out,), tmp_path / "report"))
    rows = {(r.implementation, r.quantity): r for r in report.analysis.rows if r.axis == "T"}
    cubic = rows[("planted_cubic", "time")]
    assert cubic.relative is not None and cubic.relative.reference == "torch_sdpa"
    assert cubic.flagged, cubic.check
    assert rows[("planted_memory", "memory")].flagged
    # the honest reference is flagged in neither: at d = 8 its CPU kernel's tiles still grow with T (a cold CI run
    # measured its memory growing faster than T here), yet hold a tenth of one head's T x T scores at T = 1024, which
    # the report describes as a departure (or, with a wider interval, calls undecided), never as off theory
    assert not rows[("torch_sdpa", "time")].flagged
    sdpa_memory = rows[("torch_sdpa", "memory")]
    assert not sdpa_memory.flagged, sdpa_memory.check
    assert sdpa_memory.check.split(":")[0] in ("ok", "ok (≤ 1)", "undecided", "departure", "leading term not reached"), sdpa_memory.check
    assert rows[("planted_memory", "memory")].departure is None  # the T x T matrix itself: no tile explains it
    assert "OFF" in (tmp_path / "report" / "complexity.csv").read_text()
