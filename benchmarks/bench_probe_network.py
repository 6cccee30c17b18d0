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
    .venv/bin/python benchmarks/bench_probe_network.py --memory [--threads 2]

``--memory`` (issue 58, item 1) instead times the one call, ``probe_network(model, batches)`` (exact, pooled, the
rows x rows form where a place has fewer rows than tangent features), and measures its peak memory, on two cases,
each in a fresh forked process: torchvision ``resnet50(weights=None)`` on 8 random 64x64 images in batches of 4
(every place but the first has fewer rows than ``k``: 32 rows against ``k = 18,432`` at ``layer4``) and
``resnet18(weights=None)`` on 96 random 224x224 images in batches of 8 (more rows than ``k`` at every place: 4,704
against 4,608 at ``layer4.1``). Printed per case: the wall time of the call, the peak resident memory above the
process that built the model and the batches (``ru_maxrss``; the CPU seconds beside, for a loaded machine), the call's own estimate of its peak
(``NetworkProbe.memory_bytes``), the routes and the best place.

Today's route costs about ``(B + 1)`` eigendecompositions of each ``k x k`` Gram (``B`` = images / batch), ~30 s
each at ``k = 4,608`` on one thread of this project's CPU, so the full default run takes long (13 min on one thread
here, benchmarks/README.md): time a small setting first (``--size 64 --images 16``) and extrapolate.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
from common.models.probe_network import probe_network
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


MEMORY_CASES = {  # name: (torchvision model, images, side, batch)
    "resnet50, rows < k": ("resnet50", 8, 64, 4),
    "resnet18, rows >= k": ("resnet18", 96, 224, 8),
}


def memory_case(model_name: str, images: int, size: int, batch: int) -> dict:
    """In this (forked) process: build the model and the batches, then time ``probe_network`` and read its peak."""
    torch.manual_seed(0)
    model = torchvision.models.get_model(model_name, weights=None).eval()
    batches = analysis_batches(images, size, batch)
    base = int(next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS:")).split()[1])
    start, cpu = time.perf_counter(), time.process_time()
    probe = probe_network(model, batches)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    routes = [r["route"] for r in probe.records()]
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_mib": (peak - base) / 1024,
        "estimate_mib": probe.memory_bytes / 2**20,
        "places": len(routes),
        "rows_form": sum(r.startswith("rows") for r in routes),
        "routes": ", ".join(f"{r} {routes.count(r)}" for r in dict.fromkeys(routes)),
        "best": f"{probe.summary()['best_place']} ({probe.summary()['best_place_reason']})",
    }


def in_child(job, *args) -> dict:
    """``job(*args)`` in a forked child (its own peak memory), its result back through a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.write(write, json.dumps(job(*args)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as handle:
        text = handle.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def memory_report() -> None:
    for name, (model_name, images, size, batch) in MEMORY_CASES.items():
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
        print(
            f"{name}: {model_name} (random weights), {images} images of {size}x{size} in batches of {batch}; "
            f"load average {load}",
            flush=True,
        )
        r = in_child(memory_case, model_name, images, size, batch)
        print(
            f"  probe_network: {r['seconds']:.1f} s ({r['cpu_seconds']:.0f} CPU s), peak {r['peak_mib']:,.0f} MiB above the built model and batches "
            f"(estimated {r['estimate_mib']:,.0f} MiB); {r['places']} places, {r['rows_form']} in the rows x rows "
            f"form (routes: {r['routes']}); best place {r['best']}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--size", type=int, default=224, help="image side in pixels")
    parser.add_argument("--batch", type=int, default=8, help="examples per analysis batch")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads")
    parser.add_argument("--no-train-step", action="store_true", help="leave out bench_train_step.py's figure")
    parser.add_argument("--memory", action="store_true", help="the one call's time and peak memory (issue 58)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory:
        memory_report()
        return
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
