"""The claim rule of App. G (saturated within delta) and the words of its interval and the test examples it needs."""

from __future__ import annotations

import math
from collections.abc import Mapping

from common.report.rules.verdicts import FAILS, HOLDS, UNDECIDABLE, Outcome, fmt, rule
from common.science.saturation import NOT_SATURATED, SATURATED


# ----------------------------------------------------------------------------- rule: App. G
# Its error rates (coverage, wrong verdicts, power) are measured in tests/science/test_saturation.py, on App. G's own intervals.
@rule(
    "App. G's separated test (Theorem 3) on every seed of the deepest depth probed: Gamma = max_l ||C_l|| lies in "
    "[max(0, Gamma_hat - t), Gamma_hat + t] with probability >= 1 - alpha (t = sqrt(sum_l tr_l / (n_test alpha)), traces "
    "from a calibration part); holds when every upper end is <= delta ('saturated within delta'); a lower end above "
    "delta ('not saturated'): does not hold; otherwise ('undecided', no delta given, no verdict): not decidable. "
    "Beside it, not used for the verdict: 02's asymptotic interval (a normal interval on ||C_l||^2, Bonferroni over the "
    "candidates), and for both intervals the n_test at which each would exclude delta (0 without one) at this "
    "sample's estimates"
)
def saturated_within_delta(intervals: Mapping[str, Mapping]) -> Outcome:
    """``intervals``: label -> App. G numbers (``lower``, ``upper``, ``t``, ``n_candidates``, ``delta``, ``verdict``)."""
    if not intervals:
        return Outcome(UNDECIDABLE, "no App. G interval recorded")
    shown = "; ".join(f"{k}: {app_g_text(v)}" for k, v in intervals.items())
    verdicts = [v["verdict"] for v in intervals.values()]
    if NOT_SATURATED in verdicts:
        return Outcome(FAILS, shown)
    return Outcome(HOLDS if all(v == SATURATED for v in verdicts) else UNDECIDABLE, shown)


def app_g_n_test_needed(
    t: float | None, n_test: int | None, gamma_hat: float | None, delta: float | None
) -> int | None:
    """About how many test examples Theorem 3's interval needs to exclude ``delta`` (0 when None) at this sample's
    ``gamma_hat`` and traces: ``t = sqrt(sum_l tr_l / (n alpha))`` is ``t sqrt(n_test / n)`` at n examples, below
    ``|gamma_hat - delta|`` from ``n = n_test t^2 / (gamma_hat - delta)^2`` (a plug-in estimate; None if undefined)."""
    if t is None or n_test is None or gamma_hat is None:
        return None
    gap = abs(float(gamma_hat) - (float(delta) if delta else 0.0))
    return math.ceil(float(n_test) * float(t) ** 2 / gap**2) if gap > 0 else None


def app_g_text(r: Mapping) -> str:
    """``Gamma in [lo, hi], t = .., 7 candidates, delta = ..: verdict`` (t and the candidates beside every verdict), then
    02's asymptotic interval where recorded, and the n_test each interval would need (:func:`app_g_needs`)."""
    where = "-" if r.get("lower") is None else f"[{fmt(r['lower'])}, {fmt(r['upper'])}]"
    delta = "none" if r.get("delta") is None else fmt(r["delta"])
    text = f"Gamma in {where}, t = {fmt(r['t'])}, {r['n_candidates']} candidates, delta = {delta}: {r['verdict']}"
    asymptotic = r.get("asymptotic")
    if isinstance(asymptotic, Mapping) and asymptotic.get("lower") is not None:
        text += (
            f"; asymptotic interval (normal, Bonferroni; not used for the verdict) "
            f"[{fmt(asymptotic['lower'])}, {fmt(asymptotic['upper'])}]: {asymptotic.get('verdict', '-')}"
        )
    needs = app_g_needs(r)
    return f"{text}; {needs}" if needs else text


def app_g_needs(r: Mapping) -> str:
    """``n_test to exclude 0: Theorem 3's about 20,380, asymptotic's about 640`` (delta, when one was given).

    02's ``n_test_to_exclude_zero`` / ``_delta`` (and the asymptotic interval's) where recorded; an older record
    without them gets Theorem 3's from :func:`app_g_n_test_needed`. None recorded: "never at these estimates"."""
    with_delta = r.get("delta") is not None
    key = "n_test_to_exclude_delta" if with_delta else "n_test_to_exclude_zero"
    what = f"to leave delta ({r.get(f'{key}_side') or 'either side'})" if with_delta else "to exclude 0"

    def count(n) -> str:
        return "never at these estimates" if n is None else f"about {int(n):,}"

    if key in r:
        theorem = count(r[key])
    else:
        n = app_g_n_test_needed(r.get("t"), r.get("n_test"), r.get("gamma_hat"), r.get("delta"))
        theorem = count(n) if n is not None else "-"
    parts = [f"Theorem 3's {theorem}"]
    asymptotic = r.get("asymptotic")
    if isinstance(asymptotic, Mapping) and key in asymptotic:
        parts.append(f"the asymptotic interval's {count(asymptotic[key])}")
    return f"n_test {what}: {', '.join(parts)}"
