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
``docs/claim-rules.md`` lists every case with its measured rates at the paper preset's design (a generated
table: ``python -m common.experiments.claim_rates --write-docs docs/claim-rules.md``).

**Power at the records' own design** (issue 29): :func:`power` gives P(holds | true) of a case at noise 0.5x
the effect at any :class:`Design`, such as the one a report row's records have (one seed count per depth
where they differ), and below :data:`common.claims.POWER_TARGET` the seeds it would need. The report reads
these from a committed table (:class:`PowerTable`, ``claim_power.csv`` beside this module), regenerated from
the records by ``python -m common.experiments.power_table`` (:data:`POWER_COMMAND`).

Another design (a preset's default depths, other seeds or noise levels)::

    python -m common.experiments.claim_rates --preset mini --seeds 3          # every rule, markdown table
    python -m common.experiments.claim_rates --seeds 5 --noise 0.25,0.5,1 --rules growth_wins_everywhere

or from Python, with any depths: ``design = replace(design_for_preset("paper"), sweep_depths=tuple(range(0, 41, 2)))``,
``print(markdown(measure_all(design), design))``.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from common import claims, paper, resnet_sweep, runs
from common.errors import UserError
from common.experiments import growth_vs_scratch, matched_insertion, weight_scaling
from common.scaling import DEFAULT_LEVEL

NOISE = (0.5, 1.0)  # noise sd in units of the effect (issue 21)
REPS = 2000  # repetitions per world and noise level (issue 21: >= 2,000)
SEEDS = 3  # seeds of the paper preset's design (issue 21: N = 0..100 with 3 seeds; growth 4 architectures x 3 seeds)
LINE = paper.LOW_SIGNAL_AG


# ----------------------------------------------------------------------------- designs
EXPERIMENTS = ("sweep", "growth", "matched", "scaling")  # the part of a design each case reads (Case.experiment)


def _counts(depths: Sequence, seeds: int | Sequence[int], unit: str = "seed") -> str:
    """``0,2,3 x 2 seeds`` when every depth has as many seeds, else ``0x2,2x2,3x1`` (a design key's words)."""
    n = [int(x) for x in np.broadcast_to(np.asarray(seeds), (len(depths),))]
    names = [f"{d:g}" if isinstance(d, float) else str(d) for d in depths]
    if len(set(n)) <= 1:
        k = n[0] if n else 0
        return f"{','.join(names)} x {k} {unit}{'s' if k != 1 else ''}"
    return ",".join(f"{d}x{c}" for d, c in zip(names, n, strict=True))


@dataclass(frozen=True)
class Design:
    """What the records of one preset (or of one report row) contain, as far as the rules see it.

    ``sweep_seeds`` and ``matched_seeds`` are one count for every depth or one count per depth (records where a
    depth has fewer seeds than the others); ``growth_required`` is how many of the architectures a claim names
    (None: all of them); ``scaling_fits`` the x values (depths, a depth once per run) of every fit a claim reads
    (empty: one fit at ``scaling_depths``).
    """

    sweep_depths: tuple[int, ...]  # N of the ResNet sweep (01), or L of the GPT-2 sweep (05)
    sweep_seeds: int | tuple[int, ...]
    growth_architectures: int  # rows of 03's table
    growth_seeds: int
    matched_depths: tuple[int, ...]  # d of ResNet-d (06)
    matched_seeds: int | tuple[int, ...]
    scaling_depths: tuple[int, ...]  # L of the weight-scaling fits (07)
    growth_required: int | None = None
    scaling_fits: tuple[tuple[float, ...], ...] = ()

    def fits(self) -> tuple[tuple[float, ...], ...]:
        """The x values of every fit a scaling claim reads."""
        return self.scaling_fits or (tuple(float(d) for d in self.scaling_depths),)

    def describe(self) -> str:
        sweep = self.sweep_depths
        return (
            f"sweep N = {sweep[0]}..{sweep[-1]} ({len(sweep)} depths) x {_seeds_text(self.sweep_seeds)} seeds; growth "
            f"{self.growth_architectures} architectures x {self.growth_seeds} seeds; matched insertion ResNet-"
            f"{', -'.join(map(str, self.matched_depths))} x {_seeds_text(self.matched_seeds)} seeds; weight scaling "
            f"L = {self.scaling_depths[0]}..{self.scaling_depths[-1]} ({len(self.scaling_depths)} depths)"
        )

    def key(self, experiment: str) -> str:
        """The design in words, as far as a case of ``experiment`` reads it: the power table's key."""
        if experiment == "sweep":
            return f"sweep: depths {_counts(self.sweep_depths, self.sweep_seeds)}"
        if experiment == "growth":
            named = self.growth_architectures if self.growth_required is None else self.growth_required
            return f"growth: {self.growth_architectures} architectures ({named} named) x {self.growth_seeds} seeds"
        if experiment == "matched":
            return f"matched: ResNet-{_counts(self.matched_depths, self.matched_seeds)}"
        if experiment == "scaling":
            fits = []
            for xs in self.fits():
                distinct = sorted(set(xs))
                fits.append(_counts(distinct, [xs.count(x) for x in distinct], unit="run"))
            return f"scaling: {len(fits)} fit{'s' if len(fits) != 1 else ''} at L " + "; ".join(fits)
        raise ValueError(f"experiment {experiment!r}: one of {EXPERIMENTS}")

    def seeds(self, experiment: str) -> int:
        """The fewest seeds (runs per depth, for a scaling fit) any part of ``experiment`` has."""
        if experiment == "sweep":
            return int(np.min(self.sweep_seeds))
        if experiment == "growth":
            return self.growth_seeds
        if experiment == "matched":
            return int(np.min(self.matched_seeds))
        return min(xs.count(x) for xs in self.fits() for x in set(xs))

    def with_seeds(self, experiment: str, k: int) -> Design:
        """The same design with ``k`` seeds (runs per depth) at every depth of ``experiment``."""
        if experiment == "sweep":
            return replace(self, sweep_seeds=k)
        if experiment == "growth":
            return replace(self, growth_seeds=k)
        if experiment == "matched":
            return replace(self, matched_seeds=k)
        return replace(
            self, scaling_fits=tuple(tuple(x for x in sorted(set(xs)) for _ in range(k)) for xs in self.fits())
        )

    def runs(self, experiment: str) -> int:
        """How many runs (records) ``experiment`` holds at this design (growth: both arms)."""
        if experiment == "sweep":
            return int(np.sum(np.broadcast_to(np.asarray(self.sweep_seeds), (len(self.sweep_depths),))))
        if experiment == "growth":
            return 2 * self.growth_architectures * self.growth_seeds
        if experiment == "matched":
            return int(np.sum(np.broadcast_to(np.asarray(self.matched_seeds), (len(self.matched_depths),))))
        return max(len(xs) for xs in self.fits())


def _seeds_text(seeds: int | Sequence[int]) -> str:
    return str(seeds) if np.ndim(seeds) == 0 else f"{min(seeds)}-{max(seeds)}"


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


def _over_seeds(d: np.ndarray) -> list[claims.Estimate | None]:
    per_seed = d.mean(axis=1)  # the architectures' mean at each seed (03's mean row)
    means, stds, n = per_seed.mean(axis=1), _sample_std(per_seed, axis=1), per_seed.shape[1]
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
    named = design.growth_architectures if design.growth_required is None else design.growth_required
    required = [f"a{a}" for a in range(named)]
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
    tolerance = claims.PRECISION_UNITS * claims.precision_unit(drops[-2])
    effect = math.log1p(tolerance / drops[-2])  # the tolerance on the log scale, at the deepest pair
    if world == "false":  # the deepest depth's drop exceeds the one before by the paper's precision
        drops = drops.copy()
        drops[-1] = drops[-2] + tolerance
    return _verdicts(claims.drop_not_increasing(c) for c in _matched(design, rng, reps, drops, k * effect))


def sim_precision(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    reported = paper.MATCHED_INSERTION_REDUCTION
    drops = np.array(
        [reported.get(d, v) for d, v in zip(design.matched_depths, paper_drops(design.matched_depths), strict=True)]
    )
    first = next(i for i, d in enumerate(design.matched_depths) if d in reported)
    half = claims.PRECISION_UNITS * claims.precision_unit(drops[first])
    effect = math.log1p(half / drops[first])  # the band's nearer (upper) side on the log scale
    if world == "false":  # the first depth the paper reports, off by exactly the paper's precision
        drops = drops.copy()
        drops[first] += half
    return _verdicts(
        claims.matches_paper_precision(c, reported) for c in _matched(design, rng, reps, drops, k * effect)
    )


# --- weight scaling: log-log fits over the depths
def power_law_fits(depths: Sequence[float], log_values: np.ndarray, level: float = DEFAULT_LEVEL) -> np.ndarray:
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
    design: Design, rng: np.random.Generator, reps: int, slopes: Sequence[float], k: float
) -> list[dict[str, tuple[float, float, float]]]:
    """``reps`` sets of the design's fits (one per ``Design.fits``), the j-th with true exponent ``slopes[j]``."""
    per_fit = []
    for xs, slope in zip(design.fits(), slopes, strict=True):
        x = np.log(np.asarray(xs, float))
        noise = k * claims.EXPONENT_TOLERANCE * (x.max() - x.min())  # effect: the tolerance's change over log L
        ys = slope * x + noise * rng.normal(size=(reps, len(x)))
        per_fit.append(power_law_fits(xs, ys).tolist())
    return [{f"fit {j}": tuple(rows[i]) for j, rows in enumerate(per_fit)} for i in range(reps)]


EXPONENT_WORLDS = {"true": 0.0, "above": claims.EXPONENT_TOLERANCE, "below": -claims.EXPONENT_TOLERANCE}


def _slopes(design: Design, value: float, first_off: float) -> list[float]:
    """Every fit at ``value``, the first one ``first_off`` from it (a false world moves one part only)."""
    return [value + (first_off if j == 0 else 0.0) for j in range(len(design.fits()))]


def sim_exponent(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    value = paper.COHEN_TANH_BETA
    fits = _fits(design, rng, reps, _slopes(design, value, EXPONENT_WORLDS[world]), k)
    return _verdicts(claims.exponent_within_tolerance(f, value) for f in fits)


def sim_sign(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    fits = _fits(design, rng, reps, _slopes(design, 0.0, 0.0 if world == "true" else claims.EXPONENT_TOLERANCE), k)
    return _verdicts(claims.sign_within_tolerance(f, "<= 0") for f in fits)


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
        experiment="growth",
    ),
    Case(
        claims.growth_wins_everywhere,
        "every architecture",
        STAT,
        "the reduction",
        "every architecture's reduction equal to the effect",
        "one architecture's reduction 0, the others the effect",
        sim_everywhere,
        experiment="growth",
    ),
    Case(
        claims.paper_direction,
        "one architecture, spread pooled",
        STAT,
        "the reduction",
        "every architecture's reduction equal to the effect",
        "that architecture's reduction 0",
        sim_direction,
        experiment="growth",
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
        experiment="growth",
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
        experiment="growth",
    ),
    Case(
        claims.drop_not_increasing,
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
        claims.matches_paper_precision,
        "",
        STAT,
        "the band's nearer side on the log scale, log(1 + u / 2v) (half a unit u of the paper's digit)",
        "the paper's drops, log-normal noise",
        "as true, ResNet-8's drop off by the band",
        sim_precision,
        experiment="matched",
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
        experiment="scaling",
    ),
    Case(
        claims.sign_within_tolerance,
        "'<= 0'",
        STAT,
        f"{claims.EXPONENT_TOLERANCE:g} over the range of log L",
        "exponent 0 (bounded)",
        f"exponent +{claims.EXPONENT_TOLERANCE:g}",
        sim_sign,
        experiment="scaling",
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


# ----------------------------------------------------------------------------- power at the records' own design
POWER_NOISE = NOISE[0]  # the power target's noise level: 0.5x the effect (issue 21)
SEED_STEPS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)  # seeds (runs per depth) tried for "needs about"
POWER_TABLE = Path(__file__).with_name("claim_power.csv")  # committed; 08 reads it (docs/claim-rules.md)
POWER_COLUMNS = ("case", "design", "power", "fails_true", "seeds_needed", "runs_needed", "reps", "seed", "noise")
POWER_COMMAND = "python -m common.experiments.power_table --out results/mini --preset mini"  # regenerates the table
CASES_BY_NAME = {c.name: c for c in CASES}  # case name -> case (the power table's keys)


@dataclass(frozen=True)
class Power:
    """P(holds | claim true) of one case at one design (noise 0.5x the effect, the claim's own true world of
    :data:`CASES`), P(does not hold | true), and the seeds (runs per depth) at which the power first reaches
    :data:`common.claims.POWER_TARGET` on :data:`SEED_STEPS` (None: not up to the last step; absent when it already does)."""

    case: str
    design: str
    power: float
    fails_true: float
    seeds_needed: int | None
    runs_needed: int | None
    reps: int
    seed: int
    noise: float

    @property
    def experiment(self) -> str:
        """The part of the design the case reads ("" for a case no longer in :data:`CASES`)."""
        case = CASES_BY_NAME.get(self.case)
        return case.experiment if case is not None else ""

    def needs(self) -> str:
        """``about 4 seeds per depth, 32 runs`` (what the design would need to reach the power target)."""
        unit = {"sweep": "seeds per depth", "growth": "seeds", "matched": "seeds per depth"}.get(
            self.experiment, "runs per depth"
        )
        if self.seeds_needed is None:
            return f"more than {SEED_STEPS[-1]} {unit}"
        what = "points per fit" if self.experiment == "scaling" else "runs"
        return f"about {self.seeds_needed} {unit}, {self.runs_needed} {what}"

    def row(self) -> dict:
        return {c: getattr(self, c) for c in POWER_COLUMNS}


def power_at(
    case: Case, design: Design, reps: int = REPS, seed: int = 0, k: float = POWER_NOISE
) -> tuple[float, float]:
    """(P(holds | true), P(does not hold | true)) of ``case`` at ``design``, noise ``k`` times the effect."""
    verdicts = case.simulate(design, _rng(seed, case, "true", k), reps, k, "true")
    return verdicts.count(claims.HOLDS) / reps, verdicts.count(claims.FAILS) / reps


def power(case: Case, design: Design, reps: int = REPS, seed: int = 0, k: float = POWER_NOISE) -> Power:
    """The power of ``case`` at ``design`` and, below the target, the seeds it would need (:class:`Power`)."""
    holds, fails = power_at(case, design, reps, seed, k)
    needed = runs = None
    if holds < claims.POWER_TARGET:
        have = design.seeds(case.experiment)
        for n in (n for n in SEED_STEPS if n > have):
            bigger = design.with_seeds(case.experiment, n)
            if power_at(case, bigger, reps, seed, k)[0] >= claims.POWER_TARGET:
                needed, runs = n, bigger.runs(case.experiment)
                break
    return Power(case.name, design.key(case.experiment), holds, fails, needed, runs, reps, seed, k)


class PowerTable:
    """The committed power table (:data:`POWER_TABLE`): :class:`Power` by (case name, design key).

    Every :meth:`lookup` is remembered in :attr:`requested` (case and design), found or not, so that
    ``python -m common.experiments.power_table`` can compute exactly the designs a report asks for.
    """

    def __init__(self, entries: Sequence[Power] = ()):
        self.entries = {(p.case, p.design): p for p in entries}
        self.requested: dict[tuple[str, str], tuple[Case, Design]] = {}

    @classmethod
    def load(cls, path: str | Path = POWER_TABLE) -> PowerTable:
        """The table at ``path`` (an empty table when there is no file)."""
        path = Path(path)
        if not path.is_file():
            return cls()
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))

        def count(v: str) -> int | None:
            return int(v) if v.strip() else None

        return cls(
            [
                Power(
                    r["case"],
                    r["design"],
                    float(r["power"]),
                    float(r["fails_true"]),
                    count(r["seeds_needed"]),
                    count(r["runs_needed"]),
                    int(r["reps"]),
                    int(r["seed"]),
                    float(r["noise"]),
                )
                for r in rows
            ]
        )

    def lookup(self, case: Case, design: Design) -> Power | None:
        """The power of ``case`` at ``design`` (None: not in the table: the report says so, never guesses)."""
        key = (case.name, design.key(case.experiment))
        self.requested.setdefault(key, (case, design))
        return self.entries.get(key)

    def updated(self, powers: Sequence[Power]) -> PowerTable:
        """This table with ``powers`` added or replaced."""
        return PowerTable([*self.entries.values(), *powers])

    def write(self, path: str | Path = POWER_TABLE) -> None:
        """Atomically, sorted by case and design (a rerun with the same seed writes the same bytes)."""
        rows = [p.row() for _, p in sorted(self.entries.items())]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=POWER_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: "" if v is None else (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
        runs.atomic_write_bytes(path, buffer.getvalue().encode())


def power_markdown(table: PowerTable) -> str:
    """The power table as the docs show it: one line per (case, design), the power and what it would need."""
    lines = [
        "| rule | design of the records | P(holds / true) at 0.5x | P(fails / true) at 0.5x | to reach 0.8 |",
        "|---|---|---|---|---|",
    ]
    for _, p in sorted(table.entries.items()):
        need = "-" if p.power >= claims.POWER_TARGET else p.needs()
        lines.append(f"| `{p.case}` | {p.design} | {p.power:.3f} | {p.fails_true:.3f} | {need} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the docs' tables, regenerated
DOCS = Path(__file__).resolve().parents[2] / "docs" / "claim-rules.md"
DOCS_COMMAND = "python -m common.experiments.claim_rates --write-docs docs/claim-rules.md"


def docs_block(name: str) -> tuple[str, str]:
    """The markers around a generated block of docs/claim-rules.md (never edited by hand)."""
    return f"<!-- {name}: generated by {DOCS_COMMAND} -->", f"<!-- {name}: end -->"


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with the block ``name`` replaced by ``body`` (a ValueError naming the markers when they are missing)."""
    start, end = docs_block(name)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"no block {start} ... {end}")
    head, rest = text.split(start)
    return f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"


def read_block(text: str, name: str) -> str:
    """The body of the block ``name`` of ``text``."""
    start, end = docs_block(name)
    return text.split(start, 1)[1].split(end, 1)[0].strip("\n")


def write_docs(path: str | Path, reps: int = REPS, seed: int = 0, table: str | Path = POWER_TABLE) -> None:
    """Regenerate the docs' rates table at the paper preset's design and its copy of the committed power table."""
    design = design_for_preset("paper")
    text = Path(path).read_text()
    text = replace_block(text, "rates-paper", markdown(measure_all(design, reps, seed), design))
    text = replace_block(text, "power-table", power_markdown(PowerTable.load(table)))
    runs.atomic_write_bytes(path, text.encode())


def case_named(name: str) -> Case:
    """The case of :data:`CASES` called ``name`` (``rule`` or ``rule (label)``)."""
    return CASES_BY_NAME[name]


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
    parser.add_argument(
        "--write-docs",
        type=Path,
        default=None,
        metavar="PATH",
        help="regenerate the generated tables of PATH (docs/claim-rules.md: the rates at the paper preset's design, "
        "the committed power table) instead of printing; --reps and --seed apply",
    )
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
        if args.write_docs is not None:
            if not args.write_docs.is_file():
                raise UserError(f"--write-docs {args.write_docs}: no such file (docs/claim-rules.md)")
            try:
                write_docs(args.write_docs, args.reps, args.seed)
            except ValueError as exc:
                raise UserError(f"--write-docs {args.write_docs}: {exc}") from None
            print(f"regenerated the rates and power tables of {args.write_docs}")
            return 0
    except UserError as exc:
        print(f"{build_parser().prog}: error: {exc}", file=sys.stderr)
        return 2
    print(markdown(measure_all(design, args.reps, args.seed, noise, rules), design))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
