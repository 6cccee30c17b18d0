"""The weight sequences of script 07 (:mod:`common.experiments.weight_scaling`): what its fits read off a network.

FC ResNets (:func:`fc_tensors`, :func:`fc_statistics`): the depth-indexed ``A_k``, ``b_k``, ``delta_k`` and
``|delta_k| A_k``, their per-depth records and ``layers.csv`` rows. The sweep's ResNets (:func:`stage_sequences`):
per block ``z -> shortcut(z) + V relu(BN(conv_U z))`` the first conv ``A`` = ``U`` with the BatchNorm after it folded
in (:func:`folded_conv`: in eval mode ``BN(conv_U z)`` is one conv with a bias), and the terminal conv ``delta`` = ``V``
taken raw (nothing follows it), and their input feature-map sizes (docs/decisions.md, section "One residual block").
"""

from __future__ import annotations

import torch
from torch import nn

from common.models.fc_resnet import FCResNet
from common.science import scaling


def fc_tensors(model: FCResNet) -> dict[str, torch.Tensor]:
    """The depth-indexed sequences of a trained FC ResNet: ``A``, ``b``, ``delta`` (per layer) and ``|delta_k| A_k``."""
    with torch.no_grad():
        deltas = model.layer_deltas().detach().double()
        a = model.A.detach().double()
        return {"A": a, "b": model.b.detach().double(), "delta": deltas, "delta_A": deltas.abs()[:, None, None] * a}


def fc_statistics(model: FCResNet, base: dict) -> tuple[list[dict], list[dict]]:
    """Per-depth records (Frobenius for every tensor, spectral for the matrices) and ``layers.csv`` rows."""
    records, layers = [], []
    for name, seq in fc_tensors(model).items():
        records.append({**base, "tensor": name, "norm": "fro", **scaling.weight_statistics(seq)})
        if seq.dim() == 3:  # matrices: also the spectral norm (no trend/noise split: that is a Frobenius statistic)
            spectral = scaling.weight_statistics(seq, "spectral", trend_noise=False)
            records.append({**base, "tensor": name, "norm": "spectral", **spectral})
        split = scaling.trend_noise_split(seq)
        entry = (slice(None), *(0, 1)[: seq.dim() - 1])  # A_k[0, 1], b_k[0], delta_k
        stat = {f"entry_{part}": getattr(split, part)[1:][entry] for part in ("path", "trend", "noise")}
        stat |= {f"{part}_norm": split.norms(part)[1:] for part in ("path", "trend", "noise")}
        stat["fro"] = scaling.layer_norms(seq)
        stat["spectral"] = scaling.layer_norms(seq, "spectral")
        L = len(seq)
        for k in range(L):
            layers.append(
                {
                    "stage": 0,
                    "tensor": name,
                    "k": k,
                    "t": k / L,
                    "entry": float(seq[entry][k]),
                    **{key: float(v[k]) for key, v in stat.items()},
                }
            )
    return records, layers


def folded_conv(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> torch.Tensor:
    """The kernel of ``bn(conv(.))`` in eval mode as one conv (:func:`common.science.scaling.fold_batchnorm`), float64."""
    weight, _ = scaling.fold_batchnorm(
        conv.weight.detach().double(),
        running_mean=bn.running_mean.double(),
        running_var=bn.running_var.double(),
        gamma=bn.weight.detach().double(),
        beta=bn.bias.detach().double(),
        eps=bn.eps,
    )
    return weight


def stage_sequences(model: nn.Module, input_size: int) -> list[dict]:
    """Per block: stage (1-based), downsampling or not, first conv ``A`` (``U``, its BatchNorm folded in) and terminal
    conv ``delta`` (``V``, raw), and their input feature-map sizes (one dummy forward at ``input_size`` pixels)."""
    sizes: dict[int, int] = {}
    hooks = [
        conv.register_forward_hook(lambda m, args, out: sizes.__setitem__(id(m), args[0].shape[-1]))
        for block in model.blocks
        for conv in (block.psi[0], block.terminal)
    ]
    try:
        with torch.no_grad():
            model(torch.zeros(1, model.config.in_channels, input_size, input_size, dtype=model.stem[0].weight.dtype))
    finally:
        for hook in hooks:
            hook.remove()
    blocks = []
    for block, stage in zip(model.blocks, model.stage_of_block, strict=True):
        first, last = block.psi[0], block.terminal
        blocks.append(
            {
                "stage": stage + 1,
                "downsample": not isinstance(block.shortcut, nn.Identity),
                "A": folded_conv(first, block.psi[1]),
                "delta": last.weight.detach().double(),
                "size": {"A": sizes[id(first)], "delta": sizes[id(last)]},
            }
        )
    return blocks


__all__ = ["fc_statistics", "fc_tensors", "folded_conv", "stage_sequences"]
