"""The presets of growth against scratch (script 03): the table's depths, the stages' and the parent's epochs, the
scratch arms (docs/decisions.md, section "Function-preserving growth"; mini: section "Mini preset")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from common.errors import ParamError, one_of
from common.models.resnet import BACKBONE_DEPTH
from common.paper import GROWTH_DEPTHS
from common.presets.sweep import MINI_SEEDS

PAPER_DEPTHS = tuple(d - BACKBONE_DEPTH for d in GROWTH_DEPTHS)  # N = 2, 3, 4, 5: ResNet-10 .. -13
SCRATCH_BUDGETS = ("total", "sweep", "per-stage")  # docs/decisions.md, section "Function-preserving growth"
DEFAULT_BUDGETS = ("total", "sweep")  # the equal-epoch arm the verdicts read, the sweep's fixed-epoch arm beside it
SMOKE_DEPTHS = (2, 4)  # smoke: ResNet-10 and -12, the paper's depths that 01's smoke sweep trains (its runs: scratch)
SMOKE_STAGE_EPOCHS = 2  # smoke: short stages; scratch keeps the sweep's 6 epochs, so 01's runs are reused
# mini (docs/decisions.md, section "Mini preset"): a ResNet-8 of MINI_PARENT_EPOCHS, then stages of MINI_STAGE_EPOCHS, so
# that the grown ResNet-13 has the sweep's 100 epochs in all; the equal-epoch scratch arm then trains 52, 68, 84 epochs
# at ResNet-10..12 and is the sweep's own run at ResNet-13. The fixed-epoch arm beside it reads the sweep's own two
# seeds (MINI_SWEEP_ARM_SEEDS), so that 01 trains the chains' third seed at ResNet-13 only: cut for make mini's time
# budget (docs/decisions.md, section "Mini preset").
MINI_STAGE_EPOCHS = 16
MINI_PARENT_EPOCHS = 20
MINI_SWEEP_ARM_SEEDS = MINI_SEEDS


def scratch_budgets(text: str) -> tuple[str, ...]:
    """``scratch_budget`` as a tuple (also ``--scratch-budget``'s type): comma-separated names of
    :data:`SCRATCH_BUDGETS`, in order, once each."""
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    bad = [n for n in names if n not in SCRATCH_BUDGETS]
    if not names or bad:
        raise ParamError(
            "scratch_budget",
            text,
            f"use one or more of {', '.join(SCRATCH_BUDGETS)}, comma-separated (default {','.join(DEFAULT_BUDGETS)})",
        )
    return names


@dataclass(frozen=True)
class GrowthPreset:
    """What one preset fixes for script 03; None: the sweep's value (its epochs, its training subset)."""

    depths: tuple[int, ...]  # N of the table's rows (ResNet-(8+N))
    stage_epochs: int | None = None  # epochs of every growth stage; None: the sweep's epochs
    parent_epochs: int | None = None  # epochs of the chain's ResNet-8; None: the sweep's (its own run)
    scratch_epochs: int | None = None  # one scratch arm of this many epochs instead of scratch_budget's arms
    scratch_budget: tuple[str, ...] | None = None  # scratch arms (SCRATCH_BUDGETS); None: DEFAULT_BUDGETS
    train_subset: int | None = None  # as the sweep's; None: the sweep preset's
    sweep_arm_seeds: int | None = None  # the fixed-epoch (sweep) arm: the chains' first this many seeds; None: all

    def __post_init__(self) -> None:
        if not self.depths or min(self.depths) < 1:
            raise ParamError(
                "depths",
                ",".join(map(str, self.depths)) or "(none)",
                "give extra-block counts N >= 1 (N = 0 is the parent ResNet-8), e.g. 2,3,4,5",
            )
        for name in ("stage_epochs", "parent_epochs", "scratch_epochs", "sweep_arm_seeds"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ParamError(name, value, "must be a positive number" + (" of epochs" if "epochs" in name else ""))
        if self.scratch_budget is not None:
            scratch_budgets(",".join(self.scratch_budget))
            if self.scratch_epochs is not None:
                raise ParamError(
                    "scratch_budget", ",".join(self.scratch_budget), "scratch_epochs is given too; pass one of them"
                )

    @property
    def budgets(self) -> tuple[str, ...]:
        """The scratch arms without ``scratch_epochs``."""
        return DEFAULT_BUDGETS if self.scratch_budget is None else self.scratch_budget

    def chain_epochs(self, sweep_epochs: int) -> tuple[int, int]:
        """(every growth stage's epochs, the parent ResNet-8's epochs), each ``sweep_epochs`` where the preset gives
        None."""
        return self.stage_epochs or sweep_epochs, self.parent_epochs or sweep_epochs

    def arm_epochs(self, sweep_epochs: int) -> dict[str, dict[int, int]]:
        """Each scratch arm's epochs, N -> epochs, by budget name (``e<epochs>`` for ``scratch_epochs``), in order:
        ``total`` the parent's plus N stages' (:meth:`chain_epochs`), ``sweep`` the sweep's, ``per-stage`` one
        stage's."""
        if self.scratch_epochs is not None:
            return {f"e{self.scratch_epochs}": dict.fromkeys(self.depths, self.scratch_epochs)}
        stage, parent = self.chain_epochs(sweep_epochs)
        every = {
            "total": {n: parent + n * stage for n in self.depths},
            "sweep": dict.fromkeys(self.depths, sweep_epochs),
            "per-stage": dict.fromkeys(self.depths, stage),
        }
        return {b: every[b] for b in self.budgets}

    def arm_seeds(self, budget: str, seeds: Sequence[int]) -> tuple[int, ...]:
        """The seeds of arm ``budget`` among the chains' ``seeds``: every one, but the first
        :attr:`sweep_arm_seeds` for the fixed-epoch ``sweep`` arm when set."""
        seeds = tuple(seeds)
        return seeds[: self.sweep_arm_seeds] if budget == "sweep" and self.sweep_arm_seeds else seeds

    def reused_sweep_depths(self, sweep_epochs: int, seeds: Sequence[int], among: Sequence[int]) -> list[int]:
        """The depths N at which script 03, run with the chains' ``seeds``, reads the sweep's own run of a seed of
        ``among`` (so script 01 must train it): the chains' parent (N = 0) when its epochs are the sweep's, and each
        scratch arm holding such a seed where the arm's epochs are the sweep's."""
        wanted = set(among) & set(seeds)
        if not wanted:
            return []
        depths = {0} if self.chain_epochs(sweep_epochs)[1] == sweep_epochs else set()
        for budget, epochs in self.arm_epochs(sweep_epochs).items():
            if wanted & set(self.arm_seeds(budget, seeds)):
                depths |= {n for n, e in epochs.items() if e == sweep_epochs}
        return sorted(depths)


PRESETS = {
    "smoke": GrowthPreset(SMOKE_DEPTHS, stage_epochs=SMOKE_STAGE_EPOCHS),
    "mini": GrowthPreset(
        PAPER_DEPTHS,
        stage_epochs=MINI_STAGE_EPOCHS,
        parent_epochs=MINI_PARENT_EPOCHS,
        sweep_arm_seeds=MINI_SWEEP_ARM_SEEDS,
    ),
    "paper": GrowthPreset(PAPER_DEPTHS),
    "gpu-hour": GrowthPreset(PAPER_DEPTHS),  # the paper's protocol at the gpu-hour sweep's 20 epochs per stage
}


def growth_preset(preset: str) -> GrowthPreset:
    """Script 03's preset ``preset`` ("smoke", "mini", "paper" or "gpu-hour")."""
    return one_of("preset", preset, PRESETS)


__all__ = [
    "DEFAULT_BUDGETS",
    "MINI_PARENT_EPOCHS",
    "MINI_STAGE_EPOCHS",
    "MINI_SWEEP_ARM_SEEDS",
    "PAPER_DEPTHS",
    "PRESETS",
    "SCRATCH_BUDGETS",
    "SMOKE_DEPTHS",
    "SMOKE_STAGE_EPOCHS",
    "GrowthPreset",
    "growth_preset",
    "scratch_budgets",
]
