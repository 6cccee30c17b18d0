"""Synthetic neural-ODE regression data of Cohen et al. (2021), generated from a seed, and a batch loader.

Inputs ``x ~ U(-1, 1)^d``. The target is the state after ``n`` steps (default 100) of

    z_{i+1} = z_i + n^(-1/2) tanh(sin(t_i) z_i + cos(t_i)),   t_i = 5 pi i / n,   z_0 = x

(``sin`` and ``cos`` act as scalar coefficients, ``tanh`` coordinate-wise) plus optional isotropic
Gaussian noise; then every input and every target is scaled to unit Euclidean norm (the target
is computed from the unscaled input). This is the "ODE" dataset of their fully connected
experiments (d = 10, 1,024 training and 256 test examples, no noise).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from common.data.loader import epoch_seed


@dataclass(frozen=True)
class RegressionData:
    """Float32 inputs and targets of one regression task, on the CPU."""

    x_train: torch.Tensor  # (num_train, d)
    y_train: torch.Tensor  # (num_train, d)
    x_test: torch.Tensor
    y_test: torch.Tensor


def make_neural_ode_data(
    *, dim: int = 10, num_train: int = 1024, num_test: int = 256, seed: int = 0, steps: int = 100, noise: float = 0.0
) -> RegressionData:
    """The data set above; the same arguments give the same tensors on every machine (float64, then float32)."""
    g = torch.Generator().manual_seed(seed)
    n = num_train + num_test
    x = torch.rand(n, dim, generator=g, dtype=torch.float64) * 2 - 1
    z = x.clone()
    for i in range(steps):
        t = 5 * math.pi * i / steps
        z = z + steps**-0.5 * torch.tanh(math.sin(t) * z + math.cos(t))
    y = z + noise * torch.randn(n, dim, generator=g, dtype=torch.float64)
    x, y = (v / v.norm(dim=1, keepdim=True) for v in (x, y))
    x, y = x.float(), y.float()
    return RegressionData(x[:num_train], y[:num_train], x[num_train:], y[num_train:])


class BatchLoader:
    """Batches ``(x, y)`` of two tensors moved to ``device`` once; with ``shuffle`` the order of
    epoch ``e`` follows from ``(seed, e)`` alone (:meth:`set_epoch`), so a resumed run sees the same batches."""

    def __init__(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        batch_size: int,
        *,
        shuffle: bool,
        device: torch.device | str = "cpu",
        seed: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.x, self.y = x.to(self.device), y.to(self.device)
        self.batch_size, self.shuffle, self.seed, self.epoch = batch_size, shuffle, seed, 0
        self.drop_last = shuffle if drop_last is None else drop_last

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        n, b = len(self.x), self.batch_size
        return n // b if self.drop_last else math.ceil(n / b)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.shuffle:
            order = torch.randperm(
                len(self.x), generator=torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
            )
            order = order.to(self.device)
        for i in range(len(self)):
            sl = slice(i * self.batch_size, (i + 1) * self.batch_size)
            idx = order[sl] if self.shuffle else sl
            yield self.x[idx], self.y[idx]
