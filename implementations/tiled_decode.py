"""A decode kernel: a few new queries against a long KV cache, K and V read once (flash-decoding).

A decode step has no query blocks to parallelise over: one to sixteen new queries per sequence, a
cache of thousands of keys. Its time is reading K and V, so the kernel is built to read them once:

* the query heads that share a kv head (GQA: H / Hkv of them; MQA: all H) and the Tq new queries are
  the rows of one tile, so each K and V row is loaded from memory once and used by all of them
  (SDPA's ``enable_gqa`` reads the shared K and V once per query head);
* split-KV (FlashAttention's flash-decoding): each (batch element, kv head)'s keys are cut into pieces
  when there are fewer (b, h) than threads, or ragged lengths would leave a thread idle; each piece
  ends with its partial output and log-sum-exp and the pieces are merged by log-sum-exp
  (:mod:`implementations.decode_numpy` is that merge written to be read);
* ragged cache lengths (``cache_seqlens``) and a paged cache (``block_table``) natively: a piece of a
  short sequence is short, and keys are reached through one row pointer each, page or not.

KV caches are stored in bfloat16 or float16 in inference (half the bytes: twice the steps per second on a
step bound by reading them). K and V may be float32, bfloat16 or float16, whatever q's dtype (float32,
bfloat16 or float16): rows are converted to fp32 as they are loaded (bf16 is a shift, fp16 an F16C
conversion) and every sum is fp32; the output has q's dtype. Mixed cases are declared as data
(``kv_dtypes``) and named ``kv=bfloat16`` in case ids (see docs/decode.md).

FP8 caches (float8_e4m3fn, float8_e5m2, with per-tensor, per-head or per-token float32 scales) are read by the
loops as they are: each chunk of bytes is widened to float16 bits in registers and converted by F16C, and each
row's scale multiplies that key's score (K) and its softmax weight (V), one multiply a key, never one an element.
The scales reach the loops as strided views, one value per row (a per-tensor or per-head scale is a stride of 0,
nothing copied). No FP8 tensor is dequantized in memory: a step reads one byte per element.

The loops are C++ (:file:`kernels/_decode.cpp`, :file:`kernels/_decode_kernel.h`: register tiles written once,
templates over a lane type of 8 or 16 floats; one build per tier, compiled whole for AVX2 + FMA + F16C or for AVX-512F and loaded only
on a CPU that has it (:data:`implementations._cpp_build.ISAS`); built on first use and cached like
``tiled_fused``'s; a failed build is the availability reason). The threads are torch's
own (``at::parallel_for``, items pulled from a shared counter): a step right after another torch operation
then runs on the threads that operation leaves spinning, where a pool of its own would compete with them
for the cores (measured: 12% slower right after a 1 GiB ``torch.sum`` on 2 cores).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from types import ModuleType

import torch

from harness import register
from harness.case.dtypes import FP8_DTYPES
from implementations._cpp_build import ISAS, KERNELS, build, built_before, cpu_runs, extension_name, missing
from implementations._fp8 import dequantized

LOG2E = 1.0 / math.log(2.0)
SOURCES = [KERNELS / "_decode.cpp"]
MIN_PIECE = 512
"""Keys per split-KV piece at least: below this a piece's fixed cost (its tile, the merge) is not worth it."""
PIECES_PER_THREAD = 4
PREFETCH, BLOCK_KEYS, AHEAD_BYTES, WARM_BLOCKS, SPARSE = 1, 64, 32768, 2, False
V_IN_SCORES_512 = True
"""Each K and V row is prefetched (hint T0: against T1, measured interleaved in one process at B8 H32/8 Tk32768 with
2 threads, as fast with fp32 and up to 20-30% faster with bf16 and fp16 caches on AVX2) while the row AHEAD_BYTES
before it in its stream is computed on, spread evenly over a pass's sweeps of the block so the memory sees a
steady stream of requests while the core computes: K's during the scores pass; V's during the scores pass too in
the 512-bit loops where V_IN_SCORES_512 says so (their scores pass is short, and both streams in flight together
read faster, measured interleaved with the probe at B8 H32/8 Tk32768: bf16 78% against 67%), during the P V pass
in the 256-bit loops (fp32 11% faster from memory than during the scores pass). SPARSE: one line per 4 KiB only.
Keys go through the softmax in blocks of 64."""
FLOAT32_512 = False
"""Whether the avx512 tier runs float32 caches on its 512-bit loops. It runs them on the 256-bit (avx2) loops:
from memory those read a float32 cache faster (AMD EPYC, Zen 5, B8 H32/8 Tk32768, 2 threads, interleaved in one
process: 77-82% of the read probe against 68-73% when the probe read 44-48 GB/s, 49-52 GB/s against 42-43 when it
read 78), though in cache the 512-bit loops are faster (123 against 67 GB/s). bf16 and fp16 caches, converted on
load and bound by arithmetic, run on the 512-bit loops (as fast at 45 GB/s, 15-20% faster at 76)."""
FORCE_ISA = "ATTNBENCH_DECODE_ISA"
"""Environment variable: ``avx2`` keeps the kernel on its AVX2 path on an AVX-512 CPU (the tests run every tier)."""
KV_DTYPES = ("float32", "bfloat16", "float16")
"""The K/V cache dtypes the kernel reads, beside any q dtype it takes."""
_BUILD_LOCK = threading.Lock()
_BUILD: dict[str, ModuleType | str] = {}
_TUNED: dict[str, object] = {}
"""The settings last passed to each tier's build's ``tune``."""


LEVELS = {"avx2": ISAS["avx2"], "avx512": ISAS["avx512f"]}
"""Each tier's build: the instruction-set level its extension is compiled for (the avx512 build holds the 256-bit
loops too, for float32 caches: :data:`FLOAT32_512`)."""


def extension(tier: str | None = None) -> ModuleType | str:
    """The build of ``tier`` (default: the highest this CPU runs), or the reason it is not there: the CPU lacks the
    tier's features (the build is then neither made nor loaded) or it did not build. Tried once per process."""
    tier = tier or ("avx512" if cpu_runs(LEVELS["avx512"]) else "avx2")
    with _BUILD_LOCK:
        if tier not in _BUILD:
            level = LEVELS[tier]
            reason = missing(level)
            if reason is not None:
                _BUILD[tier] = f"tiled_decode's {tier} tier: {reason}"
                return _BUILD[tier]
            # OpenMP: at::parallel_for runs on torch's own thread team (the libgomp torch has loaded already)
            openmp = ["-fopenmp"]
            name = extension_name("attnbench_decode", level.name, SOURCES, openmp)
            if not built_before(name):
                print(f"attnbench: building tiled_decode's {tier} C++ kernel (first use only, about 30 s)",
                      file=sys.stderr)
            _BUILD[tier] = build(SOURCES, name, [*level.flags, *openmp], ldflags=openmp)
        return _BUILD[tier]


def tiers() -> list[str]:
    """The kernel's instruction-set tiers this CPU runs and whose builds it has, lowest first (``avx2``,
    ``avx512``); none when the kernel did not build."""
    return [tier for tier in LEVELS if not isinstance(extension(tier), str)]


def in_cache_gbps(isa: str, dtype: torch.dtype, reps: int = 400, keys: tuple[int, int] = (256, 512)) -> float:
    """The tier's GB/s of K and V on caches small enough to stay in each core's L2: one kv head (G = 4, d = 128) per
    thread, ``keys`` keys, the difference of the fastest calls (the call's fixed cost cancels). The rate its
    arithmetic allows: a step reading from memory cannot read faster than this, whatever the memory's rate.
    0.0 when the larger case was not the slower (a busy machine): no rate was measured."""
    threads = torch.get_num_threads()
    gen = torch.Generator().manual_seed(0)
    cases = {tk: (torch.randn(1, 4 * threads, 1, 128, generator=gen), torch.randn(1, threads, tk, 128, generator=gen)
                  .to(dtype), torch.randn(1, threads, tk, 128, generator=gen).to(dtype)) for tk in keys}
    scale = torch.ones(1) if dtype in FP8_TORCH else None
    fastest = dict.fromkeys(cases, float("inf"))
    clock = time.perf_counter
    for _ in range(reps):
        for tk, (q, k, v) in cases.items():
            start = clock()
            decode_attention(q, k, v, isa=isa, k_scale=scale, v_scale=scale)
            fastest[tk] = min(fastest[tk], clock() - start)
    item = torch.finfo(dtype).bits // 8
    extra_s = fastest[keys[1]] - fastest[keys[0]]
    return 2 * threads * (keys[1] - keys[0]) * 128 * item / extra_s / 1e9 if extra_s > 0 else 0.0  # 0: unmeasured


TIER_MARGIN = 1.15
"""A lower tier is chosen by default only when its in-cache rate beats the highest tier's by this factor."""
_CHOSEN: dict[torch.dtype, str] = {}
"""The default tier per half-precision cache dtype, measured once per process (:func:`default_tier`)."""


def default_tier(kv_dtype: torch.dtype | None = None) -> str:
    """The tier a call runs on when neither ``isa`` nor ``ATTNBENCH_DECODE_ISA`` names one: the highest the CPU has,
    except for bf16 and fp16 caches on a CPU whose 256-bit loops run them faster in cache than its 512-bit ones by
    :data:`TIER_MARGIN` (a core that splits each 512-bit instruction in two, as AMD's Zen 4 does, may). Those steps
    convert every element on load and are bound by their arithmetic (docs/decode.md, "What bounds the share"),
    so the in-cache rate of one core decides; it is measured once per process and dtype (tens of milliseconds). float32 caches
    run on the 256-bit loops of either tier already (:data:`FLOAT32_512`), where the memory decides, not arithmetic."""
    have = tiers()
    if not have:
        raise RuntimeError(str(extension()))
    if len(have) == 1 or kv_dtype not in (torch.bfloat16, torch.float16):
        return have[-1]
    if kv_dtype not in _CHOSEN:  # two readings of each, interleaved: a busy moment cannot decide alone
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one core's rate decides; one thread never waits on a descheduled other
        try:
            readings = [in_cache_gbps(t, kv_dtype, reps=30, keys=(256, 768)) for _ in range(2)
                        for t in (have[0], have[-1])]
        finally:
            torch.set_num_threads(threads)
        _CHOSEN[kv_dtype] = have[0] if narrow_wins(readings[0::2], readings[1::2]) else have[-1]
    return _CHOSEN[kv_dtype]


def narrow_wins(narrow: list[float], wide: list[float]) -> bool:
    """Whether every in-cache reading of the lower tier beats every one of the highest by :data:`TIER_MARGIN`
    (a reading of 0, unmeasured, never decides for the lower tier)."""
    return bool(narrow and wide) and min(narrow) > TIER_MARGIN * max(wide) > 0


def use_isa(isa: str | None = None, kv_dtype: torch.dtype | None = None) -> str:
    """Choose the kernel's tier: ``isa`` if given, else the environment variable ``ATTNBENCH_DECODE_ISA``, else
    :func:`default_tier` for the cache's dtype (checked at run time; a tier the CPU lacks falls back to its
    highest); returns the tier in use. The kernel is re-tuned only when the tier or the tuning constants of this
    module change."""
    have = tiers()
    if not have:
        raise RuntimeError(str(extension()))
    isa = isa or os.environ.get(FORCE_ISA, "") or default_tier(kv_dtype)
    if isa not in LEVELS:
        raise ValueError(f"tiled_decode: isa={isa!r}; one of avx2, avx512")
    tier = isa if isa in have else have[-1]
    settings = (tier, PREFETCH, BLOCK_KEYS, AHEAD_BYTES, WARM_BLOCKS, V_IN_SCORES_512, SPARSE, FLOAT32_512)
    if _TUNED.get(tier) != settings:  # each build keeps its own tuning
        ext = extension(tier)
        assert not isinstance(ext, str)  # in tiers()
        ext.tune(*settings)
        _TUNED[tier] = settings
    return tier


FP8_TORCH = (torch.float8_e4m3fn, torch.float8_e5m2)
E4M3_FACTOR = 256.0
"""The loops read an e4m3fn byte as a float16 of its value / 256 (:file:`kernels/_decode_kernel.h`,
``fp8_to_half``); the factor joins the softmax scale (K) and the output (V)."""


def per_row(scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``scale`` of an FP8 cache (``(1,)``, ``(Hkv,)`` or one per row, :mod:`implementations._fp8`) as a float32
    view with one value per row of ``x`` (its shape without d): a shared scale is a stride of 0, not a copy."""
    s = scale.to(torch.float32)
    return s.reshape(1, -1, 1).expand(x.shape[:-1]) if s.dim() == 1 else s


def available(case: object = None) -> str | None:
    """None once the decode kernels are built, else the build's error (the same for every ``case``)."""
    result = extension()
    return result if isinstance(result, str) else None


def piece_size(lengths: torch.Tensor, kv_heads: int, threads: int) -> int:
    """Keys per split-KV piece: enough pieces for every thread several times over, none below MIN_PIECE."""
    total = int(lengths.sum()) * kv_heads
    return max(MIN_PIECE, -(-total // max(1, threads * PIECES_PER_THREAD)))


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                     scale: float | None = None, window: tuple[int, int] | None = None,
                     causal_align: str = "top_left", cache_seqlens: torch.Tensor | None = None,
                     block_table: torch.Tensor | None = None, isa: str | None = None,
                     k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of q (B, H, Tq, d) over k, v (B, Hkv, Tk, d), or pages (P, Hkv, page, d) with ``block_table``;
    k and v in any of :data:`KV_DTYPES` (one dtype for both), or FP8 with ``k_scale``, ``v_scale`` (dequantized to
    float32 here, before the loops), the output in q's dtype; ``isa`` as in :func:`use_isa`."""
    row_scales: dict[str, torch.Tensor] = {}
    factor = 1.0
    if k_scale is not None and (k.dtype not in FP8_TORCH or v.dtype != k.dtype):
        k, v = dequantized(k, k_scale, torch.float32), dequantized(v, v_scale, torch.float32)
    elif k_scale is not None:
        assert v_scale is not None
        factor = E4M3_FACTOR if k.dtype == torch.float8_e4m3fn else 1.0  # the loops read e4m3fn as value / 256
        row_scales = {"k_scale": per_row(k_scale, k), "v_scale": per_row(v_scale, v)}
    ext = extension(use_isa(isa, k.dtype))
    assert not isinstance(ext, str)  # use_isa returns a tier that built
    b, h, tq, d = q.shape
    hkv = k.shape[1]
    tk = block_table.shape[1] * k.shape[2] if block_table is not None else k.shape[2]
    k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (k, v))
    if v.dtype != k.dtype:
        v = v.to(k.dtype)
    out_dtype = q.dtype
    q = q.to(torch.float32)  # a few rows: the kernel scales and lays them out in fp32 anyway
    lengths = (torch.full((b,), tk, dtype=torch.int64) if cache_seqlens is None
               else cache_seqlens.to(torch.int64).clamp(max=tk))
    table = None if block_table is None else block_table.to(torch.int32).contiguous()
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    wl, wr = (-1, 0) if window is None else window
    bottom_right = causal_align == "bottom_right"
    threads = torch.get_num_threads()
    items = ext.plan(lengths, hkv, tq, causal, bottom_right, wl, wr, piece_size(lengths, hkv, threads))
    rows = (h // hkv) * tq
    part_o = torch.empty(items.shape[0], rows, d)
    part_lse = torch.empty(items.shape[0], rows)
    ext.work(q, k, v, table, lengths, items, part_o, part_lse, tq, h // hkv,
             scale * LOG2E * factor, causal, bottom_right, wl, wr, **row_scales, v_factor=factor)
    out = torch.empty(b, h, tq, d)
    ext.merge(items, part_o, part_lse, out, h // hkv)
    return out if out_dtype == torch.float32 else out.to(out_dtype)


@register("tiled_decode", backend="torch", memory="linear", dtypes=KV_DTYPES, kv_dtypes=(*KV_DTYPES, *FP8_DTYPES),
          kv_scales=("tensor", "head", "token"), causal=True, gqa=True,
          structures=("window", "bottom_right", "cache_seqlens", "paged"), available=available,
          description="decode kernel: GQA groups as tile rows (K, V read once), split-KV merged by LSE, "
                      "ragged and paged caches, fp32/bf16/fp16/fp8 caches converted on load, FP8 scales applied per "
                      "key (C++)")
def tiled_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, mask: None = None,
                 scale: float | None = None, window: tuple[int, int] | None = None, causal_align: str = "top_left",
                 cache_seqlens: torch.Tensor | None = None, block_table: torch.Tensor | None = None,
                 k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Any Tq works (each piece's tile holds all G * Tq rows); it is built for Tq of 1 to 16."""
    return decode_attention(q, k, v, causal=causal, scale=scale, window=window, causal_align=causal_align,
                            cache_seqlens=cache_seqlens, block_table=block_table, k_scale=k_scale, v_scale=v_scale)
