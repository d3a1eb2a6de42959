"""How close a verify check came to failing, in numbers a reader can compare across checks.

The pass rule (:mod:`harness.reference.tolerance`) is ``max|err| <= bound`` with ``bound = m x base_err + floor``
(and a relative-L2 bound beside it). Two numbers follow from a check's metrics:

- the **margin**, error / bound: 1.0 is the edge, a pass is at most 1, 0.5 is a pass with half
  the allowance to spare; it is bounded whatever the baseline did;
- the **baseline ratio**, error / base_err: how many times the plain formula's own error in the same
  dtype. It means something only where the baseline's error sets the bound; where the floor does
  (a float64 baseline that is the oracle's own arithmetic, T = 1) base_err is ~0 and the ratio runs
  to 1e11 while the check passes with room, so it is not shown there.
"""

from __future__ import annotations

from collections.abc import Mapping


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def margin(metrics: Mapping[str, object]) -> float | None:
    """How close a check came to failing: error / bound, the larger of the max-error and the relative-L2
    tests when both were made. 1.0 is the edge; a pass is at most 1 (None for a check without a bound)."""
    parts = []
    for err, bound in (("max_abs_err", "bound"), ("rel_l2", "rel_l2_bound")):
        e, b = _number(metrics.get(err)), _number(metrics.get(bound))
        if e is not None and b is not None and b > 0:
            parts.append(e / b)
    if not parts and _number(metrics.get("max_abs_err")) == float("inf"):
        return float("inf")  # NaN or Inf where the oracle is finite: no bound was computed
    return max(parts) if parts else None


def baseline_led(metrics: Mapping[str, object]) -> bool:
    """The baseline's error, not the floor, sets the bound (m x base_err >= floor): only then is the ratio
    error / base_err a statement about the check. Files without the floor keep every finite ratio."""
    ratio, base, m, floor = (_number(metrics.get(k)) for k in ("ratio", "base_err", "m", "floor"))
    if ratio is None or ratio == float("inf"):
        return False
    if base is None or m is None or floor is None:
        return True
    return base > 0 and m * base >= floor
