"""The claim rules' margins and thresholds, each fixed with its reason in issue 21 before any mini or paper record
was looked at (nothing is tuned to make a claim hold), and issue 21's requirements on the rules' error rates."""

from __future__ import annotations

# ----------------------------------------------------------------------------- margins and thresholds (fixed in issue 21)
SIGNIFICANCE = 0.05  # two-sided level of every test: each one-sided bound at 2.5% (a 95% interval), the convention
TAIL = SIGNIFICANCE / 2  # one side of it
EXPONENT_TOLERANCE = 0.1  # "exponent within ±0.1 of the paper" (issue 16)
# Relative slack of V_S,l <= AG_l. The probe takes AG_l from per-example gradient norms computed in the gradient's dtype
# (float32 for a float32 model: cascade sums, relative error up to ~log2(elements) * 2^-24, about 1e-6), V_S,l from the
# same gradients in float64; where the candidate is realizable (V_S,l = AG_l exactly, e.g. the head's input) rounding
# alone puts V_S,l a few 1e-8 above AG_l. A projection that adds norm (a bug) shows at the percent level.
PROJECTION_SLACK = 1e-5
EXACT_MAX_N = 8  # up to 8 points (8! = 40,320 pairings) Spearman's p-value is exact, by permutation
LINE_FACTOR = 1.5  # the paper's "approximately 5e-3": a depth is above the line only past 1.5x it (issue 21's example)
PLATEAU_MARGIN = (
    0.02  # "little or no improvement": a gain under 2% of the test loss, a sixth of the 11.8% the paper calls a gain
)
PLATEAU_BLOCKS = 4  # a gain is "systematic" when a quarter of the depths from N* on beats the first quarter
EXPLAINED_MARGIN = (
    0.3  # depth "adds nothing" beyond the training loss: |partial rho| < 0.3 (Cohen's medium r, 9% of rank variance)
)
SPEARMAN_Z_VARIANCE = 1.06  # var(atanh r_s) ~ 1.06 / (n - 3) (Fieller, Hartley and Pearson 1957)
SIZE_FACTOR = (
    2.0  # "the paper's size": within a factor of 2 either way (issue 21's example: <= 1/2x or >= 2x is another size)
)
PRECISION_UNITS = 0.5  # "at the paper's precision": within half a unit of the leading digit (one significant digit)

# Requirements of issue 21 on every rule's measured error rates (common.power.claim_rates, tests/power/test_claim_rates.py).
POWER_TARGET = 0.8  # P(holds | claim true) at noise 0.5x the effect
FALSE_HOLDS_LIMIT = 0.05  # P(holds | claim false, least favourable point) at noise 0.5x and 1x
