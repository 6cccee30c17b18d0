"""Cost of the AG probe and of the exact projection vs a plain training step (DESIGN.md 2, issue 4).

On ResNet-8 and ResNet-20 (CIFAR widths) at batch 256, one run: ``--reps`` rounds after a
warm-up, the three measurements taken in turns within each round (other processes' load hits
them alike); printed are the median ratio over the rounds and its spread (min..max):

- plain training forward + backward of the batch (train-mode BN, parameter gradients);
- the AG probe over all candidates (:func:`common.probe.probe_activation_gradients`): one
  forward and the input-gradient half of the backward, no parameter gradients.
  Target: <= 0.90 of the training step (a bare frozen-parameter forward+backward is ~0.87);
- the same with ``exact=True`` (float64 Gram statistics of every candidate's tangent features,
  ``V_S,l``). Target: <= 2.0 of the training step, read conservatively as the whole exact probe
  (its forward and backward included); the projection's own share (exact minus probe) is
  printed beside it;
- where the exact projection's time goes, per ResNet stage (C channels, H x W maps): the float64
  Gram statistics ``P = Psi^T Psi`` and ``X = Psi^T G`` through the conv3x3 family's structured
  route (the function the probe calls, ``TANGENT_FAMILIES["conv3x3"].gram``) with their
  multiply-add count and achieved float64 GFLOP/s, beside two references measured in the same
  run: ``torch.mm`` on contiguous operands of the same skinny shapes (``C x M`` times ``M x C``,
  our overhead; target >= 80 % of its rate) and one square float64 ``torch.mm`` with the same
  number of multiply-adds (the machine's float64 peak; reported, no target); then the
  eigendecomposition of the ``9C x 9C`` Gram matrix;
- peak resident memory of the exact probe over 1x and 8x the number of batches, each in a fresh
  process (``ru_maxrss``): the Gram statistics are O(k^2 + k d), so it must not grow.

    .venv/bin/python benchmarks/bench_probe.py [--reps 5] [--batch-size 256] [--threads 2]
"""

from __future__ import annotations

import argparse
import resource
import statistics
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
from common.projection import GramAccumulator
from common.tangent import TANGENT_FAMILIES

DEPTHS = {"ResNet-8": 0, "ResNet-20": 12}  # N extra blocks
TARGET_PROBE, TARGET_EXACT, TARGET_MM_SHARE = 0.90, 2.0, 0.80
STAGES = ((16, 32), (32, 16), (64, 8))  # (channels C, map side H = W) of the CIFAR ResNets' three stages


def batches(n: int, batch_size: int, seed: int = 0):
    """``n`` random CIFAR-shaped batches, generated lazily (the pool must not count as probe memory)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        yield torch.randn(batch_size, 3, 32, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def interleaved_times(fns: dict, reps: int) -> dict[str, list[float]]:
    """``reps`` timings of each function after a warm-up, run in turns (load from other processes hits all alike)."""
    for fn in fns.values():
        fn()  # warm-up
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def spread(values: list[float], fmt: str = ".2f") -> str:
    """``median (min..max)`` of a list of measurements."""
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}..{max(values):{fmt}})"


def gram_multiply_adds(batch: int, c: int, h: int, w: int) -> int:
    """Multiply-adds of the structured conv3x3 Gram (``common.tangent._conv_gram``) for C = d channels.

    Over the zero-padded flattened maps (M = B (H + 2) (W + 2) columns): nine ``X`` products and
    thirteen ``P`` products of ``C x M'`` by ``M' x C`` (M' = M less the shift), plus the edge bands:
    two rows and two columns per image, three shifts each, and four corners.
    """
    row = w + 2
    m = batch * (h + 2) * row
    offsets = [(i - 1) * row + (j - 1) for i in range(3) for j in range(3)]
    shifts = [dy * row + dx for dy in range(3) for dx in range(-2, 3) if dy > 0 or dx >= 0]
    columns = sum(m - abs(o) for o in offsets) + sum(m - s for s in shifts)
    bands = 2 * sum(batch * row - dx for dx in range(3)) + 2 * sum(batch * (h + 2) - dy for dy in range(3)) + 4 * batch
    return c * c * (columns + bands)


def stage_projection_report(batch: int, reps: int) -> bool:
    """Per stage: the Gram's multiply-adds, its float64 GFLOP/s and the two torch.mm references; True when >= 80 %."""
    gram = TANGENT_FAMILIES["conv3x3"].gram
    ok = True
    print(f"exact projection per stage, batch {batch} (median (min..max) over {reps} rounds, float64):")
    for c, side in STAGES:
        g = torch.Generator().manual_seed(c)
        psi = torch.randn(batch, c, side, side, generator=g).relu_()
        grad = torch.randn(batch, c, side, side, generator=g)
        macs = gram_multiply_adds(batch, c, side, side)
        m = batch * (side + 2) ** 2
        a, b = torch.randn(c, m, dtype=torch.float64), torch.randn(m, c, dtype=torch.float64)
        n = round(macs ** (1 / 3))
        sq1, sq2 = torch.randn(n, n, dtype=torch.float64), torch.randn(n, n, dtype=torch.float64)
        P, X = gram(psi, grad)
        acc = GramAccumulator(9 * c, c)
        acc.update_statistics(P, X, float(grad.double().square().sum()), batch * side * side)

        def skinny_mm(a=a, b=b):
            for _ in range(22):  # the 9 + 13 products, each C x M by M x C
                torch.mm(a, b)

        def eigh(acc=acc):
            acc._eig = None
            acc.growth_value()

        times = interleaved_times(
            {"gram": lambda psi=psi, grad=grad: gram(psi, grad), "skinny": skinny_mm,
             "square": lambda sq1=sq1, sq2=sq2: torch.mm(sq1, sq2), "eigh": eigh},
            reps,
        )  # fmt: skip
        ours = [2 * macs / t / 1e9 for t in times["gram"]]
        skinny = [2 * 22 * c * c * m / t / 1e9 for t in times["skinny"]]
        square = [2 * n**3 / t / 1e9 for t in times["square"]]
        share = [o / r for o, r in zip(ours, skinny, strict=True)]
        ok &= statistics.median(share) >= TARGET_MM_SHARE
        print(
            f"  stage C={c:>2} {side:>2}x{side:<2}: {macs / 1e9:5.2f} G multiply-adds, Gram {spread(ours, '.1f')} GFLOP/s; "
            f"torch.mm same shapes {spread(skinny, '.1f')} -> ours/mm {spread(share)} (target >= {TARGET_MM_SHARE}); "
            f"square {n}x{n} mm {spread(square, '.1f')} -> ours/peak {spread([o / q for o, q in zip(ours, square, strict=True)])}; "
            f"eigh of {9 * c}x{9 * c} {spread([t * 1e3 for t in times['eigh']], '.1f')} ms"
        )
    return ok


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

    print(f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}, batch {args.batch_size}, "
          f"median (min..max) of {args.reps} interleaved rounds")
    ok = True
    for name, n in DEPTHS.items():
        assert depth_label(n) == int(name.split("-")[1])
        torch.manual_seed(0)
        model = ResNet(ResNetConfig(extra_blocks=n))
        x, y = next(batches(1, args.batch_size))
        times = interleaved_times(
            {
                "train": lambda: train_step(model, x, y),  # noqa: B023
                "probe": lambda: probe_activation_gradients(model, [(x, y)]),  # noqa: B023
                "exact": lambda: probe_activation_gradients(model, [(x, y)], exact=True),  # noqa: B023
            },
            args.reps,
        )
        rounds = list(zip(times["train"], times["probe"], times["exact"], strict=True))
        r_probe = [p / t for t, p, _ in rounds]
        r_exact = [e / t for t, _, e in rounds]
        r_share = [(e - p) / t for t, p, e in rounds]
        candidates = len(model.candidates())
        ok &= statistics.median(r_probe) <= TARGET_PROBE and statistics.median(r_exact) <= TARGET_EXACT
        print(
            f"{name:<9} ({candidates:>2} candidates): train fwd+bwd {spread([t * 1e3 for t in times['train']], '.0f')} ms | "
            f"AG probe {spread(r_probe)}x (target <= {TARGET_PROBE}) | probe + exact {spread(r_exact)}x "
            f"(target <= {TARGET_EXACT}; the projection's own share, exact - probe: {spread(r_share)}x)"
        )
    ok &= stage_projection_report(args.batch_size, args.reps)
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
