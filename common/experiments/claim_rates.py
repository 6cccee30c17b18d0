"""Error rates of the claim rules (:data:`common.claims.RULES`), measured by simulation at a design.

For each rule, a "claim true" world and a "claim false" world at its least favourable point (the
boundary of the claim's region in the rule's own terms) are simulated ``reps`` times at a design
(depths and seeds of the sweep, architectures and seeds of growth vs scratch, depths and seeds of
the matched insertion, depths of the weight-scaling fits), with Gaussian noise whose standard
deviation is ``k`` times the rule's *effect* (the difference between the two worlds in the units
of one observation: one run's value, one architecture-seed pair's paired difference, one depth's
log statistic; for a trend, its change over the design's range). Each simulated record set goes
through the rule function itself; the measured rates are

- ``P(holds | true)`` (power; issue 21 asks for >= 0.8 at k = 0.5),
- ``P(does not hold | true)`` (a faithful reproduction rejected),
- ``P(holds | false)`` (noise accepted; issue 21 asks for <= 0.05 at k = 0.5 and 1; the largest
  over the rule's false worlds when it has two sides).

Where the paper gives only a figure, the true world is fixed here (issue 21), before any record:
AGmax halving over the depth grid (the trend), and for the low-signal rules AGmax falling from 4x
the line to the line over the first quarter of the grid, to half the line at 3/8 and flat after.
``docs/claim-rules.md`` lists every case with its measured rates at the paper preset's design.

Another design (a preset's default depths, other seeds or noise levels)::

    python -m common.experiments.claim_rates --preset mini --seeds 3          # every rule, markdown table
    python -m common.experiments.claim_rates --seeds 5 --noise 0.25,0.5,1 --rules growth_wins_everywhere

or from Python, with any depths: ``design = replace(design_for_preset("paper"), sweep_depths=tuple(range(0, 41, 2)))``,
``print(markdown(measure_all(design), design))``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from common import claims, paper, resnet_sweep
from common.errors import UserError
from common.experiments import growth_vs_scratch, matched_insertion, weight_scaling
from common.scaling import DEFAULT_LEVEL

NOISE = (0.5, 1.0)  # noise sd in units of the effect (issue 21)
REPS = 2000  # repetitions per world and noise level (issue 21: >= 2,000)
SEEDS = 3  # seeds of the paper preset's design (issue 21: N = 0..100 with 3 seeds; growth 4 architectures x 3 seeds)
LINE = paper.LOW_SIGNAL_AG


# ----------------------------------------------------------------------------- designs
@dataclass(frozen=True)
class Design:
    """What the records of one preset contain, as far as the rules see it."""

    sweep_depths: tuple[int, ...]  # N of the ResNet sweep (01)
    sweep_seeds: int
    growth_architectures: int  # rows of 03's table
    growth_seeds: int
    matched_depths: tuple[int, ...]  # d of ResNet-d (06)
    matched_seeds: int
    scaling_depths: tuple[int, ...]  # L of the weight-scaling fits (07)

    def describe(self) -> str:
        sweep = self.sweep_depths
        return (
            f"sweep N = {sweep[0]}..{sweep[-1]} ({len(sweep)} depths) x {self.sweep_seeds} seeds; growth "
            f"{self.growth_architectures} architectures x {self.growth_seeds} seeds; matched insertion ResNet-"
            f"{', -'.join(map(str, self.matched_depths))} x {self.matched_seeds} seeds; weight scaling "
            f"L = {self.scaling_depths[0]}..{self.scaling_depths[-1]} ({len(self.scaling_depths)} depths)"
        )


def design_for_preset(preset: str = "paper", seeds: int = SEEDS, dataset: str = "cifar10") -> Design:
    """The design of ``preset``'s default depths (scripts 01, 03, 06, 07) with ``seeds`` seeds everywhere."""
    sweep = resnet_sweep.sweep_preset(preset, dataset).depths
    if preset == "paper":
        matched = tuple(n + 8 for n in matched_insertion.PAPER_DEPTHS)
    else:  # 06 probes every finished depth of the sweep outside the paper preset
        matched = tuple(n + 8 for n in sweep)
    if preset not in weight_scaling.FC_PRESETS:
        raise UserError(
            f"--preset {preset}: no weight-scaling preset of that name ({', '.join(weight_scaling.FC_PRESETS)})"
        )
    return Design(
        sweep_depths=tuple(sweep),
        sweep_seeds=seeds,
        growth_architectures=len(growth_vs_scratch.default_depths(preset)),
        growth_seeds=seeds,
        matched_depths=matched,
        matched_seeds=seeds,
        scaling_depths=tuple(weight_scaling.FC_PRESETS[preset].depths),
    )


# ----------------------------------------------------------------------------- cases
Simulate = Callable[[Design, np.random.Generator, int, float, str], list[str]]


@dataclass(frozen=True)
class Case:
    """One simulation of one rule: its worlds in words and the function that simulates them."""

    rule: Callable[..., claims.Outcome]
    label: str  # which use of the rule (e.g. "mean over the architectures")
    kind: str  # "statistical" or "fixed tolerance"
    effect: str  # the noise unit
    true_world: str
    false_world: str
    simulate: Simulate  # (design, rng, reps, k, world) -> the verdicts of reps simulated record sets
    false_worlds: tuple[str, ...] = ("false",)

    @property
    def name(self) -> str:
        return f"{self.rule.__name__} ({self.label})" if self.label else self.rule.__name__


def _verdicts(outcomes) -> list[str]:
    return [o.verdict for o in outcomes]


# --- the ResNet sweep
def _sweep(design: Design) -> tuple[np.ndarray, np.ndarray]:
    """Every run's depth (each depth ``sweep_seeds`` times) and its place on the grid, 0 at the first depth, 1 at the last."""
    depths = np.repeat(np.asarray(design.sweep_depths, float), design.sweep_seeds)
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
    return _verdicts(claims.falls_with_depth(depths, np.exp(row)) for row in logs)


def sim_stays(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    depths, x = _sweep(design)
    mean = math.log(LINE) + math.log(2.0) * low_signal_octaves(x)
    if world == "false":  # one depth three quarters in (on the plateau) at the factor times the line
        mean = np.where(depths == depths[np.argmin(abs(x - 0.75))], math.log(claims.LINE_FACTOR * LINE), mean)
    effect = math.log(claims.LINE_FACTOR)
    logs = mean + rng.normal(0.0, k * effect, (reps, len(depths)))
    return _verdicts(claims.stays_below_line(depths, np.exp(row), LINE) for row in logs)


def sim_plateau(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    depths, x = _sweep(design)
    star = depths[x >= 0.25].min()  # N*, made certain: AGmax 10x above the line before it, 10x below from it
    ag = np.where(depths < star, 10 * LINE, LINE / 10)
    after = np.unique(depths[depths >= star])
    level = 1.0
    mean = np.where(depths < star, level + (star - depths) / max(star, 1.0), level)
    if world == "false":  # still falling after N*, so that the last block's mean is the margin below the first's
        blocks = claims.plateau_blocks(list(after))
        c0, c1 = np.mean(blocks[0]) - star, np.mean(blocks[-1]) - star
        slope = claims.PLATEAU_MARGIN * level / ((c1 - c0) + claims.PLATEAU_MARGIN * c0)
        mean = np.where(depths >= star, level - slope * (depths - star), mean)
    losses = mean + rng.normal(0.0, k * claims.PLATEAU_MARGIN * level, (reps, len(depths)))
    return _verdicts(claims.plateau_within_margin(depths, ag, row, LINE) for row in losses)


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
    r = spearman_to_pearson(claims.EXPLAINED_MARGIN)
    c = (
        0.0 if world == "true" else r * noise / math.sqrt(resid_z * (1.0 - r * r))
    )  # partial corr(log AG, z | log train) = r
    log_ag = log_train + c * z + noise * rng.normal(size=shape)
    return _verdicts(
        claims.explained_by_training_loss(depths, np.exp(a), np.exp(t)) for a, t in zip(log_ag, log_train, strict=True)
    )


# --- growth vs scratch: paired differences (scratch - growth at one seed) per architecture and seed
def _reductions(design: Design, rng: np.random.Generator, reps: int, effects: np.ndarray, noise: float) -> np.ndarray:
    shape = (reps, design.growth_architectures, design.growth_seeds)
    return effects[None, :, None] + noise * rng.normal(size=shape)


def _summaries(d: np.ndarray) -> list[dict[str, tuple[float, float, int]]]:
    means, stds, n = d.mean(axis=2), d.std(axis=2, ddof=1), d.shape[2]
    return [
        {f"a{a}": (float(m[a]), float(s[a]), n) for a in range(d.shape[1])} for m, s in zip(means, stds, strict=True)
    ]


def _over_seeds(d: np.ndarray) -> list[claims.Estimate | None]:
    per_seed = d.mean(axis=1)  # the architectures' mean at each seed (03's mean row)
    means, stds, n = per_seed.mean(axis=1), per_seed.std(axis=1, ddof=1), per_seed.shape[1]
    return [claims.over_seeds(m, s, n) for m, s in zip(means, stds, strict=True)]


def _effects(design: Design, value: float, first: float | None = None) -> np.ndarray:
    effects = np.full(design.growth_architectures, value)
    if first is not None:
        effects[0] = first
    return effects


def sim_growth_mean(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    d = _reductions(design, rng, reps, _effects(design, 1.0 if world == "true" else 0.0), k)
    return _verdicts(claims.growth_lower_mean(1.0 - (e.mean if e else 0.0), 1.0, e) for e in _over_seeds(d))


def sim_everywhere(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    d = _reductions(design, rng, reps, _effects(design, 1.0, None if world == "true" else 0.0), k)
    required = [f"a{a}" for a in range(design.growth_architectures)]
    return _verdicts(claims.growth_wins_everywhere(s, required) for s in _summaries(d))


def _pooled_first(d: np.ndarray) -> list[claims.Estimate | None]:
    return [(claims.pooled_estimates(s) or {}).get("a0") for s in _summaries(d)]


def sim_direction(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    d = _reductions(design, rng, reps, _effects(design, 1.0, None if world == "true" else 0.0), k)
    return _verdicts(claims.paper_direction(e, 1.0) for e in _pooled_first(d))


SIZE_WORLDS = {"true": 1.0, "half": 1.0 / claims.SIZE_FACTOR, "double": claims.SIZE_FACTOR}  # effect / the paper's


def sim_size_mean(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    value = paper.GROWTH_TEST_RELATIVE_REDUCTION
    noise = k * value * (1.0 - 1.0 / claims.SIZE_FACTOR)  # effect: the paper's value minus the nearer boundary
    d = _reductions(design, rng, reps, _effects(design, value * SIZE_WORLDS[world]), noise)
    return _verdicts(claims.paper_size(e, value) for e in _over_seeds(d))


def sim_size_one(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    value = paper.GROWTH_TEST_ABS_REDUCTION_RANGE["ResNet-12"]
    noise = k * value * (1.0 - 1.0 / claims.SIZE_FACTOR)
    d = _reductions(design, rng, reps, _effects(design, value, value * SIZE_WORLDS[world]), noise)
    return _verdicts(claims.paper_size(e, value) for e in _pooled_first(d))


# --- matched insertion: per-seed drops per depth
def paper_drops(depths: Sequence[int]) -> np.ndarray:
    """The true world's drops: the paper's H.1 values, interpolated linearly in depth (constant beyond its ends)."""
    known = sorted(paper.MATCHED_INSERTION_REDUCTION.items())
    return np.interp(np.asarray(depths, float), [d for d, _ in known], [v for _, v in known])


def _matched(
    design: Design, rng: np.random.Generator, reps: int, drops: np.ndarray, noise: float
) -> list[dict[int, np.ndarray]]:
    sample = drops[None, :, None] + noise * rng.normal(size=(reps, len(drops), design.matched_seeds))
    return [{d: -row[i] for i, d in enumerate(design.matched_depths)} for row in sample]


def sim_not_increasing(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    drops = paper_drops(design.matched_depths)
    tolerance = claims.PRECISION_UNITS * claims.precision_unit(drops[-2])
    if world == "false":  # the deepest depth's drop exceeds the one before by the paper's precision
        drops = drops.copy()
        drops[-1] = drops[-2] + tolerance
    return _verdicts(claims.drop_not_increasing(c) for c in _matched(design, rng, reps, drops, k * tolerance))


def sim_precision(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    reported = paper.MATCHED_INSERTION_REDUCTION
    drops = np.array(
        [reported.get(d, v) for d, v in zip(design.matched_depths, paper_drops(design.matched_depths), strict=True)]
    )
    first = next(i for i, d in enumerate(design.matched_depths) if d in reported)
    band = claims.PRECISION_UNITS * claims.precision_unit(drops[first])
    if world == "false":  # the first depth the paper reports, off by exactly the paper's precision
        drops = drops.copy()
        drops[first] += band
    return _verdicts(claims.matches_paper_precision(c, reported) for c in _matched(design, rng, reps, drops, k * band))


# --- weight scaling: log-log fits over the depths
def power_law_fits(depths: Sequence[int], log_values: np.ndarray, level: float = DEFAULT_LEVEL) -> np.ndarray:
    """Rows ``(slope, ci_low, ci_high)`` of :func:`common.scaling.fit_power_law` for each row of ``log_values``, at once
    (the same least squares and Student-t interval; tests/test_claim_rates.py checks them against it)."""
    x = np.log(np.asarray(depths, float))
    cx = x - x.mean()
    sxx = cx @ cx
    slope = (log_values - log_values.mean(axis=1, keepdims=True)) @ cx / sxx
    resid = log_values - log_values.mean(axis=1, keepdims=True) - slope[:, None] * cx
    stderr = np.sqrt((resid * resid).sum(axis=1) / (len(x) - 2) / sxx)
    half = claims.t_quantile(0.5 + level / 2, len(x) - 2) * stderr
    return np.column_stack([slope, slope - half, slope + half])


def _fits(
    design: Design, rng: np.random.Generator, reps: int, slope: float, k: float
) -> list[tuple[float, float, float]]:
    x = np.log(np.asarray(design.scaling_depths, float))
    noise = (
        k * claims.EXPONENT_TOLERANCE * (x.max() - x.min())
    )  # effect: the tolerance's change over the range of log L
    ys = slope * x + noise * rng.normal(size=(reps, len(x)))
    return [tuple(row) for row in power_law_fits(design.scaling_depths, ys).tolist()]


EXPONENT_WORLDS = {"true": 0.0, "above": claims.EXPONENT_TOLERANCE, "below": -claims.EXPONENT_TOLERANCE}


def sim_exponent(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    value = paper.COHEN_TANH_BETA
    fits = _fits(design, rng, reps, value + EXPONENT_WORLDS[world], k)
    return _verdicts(claims.exponent_within_tolerance({"": f}, value) for f in fits)


def sim_sign(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    fits = _fits(design, rng, reps, 0.0 if world == "true" else claims.EXPONENT_TOLERANCE, k)
    return _verdicts(claims.sign_within_tolerance({"stage 1": f}, "<= 0") for f in fits)


STAT = "statistical"
CASES: tuple[Case, ...] = (
    Case(
        claims.falls_with_depth,
        "",
        STAT,
        "log AGmax's fall over the grid (log 2)",
        "AGmax halves over the depth grid (log-linear in N)",
        "AGmax independent of N",
        sim_falls,
    ),
    Case(
        claims.stays_below_line,
        "",
        STAT,
        f"log {claims.LINE_FACTOR:g} (the line to {claims.LINE_FACTOR:g}x the line)",
        "AGmax from 4x the line to the line over the first quarter of the grid, half the line from 3/8 on (the low-signal world)",
        f"as true, with the depth 3/4 into the grid at {claims.LINE_FACTOR:g}x the line",
        sim_stays,
    ),
    Case(
        claims.plateau_within_margin,
        "",
        STAT,
        f"the margin ({claims.PLATEAU_MARGIN:.0%} of the test loss)",
        "N* a quarter into the grid; the test loss exactly flat from N* on",
        "the test loss still falling linearly after N*, the last quarter's mean the margin below the first quarter's",
        sim_plateau,
    ),
    Case(
        claims.explained_by_training_loss,
        "",
        STAT,
        "log AGmax's change over one sd of the log training loss",
        "log train loss = -z + noise (z: standardised N); log AGmax = log train loss + noise: depth acts through the loss",
        f"as true plus a depth term giving a partial Spearman rho of {claims.EXPLAINED_MARGIN:g} (latent Pearson "
        f"{spearman_to_pearson(claims.EXPLAINED_MARGIN):.3f})",
        sim_explained,
    ),
    Case(
        claims.growth_lower_mean,
        "mean over the architectures",
        STAT,
        "the reduction",
        "every architecture's reduction (scratch - growth) equal to the effect",
        "no reduction (effect 0)",
        sim_growth_mean,
    ),
    Case(
        claims.growth_wins_everywhere,
        "every architecture",
        STAT,
        "the reduction",
        "every architecture's reduction equal to the effect",
        "one architecture's reduction 0, the others the effect",
        sim_everywhere,
    ),
    Case(
        claims.paper_direction,
        "one architecture, spread pooled",
        STAT,
        "the reduction",
        "every architecture's reduction equal to the effect",
        "that architecture's reduction 0",
        sim_direction,
    ),
    Case(
        claims.paper_size,
        "relative reduction of the means",
        STAT,
        "half the paper's value (its distance to the nearer bound)",
        f"every architecture's reduction at the paper's {paper.GROWTH_TEST_RELATIVE_REDUCTION:.1%}",
        f"every reduction at 1/{claims.SIZE_FACTOR:g}x or {claims.SIZE_FACTOR:g}x the paper's",
        sim_size_mean,
        ("half", "double"),
    ),
    Case(
        claims.paper_size,
        "one architecture, spread pooled",
        STAT,
        "half the paper's value",
        "every architecture's reduction at the paper's 0.0242 (ResNet-12)",
        f"that architecture's at 1/{claims.SIZE_FACTOR:g}x or {claims.SIZE_FACTOR:g}x it",
        sim_size_one,
        ("half", "double"),
    ),
    Case(
        claims.drop_not_increasing,
        "",
        STAT,
        "the tolerance (half a unit of the drop's leading digit)",
        "the paper's drops (7, 4, 2, 2 x 1e-4 at ResNet-8, -14, -20, -34; interpolated at other depths)",
        "as true, the deepest drop above the one before by the tolerance",
        sim_not_increasing,
    ),
    Case(
        claims.matches_paper_precision,
        "",
        STAT,
        "the band (half a unit of the paper's digit)",
        "the paper's drops",
        "as true, ResNet-8's drop off by the band",
        sim_precision,
    ),
    Case(
        claims.exponent_within_tolerance,
        "",
        STAT,
        f"±{claims.EXPONENT_TOLERANCE:g} over the range of log L",
        f"log statistic linear in log L with the paper's exponent ({paper.COHEN_TANH_BETA:g})",
        f"the exponent {claims.EXPONENT_TOLERANCE:g} above or below it",
        sim_exponent,
        ("above", "below"),
    ),
    Case(
        claims.sign_within_tolerance,
        "'<= 0'",
        STAT,
        f"{claims.EXPONENT_TOLERANCE:g} over the range of log L",
        "exponent 0 (bounded)",
        f"exponent +{claims.EXPONENT_TOLERANCE:g}",
        sim_sign,
    ),
)


# ----------------------------------------------------------------------------- measuring
@dataclass(frozen=True)
class Rates:
    """The measured rates of one case at one design, per noise level ``k``."""

    case: Case
    reps: int
    holds_true: dict[float, float] = field(default_factory=dict)
    fails_true: dict[float, float] = field(default_factory=dict)
    holds_false: dict[float, float] = field(default_factory=dict)  # the largest over the false worlds
    seconds: float = 0.0

    def meets(self, power_at: float = 0.5) -> bool:
        """Issue 21's requirements: power >= 0.8 at ``power_at``, P(holds | false) <= 0.05 at every noise level."""
        return (
            self.holds_true[power_at] >= claims.POWER_TARGET
            and max(self.holds_false.values()) <= claims.FALSE_HOLDS_LIMIT
        )


def _rng(seed: int, case: Case, world: str, k: float) -> np.random.Generator:
    """One stream per (seed, case, world, noise level), stable across runs and independent of the order of cases."""
    key = zlib.crc32(f"{case.name}|{world}".encode())
    return np.random.default_rng([seed, key, int(round(k * 1000))])


def measure(case: Case, design: Design, reps: int = REPS, seed: int = 0, noise: Sequence[float] = NOISE) -> Rates:
    """Simulate ``case`` at ``design``: ``reps`` record sets per world and noise level, through the rule itself."""
    start = time.perf_counter()
    rates = Rates(case=case, reps=reps)
    for k in noise:
        true = case.simulate(design, _rng(seed, case, "true", k), reps, k, "true")
        rates.holds_true[k] = true.count(claims.HOLDS) / reps
        rates.fails_true[k] = true.count(claims.FAILS) / reps
        rates.holds_false[k] = max(
            case.simulate(design, _rng(seed, case, w, k), reps, k, w).count(claims.HOLDS) / reps
            for w in case.false_worlds
        )
    return replace(rates, seconds=time.perf_counter() - start)


def measure_all(
    design: Design, reps: int = REPS, seed: int = 0, noise: Sequence[float] = NOISE, rules: Sequence[str] | None = None
) -> list[Rates]:
    """Every case (or those of ``rules``, by function name) at ``design``."""
    chosen = [c for c in CASES if rules is None or c.rule.__name__ in rules]
    return [measure(c, design, reps, seed, noise) for c in chosen]


def markdown(rates: Sequence[Rates], design: Design) -> str:
    """The docs' table: one line per case with its worlds and the measured rates."""
    noise = list(rates[0].holds_true) if rates else list(NOISE)
    head = ["rule", "kind", "noise unit (the effect)", "claim true", "claim false (least favourable)"]
    head += [f"P(holds / true) at {k:g}x" for k in noise] + [f"P(fails / true) at {k:g}x" for k in noise]
    head += [f"P(holds / false) at {k:g}x" for k in noise] + ["meets issue 21"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rates:
        c = r.case
        cells = [
            f"`{c.rule.__name__}`" + (f" ({c.label})" if c.label else ""),
            c.kind,
            c.effect,
            c.true_world,
            c.false_world,
        ]
        cells += [f"{r.holds_true[k]:.3f}" for k in noise] + [f"{r.fails_true[k]:.3f}" for k in noise]
        cells += [f"{r.holds_false[k]:.3f}" for k in noise] + ["yes" if r.meets(noise[0]) else "**no**"]
        lines.append("| " + " | ".join(x.replace("|", "/") for x in cells) + " |")
    lines.append(
        f"\nDesign: {design.describe()}; {rates[0].reps if rates else REPS} repetitions per world and noise level."
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    """Flags of ``python -m common.experiments.claim_rates`` (plain argparse: a job module stays clear of the launcher's CLI)."""
    parser = argparse.ArgumentParser(
        prog="python -m common.experiments.claim_rates",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--preset", default="paper", help="take the default depths of this preset (scripts 01, 03, 06, 07)"
    )
    parser.add_argument("--seeds", type=int, default=SEEDS, help="seeds of every experiment")
    parser.add_argument(
        "--noise",
        default=",".join(f"{k:g}" for k in NOISE),
        help="noise levels in units of the effect; the first is the power's",
    )
    parser.add_argument("--reps", type=int, default=REPS, help="repetitions per world and noise level")
    parser.add_argument("--seed", type=int, default=0, help="base seed of the simulations")
    parser.add_argument("--rules", default=None, help="comma-separated rule names (default: every rule)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print the rates table at a preset's design (other designs: :func:`measure_all` with a :class:`Design`)."""
    args = build_parser().parse_args(argv)
    try:
        if args.seeds < 2 or args.reps < 1:
            raise UserError(
                f"--seeds {args.seeds} --reps {args.reps}: give at least 2 seeds (a spread) and 1 repetition"
            )
        try:
            noise = [float(k) for k in args.noise.split(",") if k.strip()]
        except ValueError:
            raise UserError(f"--noise {args.noise}: give numbers like 0.5,1") from None
        rules = args.rules.split(",") if args.rules else None
        known = {c.rule.__name__ for c in CASES}
        if rules and set(rules) - known:
            raise UserError(
                f"--rules {args.rules}: unknown {sorted(set(rules) - known)}; known: {', '.join(sorted(known))}"
            )
        design = design_for_preset(args.preset, args.seeds)
    except UserError as exc:
        print(f"{build_parser().prog}: error: {exc}", file=sys.stderr)
        return 2
    print(markdown(measure_all(design, args.reps, args.seed, noise, rules), design))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
