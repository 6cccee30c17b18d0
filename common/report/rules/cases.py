"""The simulated worlds of every claim rule (:data:`CASES`): for each rule a "claim true" world and a "claim false"
world at its least favourable point, simulated at a :class:`~common.report.rules.design.Design` through the rule
itself (:mod:`common.power.claim_rates` measures their rates and powers; docs/claim-rules.md lists them)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from common.presets import paper
from common.report.rules import (
    depth,
    expand_decoder,
    grow_by_criterion,
    growth_vs_scratch,
    margins,
    matched_insertion,
    statistics,
    verdicts,
    weight_scaling,
)
from common.report.rules.design import Design
from common.report.rules.expand_decoder_cases import sim_expansion
from common.report.rules.grow_by_criterion_cases import STOP_EFFECT, sim_placement, sim_regime, sim_stop
from common.science.scaling import DEFAULT_LEVEL

LINE = paper.LOW_SIGNAL_AG


Simulate = Callable[[Design, np.random.Generator, int, float, str], list[str]]


@dataclass(frozen=True)
class Case:
    """One simulation of one rule: its worlds in words and the function that simulates them."""

    rule: Callable[..., verdicts.Outcome]
    label: str  # which use of the rule (e.g. "mean over the architectures")
    kind: str  # "statistical" or "fixed tolerance"
    effect: str  # the noise unit
    true_world: str
    false_world: str
    simulate: Simulate  # (design, rng, reps, k, world) -> the verdicts of reps simulated record sets
    false_worlds: tuple[str, ...] = ("false",)
    experiment: str = "sweep"  # the part of the design it reads (EXPERIMENTS)

    @property
    def name(self) -> str:
        return f"{self.rule.__name__} ({self.label})" if self.label else self.rule.__name__


def _verdicts(outcomes) -> list[str]:
    return [o.verdict for o in outcomes]


# --- the ResNet sweep
def _sweep(design: Design) -> tuple[np.ndarray, np.ndarray]:
    """Every run's depth (each depth ``sweep_seeds`` times) and its place on the grid, 0 at the first depth, 1 at the last."""
    seeds = np.broadcast_to(np.asarray(design.sweep_seeds), (len(design.sweep_depths),))
    depths = np.repeat(np.asarray(design.sweep_depths, float), seeds)
    span = max(depths.max() - depths.min(), 1.0)
    return depths, (depths - depths.min()) / span


def low_signal_octaves(x: np.ndarray) -> np.ndarray:
    """The low-signal world: log2(AGmax / line) from +2 at the first depth to 0 a quarter in, -1 at 3/8, flat after."""
    return np.maximum(2.0 - 8.0 * x, -1.0)


def sim_falls(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    depths, x = _sweep(design)
    effect = math.log(2.0)  # AGmax halves over the grid
    mean = math.log(LINE) - (effect * x if world == "true" else 0.0 * x)
    logs = mean + rng.normal(0.0, k * effect, (reps, len(depths)))
    return _verdicts(depth.falls_with_depth(depths, np.exp(row)) for row in logs)


def sim_stays(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    depths, x = _sweep(design)
    mean = math.log(LINE) + math.log(2.0) * low_signal_octaves(x)
    if world == "false":  # one depth three quarters in (on the plateau) at the factor times the line
        mean = np.where(depths == depths[np.argmin(abs(x - 0.75))], math.log(margins.LINE_FACTOR * LINE), mean)
    effect = math.log(margins.LINE_FACTOR)
    logs = mean + rng.normal(0.0, k * effect, (reps, len(depths)))
    return _verdicts(depth.stays_below_line(depths, np.exp(row), LINE) for row in logs)


def sim_plateau(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    depths, x = _sweep(design)
    star = depths[x >= 0.25].min()  # N*, made certain: AGmax 10x above the line before it, 10x below from it
    ag = np.where(depths < star, 10 * LINE, LINE / 10)
    after = np.unique(depths[depths >= star])
    level = 1.0
    mean = np.where(depths < star, level + (star - depths) / max(star, 1.0), level)
    if world == "false":  # still falling after N*, so that the last block's mean is the margin below the first's
        blocks = depth.plateau_blocks(list(after))
        c0, c1 = np.mean(blocks[0]) - star, np.mean(blocks[-1]) - star
        slope = margins.PLATEAU_MARGIN * level / ((c1 - c0) + margins.PLATEAU_MARGIN * c0)
        mean = np.where(depths >= star, level - slope * (depths - star), mean)
    losses = mean + rng.normal(0.0, k * margins.PLATEAU_MARGIN * level, (reps, len(depths)))
    return _verdicts(depth.plateau_within_margin(depths, ag, row, LINE) for row in losses)


def spearman_to_pearson(rho: float) -> float:
    """The Pearson correlation of a bivariate normal whose Spearman correlation is ``rho``: 2 sin(pi rho / 6)."""
    return 2.0 * math.sin(math.pi * rho / 6.0)


def sim_explained(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    depths, _ = _sweep(design)
    z = (depths - depths.mean()) / depths.std()
    shape = (reps, len(depths))
    log_train = -z + 0.5 * rng.normal(size=shape)  # the training loss falls with depth, not exactly
    var_t, resid_z = 1.25, 1.0 - 1.0 / 1.25  # var(log train) and var(z | log train)
    noise = k * math.sqrt(var_t)  # effect: log AGmax's change over one sd of the training loss
    r = spearman_to_pearson(margins.EXPLAINED_MARGIN)
    c = (
        0.0 if world == "true" else r * noise / math.sqrt(resid_z * (1.0 - r * r))
    )  # partial corr(log AG, z | log train) = r
    log_ag = log_train + c * z + noise * rng.normal(size=shape)
    return _verdicts(
        depth.explained_by_training_loss(depths, np.exp(a), np.exp(t)) for a, t in zip(log_ag, log_train, strict=True)
    )


# --- growth vs scratch: paired differences (scratch - growth at one seed) per architecture and seed
def _reductions(design: Design, rng: np.random.Generator, reps: int, effects: np.ndarray, noise: float) -> np.ndarray:
    shape = (reps, design.growth_architectures, design.growth_seeds)
    return effects[None, :, None] + noise * rng.normal(size=shape)


def _sample_std(x: np.ndarray, axis: int) -> np.ndarray:
    """The sample std (ddof 1) along ``axis``; NaN for a single seed (no spread), without numpy's warning."""
    if x.shape[axis] < 2:
        return np.full(np.delete(x.shape, axis), np.nan)
    return x.std(axis=axis, ddof=1)


def _summaries(d: np.ndarray) -> list[dict[str, tuple[float, float, int]]]:
    means, stds, n = d.mean(axis=2), _sample_std(d, axis=2), d.shape[2]
    return [
        {f"a{a}": (float(m[a]), float(s[a]), n) for a in range(d.shape[1])} for m, s in zip(means, stds, strict=True)
    ]


def _over_seeds(d: np.ndarray) -> list[statistics.Estimate | None]:
    per_seed = d.mean(axis=1)  # the architectures' mean at each seed (03's mean row)
    means, stds, n = per_seed.mean(axis=1), _sample_std(per_seed, axis=1), per_seed.shape[1]
    return [statistics.over_seeds(m, s, n) for m, s in zip(means, stds, strict=True)]


def _effects(design: Design, value: float, first: float | None = None) -> np.ndarray:
    effects = np.full(design.growth_architectures, value)
    if first is not None:
        effects[0] = first
    return effects


def sim_growth_mean(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    d = _reductions(design, rng, reps, _effects(design, 1.0 if world == "true" else 0.0), k)
    return _verdicts(growth_vs_scratch.growth_lower_mean(1.0 - (e.mean if e else 0.0), 1.0, e) for e in _over_seeds(d))


def sim_everywhere(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    d = _reductions(design, rng, reps, _effects(design, 1.0, None if world == "true" else 0.0), k)
    named = design.growth_architectures if design.growth_required is None else design.growth_required
    required = [f"a{a}" for a in range(named)]
    return _verdicts(growth_vs_scratch.growth_wins_everywhere(s, required) for s in _summaries(d))


def _pooled_first(d: np.ndarray) -> list[statistics.Estimate | None]:
    return [(statistics.pooled_estimates(s) or {}).get("a0") for s in _summaries(d)]


def sim_direction(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    d = _reductions(design, rng, reps, _effects(design, 1.0, None if world == "true" else 0.0), k)
    return _verdicts(growth_vs_scratch.paper_direction(e, 1.0) for e in _pooled_first(d))


SIZE_WORLDS = {"true": 1.0, "half": 1.0 / margins.SIZE_FACTOR, "double": margins.SIZE_FACTOR}  # effect / the paper's


def sim_size_mean(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    value = paper.GROWTH_TEST_RELATIVE_REDUCTION
    noise = k * value * (1.0 - 1.0 / margins.SIZE_FACTOR)  # effect: the paper's value minus the nearer boundary
    d = _reductions(design, rng, reps, _effects(design, value * SIZE_WORLDS[world]), noise)
    return _verdicts(growth_vs_scratch.paper_size(e, value) for e in _over_seeds(d))


def sim_size_one(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    value = paper.GROWTH_TEST_ABS_REDUCTION_RANGE["ResNet-12"]
    noise = k * value * (1.0 - 1.0 / margins.SIZE_FACTOR)
    d = _reductions(design, rng, reps, _effects(design, value, value * SIZE_WORLDS[world]), noise)
    return _verdicts(growth_vs_scratch.paper_size(e, value) for e in _pooled_first(d))


# --- matched insertion: per-seed drops per depth, noise on the log scale (the rules pool log drops)
def paper_drops(depths: Sequence[int]) -> np.ndarray:
    """The true world's drops: the paper's H.1 values, interpolated linearly in depth (constant beyond its ends)."""
    known = sorted(paper.MATCHED_INSERTION_REDUCTION.items())
    return np.interp(np.asarray(depths, float), [d for d, _ in known], [v for _, v in known])


def _matched(
    design: Design, rng: np.random.Generator, reps: int, drops: np.ndarray, noise: float
) -> list[dict[int, np.ndarray]]:
    """``reps`` record sets of per-seed loss changes ``-drop exp(noise z)``: log-normal around each depth's drop."""
    seeds = np.broadcast_to(np.asarray(design.matched_seeds), (len(drops),))
    sample = np.log(drops)[None, :, None] + noise * rng.normal(size=(reps, len(drops), int(seeds.max())))
    return [{d: -np.exp(row[i, : seeds[i]]) for i, d in enumerate(design.matched_depths)} for row in sample]


def sim_not_increasing(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    drops = paper_drops(design.matched_depths)
    tolerance = margins.PRECISION_UNITS * matched_insertion.precision_unit(drops[-2])
    effect = math.log1p(tolerance / drops[-2])  # the tolerance on the log scale, at the deepest pair
    if world == "false":  # the deepest depth's drop exceeds the one before by the paper's precision
        drops = drops.copy()
        drops[-1] = drops[-2] + tolerance
    return _verdicts(matched_insertion.drop_not_increasing(c) for c in _matched(design, rng, reps, drops, k * effect))


def sim_precision(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    reported = paper.MATCHED_INSERTION_REDUCTION
    drops = np.array(
        [reported.get(d, v) for d, v in zip(design.matched_depths, paper_drops(design.matched_depths), strict=True)]
    )
    first = next(i for i, d in enumerate(design.matched_depths) if d in reported)
    half = margins.PRECISION_UNITS * matched_insertion.precision_unit(drops[first])
    effect = math.log1p(half / drops[first])  # the band's nearer (upper) side on the log scale
    if world == "false":  # the first depth the paper reports, off by exactly the paper's precision
        drops = drops.copy()
        drops[first] += half
    return _verdicts(
        matched_insertion.matches_paper_precision(c, reported) for c in _matched(design, rng, reps, drops, k * effect)
    )


# --- weight scaling: log-log fits over the depths
def power_law_fits(depths: Sequence[float], log_values: np.ndarray, level: float = DEFAULT_LEVEL) -> np.ndarray:
    """Rows ``(slope, ci_low, ci_high)`` of :func:`common.science.scaling.fit_power_law` for each row of ``log_values``, at once
    (the same least squares and Student-t interval; tests/power/test_claim_rates.py checks them against it)."""
    x = np.log(np.asarray(depths, float))
    cx = x - x.mean()
    sxx = cx @ cx
    slope = (log_values - log_values.mean(axis=1, keepdims=True)) @ cx / sxx
    resid = log_values - log_values.mean(axis=1, keepdims=True) - slope[:, None] * cx
    stderr = np.sqrt((resid * resid).sum(axis=1) / (len(x) - 2) / sxx)
    half = statistics.t_quantile(0.5 + level / 2, len(x) - 2) * stderr
    return np.column_stack([slope, slope - half, slope + half])


def _fits(
    design: Design, rng: np.random.Generator, reps: int, slopes: Sequence[float], k: float
) -> list[dict[str, tuple[float, float, float]]]:
    """``reps`` sets of the design's fits (one per ``Design.fits``), the j-th with true exponent ``slopes[j]``."""
    per_fit = []
    for xs, slope in zip(design.fits(), slopes, strict=True):
        x = np.log(np.asarray(xs, float))
        noise = k * margins.EXPONENT_TOLERANCE * (x.max() - x.min())  # effect: the tolerance's change over log L
        ys = slope * x + noise * rng.normal(size=(reps, len(x)))
        per_fit.append(power_law_fits(xs, ys).tolist())
    return [{f"fit {j}": tuple(rows[i]) for j, rows in enumerate(per_fit)} for i in range(reps)]


EXPONENT_WORLDS = {"true": 0.0, "above": margins.EXPONENT_TOLERANCE, "below": -margins.EXPONENT_TOLERANCE}


def _slopes(design: Design, value: float, first_off: float) -> list[float]:
    """Every fit at ``value``, the first one ``first_off`` from it (a false world moves one part only)."""
    return [value + (first_off if j == 0 else 0.0) for j in range(len(design.fits()))]


def sim_exponent(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    value = paper.COHEN_TANH_BETA
    fits = _fits(design, rng, reps, _slopes(design, value, EXPONENT_WORLDS[world]), k)
    return _verdicts(weight_scaling.exponent_within_tolerance(f, value) for f in fits)


def sim_sign(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    fits = _fits(design, rng, reps, _slopes(design, 0.0, 0.0 if world == "true" else margins.EXPONENT_TOLERANCE), k)
    return _verdicts(weight_scaling.sign_within_tolerance(f, "<= 0") for f in fits)


STAT = "statistical"
CASES: tuple[Case, ...] = (
    Case(
        depth.falls_with_depth,
        "",
        STAT,
        "log AGmax's fall over the grid (log 2)",
        "AGmax halves over the depth grid (log-linear in N)",
        "AGmax independent of N",
        sim_falls,
    ),
    Case(
        depth.stays_below_line,
        "",
        STAT,
        f"log {margins.LINE_FACTOR:g} (the line to {margins.LINE_FACTOR:g}x the line)",
        "AGmax from 4x the line to the line over the first quarter of the grid, half the line from 3/8 on (the low-signal world)",
        f"as true, with the depth 3/4 into the grid at {margins.LINE_FACTOR:g}x the line",
        sim_stays,
    ),
    Case(
        depth.plateau_within_margin,
        "",
        STAT,
        f"the margin ({margins.PLATEAU_MARGIN:.0%} of the test loss)",
        "N* a quarter into the grid; the test loss exactly flat from N* on",
        "the test loss still falling linearly after N*, the last quarter's mean the margin below the first quarter's",
        sim_plateau,
    ),
    Case(
        depth.explained_by_training_loss,
        "",
        STAT,
        "log AGmax's change over one sd of the log training loss",
        "log train loss = -z + noise (z: standardised N); log AGmax = log train loss + noise: depth acts through the loss",
        f"as true plus a depth term giving a partial Spearman rho of {margins.EXPLAINED_MARGIN:g} (latent Pearson "
        f"{spearman_to_pearson(margins.EXPLAINED_MARGIN):.3f})",
        sim_explained,
    ),
    Case(
        growth_vs_scratch.growth_lower_mean,
        "mean over the architectures",
        STAT,
        "the reduction",
        "every architecture's reduction (scratch - growth) equal to the effect",
        "no reduction (effect 0)",
        sim_growth_mean,
        experiment="growth",
    ),
    Case(
        growth_vs_scratch.growth_wins_everywhere,
        "every architecture",
        STAT,
        "the reduction",
        "every architecture's reduction equal to the effect",
        "one architecture's reduction 0, the others the effect",
        sim_everywhere,
        experiment="growth",
    ),
    Case(
        growth_vs_scratch.paper_direction,
        "one architecture, spread pooled",
        STAT,
        "the reduction",
        "every architecture's reduction equal to the effect",
        "that architecture's reduction 0",
        sim_direction,
        experiment="growth",
    ),
    Case(
        growth_vs_scratch.paper_size,
        "relative reduction of the means",
        STAT,
        "half the paper's value (its distance to the nearer bound)",
        f"every architecture's reduction at the paper's {paper.GROWTH_TEST_RELATIVE_REDUCTION:.1%}",
        f"every reduction at 1/{margins.SIZE_FACTOR:g}x or {margins.SIZE_FACTOR:g}x the paper's",
        sim_size_mean,
        ("half", "double"),
        experiment="growth",
    ),
    Case(
        growth_vs_scratch.paper_size,
        "one architecture, spread pooled",
        STAT,
        "half the paper's value",
        "every architecture's reduction at the paper's 0.0242 (ResNet-12)",
        f"that architecture's at 1/{margins.SIZE_FACTOR:g}x or {margins.SIZE_FACTOR:g}x it",
        sim_size_one,
        ("half", "double"),
        experiment="growth",
    ),
    Case(
        matched_insertion.drop_not_increasing,
        "",
        STAT,
        "the tolerance on the log scale, log(1 + tolerance / drop) (half a unit of the drop's leading digit)",
        "the paper's drops (7, 4, 2, 2 x 1e-4 at ResNet-8, -14, -20, -34; interpolated at other depths), log-normal "
        "noise",
        "as true, the deepest drop above the one before by the tolerance",
        sim_not_increasing,
        experiment="matched",
    ),
    Case(
        matched_insertion.matches_paper_precision,
        "",
        STAT,
        "the band's nearer side on the log scale, log(1 + u / 2v) (half a unit u of the paper's digit)",
        "the paper's drops, log-normal noise",
        "as true, ResNet-8's drop off by the band",
        sim_precision,
        experiment="matched",
    ),
    Case(
        weight_scaling.exponent_within_tolerance,
        "",
        STAT,
        f"±{margins.EXPONENT_TOLERANCE:g} over the range of log L",
        f"log statistic linear in log L with the paper's exponent ({paper.COHEN_TANH_BETA:g})",
        f"the exponent {margins.EXPONENT_TOLERANCE:g} above or below it",
        sim_exponent,
        ("above", "below"),
        experiment="scaling",
    ),
    Case(
        weight_scaling.sign_within_tolerance,
        "'<= 0'",
        STAT,
        f"{margins.EXPONENT_TOLERANCE:g} over the range of log L",
        "exponent 0 (bounded)",
        f"exponent +{margins.EXPONENT_TOLERANCE:g}",
        sim_sign,
        experiment="scaling",
    ),
    Case(
        grow_by_criterion.placement_lower_train_loss,
        "paired over seeds",
        STAT,
        "the difference (other - criterion training loss at round K)",
        "every seed's difference equal to the effect (the criterion lower)",
        "no difference (effect 0)",
        sim_placement,
        experiment="grow",
    ),
    Case(
        grow_by_criterion.stop_within_depths,
        "",
        STAT,
        f"{STOP_EFFECT} depths (from the stop at N* to the nearest whole depth outside ±{grow_by_criterion.STOP_TOLERANCE})",
        "V_S,max falls geometrically, crossing a tenth of round 0's half a round before N* (N* = the middle round): "
        "rule (c) stops at N* without noise",
        f"as true, the crossing {STOP_EFFECT} depths later: rule (c) stops at N* + {STOP_EFFECT} without noise",
        sim_stop,
        experiment="grow",
    ),
    Case(
        grow_by_criterion.depth_pays_at_equal_flops,
        "",
        STAT,
        "the log ratio of the two losses at B",
        "every seed's deeper network's log loss below the ResNet-8's by the effect (depth pays)",
        "equal log losses (effect 0)",
        sim_regime,
        experiment="grow",
    ),
    Case(
        expand_decoder.expansion_lower_held_out_loss,
        "paired over runs",
        STAT,
        "the difference (other - criterion held-out loss after S steps)",
        "every run's difference equal to the effect (the criterion lower)",
        "no difference (effect 0)",
        sim_expansion,
        experiment="expand",
    ),
)

CASES_BY_NAME = {c.name: c for c in CASES}  # case name -> case (the power table's keys)


def case_named(name: str) -> Case:
    """The case of :data:`CASES` called ``name`` (``rule`` or ``rule (label)``)."""
    return CASES_BY_NAME[name]
