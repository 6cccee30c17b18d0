"""The papers' reported numbers, for side-by-side comparison only (never used as an output).

Every number the two papers report (arXiv 2608.14664 and Cohen et al. 2021, as summarised for
this reproduction) is one :class:`PaperNumber` in :data:`PAPER_NUMBERS` with the section it
comes from; the few values the code compares against (the 5e-3 low-signal
line of 02, the growth-vs-scratch losses of 03, the matched-insertion reductions of 06, Cohen et
al.'s exponents beside 07's fits, and the paper's words in each row of the claims report of 08)
are also named constants below, defined once and referenced by the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOURCE = "arXiv 2608.14664 (Liu et al.)"
COHEN = "Cohen, Cont, Rossier, Xu, ICML 2021 (scaling properties of deep ResNets)"

# ----------------------------------------------------------------------------- named values
LOW_SIGNAL_AG = 5e-3  # AGmax below ~5e-3: the low-signal regime (Experiments, depth saturation)
AG_DEPTH_TREND = "AGmax decreases with depth toward a low-signal regime"  # ResNets, GPT-2, Pythia (Abstract, Experiments)
LOW_SIGNAL_PLATEAU = "AGmax stays below ~5e-3; test performance fluctuates without systematic gains"  # extended-depth runs
SEPARATED_TEST = ("separated test H0: Gamma <= delta vs H1: Gamma >= delta + 2t at threshold delta + t (Theorem 3); "
                  "the paper reports no App. G run")  # App. G
PROJECTION_BOUND = "V_S,l <= AG_l: orthogonal projection cannot increase the norm (equality under realizability)"  # Intro, App. A

GROWTH_MEAN_TRAIN_LOSS = {"growth": 0.0066, "scratch": 0.0072}  # ResNet-10..13, CIFAR-10
GROWTH_MEAN_TEST_LOSS = {"growth": 0.2576, "scratch": 0.2922}
GROWTH_TEST_RELATIVE_REDUCTION = 0.118  # "about 11.8%"
GROWTH_TEST_ABS_REDUCTION_RANGE = {"ResNet-12": 0.0242, "ResNet-10": 0.0456}  # smallest and largest
GROWTH_DEPTHS = (10, 11, 12, 13)
GROWTH_LOWER_TRAIN_LOSS = ("ResNet-10", "ResNet-11", "ResNet-13")  # growth's training loss is lower; slightly higher for ResNet-12
GROWTH_LOWER_TEST_LOSS = ("ResNet-10", "ResNet-11", "ResNet-12", "ResNet-13")  # growth's test loss is lower for all four

MATCHED_INSERTION_ALPHA = 1e-3
MATCHED_INSERTION_REDUCTION = {8: 7e-4, 14: 4e-4, 20: 2e-4, 34: 2e-4}  # depth d of ResNet-d -> loss drop (H.1)

CIFAR_EXTRA_BLOCKS = tuple(range(1, 101))  # N = 1..100 (B.1)
IMAGENET100_EXTRA_BLOCKS = tuple(range(1, 50, 4))  # N in {1, 5, 9, ..., 49} (B.3)
GPT2_BASELINE_LAYERS = 12
GPT2_DIMS = {"hidden": 768, "feed_forward": 3072, "heads": 12}
FINEWEB_EDU_TOKENS = 310_000_347

# Cohen et al. (2021), reported weight-scaling exponents (script 07's side-by-side column).
COHEN_TANH_BETA = 0.3  # fully connected, tanh, shared delta, synthetic data (their Figure 2)
COHEN_TANH_ALPHA = 0.7
COHEN_RELU_ALPHA_PLUS_BETA = 1.0  # fully connected, ReLU, per-layer delta (their Figure 4, left)
COHEN_CONV_BOUNDED = {  # convolutional ResNets on CIFAR-10, no BatchNorm: bounded, not decreasing (Figures 7, 8)
    "max_norm_exponent": "~0 (max norm bounded, not decreasing)",
    "nu": ">= 0 (scaled increments bounded)",
    "rss_slope": "<= 0 (root sum of squares bounded)",
}
COHEN_CONV_MAX_NORM_EXPONENT = 0.0  # the "~0" of COHEN_CONV_BOUNDED as a number (claims report, +-0.1)
COHEN_MAX_DEPTH = 10321


@dataclass(frozen=True)
class PaperNumber:
    """One reported number (or fact) with where it is reported."""

    what: str
    value: Any
    section: str
    source: str = SOURCE


PAPER_NUMBERS: tuple[PaperNumber, ...] = (
    PaperNumber("low-signal threshold on AGmax", LOW_SIGNAL_AG, "Experiments (depth saturation)"),
    PaperNumber("AGmax across depth", AG_DEPTH_TREND, "Experiments"),
    PaperNumber("extended-depth runs", LOW_SIGNAL_PLATEAU, "Experiments"),
    PaperNumber("activation-gradient score and growth value", PROJECTION_BOUND, "Introduction, App. A"),
    PaperNumber(
        "CIFAR backbone",
        {"backbone": "ResNet-8", "stage_widths": (16, 32, 64), "extra_blocks": CIFAR_EXTRA_BLOCKS, "blocks": "3+N"},
        "B.1",
    ),
    PaperNumber(
        "ImageNet-100",
        {
            "stem": "CIFAR-style 3-stage", "base_channels": 32, "extra_blocks": IMAGENET100_EXTRA_BLOCKS,
            "epochs": 300, "no_7x7_stride2_conv": True, "no_max_pool": True,
        },
        "B.3",
    ),
    PaperNumber(
        "CIFAR-10 / CIFAR-100",
        {"train": 50_000, "test": 10_000, "classes": {"cifar10": 10, "cifar100": 100},
         "preprocessing": "crop, flip, per-dataset normalisation"},
        "B.2",
    ),
    PaperNumber(
        "GPT-2 sweep",
        {"baseline_layers": GPT2_BASELINE_LAYERS, **GPT2_DIMS, "fineweb_edu_tokens": FINEWEB_EDU_TOKENS},
        "B.4",
    ),
    PaperNumber(
        "Pythia",
        {"configs": 6, "deduplicated": True, "revision": "step143000", "procedure": "continued pretraining, frozen-model AG"},
        "B.5",
    ),
    PaperNumber("growth vs scratch, mean training loss", GROWTH_MEAN_TRAIN_LOSS, "Function-preserving growth"),
    PaperNumber(
        "growth vs scratch, mean test loss",
        {**GROWTH_MEAN_TEST_LOSS, "relative_reduction": GROWTH_TEST_RELATIVE_REDUCTION},
        "Function-preserving growth",
    ),
    PaperNumber(
        "growth vs scratch, per architecture",
        {
            "growth_lower_train_loss": GROWTH_LOWER_TRAIN_LOSS,
            "growth_higher_train_loss": ("ResNet-12",),
            "growth_lower_test_loss": GROWTH_LOWER_TEST_LOSS,
            "abs_test_loss_reduction_min": ("ResNet-12", GROWTH_TEST_ABS_REDUCTION_RANGE["ResNet-12"]),
            "abs_test_loss_reduction_max": ("ResNet-10", GROWTH_TEST_ABS_REDUCTION_RANGE["ResNet-10"]),
        },
        "Function-preserving growth",
    ),
    PaperNumber(
        "matched insertion, immediate training-loss reduction",
        {"alpha": MATCHED_INSERTION_ALPHA, "reduction_by_depth": MATCHED_INSERTION_REDUCTION, "task_loss_training": False},
        "H.1",
    ),
    PaperNumber(
        "finite-sample detector",
        "false-negative probability Pr(Sat_n = 0) <= 1 / (n tau_n^2); separated test H0: Gamma <= delta "
        "vs H1: Gamma >= delta + 2t at threshold delta + t",
        "G",
    ),
    PaperNumber("gradient-descent decrease", "at eta = 1/L_l a one-step decrease of at least ||g_l||^2 / (2 L_l)", "D"),
    # Second seed paper (Cohen et al. 2021).
    PaperNumber(
        "fully connected, tanh, shared delta, synthetic data",
        {"beta": COHEN_TANH_BETA, "alpha": COHEN_TANH_ALPHA, "hypothesis": "1 (smooth limit) more likely", "noise_part": "negligible"},
        "Cohen et al.", COHEN,
    ),
    PaperNumber(
        "fully connected, ReLU, per-layer delta",
        {"alpha_plus_beta": COHEN_RELU_ALPHA_PLUS_BETA, "hypothesis": "2 (diffusive)"},
        "Cohen et al.", COHEN,
    ),
    PaperNumber(
        "convolutional ResNets on CIFAR-10 (no BatchNorm)",
        {"bounded_as_depth_grows": COHEN_CONV_BOUNDED, "reading": "sparse weights, neither hypothesis"},
        "Cohen et al.", COHEN,
    ),
    PaperNumber("depths studied", {"max_depth": COHEN_MAX_DEPTH, "accurate_from_depth": 15}, "Cohen et al.", COHEN),
)


def by_section(section: str) -> list[PaperNumber]:
    """All rows reported in ``section`` (e.g. ``"H.1"``, ``"Function-preserving growth"``)."""
    return [row for row in PAPER_NUMBERS if row.section == section]
