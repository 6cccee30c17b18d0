"""The tensor-resident loader of the ResNet sweeps and its augmentation (paper B.2).

Training augmentation (B.2: "crop, flip, and dataset-specific normalization"): a random crop
after 4-pixel zero padding and a horizontal flip with probability 1/2, applied to whole batches
with tensor ops on the training device (:func:`batch_crop`, :func:`batch_flip`, fused into one
gather by :func:`crop_flip_padded`; the airbench approach), then per-channel normalisation.
Evaluation uses normalisation only. :class:`TensorLoader` holds a dataset of uint8 images on the
training device and yields normalised batches; everything random follows from ``(seed, epoch)``
(:func:`epoch_seed`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F


def crop_flip_padded(
    padded: torch.Tensor, pad: int, generator: torch.Generator | None = None, *, flip: bool = True
) -> torch.Tensor:
    """Random crops (and left-right flips) of a batch of images that are *already* zero padded.

    ``padded`` is ``(B, C, H + 2 pad, W + 2 pad)``; each output image is the ``H x W`` window at
    an offset ``(dy, dx)`` uniform on ``{0, ..., 2 pad}``, mirrored with probability 1/2 when
    ``flip``. One gather does both (the flip only reverses the column index), which is what
    makes the tensor-resident loader fast on the CPU. Any dtype, any device.
    """
    b, c, hp, wp = padded.shape
    h, w = hp - 2 * pad, wp - 2 * pad
    dev = padded.device
    dy = torch.randint(0, 2 * pad + 1, (b, 1, 1), generator=generator, device=dev)
    dx = torch.randint(0, 2 * pad + 1, (b, 1, 1), generator=generator, device=dev)
    cols = torch.arange(w, device=dev).view(1, 1, w)
    if flip:
        mirrored = torch.rand(b, 1, 1, generator=generator, device=dev) < 0.5
        cols = torch.where(mirrored, (w - 1) - cols, cols)
    rows = torch.arange(h, device=dev).view(1, h, 1)
    where = (dy + rows) * wp + (dx + cols)  # (B, H, W) flat positions in the padded image
    out = padded.reshape(b, c, hp * wp).gather(2, where.view(b, 1, h * w).expand(b, c, h * w))
    return out.view(b, c, h, w)


def batch_crop(images: torch.Tensor, pad: int = 4, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random ``H x W`` crop of each image after ``pad`` pixels of zero padding on every side.

    Equivalent to torchvision's ``RandomCrop(H, padding=pad)`` per image: offsets ``(dy, dx)``
    are uniform on ``{0, ..., 2 pad}``.
    """
    if pad == 0:
        return images
    return crop_flip_padded(F.pad(images, (pad, pad, pad, pad)), pad, generator, flip=False)


def batch_flip(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Flip each image left-right with probability 1/2."""
    flip = torch.rand(images.shape[0], generator=generator, device=images.device) < 0.5
    return torch.where(flip.view(-1, 1, 1, 1), images.flip(3), images)


def epoch_seed(seed: int, epoch: int) -> int:
    """A well-mixed 63-bit seed for (run seed, epoch): the loader's order and augmentation."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1, dtype=np.uint64)[0] >> 1)


class TensorLoader:
    """Batches of device-resident uint8 images, augmented and normalised with tensor ops.

    The dataset is moved to ``device`` once (and, for training, zero padded once); each epoch
    shuffles with ``randperm`` and, when ``train``, crops and flips each batch in one gather
    (:func:`crop_flip_padded`, the same distribution as :func:`batch_crop` then
    :func:`batch_flip`). Yields
    ``(x, y)``: float32 normalised NCHW images (channels_last memory when asked) and int64
    labels. Everything random follows from ``(seed, epoch)``: call :meth:`set_epoch` before
    each epoch; resuming at epoch ``e`` reproduces the same batches bit for bit.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        batch_size: int,
        *,
        train: bool,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        device: torch.device | str = "cpu",
        seed: int = 0,
        drop_last: bool | None = None,
        crop_pad: int = 4,
        flip: bool = True,
        channels_last: bool = False,
    ) -> None:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"images must be uint8 NCHW, got {images.dtype} {tuple(images.shape)}")
        self.device = torch.device(device)
        self.images = images.to(self.device)
        self.labels = labels.to(self.device, torch.int64)
        self.batch_size = batch_size
        self.train = train
        self.drop_last = train if drop_last is None else drop_last
        self.seed = seed
        self.epoch = 0
        self.crop_pad = crop_pad if train else 0
        self.flip = flip and train
        self.channels_last = channels_last
        p = self.crop_pad
        self._source = F.pad(self.images, (p, p, p, p)) if p else self.images  # padded once, not per batch
        # Normalise in uint8 units: (x - 255 mean) / (255 std).
        self._mean = torch.tensor(mean, dtype=torch.float32, device=self.device).view(1, -1, 1, 1) * 255
        self._std = torch.tensor(std, dtype=torch.float32, device=self.device).view(1, -1, 1, 1) * 255

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def num_images(self) -> int:
        return len(self.labels)

    def __len__(self) -> int:
        n, b = self.num_images, self.batch_size
        return n // b if self.drop_last else math.ceil(n / b)

    def generator(self) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(epoch_seed(self.seed, self.epoch))

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images.float().sub_(self._mean).div_(self._std)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = self.generator()
        n = self.num_images
        order = torch.randperm(n, generator=g, device=self.device) if self.train else None
        for i in range(len(self)):
            sl = slice(i * self.batch_size, (i + 1) * self.batch_size)
            idx = order[sl] if order is not None else sl
            x, y = self._source[idx], self.labels[idx]
            if self.crop_pad:
                x = crop_flip_padded(x, self.crop_pad, g, flip=self.flip)
            elif self.flip:
                x = batch_flip(x, g)
            yield self.normalise(x), y
