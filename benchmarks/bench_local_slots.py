"""Several runs at once on a CPU (``--launcher local``, what ``make mini`` uses): images/s of K processes with
one thread each against one process with K threads, the same training code and shapes.

Each round times :func:`common.training.epoch.train_epoch` (the loop every sweep run trains with) over the sweep's own
augmenting loader at the mini preset's shape (1,000 random uint8 CIFAR-shaped images, batch 100, 10 steps per
epoch), first as one process with ``--slots`` threads, then as ``--slots`` processes started together with
:data:`common.launch.local_pool.CPU_THREADS` thread(s) each (``OMP_NUM_THREADS`` set as the local launcher sets it).
Every process trains one warm-up epoch and then ``--epochs`` timed ones; it reports its own images/s over the
timed epochs. Printed per depth: the images/s of one process alone and of all processes together (their sum),
and their ratio, the median over ``--rounds`` rounds with the spread (min..max). Rounds alternate the two
settings, so a drift of the machine's speed shows up in the spread rather than in one setting alone.

    .venv/bin/python benchmarks/bench_local_slots.py [--depths 0,5,12] [--slots 2] [--epochs 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_train_step import make_loader, passes  # benchmarks/ is this script's directory

from common.launch.local_pool import CPU_THREADS
from common.models.resnet import depth_label
from common.presets.train_resnet_sweep import MINI
from common.training.recipes import TrainSettings

MINI_IMAGES, MINI_BATCH = MINI.train_subset, MINI.batch_size  # the mini sweep's training subset and batch


def train_rate(n: int, epochs: int) -> float:
    """One warm-up epoch of ResNet-(8+n) at the mini recipe, then ``epochs`` timed ones (bench_train_step's
    ``passes``): images/s over the timed epochs."""
    dev = torch.device("cpu")
    loader = make_loader(MINI_IMAGES, MINI_BATCH, dev, channels_last=True)
    timed = passes(n, dev, loader, reps=epochs, settings=TrainSettings(MINI.recipe, channels_last=True))
    return epochs * MINI_IMAGES / sum(s.seconds for s in timed)


def processes(n: int, count: int, threads: int, epochs: int) -> list[float]:
    """``count`` worker processes of ``threads`` thread(s) each, started together: each one's images/s."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, __file__, "--worker", str(n), "--threads", str(threads), "--epochs", str(epochs)]
    workers = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(count)]
    outputs = [w.communicate()[0] for w in workers]
    if any(w.returncode for w in workers):
        raise SystemExit(f"bench_local_slots.py: error: a worker failed (ResNet-{depth_label(n)})")
    return [json.loads(out.strip().splitlines()[-1])["images_per_s"] for out in outputs]


def spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}..{format(max(values), fmt)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--depths", default="0,5,12", help="extra blocks N, comma-separated (ResNet-(8+N))")
    parser.add_argument("--slots", type=int, default=os.cpu_count() or 1, help="processes at once (default: cores)")
    parser.add_argument("--epochs", type=int, default=3, help="timed 1,000-image epochs per process and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        torch.set_num_threads(args.threads)
        print(json.dumps({"images_per_s": train_rate(args.worker, args.epochs)}))
        return
    depths = [int(d) for d in args.depths.split(",") if d.strip()]
    print(
        f"torch {torch.__version__}, {os.cpu_count()} cores, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')}:"
        f" train_epoch at batch {MINI_BATCH} on {MINI_IMAGES:,} images, {args.epochs} timed epochs per process, "
        f"{args.rounds} rounds; 1 process x {args.slots} threads against {args.slots} processes x {CPU_THREADS}"
    )
    print(f"{'model':<10} {'alone, images/s':>26} {'together, images/s':>26} {'together / alone':>24}")
    for n in depths:
        alone, together = [], []
        for _ in range(args.rounds):
            alone += processes(n, 1, args.slots, args.epochs)
            together.append(sum(processes(n, args.slots, CPU_THREADS, args.epochs)))
        ratios = [t / a for a, t in zip(alone, together, strict=True)]
        print(
            f"ResNet-{depth_label(n):<3} {spread(alone, ',.0f'):>26} {spread(together, ',.0f'):>26} "
            f"{spread(ratios, '.2f'):>24}"
        )


if __name__ == "__main__":
    main()
