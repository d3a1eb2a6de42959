"""BROKEN (head dim past a tile): scores sum q.k over the first 128 features only, as a kernel with a
128-wide feature tile and no second pass. Exact for every d <= 128 (all the usual head dims), wrong for
the 160/192/256 that FlashAttention supports."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend

TILE = 128


@register("broken_head_dim_over_128", backend="torch", causal=True, mask=True, gqa=True)
def broken_head_dim_over_128(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return attend(q[..., :TILE], k[..., :TILE], v, causal=causal, mask=mask, scale=scale)  # BUG: features past 128
