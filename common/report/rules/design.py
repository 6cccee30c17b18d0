"""The design a claim rule is simulated at: what the records of one preset (or of one report row) contain, as far
as the rules see it (:class:`Design`), and its words, the power table's keys (:meth:`Design.key`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

EXPERIMENTS = (
    "sweep",
    "growth",
    "matched",
    "scaling",
    "grow",
    "expand",
)  # the part of a design each case reads (Case.experiment)


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
    grow_seeds: int = 0  # runs per arm (09), one per seed
    grow_rounds: int = 0  # K: the blocks every criterion run reached (the stop rule's horizon; the preset's cap)
    expand_runs: int = 0  # runs of 10 two policies are paired over: one per (K, seed), every policy trained in each

    def fits(self) -> tuple[tuple[float, ...], ...]:
        """The x values of every fit a scaling claim reads."""
        return self.scaling_fits or (tuple(float(d) for d in self.scaling_depths),)

    def describe(self) -> str:
        sweep = self.sweep_depths
        text = (
            f"sweep N = {sweep[0]}..{sweep[-1]} ({len(sweep)} depths) x {_seeds_text(self.sweep_seeds)} seeds; growth "
            f"{self.growth_architectures} architectures x {self.growth_seeds} seeds; matched insertion ResNet-"
            f"{', -'.join(map(str, self.matched_depths))} x {_seeds_text(self.matched_seeds)} seeds; weight scaling "
            f"L = {self.scaling_depths[0]}..{self.scaling_depths[-1]} ({len(self.scaling_depths)} depths)"
        )
        if self.grow_seeds:
            text += f"; growth by the criterion K = {self.grow_rounds} blocks x {self.grow_seeds} seeds"
        if self.expand_runs:
            text += f"; decoder expansion: {self.expand_runs} paired runs (K, seed)"
        return text

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
        if experiment == "grow":
            return f"grow: K = {self.grow_rounds} blocks x {self.grow_seeds} seeds"
        if experiment == "expand":
            return f"expand: {self.expand_runs} paired runs (K, seed)"
        raise ValueError(f"experiment {experiment!r}: one of {EXPERIMENTS}")

    def seeds(self, experiment: str) -> int:
        """The fewest seeds (runs per depth, for a scaling fit) any part of ``experiment`` has."""
        if experiment == "sweep":
            return int(np.min(self.sweep_seeds))
        if experiment == "growth":
            return self.growth_seeds
        if experiment == "matched":
            return int(np.min(self.matched_seeds))
        if experiment == "grow":
            return self.grow_seeds
        if experiment == "expand":
            return self.expand_runs
        return min(xs.count(x) for xs in self.fits() for x in set(xs))

    def with_seeds(self, experiment: str, k: int) -> Design:
        """The same design with ``k`` seeds (runs per depth) at every depth of ``experiment``."""
        if experiment == "sweep":
            return replace(self, sweep_seeds=k)
        if experiment == "growth":
            return replace(self, growth_seeds=k)
        if experiment == "matched":
            return replace(self, matched_seeds=k)
        if experiment == "grow":
            return replace(self, grow_seeds=k)
        if experiment == "expand":
            return replace(self, expand_runs=k)
        return replace(
            self, scaling_fits=tuple(tuple(x for x in sorted(set(xs)) for _ in range(k)) for xs in self.fits())
        )

    def runs(self, experiment: str) -> int:
        """How many runs (records) ``experiment`` holds at this design (growth: both arms; grow: the two compared
        policies' trajectories; expand: its runs, each training every policy)."""
        if experiment == "sweep":
            return int(np.sum(np.broadcast_to(np.asarray(self.sweep_seeds), (len(self.sweep_depths),))))
        if experiment == "growth":
            return 2 * self.growth_architectures * self.growth_seeds
        if experiment == "matched":
            return int(np.sum(np.broadcast_to(np.asarray(self.matched_seeds), (len(self.matched_depths),))))
        if experiment == "grow":
            return 2 * self.grow_seeds
        if experiment == "expand":
            return self.expand_runs
        return max(len(xs) for xs in self.fits())


def _seeds_text(seeds: int | Sequence[int]) -> str:
    return str(seeds) if np.ndim(seeds) == 0 else f"{min(seeds)}-{max(seeds)}"
