"""BROKEN (a split threshold): past 2,048 keys the keys are cut in two halves, each normalised on its own,
and the halves averaged by key count instead of merged by their log-sum-exp. Exact below the threshold,
where every common test shape lives."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend

SPLIT_ABOVE = 2048


@register("broken_long_keys_split", backend="torch", gqa=True, causal=True, mask=True)
def broken_long_keys_split(q, k, v, *, causal=False, mask=None, scale=None):
    tk = k.shape[-2]
    if tk <= SPLIT_ABOVE or causal or mask is not None:
        return attend(q, k, v, causal=causal, mask=mask, scale=scale)
    half = tk // 2
    a = attend(q, k[:, :, :half], v[:, :, :half], scale=scale)
    b = attend(q, k[:, :, half:], v[:, :, half:], scale=scale)
    return (a * half + b * (tk - half)) / tk  # BUG: weights by key count, not by each half's sum of exp
