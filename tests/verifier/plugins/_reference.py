"""A correct torch attention the broken plugins below start from (the leading underscore keeps it out of the suite)."""
import torch


def attend(q, k, v, *, causal=False, mask=None, scale=None, fill=float("-inf")):
    """softmax(q k^T * scale, masked) v with the contract's semantics; ``fill`` is what masked logits become."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is None:
        return torch.softmax(s, -1) @ v
    allowed = allowed.expand(s.shape)
    p = torch.softmax(s.masked_fill(~allowed, fill), -1)
    return (p @ v).masked_fill(~allowed.any(-1, keepdim=True), 0.0)
