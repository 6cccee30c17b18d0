"""The probe's pass over a frozen model: the states ``z_l`` and activation gradients ``G_l = dL_b/dz_l`` at every
insertion candidate from one forward and one backward (B.1; docs/design.md), and the model's mean loss.

- :func:`probe_mode`: eval mode (or BatchNorm in train mode) and frozen parameters, everything restored on exit;
- :func:`activation_gradients`: ``L_b``, ``z_l`` and ``dL_b/dz_l`` at every candidate ``l`` (the input of
  ``candidate.module``, read by a forward pre-hook) in one forward and one backward pass (``torch.autograd.grad`` on
  the captured states, no full-backward module hooks). Parameters are frozen for the pass: the backward computes
  input gradients only, from the loss down to the first candidate (whose state is made a leaf that requires grad),
  never a parameter gradient;
- :func:`sub_batches` and :func:`sub_batch_passes`: one batch's pass over sub-batches, each loss weighted ``s / b``,
  so that the rows of ``dL_b/dz_l`` come out as in one pass (examples that do not interact);
- :func:`mean_loss`: the mean per-example loss in eval mode, in float64.

:mod:`common.science.probe` turns these into ``AG_l`` and the growth values; :mod:`common.science.gram` into the
tangent-space Gram statistics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from common.science.precision import float64_device

BN_MODES = ("eval", "train")

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@contextlib.contextmanager
def probe_mode(model: nn.Module, bn_mode: str = "eval") -> Iterator[nn.Module]:
    """Eval mode (or BatchNorm in train mode), frozen parameters; everything restored on exit.

    In ``bn_mode="train"`` the BatchNorm running statistics that the forward updates are put
    back afterwards, so probing never changes the model.
    """
    if bn_mode not in BN_MODES:
        raise ValueError(f"bn_mode must be one of {BN_MODES}, got {bn_mode!r}")
    modes = {m: m.training for m in model.modules()}
    grads = {p: p.requires_grad for p in model.parameters()}
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    buffers = {b: b.clone() for m in norms for b in m.buffers(recurse=False)} if bn_mode == "train" else {}
    try:
        model.eval()
        if bn_mode == "train":
            for m in norms:
                m.train()
        for p in grads:
            p.requires_grad_(False)
        yield model
    finally:
        for m, training in modes.items():
            m.training = training
        for p, flag in grads.items():
            p.requires_grad_(flag)
        with torch.no_grad():  # train mode: the running statistics its forward passes updated in place, put back
            for b, saved in buffers.items():
                b.copy_(saved)


def activation_gradients(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn = F.cross_entropy,
    candidates: list | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """``(L_b, [z_l], [dL_b/dz_l])`` for every candidate, from one forward and one backward pass.

    A forward pre-hook on each candidate's module reads ``z_l``; a state that does not require
    grad (the first one, with frozen parameters) is replaced by a detached leaf view that does,
    so the backward stops there. Call under :func:`probe_mode` (frozen parameters) to compute nothing
    but input gradients.
    """
    candidates = candidates if candidates is not None else model.candidates()
    states: list[torch.Tensor | None] = [None] * len(candidates)

    def pre_hook(i: int):
        def hook(module: nn.Module, args: tuple):
            if states[i] is not None:
                raise RuntimeError(f"candidate {candidates[i].name} was entered twice in one forward pass")
            z, *rest = args
            if not z.requires_grad:
                z = z.detach().requires_grad_(True)
            states[i] = z
            return (z, *rest)

        return hook

    handles = [c.module.register_forward_pre_hook(pre_hook(i)) for i, c in enumerate(candidates)]
    try:
        with torch.enable_grad():
            loss = loss_fn(model(x), y)
    finally:
        for h in handles:
            h.remove()
    missing = [c.name for c, z in zip(candidates, states, strict=True) if z is None]
    if missing:
        raise RuntimeError(f"the forward pass never entered candidates {missing}")
    grads = torch.autograd.grad(loss, states)
    return loss.detach(), [z.detach() for z in states], list(grads)


def sub_batches(b: int, size: int | None) -> list[slice]:
    """The examples of a batch of ``b`` in consecutive slices of ``size`` (the last may be shorter); None: one slice."""
    step = b if size is None else int(size)
    if step < 1:
        raise ValueError(f"sub-batch size must be positive, got {size}")
    return [slice(start, min(start + step, b)) for start in range(0, b, step)]


def sub_batch_passes(model: nn.Module, x, y, loss_fn: LossFn, candidates: list, sub_batch: int | None) -> Iterator:
    """The ``sub_batch`` mode of the probe's shared pass (:func:`common.science.probe.probe_activation_gradients`): one batch's
    :func:`activation_gradients` per sub-batch, its loss weighted ``s / b``; nothing of a sub-batch is kept here."""
    b = int(x.shape[0])
    for part in sub_batches(b, sub_batch):  # a sub-batch of s of b examples contributes (s / b) L_s to L_b
        w = (part.stop - part.start) / b
        weighted = loss_fn if w == 1.0 else (lambda outputs, targets, w=w: loss_fn(outputs, targets) * w)
        yield activation_gradients(model, x[part], y[part], weighted, candidates)


@torch.no_grad()
def mean_loss(
    model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], loss_fn: LossFn = F.cross_entropy
) -> float:
    """The mean per-example loss over ``batches`` in eval mode, the loss taken in float64 of the model's output.

    ``loss_fn`` is a batch-mean loss; each batch contributes ``b`` times its value, so the result is
    the mean over all examples whatever the batch sizes. Float64 here keeps a float32 model's loss
    changes of ~1e-6 (a matched insertion at small ``alpha``) above the float32 rounding of the mean.
    """
    total, n = 0.0, 0
    with probe_mode(model, "eval"):
        for x, y in batches:
            b = int(x.shape[0])
            outputs = model(x)
            f64 = float64_device(outputs.device)  # float64 only where the device has it (the CPU for MPS, NPU)
            total += float(loss_fn(outputs.to(f64, torch.float64), y.to(f64))) * b  # float64 loss of the model's logits
            n += b
    if n == 0:
        raise ValueError("mean_loss got no batches")
    return total / n
