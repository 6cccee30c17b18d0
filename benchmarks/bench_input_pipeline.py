"""Input pipeline throughput: tensor-resident crop+flip+normalise vs torchvision DataLoader.

Both pipelines apply the training augmentation of paper B.2 (random crop after 4-pixel
padding, horizontal flip, per-channel normalisation) to the same uint8 images with the same
batch size; the torchvision one goes through PIL with ``transforms`` in DataLoader workers.
One epoch each after a warm-up epoch; prints images/s and the ratio (target: >= 5x on CPU).

    .venv/bin/python benchmarks/bench_input_pipeline.py [--images 10000] [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision import transforms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.data.loader import TensorLoader
from common.data.vision import CIFAR10_STATS
from common.training.device import cpu_count


class PILDataset(torch.utils.data.Dataset):
    """uint8 NHWC images served one by one as PIL images through ``transform``."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform) -> None:
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])


def images_per_second(loader, epochs: int = 1) -> float:
    for _ in loader:  # warm-up epoch (workers started, caches warm)
        pass
    start, seen = time.perf_counter(), 0
    for epoch in range(epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch + 1)
        for x, _ in loader:
            seen += x.shape[0]
    return seen / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--images", type=int, default=10_000, help="number of 32x32 RGB uint8 images")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument(
        "--workers", type=int, default=cpu_count(), help="DataLoader workers of the torchvision pipeline"
    )
    parser.add_argument("--npz", type=Path, default=None, help="take x_train from this .npz instead of random images")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads of the tensor loader (default: one per CPU)"
    )
    args = parser.parse_args()

    if args.npz:
        images = np.load(args.npz)["x_train"][: args.images]
    else:
        images = np.random.default_rng(0).integers(0, 256, (args.images, 32, 32, 3), dtype=np.uint8)
    labels = np.random.default_rng(1).integers(0, 10, len(images))
    mean, std = CIFAR10_STATS
    torch.set_num_threads(args.threads or cpu_count())

    tensor_loader = TensorLoader(
        torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(),
        torch.from_numpy(labels),
        args.batch_size,
        train=True,
        mean=mean,
        std=std,
        device="cpu",
    )
    tv = transforms.Compose(
        [
            transforms.RandomCrop(32, padding=4),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ]
    )
    dataloader = torch.utils.data.DataLoader(
        PILDataset(images, labels, tv),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    fast = images_per_second(tensor_loader)
    slow = images_per_second(dataloader)
    print(
        f"images {len(images)}, batch {args.batch_size}, CPU threads {torch.get_num_threads()}, DataLoader workers {args.workers}"
    )
    print(f"tensor-resident loader (one crop+flip gather, normalise):     {fast:12,.0f} images/s")
    print(f"torchvision DataLoader + transforms (PIL):                    {slow:12,.0f} images/s")
    print(f"ratio: {fast / slow:.1f}x (target >= 5x on CPU)")


if __name__ == "__main__":
    main()
