"""Script 09's presets: the growth trajectories driven by the criterion (docs/decisions.md, section "Growth by the
criterion (09_grow_by_criterion.py)").

Each field is a flag of script 09 of the same name (``--rounds``, ``--epochs-per-round``, ``--policy``); the others
fix the probe of each round (analysis batches of training images for ``AG_l`` and ``V_S,l``; held-apart images for
App. G's interval and the validation loss). A field's value is checked here, once, naming the field
(:class:`common.errors.ParamError`). The round-0 ResNet-8 is the sweep's own run (:mod:`common.presets.sweep`).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import ParamError
from common.presets.choose import names_of
from common.presets.probe import SATURATION_ALPHA, SATURATION_CAL_FRACTION, app_g_sizes

POLICIES = ("criterion", "ag", "cyclic", "random")  # where each round's block goes (docs/09_grow_by_criterion.md)


def policies_of(text: str) -> tuple[str, ...]:
    """``policies`` as a tuple (also ``--policy``'s type): comma-separated names of :data:`POLICIES`, once each."""
    return names_of(text, POLICIES, "policies")


@dataclass(frozen=True)
class GrowPreset:
    """The trajectory settings of one preset."""

    policies: tuple[str, ...] = POLICIES
    rounds: int = 3  # K: blocks added, one per round
    epochs_per_round: int | None = None  # E; None: the sweep's epochs (the schedule restarts each round, as 03)
    probe_batch_size: int = 128  # analysis batches of training images (AG_l, V_S,l), as 02's
    probe_batches: int = 10
    held_out: int = 512  # held-apart images for App. G's interval and the validation loss
    saturation_alpha: float = SATURATION_ALPHA
    saturation_cal_fraction: float = SATURATION_CAL_FRACTION
    saturation_delta: float | None = None  # None: no tolerance (the stopping rules fix their own delta)
    train_subset: int | None = None  # None: the sweep preset's

    def __post_init__(self) -> None:
        if not self.policies:
            raise ParamError("policies", "", f"name at least one of {', '.join(POLICIES)}")
        for policy in self.policies:
            if policy not in POLICIES:
                raise ParamError("policies", policy, f"unknown policy; use one of {', '.join(POLICIES)}")
        if len(set(self.policies)) != len(self.policies):
            raise ParamError("policies", ",".join(self.policies), "names a policy twice")
        for name in ("rounds", "probe_batch_size", "probe_batches"):
            if getattr(self, name) <= 0:
                raise ParamError(name, getattr(self, name), "must be positive")
        if self.epochs_per_round is not None and self.epochs_per_round <= 0:
            raise ParamError("epochs_per_round", self.epochs_per_round, "must be positive")
        app_g_sizes(self.held_out, self.saturation_cal_fraction)  # both App. G parts big enough, before any run


PRESETS = {
    # digits: ~1,400 training images; 3 rounds of 2 epochs after the sweep's 6-epoch ResNet-8 (about a minute)
    "smoke": GrowPreset(rounds=3, epochs_per_round=2, probe_batch_size=64, probe_batches=2, held_out=128),
    # the mini sweep's 1,000 CIFAR-10 images, 03's three seeds, all four policies, 5 rounds (to N = 5) of 10 epochs;
    # probe on 512 of the training images; 1,000 of the unused training images held apart (App. G, validation loss);
    # sized against its 20-minute budget
    # (docs/decisions.md, section "Growth by the criterion (09_grow_by_criterion.py)")
    "mini": GrowPreset(rounds=5, epochs_per_round=10, probe_batch_size=128, probe_batches=4, held_out=1000),
    # CIFAR-10 on a GPU: 10 rounds of the sweep's 200 epochs, one seed (~11 GPU-hours, an estimate:
    # docs/reproducing.md); App. G and the validation loss on 5,000 of the held-out images
    "paper": GrowPreset(rounds=10, probe_batches=10, held_out=5000),
}


__all__ = ["POLICIES", "PRESETS", "GrowPreset", "policies_of"]
