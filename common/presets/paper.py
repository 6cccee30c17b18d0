"""The papers' settings and reported numbers, each written once here with the section it comes from.

From arXiv 2608.14664 (Liu et al.) and Cohen et al. (ICML 2021), as summarised for this reproduction:

- **Settings**, what the paper ran: the depth grids, stage widths and ImageNet-100's epochs of the
  ResNet sweep, GPT-2's dimensions and token budget, the Pythia revision, the growth depths, the
  matched-insertion depths and alpha. The presets and models of scripts 01, 03, 04, 05 and 06 read
  them from here and write none of them again; what the paper leaves open is decided where they are read.
- **Reported results**, what the paper measured: the 5e-3 low-signal line of 02, the growth-vs-scratch
  losses of 03, the matched-insertion reductions of 06, Cohen et al.'s exponents beside 07's fits, and
  the paper's words in each row of the claims report of 08. For side-by-side comparison only, never
  used as an output.
"""

from __future__ import annotations

# ----------------------------------------------------------------------------- settings
CIFAR_EXTRA_BLOCKS = tuple(range(1, 101))  # N = 1..100 extra blocks over the ResNet-8 backbone (B.1)
CIFAR_STAGE_WIDTHS = (16, 32, 64)  # B.1
IMAGENET100_EXTRA_BLOCKS = tuple(range(1, 50, 4))  # N in {1, 5, 9, ..., 49} (B.3)
IMAGENET100_EPOCHS = 300  # B.3
IMAGENET100_BASE_CHANNELS = 32  # the first stage's width; B.3 gives no other (common/models/resnet.py widens per stage)

GPT2_BASELINE_LAYERS = 12  # L of GPT-2 Small, the baseline of the depth sweep (B.4)
GPT2_WIDTH = 768  # hidden size d; the feed-forward size, 3072, is 4 d (B.4)
GPT2_HEADS = 12  # B.4
FINEWEB_EDU_TOKENS = 310_000_347  # FineWeb-Edu's token budget of the GPT-2 sweep (B.4)

PYTHIA_REVISION = "step143000"  # the official final checkpoint that each Pythia model continues from (B.5)

GROWTH_DEPTHS = (10, 11, 12, 13)  # ResNet-d grown and trained from scratch on CIFAR-10 (Function-preserving growth)
MATCHED_INSERTION_ALPHA = 1e-3  # the target scale of the matched insertion (H.1)

# ----------------------------------------------------------------------------- reported results
LOW_SIGNAL_AG = 5e-3  # AGmax below ~5e-3: the low-signal regime (Experiments, depth saturation)
AG_DEPTH_TREND = (
    "AGmax decreases with depth toward a low-signal regime"  # ResNets, GPT-2, Pythia (Abstract, Experiments)
)
LOW_SIGNAL_PLATEAU = (
    "AGmax stays below ~5e-3; test performance fluctuates without systematic gains"  # extended-depth runs
)
SEPARATED_TEST = (
    "separated test H0: Gamma <= delta vs H1: Gamma >= delta + 2t at threshold delta + t (Theorem 3); "
    "the paper reports no App. G run"
)  # App. G
PROJECTION_BOUND = (
    "V_S,l <= AG_l: orthogonal projection cannot increase the norm (equality under realizability)"  # Intro, App. A
)

# Function-preserving growth, at GROWTH_DEPTHS on CIFAR-10.
GROWTH_MEAN_TRAIN_LOSS = {"growth": 0.0066, "scratch": 0.0072}  # ResNet-10..13, CIFAR-10
GROWTH_MEAN_TEST_LOSS = {"growth": 0.2576, "scratch": 0.2922}
GROWTH_TEST_RELATIVE_REDUCTION = 0.118  # "about 11.8%"
GROWTH_TEST_ABS_REDUCTION_RANGE = {"ResNet-12": 0.0242, "ResNet-10": 0.0456}  # smallest and largest
GROWTH_LOWER_TRAIN_LOSS = (
    "ResNet-10",
    "ResNet-11",
    "ResNet-13",
)  # growth's training loss is lower; slightly higher for ResNet-12
GROWTH_LOWER_TEST_LOSS = (
    "ResNet-10",
    "ResNet-11",
    "ResNet-12",
    "ResNet-13",
)  # growth's test loss is lower for all four

# depth d of ResNet-d -> immediate training-loss drop at MATCHED_INSERTION_ALPHA, no task-loss training (H.1);
# its depths are the setting of script 06's paper preset.
MATCHED_INSERTION_REDUCTION = {8: 7e-4, 14: 4e-4, 20: 2e-4, 34: 2e-4}

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
