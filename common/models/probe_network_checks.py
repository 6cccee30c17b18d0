"""What :func:`common.models.probe_network.probe_network` checks in the batches and the loss before it probes.

Each mistake is one :class:`common.errors.UserError` line naming the batch and the argument, so that a wrong input
never reaches torch as a traceback (``dtrtri failed``, a shape error from inside ``cross_entropy``):

- :func:`as_pairs`: ``(x, y)`` pairs or Hugging Face dicts, one kind, at least one batch;
- :func:`check_batches`: every batch holds examples, ``x`` and ``y`` hold as many, ``x`` has the model's dtype and
  device, and its values (and soft labels) are finite;
- :func:`check_labels` (with the default losses): class ids of the logits' shape less the class axis, an integer
  dtype, in ``0 .. C-1`` (or soft labels of the logits' shape); token labels of the ids' shape in the vocabulary or
  ``-100``;
- :func:`loss_normalisation`: a loss that sums over the examples (``reduction='sum'``) is refused, since ``AG_l``
  and ``V_S,l`` are defined on the batch-mean loss (docs/design.md, section "Activation-gradient score AG_l"); the answer says how the
  loss normalises, for the record;
- :func:`finite_loss`: the loss of every batch must be finite (a NaN there would surface as a failed factorisation).

:class:`Names` says how a refusal names the arguments: the Python call's by default, script 11's flags there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from common.errors import UserError

IGNORE = -100  # label of a token the loss leaves out (Hugging Face's convention)
LOSS_RTOL = (
    1e-4  # a mean and a sum over two examples differ by a factor 2: any tolerance far below 1/2 tells them apart
)


@dataclass(frozen=True)
class Names:
    """How refusals name the probe's arguments: the Python call's (default), or a command line's flags."""

    places: str = "places=[model.block1, ...] or places='blocks.*'"
    exact: str = "exact=False (AG_l only)"
    data: str = ""  # where the batches come from ("": the batches given)
    batches: str = "smaller or fewer batches"

    def batch(self, i: int) -> str:
        return f"{self.data}: batch {i}" if self.data else f"batch {i}"


PYTHON = Names()


def as_pairs(batches: Iterable, names: Names = PYTHON) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], bool]:
    """``([(x, y)], tokens)``: tuple batches as they are; dict batches (Hugging Face) as ``x`` = the ids (and the mask
    stacked on dim 1) and ``y`` = the labels (default: the ids, ``-100`` where the mask is 0)."""
    pairs, kinds = [], set()
    for i, batch in enumerate(batches):
        if isinstance(batch, Mapping):
            if "input_ids" not in batch:
                raise UserError(f"{names.batch(i)} is a dict without input_ids; give dicts as Hugging Face models take")
            ids, mask = batch["input_ids"], batch.get("attention_mask")
            labels = batch.get("labels")
            if labels is None:
                labels = ids if mask is None else ids.masked_fill(mask == 0, IGNORE)
            pairs.append((ids if mask is None else torch.stack([ids, mask.to(ids.dtype)], 1), labels))
            kinds.add("tokens")
        elif isinstance(batch, tuple | list) and len(batch) == 2 and all(isinstance(t, torch.Tensor) for t in batch):
            pairs.append((batch[0], batch[1]))
            kinds.add("pairs")
        else:
            raise UserError(
                f"{names.batch(i)} is a {type(batch).__name__}; give (x, y) tensor pairs or Hugging Face dicts"
            )
    if not pairs:
        raise UserError("probe_network got no batches; give at least one (x, y) pair or dict")
    if len(kinds) > 1:
        raise UserError("the batches mix (x, y) pairs and dicts; give one kind")
    return pairs, kinds == {"tokens"}


def model_tensor(model: nn.Module) -> torch.Tensor | None:
    """The model's first floating parameter (or buffer): its dtype and device are the model's."""
    tensors = [*model.parameters(), *model.buffers()]
    return next((t for t in tensors if t.is_floating_point()), None)


def check_batches(pairs: list, tokens: bool, model: nn.Module, names: Names = PYTHON) -> None:
    """Every batch: examples in it, ``x`` and ``y`` of one length, ``x`` of the model's dtype and device, finite."""
    ref = model_tensor(model)
    for i, (x, y) in enumerate(pairs):
        where = names.batch(i)
        if x.dim() == 0 or x.shape[0] == 0:
            raise UserError(f"{where} holds no examples (x has shape {tuple(x.shape)}); leave empty batches out")
        if y.dim() == 0 or y.shape[0] != x.shape[0]:
            raise UserError(
                f"{where}: x holds {x.shape[0]} examples but y has shape {tuple(y.shape)}; give one label per example"
            )
        if ref is not None and x.is_floating_point() and x.dtype != ref.dtype:
            raise UserError(
                f"{where}: x is {x.dtype} but the model's weights are {ref.dtype}; cast one to the other "
                f"(x.to({ref.dtype}) or model.to({x.dtype}))"
            )
        if ref is not None and x.device != ref.device:
            raise UserError(f"{where}: x is on {x.device} but the model is on {ref.device}; move one to the other")
        for what, t in (("x", x), ("y", y)):
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                bad = int((~torch.isfinite(t)).sum())
                raise UserError(f"{where}: {what} holds {bad:,} non-finite values (NaN or inf); give finite inputs")


def check_labels(pairs: list, tokens: bool, logits_shape: tuple[int, ...], names: Names = PYTHON) -> None:
    """The labels of every batch fit the default loss and the logits (``logits_shape``: one example's)."""
    classes = int(logits_shape[-1] if tokens else logits_shape[1]) if len(logits_shape) > 1 else None
    for i, (x, y) in enumerate(pairs):
        where = names.batch(i)
        if classes is None:
            raise UserError(f"the model's output has shape {logits_shape} for one example: no class axis for the loss")
        if tokens:
            want, low, what = tuple(x.shape[:1] + x.shape[-1:]), IGNORE, "token ids of the vocabulary (or -100)"
        else:
            soft = y.is_floating_point() and tuple(y.shape[1:]) == tuple(logits_shape[1:])
            if soft:
                continue  # class probabilities, as cross_entropy takes them
            want, low, what = (x.shape[0], *logits_shape[2:]), 0, "class ids"
        if tuple(y.shape) != tuple(want):
            raise UserError(f"{where}: the labels have shape {tuple(y.shape)}, the loss wants {tuple(want)} ({what})")
        if y.is_floating_point() or y.dtype == torch.bool:
            raise UserError(f"{where}: the labels are {y.dtype}; give integer {what} (y.long())")
        kept = y[y != IGNORE] if tokens else y
        if kept.numel() and (int(kept.min()) < max(low, 0) or int(kept.max()) >= classes):
            raise UserError(
                f"{where}: labels run from {int(kept.min())} to {int(kept.max())} but the model gives {classes} "
                f"logits; give {what} in 0..{classes - 1}"
            )


def loss_normalisation(logits: torch.Tensor, y: torch.Tensor, loss_fn: Callable, names: Names = PYTHON) -> str:
    """How ``loss_fn`` normalises over the examples, checked on the logits of two examples (``logits``, ``y``):
    ``loss(both) = mean`` of each's is a batch mean; ``= sum`` is refused. Returns the sentence for the record."""
    if logits.shape[0] < 2:
        return "loss_fn: its normalisation not checked (the first batch holds one example)"
    with torch.no_grad():
        both = float(loss_fn(logits[:2], y[:2]))
        each = [float(loss_fn(logits[i : i + 1], y[i : i + 1])) for i in range(2)]
    total = sum(each)
    if not all(math.isfinite(v) for v in (both, *each)) or total == 0:
        return "loss_fn: its normalisation not checked (a zero or non-finite loss on two examples)"
    if abs(both - total) <= LOSS_RTOL * abs(total) and abs(both - total / 2) > LOSS_RTOL * abs(total):
        raise UserError(
            f"loss_fn sums over the examples (two examples: {both:.6g} = {each[0]:.6g} + {each[1]:.6g}); AG_l and "
            "V_S,l are defined on the batch-mean loss: give reduction='mean' (or divide by the batch size)"
        )
    if abs(both - total / 2) <= LOSS_RTOL * abs(total):
        return "loss_fn: a mean over the examples (checked on two examples of batch 0)"
    return f"loss_fn: neither a mean nor a sum over two examples ({both:.6g} vs {each[0]:.6g}, {each[1]:.6g}); as given"


def finite_loss(loss_fn: Callable, names: Names = PYTHON) -> Callable:
    """``loss_fn`` that refuses a non-finite loss in one line (a NaN would surface as a failed factorisation)."""
    calls = [0]

    def checked(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = loss_fn(logits, y)
        calls[0] += 1
        if not bool(torch.isfinite(loss.detach()).all()):
            raise UserError(
                f"the loss is {float(loss.detach()):g} on pass {calls[0]} of the probe (a non-finite output of the "
                f"model on {names.data or 'the batches'}); probe finite inputs where the model is finite"
            )
        return loss

    return checked
