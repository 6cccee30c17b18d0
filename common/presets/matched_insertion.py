"""Script 06's presets: which sweep depths the matched insertion of App. H.1 reads, where and at which ``alpha``.

Paper and gpu-hour: the paper's four depths (ResNet-8, -14, -20, -34: N = 0, 6, 12, 26); smoke and mini: every finished depth of
their sweep (None). The candidate (the end of stage 1 at every depth: one kind of tensor across depths), the target
scales and the fit are the same in all three; a flag replaces any field
(:func:`common.experiments.matched_insertion.matched_configs`). A field's single value is checked here, once, naming
the field (:class:`common.errors.ParamError`).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import ParamError
from common.models.resnet import BACKBONE_DEPTH
from common.presets.paper import MATCHED_INSERTION_ALPHA, MATCHED_INSERTION_REDUCTION

PAPER_DEPTHS = tuple(d - BACKBONE_DEPTH for d in sorted(MATCHED_INSERTION_REDUCTION))  # N = 0, 6, 12, 26
DEFAULT_ALPHAS = (MATCHED_INSERTION_ALPHA,)  # the paper's alpha = 1e-3 (a protocol setting, not a result)
CANDIDATE_RULES = ("stage1-end", "next", "all")
DEFAULT_CANDIDATE = "stage1-end"  # one kind of tensor at every depth (the claims compare drops across depths)
FITS = ("closed-form", "gradient-descent")


@dataclass(frozen=True)
class MatchedPreset:
    """The matched insertion's settings of one preset (each one a flag of script 06: ``--depths``, ``--candidate``,
    ``--alpha``, ``--fit``, ``--gd-steps``)."""

    depths: tuple[int, ...] | None = None  # extra blocks N of the sweep runs; None: every finished depth
    candidate: str = DEFAULT_CANDIDATE  # a rule of CANDIDATE_RULES or a candidate index
    alphas: tuple[float, ...] = DEFAULT_ALPHAS  # target scales: the block's output matches -alpha g_i
    fit: str = "closed-form"
    gd_steps: int = 2000  # steps of the gradient-descent fit

    def __post_init__(self) -> None:
        if self.depths is not None and (not self.depths or any(n < 0 for n in self.depths)):
            raise ParamError("depths", ",".join(map(str, self.depths)), "need one or more extra blocks N >= 0")
        if self.candidate not in CANDIDATE_RULES and not str(self.candidate).isdigit():
            raise ParamError("candidate", self.candidate, f"use {', '.join(CANDIDATE_RULES)} or a candidate index")
        if not self.alphas or any(not a > 0 for a in self.alphas):
            raise ParamError("alphas", list(self.alphas), "every alpha must be > 0")
        if self.fit not in FITS:
            raise ParamError("fit", self.fit, f"use one of {', '.join(FITS)}")
        if self.gd_steps <= 0:
            raise ParamError("gd_steps", self.gd_steps, "must be positive")


PRESETS = {
    "smoke": MatchedPreset(),
    "mini": MatchedPreset(),
    "paper": MatchedPreset(depths=PAPER_DEPTHS),
    "gpu-hour": MatchedPreset(depths=PAPER_DEPTHS),  # the paper's four depths, all in the gpu-hour sweep's N = 0..26
}
