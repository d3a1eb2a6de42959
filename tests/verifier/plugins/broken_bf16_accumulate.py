"""BROKEN (precision): a streaming online softmax (a few keys at a time, as a simple vectorised CPU
kernel walks them) whose bf16 path keeps the running sum and the output accumulator in bf16; scores
and exponentials are float32. Each update is rounded to 8 significant bits, so once the sum is large
the small terms are lost: the error grows with T (the error-growth sweep) though short rows look fine.
float32 input is computed correctly."""
import torch

from harness import register


@register("broken_bf16_accumulate", backend="torch", dtypes=("float32", "bfloat16"), causal=True)
def broken_bf16_accumulate(q, k, v, *, causal=False, mask=None, scale=None, block=4):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    acc_dtype = q.dtype  # BUG: bf16 input accumulates in bf16 (should be float32 whatever the input)
    qf, kf, vf = q.float(), k.float(), v.float()
    tq, tk = q.shape[2], k.shape[2]
    m = torch.full(q.shape[:-1] + (1,), float("-inf"))
    l = torch.zeros_like(m, dtype=acc_dtype)
    acc = torch.zeros(q.shape, dtype=acc_dtype)
    for k0 in range(0, tk, block):
        s = (qf @ kf[:, :, k0:k0 + block].transpose(-1, -2)) * scale
        if causal:
            keys = torch.arange(k0, min(k0 + block, tk))
            s = s.masked_fill(keys[None, :] > torch.arange(tq)[:, None], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_use = torch.where(m_new == float("-inf"), 0.0, m_new)
        p = torch.exp(s - m_use)
        alpha = torch.exp(m - m_use)
        l = (l.float() * alpha + p.sum(-1, keepdim=True)).to(acc_dtype)
        acc = (acc.float() * alpha + p @ vf[:, :, k0:k0 + block]).to(acc_dtype)
        m = m_new
    return (acc.float() / l.float()).to(q.dtype)
