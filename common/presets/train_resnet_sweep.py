"""The ResNet depth sweep's presets (scripts 01, 02, 03, 06, 07): per preset and dataset its depth grid, recipe,
batch and augmentation, and what a script derives from the preset (seeds, default dataset, the CPU warning).

Presets: ``paper`` has the paper's depth grids (``common/presets/paper.py``; B.1: CIFAR N = 1..100, to which we add the
backbone N = 0; B.3: ImageNet-100 N in {1, 5, ..., 49} for 300 epochs). The paper gives no CIFAR epoch count and
no optimiser settings: the 200 CIFAR epochs and every :class:`SGDRecipe` value below are this reproduction's
decisions (docs/decisions.md). ``smoke`` runs the same code paths in minutes on a CPU. ``mini`` trains 7 depths,
2 seeds, on a class-balanced 1,000-image subset of real CIFAR-10
(docs/decisions.md, section "Mini preset"). ``gpu-hour`` trains all of CIFAR-10 with the paper's recipe for 20
epochs at N = 0..26 x 5 seeds: about an hour on one H100-class GPU (an estimate, :mod:`common.launch.gpu_estimates`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from common.errors import ParamError, one_of
from common.presets.paper import CIFAR_EXTRA_BLOCKS, IMAGENET100_EPOCHS, IMAGENET100_EXTRA_BLOCKS
from common.training.recipes import SGDRecipe

RECIPE_FIELDS = ("epochs", "lr")  # the overrides that set a field of the preset's recipe (the rest: of the preset)


# Images per evaluation batch of the sweep's ResNets: the sweep's runs, 06's float64 passes, the GPU estimates.
EVAL_BATCH_SIZE = 500


@dataclass(frozen=True)
class SweepPreset:
    """What one preset fixes for one dataset: the depth grid, the recipe, the batch and the augmentation."""

    depths: tuple[int, ...]  # N: extra blocks over the ResNet-8 backbone
    recipe: SGDRecipe
    batch_size: int
    crop_pad: int = 4  # random crop after 4-pixel zero padding (B.2)
    flip: bool = True
    eval_batch_size: int = EVAL_BATCH_SIZE
    image_size: int | None = None  # ImageNet-100 resolution; None: the dataset's own
    train_subset: int | None = None  # K: train on K / C images per class (C classes) instead of every one
    subset_seed: int = 0  # the data seed that draws the subset: fixed by the preset, never a run's seed
    test_every_epoch: bool = True  # False: the test set is evaluated once, at the end of training
    eval_every: int = 1  # epochs between test-set evaluations (with test_every_epoch); the last epoch always
    checkpoint_every: int = 1  # epochs between checkpoints; the last epoch always (docs/decisions.md, "Eval cadence")
    fit_train_loss: float | None = None  # a run fits its images when its clean train_loss is at most this (mini)

    def __post_init__(self) -> None:
        if not self.depths or min(self.depths) < 0:
            shown = ",".join(map(str, self.depths)) or "(none)"
            raise ParamError("depths", shown, "give extra-block counts N >= 0, e.g. 0,1,2 or 1:100")
        for name, value in (
            ("epochs", self.recipe.epochs),
            ("batch_size", self.batch_size),
            ("lr", self.recipe.lr),
            ("image_size", self.image_size),
            ("train_subset", self.train_subset),
            ("eval_every", self.eval_every),
            ("checkpoint_every", self.checkpoint_every),
        ):
            if value is not None and not value > 0:
                raise ParamError(name, value, "must be positive")


@dataclass(frozen=True)
class SweepPresets:
    """One preset of the sweep across datasets, and what the scripts derive from it instead of testing its name."""

    default: SweepPreset  # every dataset without a row of its own
    default_dataset: str  # --dataset left out
    by_dataset: Mapping[str, SweepPreset] = field(default_factory=dict)
    seeds: int = 1  # seeds from --seed without --seeds (scripts 01, 02, 06, 07)
    growth_seeds: int = 1  # the same for script 09 (and 03 where its growth preset sets none)
    warn_on_cpu: bool = False  # sized for GPUs: a plan that would train on a CPU is warned about
    in_commands: bool = True  # False: the default --preset, left out of the commands a message suggests

    def for_dataset(self, dataset: str) -> SweepPreset:
        return self.by_dataset.get(dataset, self.default)


# paper: the test set every 5th epoch and a checkpoint every 10th keep both under 5% of a run's GPU time
# (an estimate: docs/decisions.md, section "Several runs per device, evaluation and checkpoint cadence (issue 33)").
CIFAR_PAPER = SweepPreset(  # the paper's N = 1..100 and the backbone, N = 0
    depths=(0, *CIFAR_EXTRA_BLOCKS),
    recipe=SGDRecipe(epochs=200, lr=0.1, warmup_epochs=1.0),
    batch_size=128,
    eval_every=5,
    checkpoint_every=10,
)
IMAGENET100_PAPER = SweepPreset(
    depths=IMAGENET100_EXTRA_BLOCKS,
    recipe=SGDRecipe(epochs=IMAGENET100_EPOCHS, lr=0.2, warmup_epochs=5.0),
    batch_size=256,
    image_size=64,
    eval_every=5,
    checkpoint_every=10,
)
SMOKE = SweepPreset(
    depths=(0, 1, 2, 4), recipe=SGDRecipe(epochs=6, lr=0.05, warmup_epochs=1.0), batch_size=64, eval_batch_size=256
)
SMOKE_IMAGENET100 = replace(SMOKE, depths=(1, 5), recipe=replace(SMOKE.recipe, epochs=2), image_size=64)
# mini (docs/decisions.md, section "Mini preset"): real CIFAR-10 images at a reduced scale; the sizes come from the
# sizing study written down there: a 5-epoch warm-up (50 steps) lets ResNet-17 and -20 fit their 1,000 images in
# 100 epochs (the 1-epoch warm-up left ResNet-20 at 0.16-0.19); ResNet-8 and -10 do not fit at any affordable
# setting; ResNet-23 was cut for the time budget.
MINI = SweepPreset(
    depths=(0, 2, 3, 4, 5, 9, 12),
    recipe=SGDRecipe(epochs=100, lr=0.05, warmup_epochs=5.0),
    batch_size=100,
    train_subset=1000,
    test_every_epoch=False,
    fit_train_loss=0.05,
)
# gpu-hour (issue 33; docs/reproducing.md, section "A reviewer's hour on one GPU"): every CIFAR-10 training image and
# the paper's recipe (batch 128, SGD at 0.1, 1 warm-up epoch, cosine; the paper preset's evaluation and checkpoint
# cadence) for 20 of its 200 epochs, at N = 0..26 (ResNet-8 to -34, the matched insertion's four depths among them)
# x 5 seeds: the smallest grid and seed count at which every rule of 01/02, 03 and 06 has power >= 0.8
# (docs/claim-rules.md). Sized by common/launch/gpu_estimates.py to about an hour on one H100-class GPU with 4 runs per
# device, 01 to 06 together: an estimate until a GPU measures it.
GPU_HOUR = replace(CIFAR_PAPER, depths=tuple(range(0, 27)), recipe=replace(CIFAR_PAPER.recipe, epochs=20))
GPU_HOUR_SEEDS = 5  # every depth, and 03's four architectures
MINI_SEEDS = 2  # mini: seeds --seed, --seed + 1 at every depth (the design 02, 06 and 07 read)
MINI_GROWTH_SEEDS = 3  # mini: growth by the criterion (09), one seed more than the sweep (09 trains its ResNet-8)

PRESETS = {
    "smoke": SweepPresets(SMOKE, "digits", {"imagenet100": SMOKE_IMAGENET100}),
    "mini": SweepPresets(MINI, "cifar10", seeds=MINI_SEEDS, growth_seeds=MINI_GROWTH_SEEDS),
    "paper": SweepPresets(
        CIFAR_PAPER, "cifar10", {"imagenet100": IMAGENET100_PAPER}, warn_on_cpu=True, in_commands=False
    ),
    "gpu-hour": SweepPresets(GPU_HOUR, "cifar10", seeds=GPU_HOUR_SEEDS, growth_seeds=GPU_HOUR_SEEDS, warn_on_cpu=True),
}
DEFAULT_DATASET = {name: p.default_dataset for name, p in PRESETS.items()}


def sweep_presets(preset: str) -> SweepPresets:
    """The preset ``preset`` ("smoke", "mini", "paper" or "gpu-hour") of the sweep, every dataset's row."""
    return one_of("preset", preset, PRESETS)


def sweep_preset(preset: str, dataset: str) -> SweepPreset:
    """The settings of ``preset`` ("smoke", "mini", "paper" or "gpu-hour") for ``dataset``."""
    return sweep_presets(preset).for_dataset(dataset)


__all__ = [
    "CIFAR_PAPER",
    "DEFAULT_DATASET",
    "GPU_HOUR",
    "GPU_HOUR_SEEDS",
    "IMAGENET100_PAPER",
    "MINI",
    "MINI_GROWTH_SEEDS",
    "MINI_SEEDS",
    "PRESETS",
    "RECIPE_FIELDS",
    "SMOKE",
    "SMOKE_IMAGENET100",
    "SweepPreset",
    "SweepPresets",
    "sweep_preset",
    "sweep_presets",
]
