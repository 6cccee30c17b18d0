"""Identity checks, true by construction and never counted among reproduced claims: V_S,l <= AG_l, a matched
insertion lowers the loss at small alpha."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from common.report.rules.margins import PROJECTION_SLACK
from common.report.rules.verdicts import FAILS, HOLDS, UNDECIDABLE, Outcome, rule


# ----------------------------------------------------------------------------- identity checks (not claims)
@rule(
    f"identity (a theorem): every candidate of every exact run has V_S,l <= AG_l (relative slack {PROJECTION_SLACK:g} "
    "for the float32 rounding of AG_l)"
)
def projection_never_exceeds(growth_value: Sequence[float], ag_norm: Sequence[float]) -> Outcome:
    v, ag = np.asarray(growth_value, float), np.asarray(ag_norm, float)
    if len(v) == 0:
        return Outcome(UNDECIDABLE, "no candidate with V_S,l")
    over = v > ag * (1 + PROJECTION_SLACK) + 1e-300
    ratio = float(np.max(v / np.where(ag > 0, ag, np.inf)))
    return Outcome(
        FAILS if over.any() else HOLDS,
        f"max V_S,l / AG_l = {ratio:.4f} over {len(v)} candidates; {int(over.sum())} above",
    )


@rule(
    "identity (true by construction at small alpha): at the paper's alpha, the measured training-loss change (mean over "
    "seeds) is < 0 at every depth run"
)
def lowers_loss_everywhere(changes: Mapping[int, float]) -> Outcome:
    if not changes:
        return Outcome(UNDECIDABLE, "no depth at the paper's alpha")
    shown = ", ".join(f"ResNet-{d}: {c:+.1e}" for d, c in sorted(changes.items()))
    return Outcome(HOLDS if all(c < 0 for c in changes.values()) else FAILS, shown)
