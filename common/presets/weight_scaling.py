"""The presets of script 07's fully connected families (Cohen et al. 2021's setting): per preset the depth grid, the
Adam recipe, the batch, the data's size and the initialisation, and the FC training schedules."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.errors import ParamError, one_of
from common.training.recipes import AdamRecipe, EarlyStopping


def geometric_depths(lowest: int, highest: int, count: int) -> tuple[int, ...]:
    """``count`` depths spaced evenly in ``log L`` from ``lowest`` to ``highest``, rounded (duplicates dropped)."""
    return tuple(sorted({round(float(v)) for v in np.geomspace(lowest, highest, count)}))


@dataclass(frozen=True)
class FCPreset:
    """What one preset fixes for the FC families: depth grid, optimiser, batch, data and initialisation."""

    depths: tuple[int, ...]
    recipe: AdamRecipe
    batch_size: int
    num_train: int = 1024
    num_test: int = 256
    dim: int = 10
    init_scale: float = 0.01

    def __post_init__(self) -> None:
        if not self.depths or min(self.depths) < 1:
            shown = ",".join(map(str, self.depths)) or "(none)"
            raise ParamError("depths", shown, "give network depths L >= 1, e.g. 4,8,16 or 4:64:4")
        for name, value in (("epochs", self.recipe.epochs), ("lr", self.recipe.lr), ("batch_size", self.batch_size)):
            if not value > 0:
                raise ParamError(name, value, "must be positive")
        if self.batch_size > self.num_train:
            raise ParamError(
                "batch_size", self.batch_size, f"larger than the {self.num_train} training examples; lower it"
            )


# The FC training schedules (--schedule): Cohen et al.'s protocol, or a cosine decay over every epoch.
SCHEDULES = {
    "constant": "Cohen et al.'s: Adam at a constant rate, early stopping (common.training.loop.EarlyStopping)",
    "cosine": "cosine decay of the rate to 0 over every epoch, no early stopping",
}
COHEN_STOPPING = EarlyStopping(below=1e-3, patience=5, min_improvement=0.01)  # scaling_experiments.train_final_net

FC_PRESETS = {
    # Cohen et al.'s protocol: scaling_run.DEFAULT_PARAMS with scaling_experiments.train_final_net (d = 10,
    # 1,024 / 256 examples, Adam at a constant lr 1e-3, batch 50, at most 200 epochs, early stopping:
    # docs/decisions.md), 17 depths from 4 to 1,024 (ratio sqrt 2).
    "paper": FCPreset(
        depths=geometric_depths(4, 1024, 17), recipe=AdamRecipe(epochs=200, lr=1e-3, decay="constant"), batch_size=50
    ),
    # Minutes on a CPU: 5 depths from 4 to 64, 256 examples, 20 epochs of 8 steps at lr 1e-2.
    "smoke": FCPreset(
        depths=geometric_depths(4, 64, 5),
        recipe=AdamRecipe(epochs=20, lr=1e-2),
        batch_size=32,
        num_train=256,
        num_test=128,
    ),
    # mini: Cohen et al.'s data and protocol (constant Adam lr 1e-3, batch 50, early stopping) at 9 depths from 4 to
    # 1,024 (ratio 2; their deepest), at most 100 epochs (docs/decisions.md, section "Mini preset").
    "mini": FCPreset(
        depths=geometric_depths(4, 1024, 9), recipe=AdamRecipe(epochs=100, lr=1e-3, decay="constant"), batch_size=50
    ),
}


def fc_preset(preset: str) -> FCPreset:
    """The FC families' preset ``preset`` ("paper", "smoke" or "mini")."""
    return one_of("preset", preset, FC_PRESETS)


__all__ = ["COHEN_STOPPING", "FC_PRESETS", "SCHEDULES", "FCPreset", "fc_preset", "geometric_depths"]
