"""Script 09's presets: growth by the criterion inside one run, on a budget of training FLOPs (docs/decisions.md,
section "Growth by the criterion (09_grow_by_criterion.py)").

Each run starts from the sweep's randomly initialised ResNet-8 and trains on the sweep's recipe until it has spent
``B``, the training FLOPs of the sweep's run at depth ``budget_depth_n`` (mini: ResNet-13's, 2.14e13); the learning
rate is the sweep's schedule at the fraction of ``B`` spent. Every ``every`` epochs while less than ``grow_until`` of
``B`` is spent, the controller probes (``AG_l`` and the exact ``V_S,l`` of every candidate on a fixed sample of
training images; the existing branches' terminal values, :mod:`common.science.terminal_value`), and inserts one ``conv3x3``
zero-output block where the policy says, until the stop rule fires (``max V_S,l / max V_b`` below ``ratio_below`` on
``in_a_row`` probes in a row) or ``cap`` blocks were added. ``none`` never grows; ``scratch`` trains the criterion's
final architecture from random initialisation; both on the same ``B`` and schedule.

The constants (``every``, ``grow_until``, ``cap``, ``ratio_below``, ``in_a_row``, ``budget_depth_n``) were chosen on
CIFAR-10 images that neither the mini training subset nor 09's held-apart sample use (``python -m
common.experiments.grow_by_criterion_calibration``; docs/decisions.md), before any mini record; ``tests/experiments/
test_grow_by_criterion.py`` pins them. A field's value is checked here, once, naming the field
(:class:`common.errors.ParamError`).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import ParamError
from common.presets.choose import names_of
from common.presets.probe_ag import SATURATION_ALPHA, SATURATION_CAL_FRACTION, app_g_sizes

POLICIES = ("criterion", "ag", "cyclic", "random")  # where a grown block goes (docs/09_grow_by_criterion.md)
CONTROLS = ("none", "scratch")  # the same budget and schedule: never grown; the criterion's architecture from scratch
ARMS = (*POLICIES, *CONTROLS)


def policies_of(text: str) -> tuple[str, ...]:
    """``policies`` as a tuple (also ``--policy``'s type): comma-separated names of :data:`ARMS`, once each."""
    return names_of(text, ARMS, "policies")


@dataclass(frozen=True)
class GrowPreset:
    """The controller's settings of one preset (module docstring)."""

    policies: tuple[str, ...] = ARMS
    budget_depth_n: int = 5  # B: the training FLOPs of the sweep's run at this depth (ResNet-13)
    every: int = 5  # P: epochs between probes
    grow_until: float = 0.5  # growth only while less than this fraction of B is spent
    cap: int = 12  # the most blocks a run adds (above the sweep's N*)
    ratio_below: float = 1.0  # the stop rule's constant on max V_S,l / max V_b
    in_a_row: int = 2  # ... on this many probes in a row
    probe_batch_size: int = 128  # the fixed sample of training images of every probe (AG_l, V_S,l, V_b)
    probe_batches: int = 4
    held_out: int = 512  # held-apart images: the validation loss and App. G's interval at each probe (post hoc)
    app_g: bool = True  # App. G's interval at every probe (the post-hoc stop table's rule b)
    saturation_alpha: float = SATURATION_ALPHA
    saturation_cal_fraction: float = SATURATION_CAL_FRACTION
    train_subset: int | None = None  # None: the sweep preset's
    seeds: int = 1  # seeds without --seeds, from --seed

    def __post_init__(self) -> None:
        if not self.policies:
            raise ParamError("policies", "", f"name at least one of {', '.join(ARMS)}")
        for policy in self.policies:
            if policy not in ARMS:
                raise ParamError("policies", policy, f"unknown policy; use one of {', '.join(ARMS)}")
        if len(set(self.policies)) != len(self.policies):
            raise ParamError("policies", ",".join(self.policies), "names a policy twice")
        # What a value must be to mean something; how large a plan may be is the bounds table's alone
        # (common/launch/bounds.py, checked as the flags are parsed): no second, different limit here.
        for name in ("every", "cap", "in_a_row", "probe_batch_size", "probe_batches", "seeds"):
            if not getattr(self, name) >= 1:
                raise ParamError(name, getattr(self, name), "must be a whole number >= 1")
        if not self.budget_depth_n >= 0:
            raise ParamError("budget_depth_n", self.budget_depth_n, "must be a depth N >= 0")
        if not 0.0 < self.grow_until <= 1.0:
            raise ParamError("grow_until", self.grow_until, "must be a fraction of the budget in (0, 1]")
        if not self.ratio_below >= 0.0:
            raise ParamError("ratio_below", self.ratio_below, "must be a ratio >= 0 (0: never stops)")
        app_g_sizes(self.held_out, self.saturation_cal_fraction)  # both App. G parts big enough, before any run


PRESETS = {
    # digits: ~1,400 training images; the sweep's 6-epoch recipe, B = its ResNet-10's FLOPs, a probe every epoch
    "smoke": GrowPreset(
        budget_depth_n=2, every=1, cap=3, probe_batch_size=64, probe_batches=2, held_out=128, app_g=False
    ),
    # the mini sweep's 1,000 CIFAR-10 images; B = its ResNet-13 run's FLOPs (2.14e13); every arm on 3 seeds, so that
    # placement (criterion against ag, cyclic and random) is judged where depth need not pay (docs/decisions.md,
    # "Mini's arms"); constants from common.experiments.grow_by_criterion_calibration (docs/decisions.md, section
    # "Growth by the criterion (09_grow_by_criterion.py)")
    "mini": GrowPreset(held_out=1000, app_g=False, seeds=3),
    # CIFAR-10 on a GPU: B = the paper recipe's ResNet-13 (200 epochs on 50,000 images), one seed, every arm;
    # a probe every 10 epochs (GPU-hours: docs/reproducing.md, estimates)
    "paper": GrowPreset(every=10, probe_batches=10, held_out=5000),
}


__all__ = ["ARMS", "CONTROLS", "POLICIES", "PRESETS", "GrowPreset", "policies_of"]
