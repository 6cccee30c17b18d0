"""Script 11's presets: probing one's own network (the analysis batches, the exact values, App. G's sample).

Each field is a flag of ``11_probe_network.py`` of the same name (``--batch-size``, ``--n-batches``, ``--exact``,
``--app-g-n`` ...). ``smoke`` builds a small torchvision ResNet with random weights on synthetic images when no model
and no data are given (seconds on a CPU); ``mini`` and ``paper`` probe the model and data given, ``paper`` with more
examples. A field's single value is checked here, once, naming the field (:class:`common.errors.ParamError`).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import ParamError
from common.presets.probe_ag import SATURATION_ALPHA, SATURATION_CAL_FRACTION, app_g_sizes


@dataclass(frozen=True)
class NetworkPreset:
    """The probe settings of one preset."""

    batch_size: int = 32  # analysis batch size (AG_l per batch mean scales like 1/sqrt(batch size))
    n_batches: int = 8  # B analysis batches
    exact: bool = True  # V_S,l pooled over every analysis example (one factorisation per place)
    per_batch: bool = False  # V_S,l on each batch too (one factorisation per place and batch)
    image_size: int = 224  # images of a folder: resized and centre-cropped to this size
    seq_len: int = 128  # tokens per window of a text file
    app_g_n: int = 512  # examples of App. G's independent sample; 0: no App. G test
    app_g_alpha: float = SATURATION_ALPHA
    app_g_cal_fraction: float = SATURATION_CAL_FRACTION
    app_g_delta: float | None = None  # None: no tolerance, no 'saturated' verdict
    smoke: bool = False  # no model and data given: the small torchvision ResNet on synthetic images

    def __post_init__(self) -> None:
        for name in ("batch_size", "n_batches", "image_size", "seq_len"):
            if getattr(self, name) <= 0:
                raise ParamError(name, getattr(self, name), "must be positive")
        if self.app_g_n < 0:
            raise ParamError("app_g_n", self.app_g_n, "give 0 (no App. G test) or a sample size")
        for name in ("app_g_alpha", "app_g_cal_fraction"):
            if not 0 < getattr(self, name) < 1:
                raise ParamError(name, getattr(self, name), "must be strictly between 0 and 1")
        if self.app_g_delta is not None and self.app_g_delta < 0:
            raise ParamError("app_g_delta", self.app_g_delta, "must be >= 0 (or None: no tolerance)")
        if self.app_g_n:
            app_g_sizes(self.app_g_n, self.app_g_cal_fraction)  # both parts big enough, before any run


PRESETS = {
    # the small torchvision ResNet (8-64 channels, one block per stage) on 32x32 synthetic images: seconds
    "smoke": NetworkPreset(batch_size=8, n_batches=2, image_size=32, app_g_n=24, smoke=True),
    "mini": NetworkPreset(batch_size=32, n_batches=4, app_g_n=256),
    "paper": NetworkPreset(),
}
