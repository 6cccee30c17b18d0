"""Training throughput of the sweep's ResNets (paper B.1): ResNet-8 and ResNet-20, images/s.

CPU: SGD steps on a fixed batch of 32x32 images, NCHW vs channels_last memory (float32);
images/s of the median step (robust to other processes on a shared machine).
On a CUDA GPU or Ascend NPU additionally bf16 autocast (where native), optional torch.compile, and the wall time of one
CIFAR-10-sized epoch (50,000 synthetic images through the tensor-resident loader, crop+flip).

    .venv/bin/python benchmarks/bench_train_step.py [--steps 8] [--batch-size 128] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import device as devices
from common.data.vision import CIFAR10_STATS, TensorLoader
from common.models.resnet import ResNet, ResNetConfig, depth_label
from common.train import SGDRecipe, classification_loss

DEPTHS = {0: "ResNet-8", 12: "ResNet-20"}


def step_throughput(n: int, dev: torch.device, *, batch: int, steps: int, channels_last: bool, amp: bool, compile: bool) -> float:
    torch.manual_seed(0)
    model = ResNet(ResNetConfig(extra_blocks=n)).to(dev)
    memory = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=memory)
    forward = torch.compile(model) if compile else model
    optimizer = SGDRecipe(epochs=1, lr=0.05).make_optimizer(model)
    x = torch.randn(batch, 3, 32, 32, device=dev).contiguous(memory_format=memory)
    y = torch.randint(0, 10, (batch,), device=dev)

    def one_step():
        with devices.autocast(dev, amp):
            loss = classification_loss(forward(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(3 if compile else 2):
        one_step()
    times = []
    for _ in range(steps):  # the median step: robust to other processes on a shared machine
        devices.synchronize(dev)
        start = time.perf_counter()
        one_step()
        devices.synchronize(dev)
        times.append(time.perf_counter() - start)
    return batch / statistics.median(times)


def cifar10_epoch_seconds(n: int, dev: torch.device, *, batch: int, compile: bool) -> float:
    """One epoch over 50,000 synthetic 32x32 images with the sweep's loader, bf16, channels_last."""
    torch.manual_seed(0)
    images = torch.randint(0, 256, (50_000, 3, 32, 32), dtype=torch.uint8)
    labels = torch.randint(0, 10, (50_000,))
    loader = TensorLoader(images, labels, batch, train=True, mean=CIFAR10_STATS[0], std=CIFAR10_STATS[1], device=dev, channels_last=True)
    model = ResNet(ResNetConfig(extra_blocks=n)).to(dev).to(memory_format=torch.channels_last)
    forward = torch.compile(model) if compile else model
    optimizer = SGDRecipe(epochs=1, lr=0.05).make_optimizer(model)
    for epoch in range(2):  # the first epoch warms up (and compiles)
        loader.set_epoch(epoch)
        devices.synchronize(dev)
        start = time.perf_counter()
        for x, y in loader:
            with devices.autocast(dev, True):
                loss = classification_loss(forward(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        devices.synchronize(dev)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="timed steps per setting (default: 8 on CPU, 50 on GPU)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile (GPU)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = devices.resolve_device(args.device)
    accelerator = dev.type != "cpu"
    steps = args.steps or (50 if accelerator else 8)
    print(f"device {dev.type}, batch {args.batch_size}, median of {steps} timed steps, torch threads {torch.get_num_threads()}")
    settings = [("float32", False, False, False), ("float32", True, False, False)]
    if devices.autocast_dtype(dev) is not None:
        settings += [("bf16", True, True, False)] + ([("bf16+compile", True, True, True)] if args.compile else [])
    print(f"{'model':<10} {'precision':<13} {'memory':<14} {'images/s':>10}")
    for n, name in DEPTHS.items():
        assert depth_label(n) == int(name.split("-")[1])
        for precision, channels_last, amp, compile in settings:
            rate = step_throughput(n, dev, batch=args.batch_size, steps=steps, channels_last=channels_last, amp=amp, compile=compile)
            print(f"{name:<10} {precision:<13} {'channels_last' if channels_last else 'NCHW':<14} {rate:>10,.0f}")
    if accelerator:
        for n, name in DEPTHS.items():
            seconds = cifar10_epoch_seconds(n, dev, batch=args.batch_size, compile=args.compile)
            print(f"{name}: one CIFAR-10-sized epoch (50,000 images, bf16, channels_last{', compiled' if args.compile else ''}): {seconds:.2f} s")


if __name__ == "__main__":
    main()
