"""A training long enough to be worth a word: one warning with its estimated time (docs/runs.md, section "Bounds").

A step count inside its bound (:mod:`common.launch.bounds`) can still be far longer than its user meant
(``--steps 1000000`` on a CPU). Such a run is not refused; once its first steps are timed, one warning gives the
estimate and the way out. Every number printed is an estimate: the mean time of the first timed steps (compilation
and warm-up included, so it errs long) times the steps left; evaluation is not counted.

:class:`StepClock` times a run of :func:`common.training.loop.train` at its first host synchronisation (the
non-finite-loss check of :func:`common.training.epoch.train_epoch`, which waits for an accelerator's queue, so
asynchronous steps are not undercounted); :func:`warn_if_long` is the warning itself, also used where a job times
its own steps (06's gradient-descent fit, 10's new layers) with :class:`StepClock` too.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

LONG_S = 3600.0  # a training estimated longer than this is announced, once, with its estimate
TIMED_STEPS = 3  # the steps a job's own loop times before its estimate (the loop of train(): its first sync)


def duration_words(seconds: float) -> str:
    """``seconds`` in the largest unit that leaves at least 2 of them: ``3 hours``, ``12 days``, ``45 s``."""
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds:.0f} s"


def warn_if_long(what: str, steps: int, step_s: float, timed: int, fix: str) -> bool:
    """One warning when ``steps`` steps at ``step_s`` seconds each (the mean of the first ``timed`` steps) would take
    longer than :data:`LONG_S`; ``what`` starts the line (the run, the flag), ``fix`` ends it. True when it warned."""
    seconds = steps * step_s
    if seconds <= LONG_S:
        return False
    log.warning(
        "%s: %s steps to go, about %s at the %.3f s per step of the first %d (an estimate); %s",
        what, f"{steps:,}", duration_words(seconds), step_s, timed, fix,
    )  # fmt: skip
    return True


@dataclass
class StepClock:
    """The time of a training's first steps, and its one warning when its ``total_steps`` would take longer than
    :data:`LONG_S` at that rate (a resumed run is timed afresh).

    ``what`` starts the warning (the run, the flag), ``fix`` ends it (the count to lower, what an interrupted run
    does). Call :meth:`start` before the first step and :meth:`tick` with the step reached (after a host
    synchronisation, on an accelerator); the first tick with at least ``min_steps`` steps behind it estimates."""

    total_steps: int
    what: str
    fix: str
    min_steps: int = 1
    started: float = field(default=0.0, init=False)
    first_step: int = field(default=0, init=False)
    done: bool = field(default=False, init=False)

    def start(self, step: int) -> None:
        """The clock starts at global step ``step`` (the resumed step, or 0)."""
        self.started, self.first_step = time.perf_counter(), step

    def tick(self, step: int) -> None:
        """At global step ``step``, right after a host synchronisation: the first call with steps behind it estimates
        the rest of the run and warns if it is long; later calls do nothing."""
        timed = step - self.first_step
        if self.done or timed < max(1, self.min_steps):
            return
        self.done = True
        step_s = (time.perf_counter() - self.started) / timed
        warn_if_long(self.what, self.total_steps - step, step_s, timed, self.fix)


__all__ = ["LONG_S", "TIMED_STEPS", "StepClock", "duration_words", "warn_if_long"]
