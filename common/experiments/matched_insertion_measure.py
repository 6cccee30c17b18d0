"""The measurement of script 06's job (:mod:`common.experiments.matched_insertion`): H.1's losses in float64, with a floor.

:func:`measure_losses` evaluates the mean training loss of the parent and of the grown model (the block inserted
with each terminal projection ``V = -alpha W*``) in float64 and in float32, the parent's twice in float64 in two
batch orders; :func:`measurement_floors` turns those into the floors of the two readings, and
:func:`precision_status` says whether a change ``Delta L`` is above its floor (docs/design.md, section
"H.1: measured in float64, with a floor").
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from common.science.activations import mean_loss
from common.science.growth import insert_zero_block
from common.science.precision import float64_device

FLOAT64_CHUNK = 16  # examples per float64 forward pass (CPU float64 convolutions unfold the batch: small is fast)

Batches = Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]]


MEASURED = "measured"
BELOW_PRECISION = "below measurement precision"


def precision_status(change: float, floor: float) -> str:
    """``"measured"`` when ``|change|`` is above ``floor``, else ``"below measurement precision"`` (no sign is read)."""
    return MEASURED if abs(change) > floor else BELOW_PRECISION


def as_dtype(model: nn.Module, dtype: torch.dtype, device: torch.device) -> nn.Module:
    """``model`` itself when it already has ``dtype`` on ``device``, else a copy cast there (the same weights)."""
    first = next(model.parameters())
    if first.dtype == dtype and first.device == device:
        return model
    return copy.deepcopy(model).to(device=device, dtype=dtype)


def cast_batches(batches: Iterable, dtype: torch.dtype, device: torch.device, chunk: int | None = None):
    """The batches with floating-point tensors cast to ``dtype`` on ``device`` (labels keep their integer type),
    each split into sub-batches of ``chunk`` examples when given (the mean loss weights every example alike)."""
    for x, y in batches:
        x, y = (t.to(device, dtype) if t.is_floating_point() else t.to(device) for t in (x, y))
        step = chunk or int(x.shape[0])
        for start in range(0, int(x.shape[0]), step):
            yield x[start : start + step], y[start : start + step]


def measure_losses(
    model: nn.Module,
    index: int,
    family: str,
    seed: int,
    weights: Sequence[torch.Tensor],
    train_batches: Batches,
    reordered_batches: Batches,
    test_batches: Batches | None,
    loss_fn,
) -> dict:
    """The mean losses of H.1 in float64 and float32: the parent's on the training split (twice in float64, in two
    batch orders), and after inserting the block with each terminal projection of ``weights``; the test split's
    before and after in float32 (docs/design.md, section "H.1: measured in float64, with a floor").

    The float64 pass runs a float64 copy of ``model`` on :func:`common.science.precision.float64_device` (the CPU for MPS and
    NPU), the batches' images cast after the float32 normalisation (the same inputs in both precisions), in
    sub-batches of :data:`FLOAT64_CHUNK` examples; the float32 pass runs ``model`` itself (a float32 copy when it
    is not float32).
    """
    device = next(model.parameters()).device
    f64 = float64_device(device)
    nets = {"": as_dtype(model, torch.float64, f64), "_float32": as_dtype(model, torch.float32, device)}
    places = {"": (torch.float64, f64, FLOAT64_CHUNK), "_float32": (torch.float32, device, None)}

    def loss(net: nn.Module, batches: Batches, tag: str) -> float:
        return mean_loss(net, cast_batches(batches(), *places[tag]), loss_fn)

    out: dict = {"float64_device": f64}
    test_after = []  # float32 only
    for tag, net in nets.items():
        out[f"before{tag}"] = loss(net, train_batches, tag)
        grown = copy.deepcopy(net)
        block = insert_zero_block(grown, index, family, seed)
        after = []
        for w in weights:
            block.set_terminal_projection(w)
            after.append(loss(grown, train_batches, tag))
            if tag == "_float32":
                test_after.append(loss(grown, test_batches, tag) if test_batches else None)
        out[f"after{tag}"] = after
    out["before_reordered"] = loss(nets[""], reordered_batches, "")
    out["test_before"] = loss(nets["_float32"], test_batches, "_float32") if test_batches else None
    out["test_after"] = test_after
    return out


def measurement_floors(losses: dict) -> dict[str, float]:
    """The floors of the two readings, from the parent model: ``float32_gap`` ``= |L_float32 - L_float64|`` (the
    float32 reading's), ``float64_order_spread`` ``= |L_float64 - L_float64'|`` over two batch orders, and
    ``measurement_floor`` ``= max(float64_order_spread, eps_float64 L_float64)``, the float64 reading's (a
    difference of two losses cannot resolve less than one rounding unit of the loss)."""
    spread = abs(losses["before"] - losses["before_reordered"])
    return {
        "float32_gap": abs(losses["before_float32"] - losses["before"]),
        "float64_order_spread": spread,
        "measurement_floor": max(spread, torch.finfo(torch.float64).eps * abs(losses["before"])),
    }
