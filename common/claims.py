"""The rules that turn run records into verdicts on the paper's claims (``figures/claims.md``).

Each rule is a pure function of plain numbers (depths, scores, losses, per-seed values or their
summaries; no files, no runs) that returns an :class:`Outcome`: a verdict and the reproduced value
in words. Its rule text, the sentence printed in the claims report, is attached by :func:`rule`
and is ``fn.rule``. The verdicts:

- ``holds``: the records show the claim at the 5% level (a 95% interval inside the claim's region);
- ``does not hold``: the records show the claim's negation at the same level (the interval outside it);
- ``not decidable``: neither, or the records cannot decide the rule (one seed where a seed spread
  is needed, too few runs for a test, a constant input). Failing to reject never gives "holds";
- ``not decidable at this design``: the same, where the rule cannot reach :data:`POWER_TARGET` at the
  records' own design (depths, seeds, sample sizes), measured by simulation in the claim's own world
  (:mod:`common.claim_rates`); the report says how many runs, seeds or test examples it
  would need. Set by the report builder, never by a rule;
- ``not comparable``: the paper's value cannot be compared with the records as it stands (the 5e-3
  line: the paper gives no normalisation, :data:`NOT_COMPARABLE_WHY`). Set by the report builder;
- ``not run``: no records (set by the report builder, never by a rule).

:data:`RULES` are the paper's claims, the two rules about growth by the criterion (script 09) and the one about
expanding a trained decoder by it (script 10) that go beyond it (:mod:`common.claim_rules.grow`,
:mod:`common.claim_rules.expand`: the paper never grows or expands by ``V_S,l``, so they have no paper value); their
error rates are measured by simulation
(:mod:`common.claim_rates`, ``tests/report/test_claim_rates.py``, ``docs/claim-rules.md``).
:data:`IDENTITY_CHECKS` are identities that hold by construction (``V_S,l <= AG_l``; a matched
insertion lowers the loss at small alpha): the report shows them apart and never counts them among
reproduced claims.

This module is the rules' front, the one place callers import a rule from; the rules live in
:mod:`common.claim_rules` (one module per family: depth, growth, grow, expand, matched, exponents, App. G,
identities, their statistics and verdict words). Every margin and threshold is fixed in :mod:`common.claim_rules.margins`, each with its reason, before
any mini or paper record was looked at; nothing is tuned to make a claim hold.

Statistics:

- Intervals are Student-t intervals ``mean ± t(0.975, df) se`` (:class:`Estimate`); a one-sided
  bound at 2.5% is one end of it. A claim over several parts (every depth, every architecture) holds
  when every part's interval is inside the claim's region (an intersection-union test: its level is
  the parts' level, no correction needed); the negation ("some part is outside") is a union, so
  its bounds are Bonferroni-corrected over the parts (the selection of the worst part).
- Seed spreads are pooled: the within-group sample variances (groups: depths, architectures)
  weighted by their degrees of freedom (:func:`pooled_spread`), which assumes one noise level
  across the groups of one claim.
- Spearman correlations are :func:`scipy.stats.spearmanr`'s (Pearson's r of average ranks); their
  two-sided p-values are exact (every pairing, :func:`scipy.stats.permutation_test`) up to 8 points,
  and spearmanr's t approximation with n - 2 degrees of freedom above (:func:`spearman`).
- :func:`partial_spearman` is the Spearman correlation of x and y given z: each variable is
  rank-transformed (average ranks for ties), the ranks of x and of y are each regressed on the
  ranks of z by least squares with an intercept, and the Pearson correlation of the two residual
  vectors is the partial correlation r. Its p-value is two-sided from Student's t with n - 3
  degrees of freedom, ``t = r sqrt((n - 3) / (1 - r^2))``. Its interval is Fisher's:
  ``atanh(r) ± 1.96 sqrt(1.06 / (n - 4))`` (the 1.06 of Fieller, Hartley and Pearson 1957 for a
  rank correlation, n - 4 for n points and one controlling variable).

The rules live in :mod:`common.claim_rules`, one module per family (``depth``, ``growth``, ``matched``,
``exponents``, ``app_g``, ``identities``) beside their ``verdicts``, ``margins`` and ``statistics``; this module
gathers them under one name, ``common.claims``, the one the report, the simulations and the tests read.
"""

from __future__ import annotations

from common.claim_rules.app_g import app_g_n_test_needed, app_g_needs, app_g_text, saturated_within_delta
from common.claim_rules.depth import (
    explained_by_training_loss,
    falls_with_depth,
    plateau_blocks,
    plateau_within_margin,
    stays_below_line,
)
from common.claim_rules.expand import expansion_lower_held_out_loss
from common.claim_rules.exponents import exponent_within_tolerance, sign_within_tolerance
from common.claim_rules.grow import STOP_TOLERANCE, placement_lower_train_loss, stop_within_depths
from common.claim_rules.growth import growth_lower_mean, growth_wins_everywhere, paper_direction, paper_size
from common.claim_rules.identities import lowers_loss_everywhere, projection_never_exceeds
from common.claim_rules.margins import (
    EXACT_MAX_N,
    EXPLAINED_MARGIN,
    EXPONENT_TOLERANCE,
    FALSE_HOLDS_LIMIT,
    LINE_FACTOR,
    PLATEAU_BLOCKS,
    PLATEAU_MARGIN,
    POWER_TARGET,
    PRECISION_UNITS,
    PROJECTION_SLACK,
    SIGNIFICANCE,
    SIZE_FACTOR,
    SPEARMAN_Z_VARIANCE,
    TAIL,
)
from common.claim_rules.matched import (
    BELOW_FLOOR,
    WRONG_SIGN,
    LogDrops,
    drop_not_increasing,
    log_band,
    log_drops,
    matches_paper_precision,
    precision_unit,
)
from common.claim_rules.statistics import (
    DepthGroups,
    Estimate,
    depth_groups,
    first_below,
    group_spread,
    over_seeds,
    partial_half_width,
    partial_interval,
    partial_min_runs,
    partial_spearman,
    pooled_estimates,
    pooled_spread,
    ranks,
    region_verdict,
    spearman,
    t_quantile,
    t_two_sided,
)
from common.claim_rules.verdicts import (
    FAILS,
    HOLDS,
    NOT_COMPARABLE,
    NOT_COMPARABLE_WHY,
    NOT_RUN,
    UNDECIDABLE,
    UNDECIDABLE_AT_DESIGN,
    VERDICTS,
    Outcome,
    clauses,
    fmt,
    rule,
    sentences,
    verdict_kind,
)

RULES = (
    falls_with_depth,
    stays_below_line,
    plateau_within_margin,
    explained_by_training_loss,
    growth_lower_mean,
    growth_wins_everywhere,
    paper_direction,
    paper_size,
    drop_not_increasing,
    matches_paper_precision,
    exponent_within_tolerance,
    sign_within_tolerance,
    placement_lower_train_loss,
    stop_within_depths,
    expansion_lower_held_out_loss,
)
IDENTITY_CHECKS = (projection_never_exceeds, lowers_loss_everywhere)

__all__ = [
    "BELOW_FLOOR",
    "DepthGroups",
    "EXACT_MAX_N",
    "EXPLAINED_MARGIN",
    "EXPONENT_TOLERANCE",
    "Estimate",
    "FAILS",
    "FALSE_HOLDS_LIMIT",
    "HOLDS",
    "IDENTITY_CHECKS",
    "LINE_FACTOR",
    "LogDrops",
    "NOT_COMPARABLE",
    "NOT_COMPARABLE_WHY",
    "NOT_RUN",
    "Outcome",
    "PLATEAU_BLOCKS",
    "PLATEAU_MARGIN",
    "POWER_TARGET",
    "PRECISION_UNITS",
    "PROJECTION_SLACK",
    "RULES",
    "SIGNIFICANCE",
    "SIZE_FACTOR",
    "SPEARMAN_Z_VARIANCE",
    "STOP_TOLERANCE",
    "TAIL",
    "UNDECIDABLE",
    "UNDECIDABLE_AT_DESIGN",
    "VERDICTS",
    "WRONG_SIGN",
    "app_g_n_test_needed",
    "app_g_needs",
    "app_g_text",
    "clauses",
    "depth_groups",
    "drop_not_increasing",
    "expansion_lower_held_out_loss",
    "explained_by_training_loss",
    "exponent_within_tolerance",
    "falls_with_depth",
    "first_below",
    "fmt",
    "group_spread",
    "growth_lower_mean",
    "growth_wins_everywhere",
    "log_band",
    "log_drops",
    "lowers_loss_everywhere",
    "matches_paper_precision",
    "over_seeds",
    "paper_direction",
    "paper_size",
    "partial_half_width",
    "partial_interval",
    "partial_min_runs",
    "partial_spearman",
    "plateau_blocks",
    "placement_lower_train_loss",
    "plateau_within_margin",
    "pooled_estimates",
    "pooled_spread",
    "precision_unit",
    "projection_never_exceeds",
    "ranks",
    "region_verdict",
    "rule",
    "saturated_within_delta",
    "sentences",
    "sign_within_tolerance",
    "spearman",
    "stays_below_line",
    "stop_within_depths",
    "t_quantile",
    "t_two_sided",
    "verdict_kind",
]
