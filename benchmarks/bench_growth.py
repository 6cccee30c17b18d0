"""An epoch of a grown model vs a scratch run of the same depth (script 03): seconds per epoch and their ratio.

A grown ResNet-(8+N) (ResNet-8 grown N times by ``common.models.resnet.grow``, blocks with V = 0)
and a freshly initialised ResNet-(8+N) have the same architecture, so an epoch of either should
cost the same. Both train with the code every run uses, ``common.training.epoch.train_epoch`` (SGD recipe,
channels_last, the tensor-resident augmenting loader), on the same synthetic 32x32 images,
interleaved (grown, scratch, grown, ...) so machine load hits both alike. Prints per-epoch
seconds (median and spread over ``--repeats``) and the ratio grown / scratch from this one run,
plus the one-off cost of an insertion (grow + the float64 function-preservation check; common/training/growing.py).

    .venv/bin/python benchmarks/bench_growth.py [--depth 2] [--images 2048] [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.data.loader import TensorLoader
from common.data.vision import CIFAR10_STATS
from common.models.resnet import ResNet, ResNetConfig, depth_label, grow
from common.science.growth import check_function_preserved
from common.training import device as devices
from common.training.epoch import train_epoch
from common.training.recipes import Schedule, SGDRecipe, TrainSettings


def grown_resnet(n: int) -> tuple[ResNet, float]:
    """ResNet-8 grown ``n`` times, each insertion checked as a growth run checks it; returns the model and the seconds of one insertion."""
    torch.manual_seed(0)
    model = ResNet(ResNetConfig(extra_blocks=0))
    x = torch.randn(8, 3, 32, 32)
    seconds = []
    for i in range(n):
        start = time.perf_counter()
        parent = copy.deepcopy(model)
        grow(model, i)
        check_function_preserved(parent, model, x)
        seconds.append(time.perf_counter() - start)
    return model, statistics.median(seconds)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--depth", type=int, default=2, help="N: compare grown and scratch ResNet-(8+N)")
    parser.add_argument("--images", type=int, default=2048, help="training images per epoch (synthetic 32x32)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="timed epochs per model, interleaved")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = devices.resolve_device(args.device)
    grown, start_s = grown_resnet(args.depth)
    torch.manual_seed(1)
    scratch = ResNet(ResNetConfig(extra_blocks=args.depth))
    assert {k: v.shape for k, v in grown.state_dict().items()} == {k: v.shape for k, v in scratch.state_dict().items()}
    images = torch.randint(0, 256, (args.images, 3, 32, 32), dtype=torch.uint8)
    labels = torch.randint(0, 10, (args.images,))
    loader = TensorLoader(
        images,
        labels,
        args.batch_size,
        train=True,
        mean=CIFAR10_STATS[0],
        std=CIFAR10_STATS[1],
        device=dev,
        channels_last=True,
    )
    settings = TrainSettings(SGDRecipe(epochs=args.repeats + 1, lr=0.05, warmup_epochs=1.0), channels_last=True)
    schedule = Schedule.of(settings.recipe, len(loader))
    runs = {}
    for name, model in (("grown", grown), ("scratch", scratch)):
        model = model.to(dev).to(memory_format=torch.channels_last).train()
        runs[name] = {"model": model, "optimizer": settings.recipe.make_optimizer(model), "step": 0, "seconds": []}
    for epoch in range(args.repeats + 1):  # epoch 0 warms up
        loader.set_epoch(epoch)
        for run in runs.values():
            stats = train_epoch(
                run["model"],
                run["optimizer"],
                loader,
                schedule=schedule,
                step=run["step"],
                settings=settings,
                device=dev,
            )
            run["step"] = stats.step
            if epoch > 0:
                run["seconds"].append(stats.seconds)
    print(
        f"device {dev.type}, torch threads {torch.get_num_threads()}, ResNet-{depth_label(args.depth)}, {args.images} images/epoch, "
        f"batch {args.batch_size}, {args.repeats} timed epochs each (interleaved, after one warm-up)"
    )
    for name, run in runs.items():
        s = run["seconds"]
        print(f"{name:<8} epoch: median {statistics.median(s):.3f} s (min {min(s):.3f}, max {max(s):.3f})")
    ratios = [g / s for g, s in zip(runs["grown"]["seconds"], runs["scratch"]["seconds"], strict=True)]
    print(
        f"grown / scratch per epoch: {statistics.median(runs['grown']['seconds']) / statistics.median(runs['scratch']['seconds']):.3f} "
        f"(per interleaved pair: min {min(ratios):.3f}, max {max(ratios):.3f})"
    )
    print(f"one-off per insertion (grow + float64 train/eval function check on 8 images): {1000 * start_s:.0f} ms")


if __name__ == "__main__":
    main()
