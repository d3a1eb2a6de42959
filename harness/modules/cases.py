"""Module cases: one frozen description of a module-level call (projections, heads, masks, layer).

A module case describes ``Y = layer(X)`` for X of shape (B, T, d_model): either multi-head
self-attention with its projections (``layer="mha"``, checked against
``nn.MultiheadAttention``) or a whole Transformer encoder layer (``layer="encoder"``,
checked against ``nn.TransformerEncoderLayer``, post-LN or pre-LN by ``norm_first``).
It carries the fields :meth:`harness.contract.registry.Implementation.not_supported_reasons`
reads (kind, dtype, device, causal, mask, heads, kv_heads, grad, bias), so the same
capability check skips what a module did not declare (GQA needs ``gqa=True``). A case may
also continue a sequence: ``past`` positions already in a KV cache, as a decoder's next call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.case.attention import CaseRecord
from harness.case.devices import DEVICES
from harness.case.dtypes import DTYPES
from harness.case.positional import ROPE_CONVENTIONS
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.contract.registry import Implementation

LAYERS = ("mha", "encoder")
MODULE_MASKS = ("none", "key_padding")
"""none, or key padding: per batch element a suffix of the positions is padding (never attended to)."""
MODULE_BIASES = ("none", "alibi")
ROPES = ("none", *ROPE_CONVENTIONS)


@dataclass(frozen=True)
class ModuleCase(CaseRecord):
    """One module-level call: shapes, layer, masks, positional variant, dtype."""

    batch: int = 2
    seq: int = 16
    d_model: int = 32
    heads: int = 4
    layer: str = "mha"
    norm_first: bool = False
    """Encoder layers only: False = post-LN (PyTorch's default), True = pre-LN."""
    dim_ff: int = 0
    """Encoder layers only: feed-forward width; 0 means 2 * d_model."""
    proj_bias: bool = True
    """Whether in_proj / out_proj carry biases (``nn.MultiheadAttention(bias=...)``)."""
    dtype: str = "float32"
    device: str = "cpu"
    causal: bool = False
    mask: str = "none"
    bias: str = "none"
    """Additive per-head attention bias: "alibi" (-slope_h |i - j|, :func:`harness.case.positional.alibi_slopes`), passed
    to the module as a ``bias=`` tensor, or asked for as ``positional_bias="alibi"`` from a module that declared it
    computes ALiBi itself (``register_module(..., positional_bias=("alibi",))``: its slopes for the head count are checked)."""
    rope: str = "none"
    """Rotary embedding applied to each head's q and k: "rotate_half" or "interleaved"."""
    grad: bool = False
    kind: str = "module"
    kv_heads: int = 0
    """Grouped-query attention: K and V are projected to this many heads (0 means ``heads``); query head h
    reads KV head h // (heads / kv_heads). Passed to the module as ``kv_heads=`` only when fewer than ``heads``."""
    past: int = 0
    """Positions already in the KV cache: the module is given their keys and values (``past_key``,
    ``past_value``, (B, kv_heads, past, head_dim), as a cache holds them: projected, RoPE applied) and X holds
    the next ``seq`` tokens, at positions past .. past + seq - 1 (RoPE rotates them there). Causal is then
    bottom-right: new token i sees every cached key and new keys j <= i. Part of the id (``past=P``) when set."""

    def __post_init__(self) -> None:
        if self.dim_ff == 0:
            object.__setattr__(self, "dim_ff", 2 * self.d_model)
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        self.validate()

    def with_(self, **changes: Any) -> ModuleCase:
        """A copy with some fields changed; KV heads equal to the heads follow a change of ``heads``."""
        if "heads" in changes and "kv_heads" not in changes and self.kv_heads == self.heads:
            changes["kv_heads"] = 0
        return super().with_(**changes)

    # What the bench's budget and result cells read of any case (tq, tk, d, structures), and the cost of one
    # call (harness.reference.flops asks a case for its own): projections, attention and, in an encoder layer, the
    # feed-forward; fwd only (module cases take no gradients).

    @property
    def tq(self) -> int:
        return self.seq

    @property
    def tk(self) -> int:
        return self.keys

    @property
    def d(self) -> int:
        return self.head_dim

    @property
    def structures(self) -> frozenset[str]:
        return frozenset()

    def own_flops(self, mode: str) -> float:
        """2 B T D (2 D + 2 Dkv) for the Q, K, V and output projections, 4 B H (attended pairs) d for the two
        attention products (causal: bottom-right over the cache), 4 B T D F for an encoder's feed-forward."""
        if mode != "fwd":
            raise ValueError(f"module cases are forward only, not {mode!r}")
        tokens = self.batch * self.seq
        projections = 2 * tokens * self.d_model * (2 * self.d_model + 2 * self.kv_dim)
        pairs = self.seq * self.past + self.seq * (self.seq + 1) // 2 if self.causal else self.seq * self.keys
        feed_forward = 4 * tokens * self.d_model * self.dim_ff if self.layer == "encoder" else 0
        return float(projections + 4 * self.batch * self.heads * pairs * self.head_dim + feed_forward)

    def own_bytes(self, mode: str, item: int) -> int:
        """Bytes one call must move at least: X read, Y written, every weight and the KV cache read once."""
        weights = self.d_model * (2 * self.d_model + 2 * self.kv_dim) + (2 * self.d_model * self.dim_ff
                                                                         if self.layer == "encoder" else 0)
        cache = 2 * self.batch * self.kv_heads * self.past * self.head_dim
        return item * (2 * self.batch * self.seq * self.d_model + weights + cache)

    def own_work(self) -> int:
        """g of the scaling fits: the attention's B H Tq Tk d, as for a kernel case."""
        return self.batch * self.heads * self.seq * self.keys * self.head_dim

    @property
    def keys(self) -> int:
        """Keys each new token may attend: the cached positions and the new ones."""
        return self.past + self.seq

    @property
    def kv_dim(self) -> int:
        """Width of the K (and V) projection: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def validate(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise UsageError(f"invalid module case {self.id}: {message}")

        for name in ("batch", "seq", "d_model", "heads", "dim_ff"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, f"{name} must be an integer >= 1")
        need(self.d_model % self.heads == 0, f"d_model={self.d_model} must be a multiple of heads={self.heads}")
        need(isinstance(self.kv_heads, int) and self.kv_heads >= 1 and self.heads % self.kv_heads == 0,
             f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")
        need(isinstance(self.past, int) and self.past >= 0, "past must be an integer >= 0")
        need(self.layer == "mha" or (self.kv_heads == self.heads and self.past == 0),
             "GQA (kv_heads) and a KV cache (past) are module cases of layer='mha' only")
        need(self.past == 0 or self.bias == "none", "a KV cache (past) with an additive bias is not a module case")
        need(self.layer in LAYERS, f"layer {self.layer!r} is not one of {LAYERS}")
        need(self.dtype in DTYPES, f"dtype {self.dtype!r} is not one of {DTYPES}")
        need(self.device in DEVICES, f"device {self.device!r} is not one of {DEVICES}")
        need(self.mask in MODULE_MASKS, f"mask {self.mask!r} is not one of {MODULE_MASKS}")
        need(self.bias in MODULE_BIASES, f"bias {self.bias!r} is not one of {MODULE_BIASES}")
        need(self.rope in ROPES, f"rope {self.rope!r} is not one of {ROPES}")
        need(self.rope == "none" or self.head_dim % 2 == 0, "RoPE needs an even head dimension d_model/heads")
        need(self.layer == "mha" or (self.bias == "none" and self.rope == "none"),
             "positional variants (bias, rope) are module cases of layer='mha' only")
        need(self.layer == "mha" or self.proj_bias, "encoder-layer cases carry biases (proj_bias=True)")
        need(self.layer == "encoder" or not self.norm_first, "norm_first applies to layer='encoder' only")
        need(not self.grad, "module cases do not check gradients (grad=False)")
        need(self.kind == "module", "kind must be 'module'")

    @property
    def layer_label(self) -> str:
        if self.layer == "encoder":
            return "preln" if self.norm_first else "postln"
        return self.layer

    @property
    def id(self) -> str:
        heads = f"H{self.heads}" if self.kv_heads == self.heads else f"H{self.heads}/{self.kv_heads}"
        parts = ["module", self.layer_label, f"B{self.batch}", f"T{self.seq}", f"D{self.d_model}", heads, self.dtype]
        if self.layer == "encoder":
            parts.insert(6, f"F{self.dim_ff}")
        if self.device != "cpu":
            parts.append(self.device)
        if self.causal:
            parts.append("causal")
        if self.mask != "none":
            parts.append(f"mask={self.mask}")
        if self.bias != "none":
            parts.append(f"bias={self.bias}")
        if self.rope != "none":
            parts.append(f"rope={self.rope}")
        if self.past:
            parts.append(f"past={self.past}")
        if not self.proj_bias:
            parts.append("nobias")
        return "-".join(parts)

    def unsupported_by(self, impl: Implementation) -> list[str]:
        """Reasons beyond the registry's flags: the layer and RoPE conventions the module declared.

        Module plugins declare them as fields of :func:`harness.register_module`: ``layers`` (default ``("mha",)``)
        and ``rope`` (default ``()``), e.g. ``register_module(..., layers=("mha",), rope=("rotate_half",))``.
        """
        reasons = []
        layers = module_layers(impl)
        if self.layer not in layers:
            reasons.append(f"layer {self.layer!r} not implemented (implements {', '.join(layers)})")
        if self.past and not impl.declared.kv_cache:
            reasons.append("a KV cache of earlier positions not supported (declare register_module(..., kv_cache=True) "
                           "and take past_key=, past_value=)")
        ropes = module_ropes(impl)
        if self.rope != "none" and self.rope not in ropes:
            reasons.append(f"RoPE convention {self.rope!r} not supported (supports {', '.join(ropes) or 'none'})")
        return reasons


def module_layers(impl: Implementation) -> tuple[str, ...]:
    """The layers a module implementation declared (``layers=``, default: mha)."""
    return impl.declared.layers or ("mha",)


def module_positional_biases(impl: Implementation) -> tuple[str, ...]:
    """The positional biases a module computes itself, declared (``positional_bias=``, default: none,
    it is handed a ``bias=`` tensor)."""
    return impl.declared.positional_bias


def module_ropes(impl: Implementation) -> tuple[str, ...]:
    """The RoPE conventions a module implementation declared (``rope=``, default: none)."""
    return impl.declared.rope
