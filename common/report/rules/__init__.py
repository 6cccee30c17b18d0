"""The rules that turn run records into verdicts on the paper's claims (``figures/claims.md``).

Each rule is a pure function of plain numbers (depths, scores, losses, per-seed values or their
summaries; no files, no runs) that returns an :class:`common.report.rules.verdicts.Outcome`: a verdict and the reproduced value
in words. Its rule text, the sentence printed in the claims report, is attached by :func:`common.report.rules.verdicts.rule`
and is ``fn.rule``. The verdicts:

- ``holds``: the records show the claim at the 5% level (a 95% interval inside the claim's region);
- ``does not hold``: the records show the claim's negation at the same level (the interval outside it);
- ``not decidable``: neither, or the records cannot decide the rule (one seed where a seed spread
  is needed, too few runs for a test, a constant input). Failing to reject never gives "holds";
- ``not decidable at this design``: the same, where the rule cannot reach :data:`common.report.rules.margins.POWER_TARGET` at the
  records' own design (depths, seeds, sample sizes), measured by simulation in the claim's own world
  (:mod:`common.power.claim_rates`); the report says how many runs, seeds or test examples it
  would need. Set by the report builder, never by a rule;
- ``not comparable``: the paper's value cannot be compared with the records as it stands (the 5e-3
  line: the paper gives no normalisation, :data:`common.report.rules.verdicts.NOT_COMPARABLE_WHY`). Set by the report builder;
- ``not run``: no records (set by the report builder, never by a rule).

The claim rules are the paper's claims, the two rules about growth by the criterion (script 09) and the one about
expanding a trained decoder by it (script 10) that go beyond it (:mod:`common.report.rules.grow_by_criterion`,
:mod:`common.report.rules.expand_decoder`: the paper never grows or expands by ``V_S,l``, so they have no paper value); their
error rates are measured by simulation
(:mod:`common.power.claim_rates`, ``tests/power/test_claim_rates.py``, ``docs/claim-rules.md``).
The identity checks (:mod:`common.report.rules.identities`) are identities that hold by construction (``V_S,l <= AG_l``; a matched
insertion lowers the loss at small alpha): the report shows them apart and never counts them among
reproduced claims.

Every margin and threshold is fixed in :mod:`common.report.rules.margins`, each with its reason, before
any mini or paper record was looked at; nothing is tuned to make a claim hold.

Statistics:

- Intervals are Student-t intervals ``mean ± t(0.975, df) se`` (:class:`common.report.rules.statistics.Estimate`); a one-sided
  bound at 2.5% is one end of it. A claim over several parts (every depth, every architecture) holds
  when every part's interval is inside the claim's region (an intersection-union test: its level is
  the parts' level, no correction needed); the negation ("some part is outside") is a union, so
  its bounds are Bonferroni-corrected over the parts (the selection of the worst part).
- Seed spreads are pooled: the within-group sample variances (groups: depths, architectures)
  weighted by their degrees of freedom (:func:`common.report.rules.statistics.pooled_spread`), which assumes one noise level
  across the groups of one claim.
- Spearman correlations are :func:`scipy.stats.spearmanr`'s (Pearson's r of average ranks); their
  two-sided p-values are exact (every pairing, :func:`scipy.stats.permutation_test`) up to 8 points,
  and spearmanr's t approximation with n - 2 degrees of freedom above (:func:`common.report.rules.statistics.spearman`).
- :func:`common.report.rules.statistics.partial_spearman` is the Spearman correlation of x and y given z: each variable is
  rank-transformed (average ranks for ties), the ranks of x and of y are each regressed on the
  ranks of z by least squares with an intercept, and the Pearson correlation of the two residual
  vectors is the partial correlation r. Its p-value is two-sided from Student's t with n - 3
  degrees of freedom, ``t = r sqrt((n - 3) / (1 - r^2))``. Its interval is Fisher's:
  ``atanh(r) ± 1.96 sqrt(1.06 / (n - 4))`` (the 1.06 of Fieller, Hartley and Pearson 1957 for a
  rank correlation, n - 4 for n points and one controlling variable).

One module per family (``depth``, ``growth_vs_scratch``, ``matched_insertion``, ``weight_scaling``,
``grow_by_criterion``, ``expand_decoder``, ``app_g``, ``identities``) beside their ``verdicts``, ``margins`` and
``statistics``: a new rule goes in its experiment's module, and callers import it from there. Infrastructure: pure
functions of numbers, importing nothing of the experiments (docs/design.md, section "Import layering").
"""
