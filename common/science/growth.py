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

Any other model (a torchvision ResNet, a hand-written ``nn.Sequential`` of residual blocks) grows through
:func:`insert_zero_block_into`: the block goes into the ``nn.Sequential`` or ``nn.ModuleList`` that the forward pass
runs, at a given position. An insertion must be reached: given one batch (``example``), a forward hook on the new
block checks that the forward pass runs it, and one that is never run is undone and refused
(:class:`InsertionNotReached`), since a block in a list the forward pass never uses would leave the function
unchanged for the wrong reason and :func:`check_function_preserved` would report 0.0.
"""

from __future__ import annotations

import copy
import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence

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
    example: torch.Tensor | Callable[[], object] | None = None,
) -> ZeroOutputBlock:
    """Insert the protocol's zero-output block at candidate ``index`` (in place) and return it.

    ``family`` defaults to the candidate's own (:func:`common.science.tangent.candidate_family`, the rule the
    probe uses: ``conv3x3`` for the ResNets); ``U_l`` is seeded by ``(seed, index)`` exactly as in
    the probe's exact projection, so the block's tangent features are the ``Psi``
    whose growth value the probe reported. The block takes the dtype and device of the model. ``example`` (one
    batch, or a callable running one forward pass): the forward pass must reach the block, else it is undone and
    :class:`InsertionNotReached` raised (None: no check, as before).
    """
    family = candidate_family(_candidate(model, index), family).name
    width = width if width is not None else candidate_width(model, index)
    like = next(model.parameters())
    block = make_zero_block(family, width, seed, index, like=like)
    block.train(model.training)
    undo = _insert_child(model.blocks, index, block)
    stages = getattr(model, "stage_of_block", None)
    if isinstance(stages, list) and stages:
        stages.insert(index, stages[index - 1] if index > 0 else stages[0])
        undo = _and_then(undo, functools.partial(stages.pop, index))
    if example is not None:
        require_reached(model, block, example, undo, f"candidate {index} (model.blocks[{index}])")
    return block


class InsertionNotReached(ValueError):
    """An inserted block that the model's forward pass never runs (undone before this is raised)."""


def insert_zero_block_into(
    model: nn.Module,
    container: nn.Module,
    position: int,
    family: str,
    width: int,
    *,
    seed: int = 0,
    index: int = 0,
    example: torch.Tensor | Callable[[], object] | None = None,
    where: str | None = None,
    verify: Callable[[], None] | None = None,
) -> ZeroOutputBlock:
    """The protocol's zero-output block (``U_l`` seeded by ``(seed, index)``) put into ``container`` (an
    ``nn.Sequential`` or ``nn.ModuleList`` that ``model``'s forward pass runs in order) at ``position``
    (``len(container)``: appended), in place; with ``example`` (one batch, or a callable running one forward pass)
    the forward pass must reach it, else it is undone and :class:`InsertionNotReached` raised. ``verify`` (e.g. the
    model's outputs compared with those before) runs last; whatever it raises, the insertion is undone first."""
    if not isinstance(container, nn.Sequential | nn.ModuleList):
        raise TypeError(
            f"a zero-output block goes into an nn.Sequential or nn.ModuleList, not {type(container).__name__}"
        )
    if not 0 <= position <= len(container):
        raise ValueError(f"position {position} out of range: the container holds {len(container)} modules")
    block = make_zero_block(family, width, seed, index, like=next(model.parameters()))
    block.train(model.training)
    undo = _insert_child(container, position, block)
    if example is not None:
        require_reached(model, block, example, undo, where or f"position {position} of {type(container).__name__}")
    if verify is not None:
        try:
            verify()
        except BaseException:
            undo()
            raise
    return block


class _Reached(Exception):
    """Raised by the reach check's hook to stop the forward pass once the new block has run."""


def require_reached(
    model: nn.Module,
    block: nn.Module,
    example: torch.Tensor | Callable[[], object],
    undo: Callable[[], None],
    where: str,
) -> None:
    """Run one forward pass (``model(example)``, or ``example()``) in eval mode without gradients, stopped as soon as
    ``block`` runs; if it never runs, call ``undo`` and raise :class:`InsertionNotReached` naming ``where``."""

    def hook(module, args):
        raise _Reached

    modes = {m: m.training for m in model.modules()}
    handle = block.register_forward_pre_hook(hook)
    reached = False
    try:
        model.eval()
        with torch.no_grad():
            example() if callable(example) else model(example)
    except _Reached:
        reached = True
    finally:
        handle.remove()
        for m, training in modes.items():
            m.training = training
    if not reached:
        undo()
        raise InsertionNotReached(
            f"the block inserted at {where} is never run by {type(model).__name__}'s forward pass (it sits in a list "
            "the forward does not use); it was removed: insert into the nn.Sequential or ModuleList the forward runs"
        )


def _insert_child(container: nn.Module, position: int, block: nn.Module) -> Callable[[], None]:
    """Put ``block`` at ``position`` of an ``nn.Sequential`` or ``nn.ModuleList``; returns the undo.

    Numbered children (``0, 1, ...``) are renumbered as ``insert`` does; named ones keep their names and the new
    block is ``zero_block`` (``zero_block_1``, ... when taken)."""
    saved = list(container._modules.items())
    if all(key.isdigit() for key, _ in saved):
        container.insert(position, block)
    else:
        taken, key = {k for k, _ in saved}, "zero_block"
        key = next(f"{key}_{i}" for i in range(1, len(saved) + 2) if f"{key}_{i}" not in taken) if key in taken else key
        container._modules.clear()
        container._modules.update(OrderedDict([*saved[:position], (key, block), *saved[position:]]))

    def undo() -> None:
        container._modules.clear()
        container._modules.update(OrderedDict(saved))

    return undo


def _and_then(first: Callable[[], object], second: Callable[[], object]) -> Callable[[], None]:
    def both() -> None:
        first()
        second()

    return both


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
