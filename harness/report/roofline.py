"""The roofline figure: every timed cell at its FLOPs per compulsory byte under both roofs measured for its dtype,
the GEMM peak and the read bandwidth (Williams, Waterman and Patterson's roofline), on one kind of machine."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from harness.report.plots import Plot, _gflops, _save, _style, _text
from harness.results import Bandwidth, BandwidthKey, Peak, PeakKey


def roofs(cells: pd.DataFrame, dtype: str, peaks: Mapping[PeakKey, Peak], bandwidth: Mapping[BandwidthKey, Bandwidth]
          ) -> tuple[pd.DataFrame, str | None, float | None, float | None]:
    """The cells of one kind of machine (a cluster run's most common; all cells of a local run), that
    kind, and its two roofs: GEMM GFLOP/s for ``dtype`` and read GB/s. Never one kind's roof over
    another kind's cells. The records may be given in their stored form (JSON objects)."""
    kinds = cells["node_kind"].dropna() if "node_kind" in cells else pd.Series(dtype=object)
    kind = str(kinds.value_counts().index[0]) if not kinds.empty else None
    if kind is not None:
        cells = cells[cells["node_kind"] == kind]
    peak = _gflops(peaks.get(PeakKey(dtype, str(cells["device"].iloc[0]), kind)))
    measured = ((key, Bandwidth.coerce(r).read_gbps) for key, r in bandwidth.items())
    reads = [float(r) for key, r in measured if isinstance(r, (int, float)) and key.kind == kind]
    return cells, kind, peak, (max(reads) if reads else None)


def roofline_plot(bench: pd.DataFrame, out: Path, peaks: Mapping[PeakKey, Peak],
                  bandwidth: Mapping[BandwidthKey, Bandwidth]) -> Plot | None:
    """Every timed cell with compulsory bytes at (FLOPs / byte, GFLOP/s) under both roofs of its dtype: the
    GEMM peak and the read bandwidth x intensity (Williams, Waterman and Patterson's roofline)."""
    if bench.empty or "gbps" not in bench or not bench["gbps"].notna().any():
        return None
    ok = bench[(bench["status"] == "ok") & bench["gbps"].notna() & bench["gflops"].notna() & (bench["bytes"] > 0)
               & (bench["flops"] > 0)]  # a log axis of FLOPs per byte
    dtypes = ok["dtype"].value_counts()
    if ok.empty or dtypes.empty:
        return None
    dtype = str(dtypes.index[0])  # one dtype's roofs: the one most cells ran in
    ok = ok[ok["dtype"] == dtype]
    ok, kind, peak, roof_bw = roofs(ok, dtype, peaks, bandwidth)
    intensity = ok["flops"].astype(float) / ok["bytes"].astype(float)
    fig, ax = plt.subplots(figsize=(8, 5))
    lo, hi = float(intensity.min()) / 2, float(intensity.max()) * 2
    xs = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    if roof_bw and peak:
        ax.plot(xs, [min(peak, roof_bw * x) for x in xs], color="0.3", linewidth=2, zorder=1,
                label=f"roofline: {roof_bw:.0f} GB/s read, {peak:.0f} GFLOP/s GEMM")
        ax.axvline(peak / roof_bw, color="0.6", linestyle=":", linewidth=1, label=f"ridge {peak / roof_bw:.1f} FLOP/B")
    elif peak:
        ax.axhline(peak, color="0.3", linestyle="--", label=f"GEMM peak {peak:.0f} GFLOP/s")
    for i, (name, group) in enumerate(ok.groupby("implementation", sort=True)):
        decode = group["tq"] < group["tk"]
        style = _style(i)
        for part, marker, suffix in ((group[~decode], style["marker"], ""), (group[decode], "x", " (decode)")):
            if part.empty:
                continue
            x = part["flops"].astype(float) / part["bytes"].astype(float)
            ax.scatter(x, part["gflops"], marker=marker, color=f"C{i % 10}", s=36, zorder=3,
                       label=_text(f"{name}{suffix}"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per compulsory byte: Q, K, V read once, O written once)")
    ax.set_ylabel("GFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    on = f", {kind}" if kind is not None else ""
    ax.set_title(_text(f"Roofline ({dtype}{on}, the run's measured roofs)"), fontsize=10)
    return _save(fig, out, "roofline", "Roofline",
                 f"Each timed {dtype} cell at its arithmetic intensity and achieved GFLOP/s. Roofs measured in the "
                 "same run: the GEMM peak and the read bandwidth (torch.sum over 256 MiB) times intensity. Prefill "
                 "(Tq = Tk) lies far right, under the compute roof; decode steps (x, Tq << Tk) at about "
                 "2 x (H / Hkv) / bytes per element FLOPs per byte, under the bandwidth roof.")
