"""The exact growth value V_S,l at the size of a real model (issue 46, item 3): torchvision's ResNet-18, every
candidate, today's route against the pooled-only one.

An unmodified ``torchvision.models.resnet18(weights=None)`` (random weights, eval mode, float32) is probed through
``probe_activation_gradients(..., candidates=...)`` at its 9 candidates, built here: the input of each of the 8
``BasicBlock`` s (``layer1.0`` .. ``layer4.1``) and the input of ``avgpool`` (the tensor entering the head), all with
the ``conv3x3`` tangent family (``k = 9 C``: 576 .. 4,608). ``--images`` random images of ``--size`` pixels with random
labels go through in batches of ``--batch``. Two routes in the same run, on the same batches:

- today's (``exact=True``, the default ``exact_per_batch=True``): ``V_S,l`` per batch (an eigendecomposition per
  batch and candidate) and pooled (another);
- the pooled-only one (``exact_per_batch=False``): the pooled Gram statistics only, factorised once per candidate
  (``common.science.pooled_solve.solve_pooled``: Cholesky or pivoted Cholesky where the rank they give is certified,
  else the eigendecomposition).

Printed: each route's wall time and their ratio (target: the new route >= 5x faster), per candidate ``k``, the
pooled rows, the rank, the new route's solver and the relative difference of the pooled ``V_S,l`` between the
routes (and its maximum), each route's progress lines as they come, and then, for the machine's speed that day,
``benchmarks/bench_train_step.py``'s figure: ``train_epoch`` images/s of ResNet-8 channels_last, float32 (its
``passes``; ``--no-train-step`` leaves it out).

    .venv/bin/python benchmarks/bench_probe_network.py [--images 64] [--size 224] [--batch 8] [--threads 2]

Today's route costs about ``(B + 1)`` eigendecompositions of each ``k x k`` Gram (``B`` = images / batch), ~30 s
each at ``k = 4,608`` on one thread of this project's CPU, so the full default run takes long (13 min on one thread
here, benchmarks/README.md): time a small setting first (``--size 64 --images 16``) and extrapolate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torchvision
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_train_step import RECIPE, make_loader, passes  # benchmarks/ is this script's directory

from common.models.candidates import Candidate
from common.science.probe import ProbeResult, probe_activation_gradients
from common.training.recipes import TrainSettings

TARGET_RATIO = 5.0  # today's route / the pooled-only route


def resnet18_candidates(model: nn.Module) -> list[Candidate]:
    """The input of every ``BasicBlock`` and of ``avgpool``, in forward order, ``conv3x3`` family."""
    found = []
    for stage in ("layer1", "layer2", "layer3", "layer4"):
        for i, block in enumerate(getattr(model, stage)):
            found.append(Candidate(len(found), f"{stage}.{i}", block, "conv3x3"))
    found.append(Candidate(len(found), "avgpool", model.avgpool, "conv3x3"))
    return found


def analysis_batches(images: int, size: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(images, 3, size, size, generator=g)
    y = torch.randint(0, 1000, (images,), generator=g)
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, images, batch)]


def timed_probe(label: str, model, batches, candidates, per_batch: bool) -> tuple[ProbeResult, float]:
    def report(line: str) -> None:
        print(f"  [{label}] {line}", flush=True)

    start = time.perf_counter()
    result = probe_activation_gradients(
        model, batches, exact=True, candidates=candidates, exact_per_batch=per_batch, progress=report
    )
    seconds = time.perf_counter() - start
    print(f"{label}: {seconds:.1f} s", flush=True)
    return result, seconds


def compare(today: ProbeResult, pooled: ProbeResult) -> float:
    """One line per candidate; returns the largest relative difference of the pooled ``V_S,l``."""
    print(
        f"{'candidate':<10} {'k':>5} {'rows':>7} {'rank':>5} {'route':>8} {'kappa bound':>11} {'V pooled':>12} rel. diff"
    )
    worst = 0.0
    for a, b in zip(today.scores, pooled.scores, strict=True):
        diff = abs(b.growth_value_pooled - a.growth_value_pooled) / a.growth_value_pooled
        worst = max(worst, diff)
        bound = f"{b.gram_condition_bound:.2e}" if b.gram_condition_bound is not None else "-"
        if (a.tangent_rank, a.rows_pooled) != (b.tangent_rank, b.n_rows):
            print(
                f"  {b.name}: rank/rows differ: today {a.tangent_rank}/{a.rows_pooled}, pooled {b.tangent_rank}/{b.n_rows}"
            )
        print(
            f"{b.name:<10} {b.tangent_dim:>5} {b.n_rows:>7} {b.tangent_rank:>5} {b.pooled_route:>8} {bound:>11} "
            f"{b.growth_value_pooled:>12.6e} {diff:.1e}"
        )
    return worst


def train_step_figure(threads: int) -> None:
    """``bench_train_step.py``'s figure: ResNet-8, float32, channels_last, batch 128, 8 batches, 5 timed passes."""
    loader = make_loader(8 * 128, 128, torch.device("cpu"), channels_last=True)
    settings = TrainSettings(RECIPE, amp=False, compile=False, channels_last=True)
    rates = [s.examples_per_s for s in passes(0, torch.device("cpu"), loader, reps=5, settings=settings)]
    print(
        f"bench_train_step.py's figure ({threads} threads): ResNet-8 float32 channels_last "
        f"{statistics.median(rates):,.0f} images/s median ({min(rates):,.0f}..{max(rates):,.0f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--size", type=int, default=224, help="image side in pixels")
    parser.add_argument("--batch", type=int, default=8, help="examples per analysis batch")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads")
    parser.add_argument("--no-train-step", action="store_true", help="leave out bench_train_step.py's figure")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    candidates = resnet18_candidates(model)
    batches = analysis_batches(args.images, args.size, args.batch)
    load = os.getloadavg()
    print(
        f"torchvision resnet18 (random weights), {len(candidates)} candidates (conv3x3), {args.images} images of "
        f"{args.size}x{args.size} in {len(batches)} batches of {args.batch}; CPU, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        flush=True,
    )
    pooled, t_pooled = timed_probe("pooled only", model, batches, candidates, per_batch=False)
    today, t_today = timed_probe("today (per batch + pooled)", model, batches, candidates, per_batch=True)
    worst = compare(today, pooled)
    ratio = t_today / t_pooled
    verdict = "met" if ratio >= TARGET_RATIO else "missed"
    print(
        f"today's route {t_today:.1f} s, pooled only {t_pooled:.1f} s: {ratio:.2f}x (target >= {TARGET_RATIO}: "
        f"{verdict}); max relative difference of the pooled V_S,l {worst:.1e}; load average now "
        + " ".join(f"{v:.2f}" for v in os.getloadavg())
    )
    if not args.no_train_step:
        train_step_figure(torch.get_num_threads())


if __name__ == "__main__":
    main()
