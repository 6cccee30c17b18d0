"""Training throughput of the sweep's ResNets (paper B.1): ResNet-8 and ResNet-20, images/s.

Times :func:`common.training.epoch.train_epoch`, the loop every sweep run trains with (per-step cosine
learning rate, autocast, the periodic non-finite-loss check, the optimizer step), over the
sweep's own tensor-resident augmenting loader (``common.data.vision.TensorLoader``, 4-pixel crop
and flip) on random uint8 CIFAR-shaped images. Each setting runs ``--reps`` passes of
``--batches`` batches after one warm-up pass; printed: the median images/s with the spread
(min..max) over the passes, and NCHW vs channels_last memory in the same run.

The time of one CIFAR-10 epoch (50,000 images) is 50,000 / images/s of that same function:
marked "estimated" on the CPU; on a GPU (bf16, optionally compiled) a full 50,000-image pass of
``train_epoch`` is also timed directly.

    .venv/bin/python benchmarks/bench_train_step.py [--reps 5] [--batches 8] [--batch-size 128] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.data.loader import TensorLoader
from common.data.vision import CIFAR10_STATS
from common.models.resnet import ResNet, ResNetConfig, depth_label
from common.training import device as devices
from common.training.epoch import EpochStats, train_epoch
from common.training.recipes import Schedule, SGDRecipe, TrainSettings

DEPTHS = {0: "ResNet-8", 12: "ResNet-20"}
CIFAR10_TRAIN_IMAGES = 50_000
RECIPE = SGDRecipe(epochs=200, lr=0.1, warmup_epochs=1.0)  # the CIFAR paper preset's recipe


def make_loader(n_images: int, batch: int, dev: torch.device, channels_last: bool) -> TensorLoader:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n_images, 3, 32, 32), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (n_images,), generator=g)
    mean, std = CIFAR10_STATS
    return TensorLoader(images, labels, batch, train=True, mean=mean, std=std, device=dev, channels_last=channels_last)


def passes(n: int, dev: torch.device, loader: TensorLoader, *, reps: int, settings: TrainSettings) -> list[EpochStats]:
    """One warm-up pass, then ``reps`` timed passes of ``train_epoch`` over ``loader``."""
    torch.manual_seed(0)
    model = ResNet(ResNetConfig(extra_blocks=n)).to(dev)
    if settings.channels_last:
        model = model.to(memory_format=torch.channels_last)
    forward = torch.compile(model) if settings.compile else model
    optimizer = settings.recipe.make_optimizer(model)
    schedule = Schedule.of(settings.recipe, len(loader))
    model.train()
    out, step = [], 0
    for rep in range(reps + 1):
        loader.set_epoch(rep)
        stats = train_epoch(forward, optimizer, loader, schedule=schedule, step=step, settings=settings, device=dev)
        step = stats.step
        if rep > 0:
            out.append(stats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--reps", type=int, default=5, help="timed passes per setting (after one warm-up pass)")
    parser.add_argument("--batches", type=int, default=None, help="batches per pass (default: 8 on CPU, 100 on GPU)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile (GPU)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = devices.resolve_device(args.device)
    gpu = dev.type != "cpu"
    batches = args.batches or (100 if gpu else 8)
    print(
        f"device {dev.type}, torch {torch.__version__}, threads {torch.get_num_threads()}, batch {args.batch_size}: "
        f"common.training.epoch.train_epoch over {batches} batches of the sweep's loader, {args.reps} timed passes after a warm-up"
    )
    settings = [("float32", False, False, False), ("float32", True, False, False)]
    if gpu:
        settings += [("bf16", True, True, False)] + ([("bf16+compile", True, True, True)] if args.compile else [])
    print(
        f"{'model':<10} {'precision':<13} {'memory':<14} {'images/s median':>16} {'min..max':>19} {'CIFAR-10 epoch':>16}"
    )
    for n, name in DEPTHS.items():
        assert depth_label(n) == int(name.split("-")[1])
        for precision, channels_last, amp, compile in settings:
            loader = make_loader(batches * args.batch_size, args.batch_size, dev, channels_last)
            run = TrainSettings(RECIPE, amp=amp, compile=compile, channels_last=channels_last)
            rates = [s.examples_per_s for s in passes(n, dev, loader, reps=args.reps, settings=run)]
            median = statistics.median(rates)
            epoch = CIFAR10_TRAIN_IMAGES / median
            print(
                f"{name:<10} {precision:<13} {'channels_last' if channels_last else 'NCHW':<14} {median:>16,.0f} "
                f"{min(rates):>9,.0f}..{max(rates):<9,.0f} {epoch:>9.0f} s (estimated)"
            )
    if gpu:
        for n, name in DEPTHS.items():
            loader = make_loader(CIFAR10_TRAIN_IMAGES, args.batch_size, dev, True)
            run = TrainSettings(RECIPE, amp=True, compile=args.compile, channels_last=True)
            [stats] = passes(n, dev, loader, reps=1, settings=run)
            print(
                f"{name}: one measured CIFAR-10 epoch (50,000 images, bf16, channels_last"
                f"{', compiled' if args.compile else ''}) through train_epoch: {stats.seconds:.2f} s"
            )


if __name__ == "__main__":
    main()
