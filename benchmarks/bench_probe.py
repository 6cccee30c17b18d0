"""Cost of the AG probe and of the exact projection vs a plain training step (DESIGN.md 2, issue 4).

On ResNet-8 and ResNet-20 (CIFAR widths) at batch 256, one run: the best of ``--reps``
timings after a warm-up, the three measurements taken in turns (other processes' load):

- plain training forward + backward of the batch (train-mode BN, parameter gradients);
- the AG probe over all candidates (:func:`common.probe.probe_activation_gradients`): one
  forward and the input-gradient half of the backward, no parameter gradients.
  Target: <= 0.90 of the training step (a bare frozen-parameter forward+backward is ~0.87);
- the same with ``exact=True`` (float64 Gram statistics of every candidate's tangent features,
  ``V_S,l``). Target: <= 2.0 of the training step, read conservatively as the whole exact probe
  (its forward and backward included); the projection's own share (exact minus probe) is
  printed beside it;
- peak resident memory of the exact probe over 1x and 8x the number of batches, each in a fresh
  process (``ru_maxrss``): the Gram statistics are O(k^2 + k d), so it must not grow.

    .venv/bin/python benchmarks/bench_probe.py [--reps 5] [--batch-size 256] [--threads 2]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.device import cpu_count
from common.models.resnet import ResNet, ResNetConfig, depth_label
from common.probe import probe_activation_gradients

DEPTHS = {"ResNet-8": 0, "ResNet-20": 12}  # N extra blocks
TARGET_PROBE, TARGET_EXACT = 0.90, 2.0


def batches(n: int, batch_size: int, seed: int = 0):
    """``n`` random CIFAR-shaped batches, generated lazily (the pool must not count as probe memory)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        yield torch.randn(batch_size, 3, 32, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def interleaved_times(fns: dict, reps: int) -> dict:
    """Best of ``reps`` timings of each function, run in turns (robust to load from other processes)."""
    for fn in fns.values():
        fn()  # warm-up
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: min(ts) for name, ts in times.items()}


def train_step(model, x, y) -> None:
    model.train()
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()


def memory_child(extra_blocks: int, n_batches: int, batch_size: int) -> None:
    """In a fresh process: one exact probe over ``n_batches``; print the peak RSS in MiB."""
    torch.manual_seed(0)
    model = ResNet(ResNetConfig(extra_blocks=extra_blocks)).eval()
    probe_activation_gradients(model, batches(n_batches, batch_size), exact=True)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def peak_mib(extra_blocks: int, n_batches: int, batch_size: int, threads: int) -> float:
    cmd = [sys.executable, __file__, "--memory-child", str(extra_blocks), str(n_batches), "--batch-size", str(batch_size),
           "--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--memory-batches", type=int, default=1, help="1x for the memory check (8x is 8 times this)")
    parser.add_argument("--memory-batch-size", type=int, default=128, help="batch size of the memory check")
    parser.add_argument("--threads", type=int, default=cpu_count(), help="torch CPU threads")
    parser.add_argument("--memory-child", nargs=2, type=int, metavar=("N", "BATCHES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(*args.memory_child, args.batch_size)
        return

    print(f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}, batch {args.batch_size}, best of {args.reps}, interleaved")
    ok = True
    for name, n in DEPTHS.items():
        assert depth_label(n) == int(name.split("-")[1])
        torch.manual_seed(0)
        model = ResNet(ResNetConfig(extra_blocks=n))
        x, y = next(batches(1, args.batch_size))
        best = interleaved_times(
            {
                "train": lambda: train_step(model, x, y),  # noqa: B023
                "probe": lambda: probe_activation_gradients(model, [(x, y)]),  # noqa: B023
                "exact": lambda: probe_activation_gradients(model, [(x, y)], exact=True),  # noqa: B023
            },
            args.reps,
        )
        train, probe, exact = best["train"], best["probe"], best["exact"]
        candidates = len(model.candidates())
        r_probe, r_exact = probe / train, exact / train
        ok &= r_probe <= TARGET_PROBE and r_exact <= TARGET_EXACT
        print(
            f"{name:<9} ({candidates:>2} candidates): train fwd+bwd {train * 1e3:7.1f} ms | AG probe {probe * 1e3:7.1f} ms "
            f"= {r_probe:.2f}x (target <= {TARGET_PROBE}) | probe + exact {exact * 1e3:7.1f} ms = {r_exact:.2f}x "
            f"(target <= {TARGET_EXACT}; the projection's own share, exact - probe: {(exact - probe) / train:.2f}x)"
        )
    n = DEPTHS["ResNet-20"]
    one = peak_mib(n, args.memory_batches, args.memory_batch_size, args.threads)
    eight = peak_mib(n, 8 * args.memory_batches, args.memory_batch_size, args.threads)
    grows = eight > one * 1.05 + 16
    ok &= not grows
    print(
        f"exact projection peak RSS, ResNet-20, batch {args.memory_batch_size}: {args.memory_batches} batch(es) {one:.0f} MiB, "
        f"{8 * args.memory_batches} batches {eight:.0f} MiB ({'grows' if grows else 'does not grow'})"
    )
    print("all targets met" if ok else "some targets missed")


if __name__ == "__main__":
    main()
