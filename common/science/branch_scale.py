"""How far each residual branch has grown: ``||V psi(z)|| / ||shortcut(z)||`` per block, on a set of images.

A block ``z -> shortcut(z) + V psi(z; U)`` inserted at ``V = 0`` computes the identity; whether growth then *learned*
anything shows in the scale its branch reaches against the stream it is added to. :func:`branch_ratios` reads it
for every block of ``model.blocks`` that has a terminal layer ``V`` (a ``terminal`` attribute: the ResNets'
:class:`~common.models.resnet.ResidualBlock` and the inserted :class:`~common.science.tangent.ZeroOutputBlock`):

    ratio_b = sqrt(sum_i ||V psi(z_i)||^2) / sqrt(sum_i ||shortcut(z_i)||^2)

summed over every image ``i`` of ``batches`` (Frobenius norms of each image's maps; for a stride-1 block the
shortcut is the identity, so the denominator is the block's input; for a downsampling block it is that input
subsampled and zero-padded, the tensor the branch is added to). In eval mode (running statistics), without
gradients, sums in float64; nothing of the model is changed (:func:`common.science.activations.probe_mode`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from common.science.activations import probe_mode
from common.science.tangent import ZeroOutputBlock


@dataclass(frozen=True)
class BranchRatio:
    """Block ``index`` of ``model.blocks``: ``ratio`` = branch norm / shortcut norm over the images; ``inserted``: a
    zero-output block put in by growth (a :class:`~common.science.tangent.ZeroOutputBlock`), else the network's own."""

    index: int
    ratio: float
    inserted: bool

    def to_record(self) -> dict:
        return {"block": self.index, "ratio": self.ratio, "inserted": self.inserted}


def branch_ratios(model: nn.Module, batches: Iterable[torch.Tensor]) -> list[BranchRatio]:
    """:class:`BranchRatio` of every block of ``model.blocks`` with a ``terminal`` layer, in block order, over the
    inputs ``batches`` (each a batch of model inputs; module docstring)."""
    blocks = [(i, b) for i, b in enumerate(model.blocks) if isinstance(getattr(b, "terminal", None), nn.Module)]
    branch_sq, stream_sq = [0.0] * len(blocks), [0.0] * len(blocks)
    inputs: dict[int, torch.Tensor] = {}  # block k's input z, read before its terminal layer runs

    def keep_input(k: int, args: tuple) -> None:
        inputs[k] = args[0]

    def add_norms(k: int, shortcut: nn.Module, branch: torch.Tensor) -> None:
        branch_sq[k] += float(branch.double().square().sum())
        stream_sq[k] += float(shortcut(inputs.pop(k)).double().square().sum())

    handles = []
    for k, (_, block) in enumerate(blocks):
        shortcut = getattr(block, "shortcut", None) or nn.Identity()
        handles.append(block.register_forward_pre_hook(lambda m, a, k=k: keep_input(k, a)))
        handles.append(block.terminal.register_forward_hook(lambda m, a, out, k=k, s=shortcut: add_norms(k, s, out)))
    seen = 0
    try:
        with probe_mode(model, "eval"), torch.no_grad():
            for x in batches:
                model(x)
                seen += 1
    finally:
        for h in handles:
            h.remove()
    if not seen:
        raise ValueError("branch_ratios got no batches")
    return [
        BranchRatio(i, (b / s) ** 0.5 if s > 0 else float("nan"), isinstance(block, ZeroOutputBlock))
        for (i, block), b, s in zip(blocks, branch_sq, stream_sq, strict=True)
    ]


def ratio_summary(records: Iterable[dict]) -> dict[str, float]:
    """Mean, lowest and highest ``ratio`` of the inserted and of the original blocks among ``records`` (each a
    :meth:`BranchRatio.to_record`): ``inserted_mean``, ``inserted_min``, ``inserted_max``, ``original_mean``, ...;
    NaN for a kind with no block (a run that never grew)."""
    out = {}
    records = list(records)
    for kind, inserted in (("inserted", True), ("original", False)):
        values = [float(r["ratio"]) for r in records if bool(r["inserted"]) is inserted]
        out[f"{kind}_mean"] = sum(values) / len(values) if values else float("nan")
        out[f"{kind}_min"] = min(values, default=float("nan"))
        out[f"{kind}_max"] = max(values, default=float("nan"))
    return out


__all__ = ["BranchRatio", "branch_ratios", "ratio_summary"]
