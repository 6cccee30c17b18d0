"""The presets of growth against scratch (script 03): the final depths, when each block goes in, the restart ablation
(docs/decisions.md, section "Function-preserving growth"; mini: section "Mini preset").

Every growth run trains the sweep's epochs on the sweep's one schedule, from a randomly initialised ResNet-8; its
``k``-th block goes in after the fraction ``insert_at[k - 1]`` of the run (rounded to a whole epoch). Scratch is the
sweep's own run of the final depth (same epochs, same schedule, same seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from common.errors import ParamError, one_of
from common.models.resnet import BACKBONE_DEPTH
from common.presets.choose import BlankItem, comma_items
from common.presets.paper import GROWTH_DEPTHS
from common.presets.train_resnet_sweep import MINI_SEEDS

PAPER_DEPTHS = tuple(d - BACKBONE_DEPTH for d in GROWTH_DEPTHS)  # N = 2, 3, 4, 5: ResNet-10 .. -13
# The k-th insertion after 10k% of the run: growth ends halfway, so the final architecture trains the second half of
# the one cosine schedule (the paper gives no timing; docs/decisions.md, section "Function-preserving growth").
INSERT_AT = (0.1, 0.2, 0.3, 0.4, 0.5)
SMOKE_DEPTHS = (2, 4)  # smoke: ResNet-10 and -12, the paper's depths that 01's smoke sweep trains (its runs: scratch)
SMOKE_INSERT_AT = (0.15, 0.3, 0.5, 0.65)  # the smoke sweep's 6 epochs: insertions before epochs 2, 3, 4 and 5


def insert_fractions(text: str | Sequence[float]) -> tuple[float, ...]:
    """``insert_at`` as a tuple (also ``--insert-at``'s type): comma-separated fractions of the run, each in (0, 1),
    strictly increasing."""
    shown = text if isinstance(text, str) else ",".join(map(str, text))
    try:
        values = tuple(float(t) for t in (comma_items(text) if isinstance(text, str) else text))
    except BlankItem:
        raise ParamError(
            "insert_at", shown, "holds a blank item; remove the extra comma or give the missing fraction"
        ) from None
    except ValueError:
        values = ()
    if not values or any(not 0 < v < 1 for v in values) or list(values) != sorted(set(values)):
        raise ParamError(
            "insert_at",
            shown or "(none)",
            "give fractions of the run in (0, 1), strictly increasing, one per inserted block, e.g. 0.1,0.2,0.3",
        )
    return values


@dataclass(frozen=True)
class GrowthPreset:
    """What one preset fixes for script 03."""

    depths: tuple[int, ...]  # N of the table's rows (ResNet-(8+N)): one growth run and one scratch run per seed each
    insert_at: tuple[float, ...] = INSERT_AT  # the k-th block goes in after this fraction of the run
    ablation_depths: tuple[int, ...] = ()  # N whose growth also runs restarted at every insertion (the ablation)
    seeds: int | None = None  # seeds from --seed without --seeds; None: the sweep preset's growth_seeds
    train_subset: int | None = None  # as the sweep's; None: the sweep preset's

    def __post_init__(self) -> None:
        if not self.depths or min(self.depths) < 1:
            raise ParamError(
                "depths",
                ",".join(map(str, self.depths)) or "(none)",
                "give extra-block counts N >= 1 (N = 0 is the ResNet-8 growth starts from), e.g. 2,3,4,5",
            )
        insert_fractions(self.insert_at)
        if max(self.depths) > len(self.insert_at):
            raise ParamError(
                "insert_at",
                ",".join(map(str, self.insert_at)),
                f"gives {len(self.insert_at)} insertions, but ResNet-{BACKBONE_DEPTH + max(self.depths)} needs "
                f"{max(self.depths)}: give one fraction per block up to the deepest depth",
            )
        stray = sorted(set(self.ablation_depths) - set(self.depths))
        if stray:
            raise ParamError(
                "ablation_depths",
                ",".join(map(str, self.ablation_depths)),
                f"{','.join(map(str, stray))} not among the depths {','.join(map(str, self.depths))}",
            )
        if self.seeds is not None and self.seeds < 1:
            raise ParamError("seeds", self.seeds, "must be a positive number of seeds")

    def insert_epochs(self, epochs: int, n: int) -> tuple[int, ...]:
        """The epochs (0-based rounds) before which the blocks of ResNet-(8+N) go in, in a run of ``epochs``: each
        fraction of :attr:`insert_at` rounded to a whole epoch, between the first and the last, all distinct."""
        found = tuple(round(f * epochs) for f in self.insert_at[:n])
        if any(not 1 <= e < epochs for e in found) or len(set(found)) != len(found):
            raise ParamError(
                "insert_at",
                ",".join(map(str, self.insert_at)),
                f"falls on epochs {','.join(map(str, found))} of a {epochs}-epoch run: each insertion needs an epoch of "
                "its own after the first and before the last; spread the fractions or train more epochs",
            )
        return found


PRESETS = {
    "smoke": GrowthPreset(SMOKE_DEPTHS, insert_at=SMOKE_INSERT_AT, ablation_depths=(max(SMOKE_DEPTHS),)),
    # mini: the sweep's two seeds, so that every scratch run is the sweep's own; the ablation at ResNet-13
    "mini": GrowthPreset(PAPER_DEPTHS, ablation_depths=(max(PAPER_DEPTHS),), seeds=MINI_SEEDS),
    "paper": GrowthPreset(PAPER_DEPTHS),
    "gpu-hour": GrowthPreset(PAPER_DEPTHS),  # the paper's protocol at the gpu-hour sweep's 20 epochs
}


def growth_preset(preset: str) -> GrowthPreset:
    """Script 03's preset ``preset`` ("smoke", "mini", "paper" or "gpu-hour")."""
    return one_of("preset", preset, PRESETS)


__all__ = [
    "INSERT_AT",
    "PAPER_DEPTHS",
    "PRESETS",
    "SMOKE_DEPTHS",
    "SMOKE_INSERT_AT",
    "GrowthPreset",
    "growth_preset",
    "insert_fractions",
]
