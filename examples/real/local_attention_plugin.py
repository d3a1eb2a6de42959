"""local-attention's ``LocalAttention`` (MIT), as it is: sliding windows with ``exact_windowsize=True``.

``pip install 'attnbench[real]'`` (local-attention 1.11.2). A query attends keys within ``window_size`` on
either side (``look_backward=1``, ``look_forward=1``; causal: behind only), so it runs window cases
``(W, W)`` (causal: ``(W, any)``) of self-attention shapes. ``autopad=True`` pads T to a multiple of the window.
Masks are (B, Tk) key padding; a row whose window holds no allowed key has no specified value.
"""

from __future__ import annotations

from harness import Conventions, register

try:
    from local_attention import LocalAttention
    MISSING = None
except ImportError as exc:
    MISSING = f"needs local-attention ({exc}): pip install 'attnbench[real]'"


def runs(case) -> str | None:
    if MISSING:
        return MISSING
    if case.window is None or not (case.causal or case.window[0] == case.window[1]) or case.window[0] < 1:
        return "LocalAttention attends a window (W, W) (causal: (W, any)), W >= 1"
    if case.tq != case.tk or case.kv_heads != case.heads or case.structures - {"window"}:
        return "LocalAttention takes self-attention shapes (Tq == Tk, Hkv == H) and no other structure"
    return None


@register("local_attention", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True, grad=True,
          structures=("window",), available=runs,
          conventions=Conventions(mask_kind="key_padding", empty_row="unspecified"),
          description="local_attention.LocalAttention(exact_windowsize=True, autopad=True)")
def local_attention(q, k, v, *, causal=False, mask=None, scale=None, window=None):
    attend = LocalAttention(window_size=window[0], causal=causal, look_backward=1, look_forward=0 if causal else 1,
                            exact_windowsize=True, autopad=True, scale=scale)
    return attend(q, k, v, mask=mask)
