"""Chunked token cross-entropy: float32 math without the whole batch's float32 logits (issue 33, item 4).

A decoder trained under bf16 autocast gives bf16 logits of shape ``(B T, V)`` (16 x 1,024 x 50,304 for the GPT-2
paper preset: 1.6 GB). ``F.cross_entropy(logits.float(), y)`` makes a float32 copy of them (3.3 GB), keeps its
float32 log-softmax for the backward (3.3 GB) and writes a float32 gradient (3.3 GB) before casting it back.
:func:`chunked_cross_entropy` computes the same mean loss and gradient a chunk of rows at a time: the forward keeps
the bf16 logits (held by the training loop anyway) and each row's float32 loss; the backward recomputes each
chunk's float32 softmax and writes the chunk's gradient ``(softmax - onehot) / N`` in the logits' dtype. At most
one chunk (:data:`CHUNK_ELEMENTS` float32 values, 128 MiB) is float32 at a time.

Numerics: each row's loss is ``-log_softmax(x)[y]`` in float32 from the exact upcast of ``x``, what today's path
computes; the mean and the gradient differ from it only by float32 rounding (the order of the reductions), the
gradient then rounded to the logits' dtype as before.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

CHUNK_ELEMENTS = 1 << 25  # float32 values of one chunk of rows (128 MiB; 667 rows of a 50,304-token vocabulary)


def chunk_rows(classes: int, budget: int | None = None) -> int:
    """Rows per chunk: as many whole rows of ``classes`` logits as ``budget`` float32 values hold (at least one);
    None: :data:`CHUNK_ELEMENTS`."""
    return max(1, (budget or CHUNK_ELEMENTS) // max(classes, 1))


def chunked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """Mean cross-entropy of ``logits`` ``(N, C)`` (any float dtype) at ``targets`` ``(N,)``, in float32, by chunks of
    ``rows`` rows (None: :func:`chunk_rows`); a float32 scalar. Every target must be a class (no ``ignore_index``);
    no label smoothing. Differentiable once with respect to ``logits``, the gradient in their dtype."""
    if logits.dim() != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(
            f"logits (N, C) and targets (N,) expected, got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    return _ChunkedCrossEntropy.apply(logits, targets, rows or chunk_rows(logits.shape[1]))


def _chunks(n: int, rows: int) -> list[slice]:
    return [slice(start, min(start + rows, n)) for start in range(0, n, rows)]


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Forward: per-row float32 losses by chunks, their mean. Backward: ``g (softmax - onehot) / N`` by chunks."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, rows: int) -> torch.Tensor:
        losses = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for part in _chunks(logits.shape[0], rows):
            log_p = torch.log_softmax(logits[part], dim=-1, dtype=torch.float32)  # the exact upcast, then float32
            losses[part] = log_p.gather(1, targets[part, None]).squeeze(1).neg()
        ctx.save_for_backward(logits, targets)
        ctx.rows = rows
        return losses.mean()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):
        logits, targets = ctx.saved_tensors
        scale = grad_loss.to(torch.float32) / logits.shape[0]
        grad = torch.empty_like(logits)
        for part in _chunks(logits.shape[0], ctx.rows):
            p = torch.softmax(logits[part], dim=-1, dtype=torch.float32)
            p[torch.arange(p.shape[0], device=p.device), targets[part]] -= 1.0
            grad[part] = p.mul_(scale)  # rounded to the logits' dtype, as the upcast's backward rounds today's
        return grad, None, None
