"""Whether a cell's time depends on its input values: the verdict on the value probe's raw times, derived on reading.

Bench stores only the probe's samples (:class:`~harness.results.ValueProbe`): each distribution's calls, the
distributions interleaved in rounds in a shuffled order each round, so a change of the machine's load hits
them alike. Here each round gives one paired observation per distribution, its median call over the median
call of the ``normal`` draw *of the same round*; the median of those ratios and its distribution-free
interval (:func:`~harness.analysis.stats.median_interval`) say how the distribution changes the time.

The rule, stated once: a distribution makes the time **data-dependent** when that interval lies wholly outside
the noise band [1 / (1 + :data:`NOISE_BAND`), 1 + :data:`NOISE_BAND`] (10%: a dense kernel's call varies that much
with the caches and the clock, whatever its values), at a coverage of at least 95% for all the probe's
distributions together (each interval at 1 - 5% / m for m distributions compared: Bonferroni), and its rounds agree
(the interval is narrower than its median is far from 1, on a log scale: high / low < 1 / ratio for a faster
time, ratio for a slower one). **Independent**: the interval lies wholly inside the band.
Anything else is **undecided**, which is never a finding: too few rounds, a ratio the noise could explain, or
rounds too scattered to say. A dense kernel does the same work on any values, so its ratios scatter around 1
and cannot clear the band in every round; a loaded machine widens the interval, which only makes a finding rarer.

Derived, never stored: a file read by a later attnbench gets the later rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.analysis.stats import PAIRED_CONFIDENCE, median_interval, quantile
from harness.results import BenchCell, ValueProbe

NOISE_BAND = 0.10
"""How far a distribution's time may stray from the normal draw's before it counts: +-10% (as a ratio)."""
FAMILY_CONFIDENCE = PAIRED_CONFIDENCE
"""The coverage of one probe's intervals together (each distribution's at 1 - (1 - this) / m)."""
BASELINE = "normal"
"""The distribution every other's per-round ratio divides by: the case's usual draw."""
DISTRIBUTIONS = ("normal", "equal_logits", "large", "one_hot_keys", "zeros", "sparse_mask")
"""The probe's distributions of input values, in the order they are said (docs/benchmarking.md, "Values")."""
LABELS = {"normal": "normal", "equal_logits": "equal logits", "large": "large magnitudes",
          "one_hot_keys": "one-hot keys", "zeros": "zeros", "sparse_mask": "sparse mask"}
DEPENDENT, INDEPENDENT, UNDECIDED = "data-dependent", "independent", "undecided"
VALUES_RULE = ("The value probe times a cell's case again under other distributions of its input values (equal "
               "logits, large magnitudes, one-hot keys, zeros, a sparse mask), interleaved with the normal draw in "
               "shuffled rounds; a distribution is listed when the interval of its per-round time over the normal "
               f"draw's (95% for the probe's distributions together) lies wholly outside +-{NOISE_BAND:.0%} and its "
               "rounds agree (the interval narrower than its distance from 1). A data-dependent time is a kernel's fast path, or a "
               "kernel that recognises the harness's inputs.")
"""The rule in words, under the report's Values section."""


@dataclass(frozen=True)
class Shift:
    """One distribution's time over the normal draw's: the median per-round ratio and its interval."""

    distribution: str
    ratio: float
    low: float
    high: float
    coverage: float
    rounds: int
    required: float = PAIRED_CONFIDENCE
    """The coverage a finding needs: :data:`FAMILY_CONFIDENCE` shared by the distributions compared."""

    @property
    def verdict(self) -> str:
        """:data:`DEPENDENT` (interval outside the band, coverage enough, rounds agreeing), :data:`INDEPENDENT`
        (inside the band) or :data:`UNDECIDED`."""
        top, bottom = 1.0 + NOISE_BAND, 1.0 / (1.0 + NOISE_BAND)
        agree = self.low > 0 and math.log(self.high / self.low) < abs(math.log(self.ratio))  # spread below the shift
        if self.coverage >= self.required and agree and (self.low > top or self.high < bottom):
            return DEPENDENT
        if bottom <= self.low and self.high <= top:
            return INDEPENDENT
        return UNDECIDED

    @property
    def text(self) -> str:
        """"zeros 0.41x of normal [0.38, 0.45]"."""
        return (f"{LABELS.get(self.distribution, self.distribution)} {self.ratio:.2f}x of normal "
                f"[{self.low:.2f}, {self.high:.2f}]")


def round_medians(samples: Sequence[float], sizes: Sequence[int]) -> list[float]:
    """The median of each round's calls (``sizes`` splits ``samples`` in order; a round without calls: NaN)."""
    out, at = [], 0
    for size in sizes:
        part = sorted(float(x) for x in samples[at:at + size])
        at += size
        out.append(quantile(part, 0.5) if part else float("nan"))
    return out


def shifts(probe: ValueProbe) -> list[Shift]:
    """Each probed distribution's :class:`Shift` against the normal draw, in :data:`DISTRIBUTIONS`' order: from
    the rounds where both have calls and the normal median is above 0. None without a normal draw or rounds."""
    samples: Mapping[str, Sequence[float]] = probe.samples_s or {}
    sizes = tuple(probe.round_sizes or ())
    if BASELINE not in samples or not sizes:
        return []
    base = round_medians(samples[BASELINE], sizes)
    names = [n for n in DISTRIBUTIONS if n in samples and n != BASELINE]
    names += sorted(n for n in samples if n not in DISTRIBUTIONS)  # a newer attnbench's distribution: said as stored
    required = 1.0 - (1.0 - FAMILY_CONFIDENCE) / max(1, len(names))
    out = []
    for name in names:
        ratios = [m / b for m, b in zip(round_medians(samples[name], sizes), base) if b > 0 and m == m]
        if ratios:
            ratio, low, high, coverage = median_interval(ratios, required)
            out.append(Shift(name, ratio, low, high, coverage, len(ratios), required))
    return out


def dependent(probe: ValueProbe | None) -> list[Shift]:
    """The distributions whose interval clears the noise band: the cell's value findings."""
    return [s for s in shifts(probe) if s.verdict == DEPENDENT] if probe is not None else []


def verdict_line(probe: ValueProbe) -> str:
    """The probe's verdict in one line: "data-dependent: zeros 0.41x of normal [0.38, 0.45]", or "no value
    dependence beyond noise" (naming the distributions left undecided), or why nothing can be said."""
    if probe.error:
        return f"not probed: {probe.error}"
    found = shifts(probe)
    if not found:
        return "nothing to compare (no rounds of the normal draw and another)"
    hits = [s for s in found if s.verdict == DEPENDENT]
    if hits:
        return f"{DEPENDENT}: " + "; ".join(s.text for s in hits)
    undecided = [LABELS.get(s.distribution, s.distribution) for s in found if s.verdict == UNDECIDED]
    line = f"no value dependence beyond noise (+-{NOISE_BAND:.0%})"
    return line + (f"; undecided: {', '.join(undecided)}" if undecided else "")


@dataclass(frozen=True)
class ValueFinding:
    """A cell whose time depends on the values, with the distributions that change it."""

    implementation: str
    case_id: str
    mode: str
    shifts: tuple[Shift, ...]

    @property
    def text(self) -> str:
        return f"{self.implementation} {self.case_id} {self.mode}: {DEPENDENT}: " + "; ".join(s.text for s in self.shifts)


@dataclass(frozen=True)
class Values:
    """The value probe over a run's cells: how many were probed, and those whose time depends on the values."""

    probed: int
    findings: tuple[ValueFinding, ...]
    failed: int = 0
    """Probes that gave no times (their cells' own times stand)."""

    @property
    def summary(self) -> str:
        """The finding in one sentence without its cells; empty when no cell was probed."""
        failed = f"; {self.failed} probe(s) gave no times" if self.failed else ""
        if not self.probed:
            return f"{self.failed} value probe(s) gave no times" if self.failed else ""
        if self.findings:
            return (f"{len(self.findings)} of {self.probed} probed cell(s) take a time that depends on the input values "
                    f"(beyond +-{NOISE_BAND:.0%}){failed}")
        return f"no value dependence beyond noise (+-{NOISE_BAND:.0%}) in the {self.probed} probed cell(s){failed}"

    @property
    def note(self) -> str:
        """The finding in words with each data-dependent cell; empty when no cell was probed."""
        if not self.findings:
            return self.summary
        return self.summary + ": " + " | ".join(f.text for f in self.findings)


def value_findings(cells: Iterable[BenchCell]) -> Values:
    """The value probe's findings over ``cells``: each cell whose probe shows a data-dependent time."""
    probes = [c for c in cells if c.value_probe is not None]
    probed = [c for c in probes if c.value_probe is not None and not c.value_probe.error]
    findings = tuple(ValueFinding(c.implementation, c.case_id, c.mode, tuple(found))
                     for c in probed if (found := dependent(c.value_probe)))
    return Values(len(probed), findings, len(probes) - len(probed))
