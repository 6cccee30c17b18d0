"""Script 02's presets: the AG probe's analysis batches and App. G's separated saturation test, per ``--preset``.

Smoke, mini and paper differ in the number of analysis batches (mini's 1,000 training images hold 7 of 128) and in
whether the exact growth value ``V_S,l`` is computed (smoke and mini: yes; paper: no, it is the costly part). Every
other setting is the same in all three; a flag replaces any field (:func:`common.experiments.probe_ag.probe_configs`).
A field's single value is checked here, once, naming the field (:class:`common.errors.ParamError`).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import ParamError
from common.science.activations import BN_MODES

DEFAULT_BATCH_SIZE = 128  # analysis batch size (docs/decisions.md): AG_l ~ 1/sqrt(batch)
DEFAULT_N_BATCHES = 10  # B analysis batches per model
MINI_N_BATCHES = 7  # --preset mini: 7 x 128 of the mini sweep's 1,000 training images (docs/decisions.md)
SPLITS = ("train", "test")
HELD_OUT = "held-out"  # App. G's default sample: every image the model never trained on (probe_ag.held_out_pool)
SATURATION_SPLITS = (HELD_OUT, "test", "train")
SATURATION_ALPHA = 0.05  # App. G: the interval's confidence is 1 - alpha (docs/decisions.md)
SATURATION_CAL_FRACTION = 0.25  # App. G: the calibration part's share of the independent sample (docs/decisions.md)
# App. G on every probed model, or on those of the deepest depth probed (per dataset) only: the claims report's App. G
# row reads the deepest depth alone, and App. G's ~11,000 held-out images cost mini most of 02's time (docs/decisions.md)
SATURATION_DEPTHS = ("all", "deepest")


@dataclass(frozen=True)
class ProbePreset:
    """The probe settings of one preset (each one a flag of script 02 of the same name, ``--batch-size`` ...)."""

    split: str = "train"  # where the analysis batches come from
    batch_size: int = DEFAULT_BATCH_SIZE
    n_batches: int = DEFAULT_N_BATCHES
    exact: bool = False  # also V_S,l per candidate
    bn_mode: str = "eval"
    saturation_delta: float | None = None  # None: no tolerance, no "saturated" verdict
    saturation_t: float | None = None  # None: t from the calibration traces and n_test
    saturation_alpha: float = SATURATION_ALPHA
    saturation_n: int | None = None  # None: every example of the split outside the analysis batches
    saturation_split: str = HELD_OUT
    saturation_cal_fraction: float = SATURATION_CAL_FRACTION
    saturation_depths: str = "all"  # App. G on every probed model, or on the deepest depth's only (SATURATION_DEPTHS)

    def __post_init__(self) -> None:
        for name, options in (
            ("split", SPLITS),
            ("saturation_split", SATURATION_SPLITS),
            ("bn_mode", BN_MODES),
            ("saturation_depths", SATURATION_DEPTHS),
        ):
            if getattr(self, name) not in options:
                raise ParamError(name, getattr(self, name), f"use one of {', '.join(options)}")
        for name in ("batch_size", "n_batches"):
            if getattr(self, name) <= 0:
                raise ParamError(name, getattr(self, name), "must be positive")
        if self.saturation_delta is not None and self.saturation_delta < 0:
            raise ParamError(
                "saturation_delta",
                self.saturation_delta,
                "must be >= 0 (or None: no tolerance, no 'saturated' verdict)",
            )
        if self.saturation_t is not None and self.saturation_t <= 0:
            raise ParamError("saturation_t", self.saturation_t, "the half-width must be > 0 (or None: from alpha)")
        for name in ("saturation_alpha", "saturation_cal_fraction"):
            if not 0 < getattr(self, name) < 1:
                raise ParamError(name, getattr(self, name), "must be strictly between 0 and 1")
        if self.saturation_n is not None and self.saturation_n < 2:
            raise ParamError("saturation_n", self.saturation_n, "the traces need a sample covariance, so at least 2")
        if self.saturation_n is not None and self.saturation_t is None:
            app_g_sizes(self.saturation_n, self.saturation_cal_fraction)  # both parts big enough, before any run


def app_g_sizes(n: int, cal_fraction: float) -> tuple[int, int]:
    """``(n_cal, n_test)`` of an App. G sample of ``n`` examples: ``round(cal_fraction * n)`` calibrate the traces (at
    least 2, for a sample covariance), the other ``n_test`` (at least 1) give ``C_hat_l``; else a ParamError."""
    n_cal = round(cal_fraction * n)
    if n_cal < 2 or n - n_cal < 1:
        raise ParamError(
            "saturation_cal_fraction",
            f"{cal_fraction:g}",
            f"an App. G sample of {n} examples split there leaves {n_cal} calibration and {n - n_cal} test examples; "
            "at least 2 and 1 are needed: a larger sample (saturation_n) or another fraction",
        )
    return n_cal, n - n_cal


PRESETS = {
    "smoke": ProbePreset(exact=True),
    "mini": ProbePreset(n_batches=MINI_N_BATCHES, exact=True, saturation_depths="deepest"),
    "paper": ProbePreset(),
    "gpu-hour": ProbePreset(),  # the paper's probe of the gpu-hour sweep (all of CIFAR-10: 10 batches of 128)
}
