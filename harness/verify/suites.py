"""Kernel case suites, generated from what an implementation declares (never from skip lists).

A suite is a plan: a list of case templates, each naming the capabilities it needs
(causal, mask, gqa, grad, bias) and whether it runs in the implementation's primary dtype
only or in every dtype it declares. :func:`kernel_cases` keeps the templates the
implementation can express and instantiates them for each declared device this machine has
(all declared devices when it has none of them, so that a CUDA-only implementation shows
why it did not run). A case the implementation declared but cannot run *here* (a backend
that refuses an input) is still generated, and the runner records it as ``skipped`` with
the implementation's own reason.

Suites:

- ``small``: every feature on tiny shapes (T <= 64): for very slow implementations such as
  a Triton kernel under ``TRITON_INTERPRET=1``, and the default of the pytest conformance suite.
- ``quick``: every feature, T up to 257 plus one long pair, and a pairwise covering array
  (:mod:`harness.verify.pairwise`) over every declared axis; all built-ins within 60 s here.
- ``full``: the whole case matrix: T in 1 ... 1025, Tq != Tk pairs, d from 8 to 128
  with an odd 59, heads 1/3/8, GQA 8/2 and MQA 8/1, batch 1 and 3, every mask kind, every
  declared dtype, large/rand inputs, transposed/strided layouts, a non-default scale,
  self-attention, gradients and ALiBi bias.

It is one module because it is mostly data: one template per line, and a reader
comparing what two suites cover wants every template in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from harness.case.attention import AttentionCase, CaseFields
from harness.contract.registry import Implementation
from harness.errors import UsageError
from harness.verify.pairwise import SUITE_AXES, pairwise_cases

SUITES = ("small", "quick", "full")
PRIMARY_DTYPES = ("float32", "float64", "bfloat16", "float16")
"""The dtype most cases run in: the first of these the implementation declares."""


@dataclass(frozen=True)
class Template:
    fields: CaseFields
    dtypes: str = "primary"
    """"primary": the implementation's primary dtype; "all": every declared dtype; "half": the declared bfloat16 and
    float16 (a case whose point is low-precision arithmetic, where float32's own summation order would decide)."""
    needs: frozenset[str] = field(default_factory=frozenset)

    def __hash__(self) -> int:  # fields is a dict; templates are only compared by identity
        return id(self)


def T(dtypes: str = "primary", **fields: Any) -> Template:
    """A template; the capabilities it needs follow from its fields."""
    needs = set()
    if fields.get("causal"):
        needs.add("causal")
    if fields.get("mask", "none") != "none":
        needs.add("mask")
    if fields.get("kv_heads", fields.get("heads", 1)) != fields.get("heads", 1):
        needs.add("gqa")
    if fields.get("grad"):
        needs.add("grad")
    if fields.get("bias", "none") != "none":
        needs.add("bias")
    if fields.get("window") is not None:
        needs.add("window")
    if fields.get("causal_align", "top_left") != "top_left":
        needs.add("bottom_right")
    if fields.get("varlen") is not None:
        needs.add("varlen")
    if fields.get("cache_seqlens") is not None:
        needs.add("cache_seqlens")
    if fields.get("page_size") is not None:
        needs.add("paged")
    if fields.get("kv_dtype") is not None:  # the cache's own dtype, and an FP8 cache's scale layout
        needs.add(f"kv_dtype:{fields['kv_dtype']}")
    if fields.get("kv_scales") is not None:
        needs.add(f"kv_scales:{fields['kv_scales']}")
    if fields.get("sinks"):
        needs.add("sinks")
    if fields.get("softcap") is not None:
        needs.add("softcap")
    if fields.get("dv", 0) not in (0, fields.get("d", 16)):
        needs.add("value_dim")
    if any(name == "dout" for name, _ in fields.get("layouts", ())) and not fields.get("grad"):
        raise ValueError("a dout layout needs grad=True")
    return Template(cast(CaseFields, fields), dtypes, frozenset(needs))  # checked as the case is built


def packed(*seqlens: tuple[int, int]) -> CaseFields:
    """The fields of a packed case: ``varlen`` and the total query and key lengths."""
    return {"varlen": seqlens, "tq": sum(a for a, _ in seqlens), "tk": sum(b for _, b in seqlens)}


def _common(tiny: bool) -> list[Template]:
    """Features every suite covers, on shapes small enough for the tiny suite when asked."""
    t, pair = (17, 64) if tiny else (97, 128)
    tq, tk = (13, 61) if tiny else (113, 203)
    return [
        T(batch=3, heads=3, tq=t, d=32),
        T(batch=2, heads=8, kv_heads=2, tq=t, d=32),
        T(heads=8, kv_heads=2, tq=t, d=32, causal=True),
        T(heads=8, kv_heads=1, tq=tq, tk=tk, d=16),
        T(heads=8, kv_heads=2, tq=tq, tk=tk, d=16, mask="random"),
        T(batch=3, heads=2, tq=tq, tk=tk, d=32, mask="key_padding"),
        T(batch=2, heads=2, tq=tq, tk=tk, d=32, mask="empty_rows"),
        T(batch=2, heads=2, tq=pair, d=32, mask="random", causal=True),
        T(batch=3, heads=2, tq=pair, d=32, mask="key_padding", causal=True),
        T(heads=2, tq=pair, d=64, inputs="large"),
        T(heads=2, tq=pair, d=64, inputs="large", scale=1.0),  # logits in the hundreds: needs max-subtraction
        T(heads=2, tq=t, d=32, inputs="rand"),
        T(heads=2, tq=t, d=32, scale=0.3),
        T(heads=3, tq=tq, tk=tk, d=40, layout="transposed"),
        T(heads=4, kv_heads=2, tq=t, d=32, layout="strided", causal=True),
        T(heads=2, tq=pair, d=32, self_attention=True),
        T(heads=2, tq=pair, d=32, self_attention=True, causal=True),
        # every declared dtype
        T("all", heads=2, tq=t, d=64),
        T("all", heads=2, tq=pair, d=32, causal=True),
        T("all", batch=2, heads=4, kv_heads=2, tq=tq, tk=tk, d=32, mask="empty_rows"),
        T("all", heads=2, tq=t, d=64, inputs="large"),
        T("all", heads=2, tq=pair, d=64, inputs="large", scale=1.0),  # logits past exp's range in bf16/fp16
        T("all", batch=2, heads=4, kv_heads=2, tq=tq, tk=tk, d=32, inputs="wide", causal=True),  # V past narrower types' range
        # causal with Tq != Tk (top-left: query i sees keys j <= i), both ways, and rows a mask empties
        T(heads=2, tq=tq, tk=tk, d=32, causal=True),
        T(heads=2, tq=tk, tk=tq, d=32, causal=True),
        T(batch=2, heads=2, tq=tk, tk=tq, d=32, causal=True, mask="key_padding_left"),
        # gradients
        T("all", heads=2, tq=t, d=32, grad=True),
        T(batch=2, heads=4, kv_heads=2, tq=pair, d=32, causal=True, grad=True),
        T(batch=2, heads=2, tq=tq, tk=tk, d=16, mask="empty_rows", grad=True),
        T(heads=2, tq=t, d=40, layout="strided", grad=True, inputs="large"),
        T(heads=2, tq=t, d=32, self_attention=True, grad=True),
        # ALiBi
        T(heads=4, tq=pair, d=32, bias="alibi"),
        T(heads=8, kv_heads=2, tq=pair, d=32, bias="alibi", causal=True),
        T(heads=4, tq=t, d=32, bias="alibi", grad=True),
        # structure: sliding windows (left, right) and bottom-right causal, natively or as a dense mask
        *[T(heads=2, tq=t, d=32, window=w) for w in ((0, 0), (1, 0), (17, 5), (8, 8), (t, t))],  # (t, t): every key
        # (8, 8): symmetric, T not a multiple of it (a kernel that pads T to whole windows must mask the padding)
        T(heads=4, kv_heads=2, tq=pair, d=32, causal=True, window=(17, 0)),
        T("all", heads=2, tq=pair, d=32, causal=True, window=(33, 0)),
        T(batch=2, heads=2, tq=tq, tk=tk, d=32, window=(17, 5), mask="key_padding"),
        T(heads=2, tq=tq, tk=tk, d=32, causal=True, causal_align="bottom_right"),  # Tq < Tk: chunked prefill
        T(heads=2, tq=tk, tk=tq, d=32, causal=True, causal_align="bottom_right"),  # Tq > Tk: first rows see no key
        T(heads=2, tq=tq, tk=tk, d=32, window=(17, 5), causal_align="bottom_right"),
        T(batch=2, heads=2, tq=tk, tk=tq, d=32, causal=True, window=(9, 0), causal_align="bottom_right",
          mask="key_padding"),
        T(heads=2, tq=t, d=32, window=(5, 3), grad=True),
        T(heads=4, kv_heads=2, tq=tk, tk=tq, d=16, causal=True, causal_align="bottom_right", grad=True),
        # packed variable-length sequences: block-diagonal, causal inside each, a sequence with no key
        T(heads=4, kv_heads=2, d=32, **packed((5, 5), (t, t), (1, 1), (pair, pair))),
        T(heads=2, d=32, causal=True, **packed((t, t), (3, 3), (pair - 1, pair - 1))),
        T(heads=2, d=32, causal=True, **packed((3, 9), (12, 4), (t, t))),  # top-left inside each sequence
        T(heads=2, d=32, causal=True, causal_align="bottom_right", **packed((3, 9), (8, 0), (12, 4), (tq, tk))),
        T(heads=2, d=32, causal=True, window=(7, 0), **packed((t, t), (pair, pair))),
        T(heads=2, d=32, mask="key_padding", **packed((9, 13), (t, 2 * t))),
        T(heads=2, d=16, causal=True, grad=True, **packed((t, t), (0, 5), (pair, pair))),
        *_models_2025(t, pair, tq, tk),
        *_decode(tiny),
    ]


def _models_2025(t: int, pair: int, tq: int, tk: int) -> list[Template]:
    """Learned attention sinks (gpt-oss, with its sliding window), logit soft-capping (Gemma 2, with its sliding
    window) and a value head dim of its own (DeepSeek MLA's 192 / 128): alone, in every declared dtype, with masks
    that empty rows, with gradients, and sinks with soft-capping in one call."""
    return [
        T("all", heads=4, kv_heads=2, tq=t, d=32, sinks=True, causal=True),
        T("all", heads=2, tq=pair, d=64, sinks=True),  # alone: no GQA, mask or causality beside it
        T(batch=2, heads=2, tq=tq, tk=tk, d=16, sinks=True, mask="empty_rows"),
        T(heads=4, kv_heads=2, tq=pair, d=32, sinks=True, causal=True, window=(33, 0)),
        T(heads=4, kv_heads=2, tq=t, d=32, sinks=True, causal=True, grad=True),
        T("all", heads=2, tq=pair, d=64, softcap=5.0, inputs="large"),
        T(heads=4, kv_heads=2, tq=pair, d=32, softcap=30.0, causal=True),
        T(heads=4, kv_heads=2, tq=pair, d=64, softcap=50.0, causal=True, window=(33, 0)),  # Gemma 2's local layer
        T(batch=2, heads=2, tq=tq, tk=tk, d=16, softcap=5.0, mask="empty_rows"),
        T(heads=2, tq=t, d=32, softcap=5.0, inputs="large", grad=True),
        T(heads=4, kv_heads=2, tq=pair, d=64, sinks=True, softcap=20.0, causal=True),  # both, as fused ports take them
        T("all", heads=2, tq=pair, d=48, dv=32),  # alone: a kernel that declares value_dim and nothing else
        T("all", heads=4, tq=t, d=48, dv=32, causal=True),
        T(heads=4, kv_heads=2, tq=tq, tk=tk, d=24, dv=16, mask="random"),
        T(heads=2, tq=t, d=192, dv=128, causal=True),
        T(heads=2, tq=t, d=48, dv=32, grad=True),
        T(heads=2, tq=t, d=192, dv=128, grad=True),  # MLA's head dims, backward
        T(heads=2, tq=pair, d=256, causal=True),  # Gemma's 256-dim heads, forward and backward
        T(heads=2, tq=t, d=256, grad=True),
    ]


def _decode(tiny: bool) -> list[Template]:
    """Decode steps against a KV cache (:mod:`harness.case.decode`): ragged lengths (one of 0, one shorter than
    Tq: rows with no key), GQA and MQA, Tq 1..16 at the end of each sequence, paged caches (a page size that
    does not divide Tk), KV caches stored in bf16/fp16 beside fp32 queries (``kv_dtype``, for implementations
    that declare ``kv_dtypes``), FP8 caches with each scale layout (per-tensor with ragged lengths; per-head, in
    every declared q dtype, with given static scales that some values exceed; per-token, plain and paged), and,
    beyond the tiny suite, a cache long enough to be split across pieces."""
    tk = 61 if tiny else 203
    br: CaseFields = {"causal": True, "causal_align": "bottom_right"}
    cases = [
        T(batch=3, heads=8, kv_heads=2, tq=1, tk=tk, d=32, cache_seqlens=(tk, 1, tk // 2)),
        T(batch=1, heads=128, kv_heads=1, tq=1, tk=tk, d=64, cache_seqlens=(tk,)),  # MLA decode: 128 heads, one latent
        T(batch=2, heads=8, kv_heads=1, tq=4, tk=tk, d=32, cache_seqlens=(tk, 3), **br),
        T(batch=2, heads=4, kv_heads=2, tq=16, tk=tk, d=32, cache_seqlens=(20, tk), **br),
        T(batch=2, heads=8, kv_heads=2, tq=1, tk=tk, d=64, page_size=7),
        T(batch=3, heads=4, kv_heads=2, tq=2, tk=tk, d=32, cache_seqlens=(tk - 1, 0, 17), page_size=16, **br),
        T("all", batch=2, heads=8, kv_heads=2, tq=1, tk=tk, d=64, cache_seqlens=(tk, 9)),
        T(batch=3, heads=8, kv_heads=2, tq=1, tk=tk, d=64, cache_seqlens=(tk, 1, tk // 2), kv_dtype="bfloat16"),
        T(batch=2, heads=8, kv_heads=1, tq=4, tk=tk, d=40, cache_seqlens=(tk, 3), kv_dtype="float16", **br),
        T(batch=2, heads=4, kv_heads=2, tq=2, tk=tk, d=32, cache_seqlens=(tk - 1, 17), page_size=16,
          kv_dtype="bfloat16", **br),
        # FP8 caches: K and V stored in FP8 with float32 scales (harness.case.quantized)
        T(batch=3, heads=8, kv_heads=2, tq=1, tk=tk, d=64, cache_seqlens=(tk, 1, tk // 2), kv_dtype="float8_e4m3fn",
          kv_scales="tensor"),
        T("all", batch=2, heads=8, kv_heads=2, tq=1, tk=tk, d=32, kv_dtype="float8_e5m2", kv_scales="head"),
        T(batch=2, heads=4, kv_heads=2, tq=1, tk=tk, d=32, kv_dtype="float8_e4m3fn", kv_scales="head",
          kv_scale_values=((0.03, 0.02), (0.025, 0.035))),  # a checkpoint's static scales: some values saturate
        T(batch=2, heads=8, kv_heads=2, tq=1, tk=tk, d=32, kv_dtype="float8_e4m3fn", kv_scales="token"),
        T(batch=2, heads=4, kv_heads=2, tq=4, tk=tk, d=32, cache_seqlens=(tk - 1, 17), page_size=16,
          kv_dtype="float8_e4m3fn", kv_scales="token", **br),
    ]
    if not tiny:
        cases.append(T(heads=16, kv_heads=1, tq=1, tk=1500, d=64))  # MQA, one long cache: split-KV at work
        cases.append(T(batch=2, heads=8, kv_heads=2, tq=1, tk=1500, d=64, cache_seqlens=(1500, 1100), page_size=16))
    return cases


def _edges(suite: str) -> list[Template]:
    """Every axis at the sizes real models and kernels' internal thresholds reach, cheaply: a case with
    more than :data:`~harness.verify.checks.SAMPLE_ABOVE_SCORES` scores is checked exactly on sampled query
    rows (its gradients too, with dO zero elsewhere), so its cost is the implementation's own call.

    Thresholds: FlashAttention's head dims up to 256 (kernels specialise at 64/96/128/160/192/256), odd
    ones no tile divides; key counts past 2,048/4,096 (block counts, SDPA's CPU kv split of 512, query split
    switching at 192/768 rows); B x H past 65,535 (a CUDA grid's y/z limit, where kernels that put batch x
    heads on one grid axis fail); GQA groups of 8 and 16 (Llama-3 70B, 405B); decode caches of 4,097 to
    16,400 keys with few heads, where split-KV kernels cut the cache (FlashAttention's num_splits heuristic
    on blocks vs. SMs) and change how many pieces they merge."""
    decode_br: CaseFields = {"causal": True, "causal_align": "bottom_right"}
    quick = [
        T(heads=2, tq=1030, tk=2060, d=256, causal=True),  # d at FlashAttention's limit, past SDPA's splits
        T(batch=2, heads=8, kv_heads=1, tq=1, tk=8200, d=64, cache_seqlens=(8200, 4097)),  # split-KV decode, GQA 8
        T(heads=32, kv_heads=2, tq=130, tk=700, d=64, mask="key_padding", **decode_br),  # GQA 16, chunked prefill
        T(heads=2, tq=1030, tk=2060, d=160, causal=True, grad=True),  # backward past block thresholds, sampled
        T(tq=33, tk=97, d=255, scale=0.3),  # an odd head dim no tile divides
        T(batch=3, heads=40, kv_heads=8, tq=33, tk=70, d=32, causal=True),  # 120 work items: past 64, no multiple of 48
        T(heads=2, d=32, causal=True, **packed((3, 5), (0, 4), (300, 300), (9, 0))),  # a packed sequence past 256 keys
        T(tq=2100, d=32, causal=True),  # past 2,048 query rows (kernels' query chunking), on sampled rows
        T(tq=17, tk=23, d=16, causal=True, scale=0.0),  # scale 0 (uniform weights) is a scale, not "none given"
        T(tq=8, tk=8, d=16, window=(1, 1)),  # key counts one 8-lane vector past a 16-lane multiple (8, 24, 136):
        T(heads=2, tq=5, tk=24, d=16, causal=True, causal_align="bottom_right"),  # where vector tails go wrong
    ]
    if suite != "full":
        return quick
    return quick + [
        T(heads=1, tq=4100, d=128, causal=True),  # 4,100 x 4,100 scores, on sampled rows
        T(heads=2, tq=600, tk=8200, d=64, mask="random", mask_rank="2d"),
        T("all", heads=2, tq=1025, tk=2049, d=192, causal=True, window=(700, 300), causal_align="bottom_right"),
        T("all", heads=2, tq=1030, tk=2060, d=256, grad=True, inputs="large"),
        T(heads=16, kv_heads=2, tq=520, tk=1030, d=128, causal=True, grad=True),  # GQA 8 backward
        T(heads=4, tq=2100, d=96, bias="alibi", causal=True),
        T(heads=2, d=64, causal=True, **packed((5, 7), (0, 9), (2050, 2050), (40, 0))),  # a long packed sequence
        T(batch=4097, heads=16, tq=2, tk=3, d=8),  # 65,552 (batch, head) work items
        T(batch=3, heads=16, kv_heads=1, tq=4, tk=16400, d=64, cache_seqlens=(16400, 0, 4097), **decode_br),
        T(batch=2, heads=8, kv_heads=1, tq=1, tk=8200, d=128, cache_seqlens=(8200, 7), page_size=256),
        T(batch=4, heads=8, kv_heads=2, tq=16, tk=4100, d=64, cache_seqlens=(4100, 1, 0, 4099), page_size=48, **decode_br),
        T(heads=2, tq=97, d=257, causal=True),  # past FlashAttention's 256: refused or right
    ]


def _what_models_feed() -> list[Template]:
    """What real models feed, in quick and full: the commonest shapes (d 64 and 128, causal, GQA, gradients, in every
    declared dtype: bf16/fp16 training), non-contiguous d > 128 gradients, logits at the edge of each dtype's range
    and tiny ones, K, V and dO in layouts of their own, key padding (B, 1, 1, Tk) over long keys with padding on
    elements other than 0, a whole first block of 512+ keys masked in some rows, long rows of non-negative V (an
    output near 0.5 shows a low-precision running sum that randn V, averaging to ~0, hides), and a KV cache under
    top-left causal masking."""
    return [
        T("all", heads=4, kv_heads=2, tq=128, d=64, causal=True, grad=True),  # Llama-like GQA, d 64
        T("all", batch=2, heads=2, kv_heads=1, tq=40, tk=128, d=128, causal=True, grad=True, mask="key_padding"),
        T(batch=2, heads=4, kv_heads=2, tq=65, d=64, causal=True, grad=True, layout="transposed",
          layouts=(("v", "strided"), ("dout", "transposed"))),
        T(heads=2, tq=70, tk=90, d=192, causal=True, grad=True, layout="transposed"),  # d > 128, non-contiguous
        T(heads=2, tq=33, d=160, grad=True, layout="strided", mask="random"),
        T("all", batch=2, heads=2, kv_heads=1, tq=32, tk=96, d=64, causal=True, inputs="huge"),
        T(batch=2, heads=2, tq=33, tk=70, d=128, mask="random", inputs="huge"),
        T(heads=2, tq=40, d=64, grad=True, inputs="huge"),
        T(heads=2, tq=64, d=64, inputs="tiny", causal=True),  # every dtype in the covering array
        T(batch=2, heads=4, kv_heads=2, tq=33, tk=70, d=32, layouts=(("k", "transposed"),)),
        T(batch=2, heads=2, tq=33, tk=70, d=32, mask="key_padding", layouts=(("v", "offset"), ("mask", "strided"))),
        T(batch=3, heads=4, kv_heads=2, tq=8, tk=1100, d=64, mask="key_padding"),  # (B, 1, 1, Tk) over long keys
        T(batch=3, heads=2, tq=8, tk=1100, d=64, mask="key_padding_late", causal=True, causal_align="bottom_right"),
        T(batch=2, tq=8, tk=1100, d=64, mask="first_block"),
        T("half", batch=2, heads=4, kv_heads=2, tq=8, tk=2100, d=64, mask="first_block", mask_rank="bcast_heads"),
        T("half", heads=1, tq=4, tk=8192, d=64, inputs="rand"),  # long rows, outputs near 0.5
        T(batch=2, heads=4, kv_heads=2, tq=5, tk=203, d=32, causal=True, cache_seqlens=(203, 60)),  # cache, top-left
    ]


def _plan(suite: str) -> list[Template]:
    if suite == "small":
        seq = [T(heads=2, tq=n, d=16) for n in (1, 2, 3, 17, 33, 64)]
        seq += [T(heads=2, tq=n, d=16, causal=True) for n in (1, 3, 17, 64)]
        pairs = [T(heads=2, tq=a, tk=b, d=16) for a, b in ((1, 61), (3, 47), (64, 32))]
        dims = [T(heads=2, tq=17, d=d) for d in (8, 59, 64, 128)]
        return seq + pairs + dims + _common(tiny=True)
    # quick leaves the tails (T mod 16/32/64/128) to the covering array; full keeps its own sweep too
    lengths = (1, 3, 17, 97, 257) if suite == "quick" else (1, 2, 3, 17, 64, 97, 128, 257, 1000, 1025)
    seq = [T(heads=2 if n <= 257 else 1, tq=n, d=64) for n in lengths]
    seq += [T(heads=2 if n <= 257 else 1, tq=n, d=64, causal=True) for n in lengths if n in (1, 3, 17, 128, 257, 1025)]
    pair_list = ((1, 239), (113, 203), (512, 256), (3, 799)) if suite == "full" else ((1, 239), (3, 799))
    pairs = [T(heads=2, tq=a, tk=b, d=32) for a, b in pair_list]
    pairs += [T(heads=2, tq=a, tk=b, d=32, mask="random") for a, b in pair_list[1:3]]
    dim_list = (8, 16, 32, 40, 59, 64, 80, 128) if suite == "full" else (59,)
    dims = [T(batch=2, heads=3, tq=97, d=d) for d in dim_list]
    heads = [T(heads=1, tq=64, d=32), T(heads=8, tq=64, d=32), T(batch=3, heads=8, kv_heads=1, tq=64, d=32)]
    full_extra: list[Template] = []
    if suite == "full":
        full_extra = [
            T(batch=3, heads=8, kv_heads=2, tq=257, d=64, causal=True, mask="key_padding"),
            T("all", heads=2, tq=1025, d=64, causal=True),
            T("all", heads=2, tq=257, d=128, mask="random"),
            T(heads=2, tq=1000, d=64, inputs="large", scale=1.0),
            T(heads=8, kv_heads=1, tq=257, d=64, causal=True, grad=True),
            T(heads=2, tq=512, tk=256, d=64, grad=True, mask="random"),
            T("all", heads=2, tq=128, d=64, causal=True, grad=True),
            T(heads=4, tq=1000, d=64, bias="alibi", causal=True),
        ]
    return seq + pairs + dims + heads + _common(tiny=False) + _what_models_feed() + full_extra + _edges(suite) + _real_models()


def _real_models() -> list[Template]:
    """The commonest real shapes, from the model catalogue (:mod:`harness.case.models`; ``verify --model`` runs any
    entry whole): Llama 3.1 8B's prefill (32 query / 8 KV heads, d 128, causal, a prompt of 300 tokens) and
    gpt-oss's decode step (64 / 8 heads, d 64, a batch of 4 ragged caches of up to 1,030 keys) in both its
    layer kinds: the sliding window of 128 (bottom-right) and full attention."""
    from harness.case.models import model_cases, model_named

    cases = (*model_cases(model_named("llama-3.1-8b"), "prefill", length=300).cases,
             *model_cases(model_named("gpt-oss-20b"), "decode", length=1030, batch=4).cases)
    # each as the model computes it (gpt-oss: with its sinks), and its shape alone for kernels without the feature
    shapes = [case.with_(sinks=False, softcap=None, dv=0) for case in cases]
    return [T(**{k: v for k, v in case.to_dict().items() if k not in ("dtype", "device", "kind")})
            for case in {c.id: c for c in (*cases, *shapes)}.values()]


def primary_dtype(impl: Implementation) -> str:
    return next(d for d in PRIMARY_DTYPES if d in impl.declared.dtypes)


def devices_here(impl: Implementation) -> tuple[str, ...]:
    """The declared devices this machine has; all declared ones when it has none (they are then skipped)."""
    from harness.contract.registry import _cuda_available

    present = tuple(d for d in impl.declared.devices if d == "cpu" or _cuda_available())
    return present or impl.declared.devices


def kernel_cases(impl: Implementation, suite: str) -> list[AttentionCase]:
    """The cases of ``suite`` that ``impl`` declares it can express, on each declared device, deduplicated."""
    if suite not in SUITES:
        raise UsageError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}")
    caps = {flag for flag in ("causal", "mask", "gqa", "grad", "bias", "sinks", "softcap", "value_dim")
            if getattr(impl.declared, flag)}
    caps |= set(impl.declared.structures) | ({"window", "bottom_right", "varlen", "cache_seqlens"} if impl.declared.mask else set())
    caps |= {f"kv_dtype:{d}" for d in impl.declared.kv_dtypes} | {f"kv_scales:{s}" for s in impl.declared.kv_scales}
    primary = primary_dtype(impl)
    cases: dict[str, AttentionCase] = {}
    for device in devices_here(impl):
        for template in _plan(suite):
            if not template.needs <= caps:
                continue
            dtypes = {"all": impl.declared.dtypes, "primary": (primary,),
                      "half": tuple(d for d in impl.declared.dtypes if d in ("bfloat16", "float16"))}[template.dtypes]
            for dtype in dtypes:
                if template.fields.get("kv_dtype") == dtype:
                    continue  # a "mixed" case in the cache's own dtype is no mixed case
                fields = template.fields.copy()
                fields.update({"dtype": dtype, "device": device, "kind": "kernel"})
                case = AttentionCase(**fields)
                cases.setdefault(case.id, case)
        if suite in SUITE_AXES:  # every pair of declared axis values, beside the templates above
            for case in pairwise_cases(impl, suite, device):
                cases.setdefault(case.id, case)
    # the error-growth sweep's cases share ids with ordinary ones; their check ("error_growth") differs
    return list(cases.values()) + growth_cases(impl, suite, tuple(devices_here(impl)))


GROWTH_T = {"small": (), "quick": (64, 256, 1024, 4096), "full": (64, 128, 256, 512, 1024, 2048, 4096, 8192)}
"""The sizes each verify suite sweeps (the small suite, for pytest, none): T is the number of keys."""

GROWTH_QUERIES = 256
"""Query rows per growth case. Error growth with T is growth in the number of keys one output row
sums over; rows are independent (no mask), so 256 rows measure it as well as T rows do, and the
T = 4,096 point costs 1/16 of a square case (it was 40% of verify quick's time)."""


def growth_cases(impl: Implementation, suite: str, devices: tuple[str, ...]) -> list[AttentionCase]:
    """One case per (device, declared dtype, T) of the suite's sweep: min(T, 256) queries over T keys."""
    return [AttentionCase(heads=1, tq=min(t, GROWTH_QUERIES), tk=t, d=64, dtype=dtype, device=device, growth=True)
            for device in devices for dtype in impl.declared.dtypes for t in GROWTH_T.get(suite, ())]
