"""Function-preserving growth: insert standard zero-output blocks at candidates (App. E; docs/design.md).

Candidate ``l`` is the input of ``model.blocks[l]`` (the last candidate is the input of the
head), so a block inserted at candidate ``l`` becomes ``model.blocks[l]`` (appended for the
last candidate): it reads ``z_l`` and, being zero-output, hands the same ``z_l`` on. The model
computes the same function pointwise (:func:`function_preserved` checks it bit for bit).

Works for any model with a ``blocks`` ``nn.ModuleList`` whose blocks map the state alone
(``z = block(z)``) and a ``candidates()`` method that follows :mod:`common.models.candidates`: the
ResNets (``conv3x3`` family) and the GPT decoders of :mod:`common.models.gpt` (``linear``). A Hugging
Face decoder's layers take more than the state; it grows by a copied layer with its output
projections zeroed instead (``common.models.hf_decoder.insert_zero_layer``).

:func:`check_function_preserved` is the run-time guard of any growth step (script 03 grows a
ResNet with its own basic block, ``common.models.resnet.grow``): the grown model must give the
parent's outputs bit for bit, in float64, in train mode (batch statistics) and in eval mode.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from common.science.tangent import ZeroOutputBlock, candidate_family, make_zero_block


def candidate_width(model: nn.Module, index: int) -> int:
    """``d``: channels (or features) of the state ``z_index``, read from the module that consumes it.

    A model may answer itself with ``candidate_width(index)``; otherwise the first Conv2d,
    Linear or LayerNorm of the candidate's module gives its input width.
    """
    if hasattr(model, "candidate_width"):
        return int(model.candidate_width(index))
    module = _candidate(model, index).module
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            return m.in_channels
        if isinstance(m, nn.Linear):
            return m.in_features
        if isinstance(m, nn.LayerNorm):
            return int(m.normalized_shape[-1])
    raise ValueError(f"cannot tell the width of candidate {index} ({type(module).__name__}); pass width=")


def insert_zero_block(
    model: nn.Module,
    index: int,
    family: str | None = None,
    seed: int = 0,
    *,
    width: int | None = None,
) -> ZeroOutputBlock:
    """Insert the protocol's zero-output block at candidate ``index`` (in place) and return it.

    ``family`` defaults to the candidate's own (:func:`common.science.tangent.candidate_family`, the rule the
    probe uses: ``conv3x3`` for the ResNets); ``U_l`` is seeded by ``(seed, index)`` exactly as in
    the probe's exact projection, so the block's tangent features are the ``Psi``
    whose growth value the probe reported. The block takes the dtype and device of the model.
    """
    family = candidate_family(_candidate(model, index), family).name
    width = width if width is not None else candidate_width(model, index)
    like = next(model.parameters())
    block = make_zero_block(family, width, seed, index, like=like)
    block.train(model.training)
    model.blocks.insert(index, block)
    stages = getattr(model, "stage_of_block", None)
    if isinstance(stages, list) and stages:
        stages.insert(index, stages[index - 1] if index > 0 else stages[0])
    return block


def insert_zero_blocks(
    model: nn.Module, indices: Sequence[int], family: str | None = None, seed: int = 0
) -> list[ZeroOutputBlock]:
    """Joint insertion (App. E): one zero-output block at each of several candidates of the *original* model.

    Inserts from the last index to the first so that each index still names the original
    candidate; returns the blocks in the order of ``indices``.
    """
    if len(set(indices)) != len(indices):
        raise ValueError(f"joint insertion needs distinct candidates, got {list(indices)}")
    widths = {i: candidate_width(model, i) for i in indices}
    blocks = {i: insert_zero_block(model, i, family, seed, width=widths[i]) for i in sorted(indices, reverse=True)}
    return [blocks[i] for i in indices]


@torch.no_grad()
def function_preserved(before: nn.Module, after: nn.Module, x: torch.Tensor) -> bool:
    """True when ``after(x)`` equals ``before(x)`` exactly (``torch.equal``, no tolerance)."""
    return bool(torch.equal(before(x), after(x)))


class GrowthBrokeFunction(RuntimeError):
    """A growth step changed the model's function (a programming error, never a user mistake)."""


def function_difference(
    before: nn.Module, after: nn.Module, x: torch.Tensor, modes: Sequence[str] = ("train", "eval")
) -> dict[str, float]:
    """``max |after(x) - before(x)|`` per BatchNorm mode, on float64 copies (the models are not touched).

    Both models are deep-copied, cast to float64 and put in ``mode``; train mode uses batch
    statistics (and updates only the copies' running buffers). A function-preserving insertion
    gives exactly 0.0 in every mode; :func:`check_function_preserved` also demands bitwise equality.
    """
    x = x.detach().to(dtype=torch.float64)
    out = {}
    for mode in modes:
        a, b = (
            copy.deepcopy(m).to(dtype=torch.float64, device=x.device).train(mode == "train") for m in (before, after)
        )
        with torch.no_grad():
            ya, yb = a(x), b(x)
        out[mode] = (
            0.0 if torch.equal(ya, yb) else float((ya - yb).abs().max()) if ya.shape == yb.shape else float("inf")
        )
    return out


def check_function_preserved(
    before: nn.Module, after: nn.Module, x: torch.Tensor, *, what: str = "growth"
) -> dict[str, float]:
    """Raise :class:`GrowthBrokeFunction` unless ``after`` equals ``before`` bit for bit on ``x`` in
    float64, in train and in eval mode; returns the per-mode differences (all 0.0) for the record."""
    diff = function_difference(before, after, x)
    broken = {mode: d for mode, d in diff.items() if d != 0.0}
    if broken:
        raise GrowthBrokeFunction(
            f"{what}: the grown model's outputs differ from the parent's in float64 ({', '.join(f'{m} mode: max |diff| {d:.3g}' for m, d in broken.items())})"
        )
    return diff


def _candidate(model: nn.Module, index: int):
    candidates = model.candidates()
    if not 0 <= index < len(candidates):
        raise ValueError(f"candidate {index} out of range: the model has {len(candidates)} candidates")
    return candidates[index]
