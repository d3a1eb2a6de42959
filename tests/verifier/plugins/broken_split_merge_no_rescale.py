"""BROKEN (split-KV merge): the cache is cut into pieces of 64 keys, each normalised by its own softmax, and
the pieces are merged weighted by their sums of exp(score - own max), forgetting to rescale each by
exp(own max - global max). Exact with one piece (short caches), wrong once a cache is split."""
import math

import torch

from harness import register

PIECE = 64


@register("broken_split_merge_no_rescale", backend="torch", gqa=True)
def broken_split_merge_no_rescale(q, k, v, *, causal=False, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    outs, sums = [], []
    for start in range(0, k.shape[2], PIECE):
        s = (q @ k[:, :, start:start + PIECE].transpose(-1, -2)) * scale
        p = torch.exp(s - s.amax(-1, keepdim=True))
        outs.append((p @ v[:, :, start:start + PIECE]) / p.sum(-1, keepdim=True))
        sums.append(p.sum(-1, keepdim=True))  # BUG: relative to this piece's max, never rescaled to the global one
    total = sum(sums)
    return sum(o * w for o, w in zip(outs, sums)) / total
