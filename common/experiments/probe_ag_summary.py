"""Script 02's summary of its records: one row per probed model, the table it prints, and App. G's numbers of a record.

:func:`summary_rows` and :func:`summary_table` are what ``02_probe_ag.py`` writes and prints (every finished run with
the same summary stem, :func:`common.experiments.probe_ag.summary_stem`); :func:`saturation_summary` reads App. G's
numbers from any probe record, those written before the interval existed included (the claims report's rows).
"""

from __future__ import annotations

from collections.abc import Iterable

from common.science.saturation import gamma_interval, saturation_verdict

ROW_KEYS = (
    "depth_n",
    "depth_label",
    "ag_max",
    "ag_max_candidate",
    "ag_max_per_example",
    "ag_max_per_example_candidate",
    "ag_max_blocks",
    "ag_max_blocks_candidate",
    "batch_size",
    "n_batches",
    "split",
)
ROW_TAIL = ["seed", "n_examples", "bn_mode", "mean_loss"]
SATURATION_ROW_KEYS = (
    "verdict",
    "statistic",
    "gamma_hat",
    "argmax",
    "lower",
    "upper",
    "delta",
    "t",
    "alpha",
    "alpha_source",
    "n_candidates",
    "n_cal",
    "n_test",
    "split_seed",
    "split",
    "reused_training_data",
)
ASYMPTOTIC_ROW_KEYS = ["lower", "upper", "verdict", "n_test_to_exclude_zero"]  # as saturation_asymptotic_<key>


def summary_rows(results: Iterable[dict]) -> list[dict]:
    """One row per probed model (depth, seed) for the summary CSV of script 02."""
    rows = []
    for r in sorted(results, key=lambda r: (r["depth_n"], r["seed"])):
        row = {k: r[k] for k in ROW_KEYS}
        if r.get("exact"):
            row["v_max"] = r["v_max"]
            row["v_max_candidate"] = r["v_max_candidate"]
        sat = r["saturation"] or {}  # None: no App. G test at this depth (02's --saturation-depths deepest)
        asym = sat.get("asymptotic") or {}
        row.update({k: r[k] for k in ROW_TAIL})
        row.update({f"saturation_{k}": sat.get(k) for k in SATURATION_ROW_KEYS})
        row["saturation_sources"] = ", ".join(f"{k}={v}" for k, v in (sat.get("sources") or {}).items())
        row["saturation_n_test_to_exclude_zero"] = sat.get("n_test_to_exclude_zero")
        row.update({f"saturation_asymptotic_{k}": asym.get(k) for k in ASYMPTOTIC_ROW_KEYS})
        rows.append(row)
    return rows


def summary_table(rows: list[dict], low_signal: float) -> str:
    """Depth vs AGmax in both normalisations (each marked below the paper's low-signal line) and App. G."""
    exact = any("v_max" in r for r in rows)
    mark = "<" + format(low_signal, ".0e")
    header = (
        f"{'N':>4} {'model':<11} {'seed':>4} {'AGmax':>10} {'argmax':<10} {mark:>6} "
        f"{'AGmax/ex':>10} {'argmax':<10} {mark:>6}"
    )
    header += f" {'V_S,max':>10}" if exact else ""
    header += (
        f" {'max||C_l||':>10} {'Gamma interval':>21} {'t':>9} {'asymptotic interval':>21} {'cands':>5} App. G verdict"
    )
    lines = [header, "-" * len(header)]
    lines += [_table_line(r, exact, low_signal) for r in rows]
    if rows:
        lines += _table_notes(rows, low_signal)
    return "\n".join(lines)


def _table_line(r: dict, exact: bool, low_signal: float) -> str:
    """One probed model's line of :func:`summary_table` (``*`` marks an AGmax below ``low_signal``)."""
    line = (
        f"{r['depth_n']:>4} {'ResNet-' + str(r['depth_label']):<11} {r['seed']:>4} "
        f"{r['ag_max']:>10.3e} {r['ag_max_candidate']:<10} {'*' if r['ag_max'] < low_signal else '':>6} "
        f"{r['ag_max_per_example']:>10.3e} {r['ag_max_per_example_candidate']:<10} "
        f"{'*' if r['ag_max_per_example'] < low_signal else '':>6}"
    )
    line += f" {r['v_max']:>10.3e}" if exact else ""
    if r["saturation_verdict"] is None:  # no App. G test at this depth
        line += f" {'-':>10} {'-':>21} {'-':>9} {'-':>21} {'-':>5} not run (deepest depth only)"
    else:
        interval = _shown(r["saturation_lower"], r["saturation_upper"])
        asymptotic = _shown(r["saturation_asymptotic_lower"], r["saturation_asymptotic_upper"])
        line += (
            f" {r['saturation_gamma_hat']:>10.3e} {interval:>21} {r['saturation_t']:>9.3e} {asymptotic:>21} "
            f"{r['saturation_n_candidates']:>5} {r['saturation_verdict']}"
        )
    return line


def _table_notes(rows: list[dict], low_signal: float) -> list[str]:
    """The notes under :func:`summary_table` (``rows`` not empty): the two AGmax readings, how App. G's interval and
    verdict were made, and the asymptotic interval beside it."""
    tested = [r for r in rows if r["saturation_verdict"] is not None]
    first, b = rows[0], rows[0]["batch_size"]
    sat_first = tested[0] if tested else first
    delta = "none given" if sat_first["saturation_delta"] is None else f"{sat_first['saturation_delta']:g}"
    sources = []  # rows probed with a calibration split, and rows probed at a given t, each described once
    if one := next((r for r in tested if r["saturation_n_cal"]), None):
        sources.append(
            f"t = sqrt(sum_l tr_l / (n_test alpha)), alpha = {one['saturation_alpha']:g}, tr_l from a "
            f"calibration part of {one['saturation_n_cal']} examples, C_l from a test part of n_test = "
            f"{one['saturation_n_test']} (split seed {one['saturation_split_seed']}); coverage is "
            "conditional on the calibration traces"
        )
    if one := next((r for r in tested if not r["saturation_n_cal"]), None):
        sources.append(
            f"t given, no split: C_l and tr_l from all n = {one['saturation_n_test']} examples; implied "
            f"alpha = sum_l tr_l / (n t^2) = {one['saturation_alpha']:.3g} in the first such row"
        )
    source = "; for other rows, ".join(sources)
    return [
        f"* below {low_signal:g}, the paper's low-signal line (common.presets.paper.LOW_SIGNAL_AG), in either reading: AGmax is "
        f"the norm of the batch-mean loss gradient at batch size {b} (x{first['n_batches']} batches, {first['split']} "
        f"split); AGmax/ex is the per-example RMS gradient norm (~ AGmax * sqrt({b})); the readings coincide at batch size 1.",
        f"App. G (Theorem 3): Gamma = max_l ||C_l||, C_l the gradient of the mean loss over independent "
        f"{sat_first['saturation_split']} examples w.r.t. the zero block's V_l; Gamma in [max(0, max||C_l|| - t), max||C_l|| + t] "
        f"with probability >= 1 - alpha; {source}. t grows with the number of candidates (cands). Verdict against delta "
        f"({delta}): 'saturated within delta' when the upper end <= delta, 'not saturated' when the lower end > delta, "
        "else 'undecided'; never 'saturated' without a delta > 0.",
        "asymptotic interval (not Theorem 3's guarantee; not used for the verdict): per candidate a Bonferroni "
        "t interval on ||C_l||^2 from U_l = ||C_l||^2 - tr_l / n_test, with variance 4 C_l^T Sigma_l C_l / n_test + "
        "2 tr(Sigma_l^2) / n_test^2 estimated from the same parts, mapped to Gamma; '-' without a calibration part.",
    ]


def _shown(lower: float | None, upper: float | None) -> str:
    return "-" if lower is None else f"[{lower:.3e}, {upper:.3e}]"


SUMMARY_KEYS = (
    "gamma_hat",
    "lower",
    "upper",
    "t",
    "alpha",
    "n_candidates",
    "delta",
    "verdict",
    "n_cal",
    "n_test",
    "split_seed",
    "statistic_source",
    "split",
    "sources",
    "n_test_to_exclude_zero",
    "n_test_to_exclude_delta",
    "n_test_to_exclude_delta_side",
    "asymptotic",
)


def saturation_summary(sat: dict) -> dict:
    """App. G's numbers of one probe record, also from records written before the interval existed.

    New records carry them (``gamma_hat``, ``lower``, ``upper``, ``t``, ``n_candidates``, ``verdict``,
    ..., since issue 29 also ``split``, ``sources``, the projected ``n_test_to_exclude_*`` and the
    ``asymptotic`` interval's record; None where a record predates them). Older ones (``max_value``, ``t``, ``delta``, ``values``; t from the same sample it judged)
    get the interval ``[max(0, max_value - t), max_value + t]`` and its verdict against their delta,
    with ``statistic_source`` saying where t came from.
    """
    if "verdict" in sat:
        return {k: sat.get(k) for k in SUMMARY_KEYS}
    lower, upper = gamma_interval(sat["max_value"], sat["t"])
    delta = sat.get("delta")  # 0 by default then: the same verdicts as no delta
    return {
        **dict.fromkeys(SUMMARY_KEYS),  # None where an older record has nothing
        "gamma_hat": sat["max_value"],
        "lower": lower,
        "upper": upper,
        "t": sat["t"],
        "alpha": sat.get("error_bound"),
        "n_candidates": len(sat["values"]),
        "delta": delta,
        "verdict": saturation_verdict(lower, upper, delta),
        "n_cal": 0,
        "n_test": sat["n"],
        "statistic_source": "older record: t from the sample it judges",
        "split": sat.get("split"),
    }
