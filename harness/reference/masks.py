"""A case's boolean mask (True = may attend), drawn from the trial's generator in the case's kind and rank.

Each kind is built to show a kernel's mistake by contrast: key padding leaves one batch element unpadded and pads
another to a single key; ``empty_rows`` always empties the first row; ``first_block`` masks more than one
512-key block at the start of some rows (:data:`FIRST_BLOCK`). :func:`harness.reference.tensors.make_inputs` draws
the mask right after q, k and v, from the same generator.
"""

from __future__ import annotations

import torch

from harness.case.attention import AttentionCase


def _key_validity(groups: int, tk: int, kind: str, gen: torch.Generator) -> torch.Tensor:
    """(groups, Tk) booleans: which keys each group (batch element, or head) keeps.

    The first group keeps every key (padding shows by contrast) and, with two groups or more,
    the last keeps one key only (padding of length Tk - 1).
    """
    lengths = torch.randint(1, tk + 1, (groups,), generator=gen)
    lengths[0] = tk
    if groups > 1:
        lengths[-1] = 1
    keys = torch.arange(tk)[None, :]
    if kind == "key_padding":
        return keys < lengths[:, None]
    if kind == "key_padding_left":
        return keys >= (tk - lengths)[:, None]
    holes = torch.rand(groups, tk, generator=gen, dtype=torch.float64) < 0.3  # key_padding_holes
    holes[0] = False
    if groups > 1:
        holes[-1] = True
        holes[-1, int(torch.randint(0, tk, (1,), generator=gen))] = False
    return ~holes


def _late_padding(groups: int, tk: int, gen: torch.Generator) -> torch.Tensor:
    """(groups, Tk) key padding where group 0 keeps the fewest keys (about a third), the last every key and the
    others random lengths: padding on elements other than 0, and an element 0 unlike the rest."""
    lengths = torch.randint(1, tk + 1, (groups,), generator=gen)
    lengths[0] = tk // 3 + 1
    if groups > 1:
        lengths[-1] = tk
    return torch.arange(tk)[None, :] < lengths[:, None]


FIRST_BLOCK = 520
"""Keys a ``first_block`` mask masks at the start of its rows once Tk passes it: more than one 512-key block."""


def _first_block(bm: int, hm: int, tq: int, tk: int, gen: torch.Generator) -> torch.Tensor:
    """(bm, hm, Tq, Tk): about half the rows (always the first) have their first max(Tk // 2, 520) keys masked (at
    most Tk - 1: a key stays); the other rows mask a random 10% of keys."""
    prefix = min(tk - 1, max(tk // 2, FIRST_BLOCK))
    mask = torch.rand(bm, hm, tq, tk, generator=gen, dtype=torch.float64) >= 0.1
    rows = torch.rand(bm, hm, tq, generator=gen, dtype=torch.float64) < 0.5
    rows.view(-1)[0] = True
    mask[..., :prefix] &= ~rows[..., None]
    mask[..., prefix:] |= rows[..., None]
    return mask


def _shaped_mask(case: AttentionCase, gen: torch.Generator) -> torch.Tensor:
    """Any mask kind at the case's rank: drawn as (Bm, Hm, Tq, Tk), leading dims dropped for 2d/3d."""
    b, h, tq, tk = case.batch, case.heads, case.tq, case.tk
    bm, hm = {"full": (b, h), "2d": (1, 1), "3d": (1, h), "bcast_heads": (b, 1)}[case.mask_rank]
    if case.mask.startswith("key_padding"):
        if case.mask_rank == "full":  # as key padding is usually given: (B, 1, 1, Tk)
            return _key_validity(b, tk, case.mask, gen).reshape(b, 1, 1, tk)
        mask = _key_validity(bm * hm, tk, case.mask, gen).reshape(bm, hm, 1, tk).expand(bm, hm, tq, tk)
    elif case.mask == "key_padding_late":
        mask = _late_padding(b, tk, gen).reshape(b, 1, 1, tk).expand(bm, hm, tq, tk) if bm == b else \
            _late_padding(bm * hm, tk, gen).reshape(bm, hm, 1, tk).expand(bm, hm, tq, tk)
    elif case.mask == "first_block":
        mask = _first_block(bm, hm, tq, tk, gen)
    elif case.mask == "one_masked":
        masked = torch.randint(0, tk, (bm, hm, tq, 1), generator=gen)
        mask = torch.ones(bm, hm, tq, tk, dtype=torch.bool).scatter_(-1, masked, False)
    else:
        mask = torch.rand(bm, hm, tq, tk, generator=gen, dtype=torch.float64) < 0.7
        if case.mask == "empty_rows":
            empty = torch.rand(bm, hm, tq, generator=gen, dtype=torch.float64) < 0.25
            empty.view(-1)[0] = True
            mask &= ~empty[..., None]
    mask = mask.contiguous()
    return {"2d": mask[0, 0], "3d": mask[0]}.get(case.mask_rank, mask)


def make_mask(case: AttentionCase, gen: torch.Generator) -> torch.Tensor | None:
    """The boolean mask of the case (True = may attend), shaped to broadcast to (B, H, Tq, Tk)."""
    b, h, tq, tk = case.batch, case.heads, case.tq, case.tk
    if case.mask == "none":
        return None
    if case.mask == "key_padding_late" and case.mask_rank == "full":  # as key padding is usually given: (B, 1, 1, Tk)
        return _late_padding(b, tk, gen).reshape(b, 1, 1, tk)
    if case.mask_rank != "full" or case.mask not in ("random", "key_padding", "empty_rows"):
        return _shaped_mask(case, gen)
    if case.mask == "key_padding":
        lengths = torch.randint(1, tk + 1, (b,), generator=gen)
        lengths[0] = tk  # one batch element unpadded, so padding is visible by contrast
        return (torch.arange(tk)[None, :] < lengths[:, None]).reshape(b, 1, 1, tk)
    mask = torch.rand(b, h, tq, tk, generator=gen, dtype=torch.float64) < 0.7
    if case.mask == "empty_rows":
        empty = torch.rand(b, h, tq, generator=gen, dtype=torch.float64) < 0.25
        empty.view(-1)[0] = True
        mask &= ~empty[..., None]
    return mask
