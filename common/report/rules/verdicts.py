"""The verdicts a claim rule gives, its :class:`Outcome`, the :func:`rule` decorator that attaches its text, and the
report's text helpers (:mod:`common.report.rules` lists the verdicts' meanings)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

HOLDS = "holds"
FAILS = "does not hold"
UNDECIDABLE = "not decidable"
UNDECIDABLE_AT_DESIGN = "not decidable at this design"  # undecided, and the rule cannot reach POWER_TARGET there
NOT_COMPARABLE = "not comparable"
NOT_COMPARABLE_WHY = "the paper's normalisation is not given"
NOT_RUN = "not run"
VERDICTS = (HOLDS, FAILS, UNDECIDABLE, UNDECIDABLE_AT_DESIGN, NOT_COMPARABLE, NOT_RUN)


@dataclass(frozen=True)
class Outcome:
    """What a rule found: its verdict and the reproduced value in words."""

    verdict: str
    value: str


def rule(text: str) -> Callable[[Callable[..., Outcome]], Callable[..., Outcome]]:
    """Attach ``text`` (the rule as the claims report prints it) to a rule function as ``fn.rule``."""

    def attach(fn: Callable[..., Outcome]) -> Callable[..., Outcome]:
        fn.rule = text  # type: ignore[attr-defined]
        return fn

    return attach


def verdict_kind(verdict: str) -> str:
    """The kind of a report's verdict cell (one of :data:`VERDICTS`): its longest prefix among them, so that
    "not decidable at this design (needs ...) (mini scale)" is ``UNDECIDABLE_AT_DESIGN``, not ``UNDECIDABLE``."""
    found = [v for v in VERDICTS if verdict == v or verdict.startswith(v + " ") or verdict.startswith(v + ":")]
    if not found:
        raise ValueError(f"verdict {verdict!r} is none of {VERDICTS}")
    return max(found, key=len)


def sentences(*parts: str) -> str:
    """Text parts joined as sentences: each ends with a full stop (one added where it has none), empty parts dropped.

    Where a report cell is put together from several texts (a rule and what follows it), they never run together:
    ``sentences("a: not decidable", "Cannot reach ...")`` is ``"a: not decidable. Cannot reach ..."``.
    """
    kept = [p.strip() for p in parts if p and p.strip()]
    return " ".join(p if p.endswith((".", "?", "!")) else f"{p}." for p in kept)


def clauses(*parts: str) -> str:
    """The non-empty parts of a reproduced value joined by "; " (the report's separator within one value)."""
    return "; ".join(p for p in parts if p)


def fmt(x: float | None) -> str:
    """A number in 3 significant digits ("-" for None / NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3g}"
