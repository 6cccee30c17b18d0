"""Claim rule about expanding a trained decoder by the criterion (script 10), beyond the paper: the paper never places
new layers by ``V_S,l``, so the rule has no paper value to compare with.

- :func:`expansion_lower_held_out_loss`: K copied zero-output layers placed where the copied layer's exact growth
  value ``V_S,l`` is largest (``criterion``), the new layers alone trained S steps, reach a lower held-out loss than
  the same K layers placed by another policy (LLaMA Pro's even spacing, beside ShortGPT's most important blocks by
  Block Influence, where ``AG_l`` is largest) trained as many steps, paired over runs (one run per (K, seed), every
  policy trained from the same base model in it).

Its statistics are :func:`common.report.rules.grow_by_criterion.placement_lower_train_loss`'s (a paired one-sample Student-t
interval), over runs instead of seeds. Two policies that place the same layers train the same model, so their
held-out losses are equal: where every paired difference is exactly 0 there is no spread to test and nothing to
test for, and the rule says the criterion is not lower (does not hold) rather than "not decidable", which the
report would read as a lack of power that more runs could cure.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from common.report.rules.grow_by_criterion import paired_differences, paired_verdict
from common.report.rules.verdicts import FAILS, UNDECIDABLE, Outcome, rule

RunKey = Hashable  # a run of script 10: (K, seed)


@rule(
    "beyond the paper: per run (one per K and seed; every policy's new layers trained the same S steps from the same "
    "base model), the other policy's held-out loss minus the criterion's, paired over the runs both have; holds when "
    "its 95% Student-t interval over runs is above 0 (the criterion significantly lower); does not hold when it is "
    "below 0, or when every paired difference is exactly 0 (the two policies placed the same layers: the same model, "
    "no difference); else, or fewer than 2 paired runs, not decidable"
)
def expansion_lower_held_out_loss(
    criterion: Mapping[RunKey, float],
    other: Mapping[RunKey, float],
    other_name: str = "other",
    steps: int | None = None,
) -> Outcome:
    """``criterion`` and ``other``: run (K, seed) -> held-out loss after S training steps of that policy's layers."""
    d = paired_differences(criterion, other)
    after = f" after S = {steps} steps" if steps is not None else ""
    if not d:
        return Outcome(UNDECIDABLE, f"no run with both policies' held-out loss{after}")
    mean_c = sum(criterion[r] for r in d) / len(d)
    mean_o = sum(other[r] for r in d) / len(d)
    over = f"{len(d)} run{'s' if len(d) != 1 else ''}"
    shown = f"held-out loss{after}: criterion {mean_c:.4f} vs {other_name} {mean_o:.4f} (means over {over})"
    if len(d) < 2:
        return Outcome(UNDECIDABLE, f"{shown}; one paired run: no spread to test")
    if all(v == 0.0 for v in d.values()):
        return Outcome(FAILS, f"{shown}; {other_name} - criterion exactly 0 at every run: no difference")
    return paired_verdict(d, shown, other_name, "runs")


__all__ = ["RunKey", "expansion_lower_held_out_loss"]
