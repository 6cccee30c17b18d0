"""The exponent fits of script 07 (:mod:`common.experiments.weight_scaling`): Cohen et al.'s exponents from its records.

:func:`exponent_rows`: per (family, dataset, stage, tensor, norm) the exponents of
:data:`common.science.scaling.STEPS` that :data:`TENSOR_EXPONENTS` gives the tensor, fitted over the depths with
at least :data:`MIN_BLOCKS` layers (``alpha``, ``beta`` from the cumulative-sum or the max norm, ``nu`` by a joint
fit that carries beta's uncertainty, the slopes of the root sum of squares and of the noise fraction), with Cohen
et al.'s reported values (:data:`PAPER_EXPONENTS`, :mod:`common.presets.paper`) beside them. The columns are those
of the job module's docstring (``exponents-<tag>.csv``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from common.presets.paper import COHEN_CONV_BOUNDED, COHEN_RELU_ALPHA_PLUS_BETA, COHEN_TANH_ALPHA, COHEN_TANH_BETA
from common.science import scaling

MIN_BLOCKS = 3  # a depth enters the fits only with at least 3 layers (blocks) in the sequence

# Which exponents each tensor gets (common.science.scaling.STEPS), and the name a row reports.
TENSOR_EXPONENTS = {
    "A": ("beta", "max_norm_exponent", "nu", "nu_max_norm", "rss_slope", "noise_fraction_slope"),
    "b": ("beta", "max_norm_exponent", "nu", "nu_max_norm", "rss_slope", "noise_fraction_slope"),
    "delta": ("alpha",),  # FC: the scalars delta_k (sweep: conv kernels, the A list of exponents)
    "delta_A": ("beta", "max_norm_exponent"),  # |delta_k| A_k: reported as alpha + beta
}
SLOPE_INTERVAL = "slope"  # the t interval of the statistic's own log-log slope
JOINT_INTERVAL = "joint fit (beta's uncertainty included)"  # nu: common.science.scaling.joint_exponent
RENAMED = {("delta_A", "beta"): "alpha_plus_beta", ("delta_A", "max_norm_exponent"): "alpha_plus_beta_max_norm"}

# Cohen et al.'s reported exponents beside ours (side by side only; common/presets/paper.py).
PAPER_EXPONENTS = {
    ("fc-tanh", "delta", "alpha"): COHEN_TANH_ALPHA,
    ("fc-tanh", "A", "beta"): COHEN_TANH_BETA,
    ("fc-tanh", "A", "max_norm_exponent"): COHEN_TANH_BETA,  # their Figure 2 reads beta off the max norm
    ("fc-relu", "delta_A", "alpha_plus_beta"): COHEN_RELU_ALPHA_PLUS_BETA,
    ("fc-relu", "delta_A", "alpha_plus_beta_max_norm"): COHEN_RELU_ALPHA_PLUS_BETA,
    **{("sweep", t, e): COHEN_CONV_BOUNDED[e] for t in ("A", "delta") for e in COHEN_CONV_BOUNDED},
    **{("sweep", t, "nu_max_norm"): COHEN_CONV_BOUNDED["nu"] for t in ("A", "delta")},
}


def exponent_rows(records: Iterable[dict], level: float = scaling.DEFAULT_LEVEL) -> list[dict]:
    """The exponent table: per (family, dataset, stage, tensor, norm) every exponent of :data:`TENSOR_EXPONENTS`."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["family"], r["dataset"], r["stage"], r["tensor"], r["norm"])].append(r)
    rows = []
    for key, group in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        rows += _group_rows(key, group, level)
    return rows


def _group_rows(key: tuple, group: list[dict], level: float) -> list[dict]:
    """The rows of one (family, dataset, stage, tensor, norm) group: its exponents in the order of
    :data:`TENSOR_EXPONENTS`, each of ``nu``'s after the beta it is read against (:func:`_exponent_row`)."""
    family, dataset, stage, tensor, norm = key
    points = [r for r in group if r["depth"] >= MIN_BLOCKS]
    names = TENSOR_EXPONENTS["A"] if (family == "sweep" or tensor not in TENSOR_EXPONENTS) else TENSOR_EXPONENTS[tensor]
    fitted: dict[str, float] = {}
    rows = []
    for name in names:
        step = scaling.STEPS[name]
        if step.statistic not in group[0]:  # e.g. no trend/noise split in the spectral norm
            continue
        shown = RENAMED.get((tensor, name), name)
        row = {
            "family": family,
            "dataset": dataset,
            "stage": stage,
            "tensor": tensor,
            "norm": norm,
            "exponent": shown,
            "estimator": scaling.ESTIMATORS.get(name, ""),
            "statistic": step.statistic,
            "rule": step.rule,
            "level": level,
            "estimate": math.nan,
            "ci_low": math.nan,
            "ci_high": math.nan,
            "status": "ok",
            "interval": SLOPE_INTERVAL,
            "paper": PAPER_EXPONENTS.get((family, tensor, shown), ""),
        }
        rows.append(_exponent_row(row, name, points, fitted, level))
    return rows


def _exponent_row(row: dict, name: str, points: list[dict], fitted: dict[str, float], level: float) -> dict:
    """``row`` with exponent ``name``'s fit over ``points`` (the depths with at least :data:`MIN_BLOCKS` layers), or
    the status that says why there is none; a fitted estimate is added to ``fitted`` (``nu`` reads its beta there)."""
    step = scaling.STEPS[name]
    depths = [r["depth"] for r in points]
    try:
        fit = scaling.fit_power_law(depths, [r[step.statistic] for r in points], level)
    except scaling.FitUnavailable as exc:
        return {**row, "status": exc.status, "n": len(points), "n_depths": len(set(depths))}
    offset = step.offset
    if isinstance(offset, str):  # "-beta" / "-max_norm_exponent": nu needs this group's beta
        beta_name = offset.lstrip("-")
        if beta_name not in fitted:
            return {**row, **fit.as_record(), "status": "needs beta", "interval": JOINT_INTERVAL}
        beta_step = scaling.STEPS[beta_name]
        _, fixed_low, fixed_high = scaling.exponent(fit, step.sign, -fitted[beta_name])  # beta held fixed
        fit, (estimate, low, high) = scaling.joint_exponent(
            depths,
            [r[step.statistic] for r in points],
            [r[beta_step.statistic] for r in points],
            step,
            beta_step,
            level,
        )
        row |= {
            "statistic": f"{step.statistic} / {beta_step.statistic}",
            "interval": JOINT_INTERVAL,
            "ci_low_beta_fixed": fixed_low,
            "ci_high_beta_fixed": fixed_high,
        }
    else:
        estimate, low, high = scaling.exponent(fit, step.sign, offset)
    fitted[name] = estimate
    return {**row, **fit.as_record(), "level": level, "estimate": estimate, "ci_low": low, "ci_high": high}


__all__ = [
    "JOINT_INTERVAL",
    "MIN_BLOCKS",
    "PAPER_EXPONENTS",
    "RENAMED",
    "SLOPE_INTERVAL",
    "TENSOR_EXPONENTS",
    "exponent_rows",
]
