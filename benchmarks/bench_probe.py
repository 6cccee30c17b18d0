"""Cost of the AG probe and of the exact projection vs a plain training step (issue 4; docs/design.md,
section "Exact growth value V_S,l").

On ResNet-8 and ResNet-20 (CIFAR widths) at batch 256, one run: ``--reps`` rounds after a
warm-up, the three measurements taken in turns within each round (other processes' load hits
them alike); printed are the median ratio over the rounds and its spread (min..max):

- plain training forward + backward of the batch (train-mode BN, parameter gradients);
- the AG probe over all candidates (:func:`common.science.probe.probe_activation_gradients`): one
  forward and the input-gradient half of the backward, no parameter gradients.
  Target: <= 0.90 of the training step (a bare frozen-parameter forward+backward is ~0.87);
- the same with ``exact=True`` (float64 Gram statistics of every candidate's tangent features,
  ``V_S,l``). Target: <= 2.0 of the training step, read conservatively as the whole exact probe
  (its forward and backward included); the projection's own share (exact minus probe) is
  printed beside it;
- where the exact projection's time goes, per ResNet stage (C channels, H x W maps): the float64
  Gram statistics ``P = Psi^T Psi`` and ``X = Psi^T G`` through the conv3x3 family's structured
  route (the function the probe calls, ``TANGENT_FAMILIES["conv3x3"].gram``) with their
  multiply-add count and achieved float64 GFLOP/s, as a share of the machine's float64 peak:
  the best of square float64 ``torch.mm`` products of a few sizes (:data:`PEAK_SIZES`), measured
  first in the same run, and that size timed again in every round beside the Gram. Target: >= 0.6
  of peak at every stage. Printed beside it: the route's 22 products per chunk issued bare, as
  the route issues them (``a[:, :M - s] @ b[:, s:]^T`` of row-major ``C x M`` float64 maps: the
  second operand read transposed, never a row-major ``M x C``), which bounds what any bookkeeping
  around them can reach; then the eigendecomposition of the ``9C x 9C`` Gram matrix.

  Why a stage can stay below 0.6 (arithmetic intensity): each of those products has a ``C x C``
  output (``X = Psi^T G`` has C = d columns: 16 at the first stage) and an inner dimension of
  ``M`` ~ 10^4-10^5 padded pixels, so every operand element read feeds only ``C / 2``
  multiply-adds (8 at C = 16, 16 at C = 32, 32 at C = 64), against ``n / 2`` (128 and more) for a
  square ``n x n`` product. The BLAS packs both operands into its panel layout for each slice of
  ``M`` whatever the output size, so at C = 16 packing and loading cost about as much as the
  multiply-adds; the bare products measure that ceiling, and at C = 16 and 32 the Gram runs close to
  them (numbers in benchmarks/README.md). Reaching 0.6 at C = 16 would take wider products
  (several shifts stacked into one ``C x kC`` output, at the price of copying the shifted maps) or
  chunks small enough to stay in cache (``--gram-chunk-elements``), not a faster loop around them;
- peak resident memory of the exact probe over 1x and 8x the number of batches, each in a fresh
  process (``ru_maxrss``): the Gram statistics are O(k^2 + k d), so it must not grow.

    .venv/bin/python benchmarks/bench_probe.py [--reps 5] [--batch-size 256] [--threads 2] [--gram-chunk-elements 1048576]
"""

from __future__ import annotations

import argparse
import functools
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.models.resnet import ResNet, ResNetConfig, depth_label
from common.science.probe import probe_activation_gradients
from common.science.projection import GramAccumulator
from common.science.tangent import GRAM_CHUNK_ELEMENTS, TANGENT_FAMILIES
from common.training.device import cpu_count

DEPTHS = {"ResNet-8": 0, "ResNet-20": 12}  # N extra blocks
TARGET_PROBE, TARGET_EXACT, TARGET_PEAK_SHARE = 0.90, 2.0, 0.60
PEAK_SIZES = (256, 512, 1024, 2048)  # square float64 products tried for the peak
PEAK_MULTIPLY_ADDS = 2**30  # each timing of the peak repeats its product to about this much work (not a 1 ms blip)
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
    """Multiply-adds of the structured conv3x3 Gram (``common.science.tangent._conv_gram``) for C = d channels.

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


def float64_peak(reps: int) -> tuple[int, list[float]]:
    """The machine's practical float64 peak: the square ``torch.mm`` size of :data:`PEAK_SIZES` with the
    best median GFLOP/s in this run, and its GFLOP/s per round."""
    best: tuple[int, list[float]] | None = None
    for n in PEAK_SIZES:
        square = SquareProducts(n)
        rates = [2 * square.multiply_adds / t / 1e9 for t in interleaved_times({"mm": square}, reps)["mm"]]
        if best is None or statistics.median(rates) > statistics.median(best[1]):
            best = (n, rates)
    assert best is not None
    return best


class SquareProducts:
    """``torch.mm`` of two random square float64 ``n x n`` matrices, repeated to about :data:`PEAK_MULTIPLY_ADDS`."""

    def __init__(self, n: int) -> None:
        self.a, self.b = torch.randn(n, n, dtype=torch.float64), torch.randn(n, n, dtype=torch.float64)
        self.repeats = max(1, round(PEAK_MULTIPLY_ADDS / n**3))
        self.multiply_adds = self.repeats * n**3

    def __call__(self) -> None:
        for _ in range(self.repeats):
            torch.mm(self.a, self.b)


def gram_chunks(batch: int, c: int, side: int, chunk_elements: int) -> list[int]:
    """Padded columns ``M`` of each chunk the Gram route processes (about ``chunk_elements`` float64 values each)."""
    per_chunk = max(1, chunk_elements // (c * (side + 2) ** 2))
    return [min(per_chunk, batch - start) * (side + 2) ** 2 for start in range(0, batch, per_chunk)]


def bare_products(chunks: list[tuple[torch.Tensor, torch.Tensor]], shifts: list[int]) -> None:
    """The Gram route's 22 products per chunk, bare: ``a[:, :M - s] @ b[:, s:]^T`` of row-major ``C x M``
    float64 maps (both operands row-major, the second read transposed), as ``_shifted_product`` issues them."""
    for y, gg in chunks:
        m = y.shape[1]
        for s in shifts[:9]:  # X: G against the nine offsets
            torch.mm(gg[:, : m - s], y[:, s:].T)
        for s in shifts[9:]:  # P: thirteen shifts
            torch.mm(y[:, : m - s], y[:, s:].T)


def stage_projection_report(batch: int, reps: int, chunk_elements: int = GRAM_CHUNK_ELEMENTS) -> bool:
    """Per stage: the Gram's float64 GFLOP/s against the machine's float64 peak (target :data:`TARGET_PEAK_SHARE`),
    beside the same products issued bare and the products' arithmetic intensity; True when every stage meets it."""
    gram = functools.partial(TANGENT_FAMILIES["conv3x3"].gram, chunk_elements=chunk_elements)
    n, peak_rates = float64_peak(reps)
    square = SquareProducts(n)
    print(
        f"float64 peak: best square torch.mm of {PEAK_SIZES}: {n}x{n}, {spread(peak_rates, '.1f')} GFLOP/s; "
        f"exact projection per stage, batch {batch}, chunks of {chunk_elements} float64 values (median (min..max) over {reps} rounds, each stage's ratios "
        f"taken against the {n}x{n} mm timed in the same round):"
    )
    ok = True
    for c, side in STAGES:
        g = torch.Generator().manual_seed(c)
        psi = torch.randn(batch, c, side, side, generator=g).relu_()
        grad = torch.randn(batch, c, side, side, generator=g)
        macs = gram_multiply_adds(batch, c, side, side)
        row = side + 2
        shifts = [(i - 1) * row + (j - 1) for i in range(3) for j in range(3)]  # X offsets (abs: the same work)
        shifts = [abs(o) for o in shifts] + [
            dy * row + dx for dy in range(3) for dx in range(-2, 3) if dy > 0 or dx >= 0
        ]
        chunks = [
            (torch.randn(c, m, dtype=torch.float64), torch.randn(c, m, dtype=torch.float64))
            for m in gram_chunks(batch, c, side, chunk_elements)
        ]
        bare_macs = sum(c * c * (y.shape[1] - s) for y, _ in chunks for s in shifts)
        P, X = gram(psi, grad)
        acc = GramAccumulator(9 * c, c)
        acc.update_statistics(P, X, float(grad.double().square().sum()), batch * side * side)

        def eigh(acc=acc):
            acc._eig = None
            acc.growth_value()

        times = interleaved_times(
            {
                "gram": lambda psi=psi, grad=grad: gram(psi, grad),
                "bare": lambda chunks=chunks, shifts=shifts: bare_products(chunks, shifts),
                "square": square,
                "eigh": eigh,
            },
            reps,
        )
        ours = [2 * macs / t / 1e9 for t in times["gram"]]
        bare = [2 * bare_macs / t / 1e9 for t in times["bare"]]
        peak = [2 * square.multiply_adds / t / 1e9 for t in times["square"]]
        share = [o / q for o, q in zip(ours, peak, strict=True)]
        met = statistics.median(share) >= TARGET_PEAK_SHARE
        ok &= met
        print(
            f"  stage C={c:>2} {side:>2}x{side:<2}: {macs / 1e9:5.2f} G multiply-adds, Gram {spread(ours, '.1f')} GFLOP/s "
            f"= {spread(share)} of peak (target >= {TARGET_PEAK_SHARE}: {'met' if met else 'missed'}); "
            f"its 22 products alone {spread([x / q for x, q in zip(bare, peak, strict=True)])} of peak; "
            f"{c / 2:.0f} multiply-adds per operand element read (square mm: {n // 2}); "
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
    cmd = [
        sys.executable,
        __file__,
        "--memory-child",
        str(extra_blocks),
        str(n_batches),
        "--batch-size",
        str(batch_size),
        "--threads",
        str(threads),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--memory-batches", type=int, default=1, help="1x for the memory check (8x is 8 times this)")
    parser.add_argument("--memory-batch-size", type=int, default=128, help="batch size of the memory check")
    parser.add_argument("--threads", type=int, default=cpu_count(), help="torch CPU threads")
    parser.add_argument(
        "--gram-chunk-elements",
        type=int,
        default=GRAM_CHUNK_ELEMENTS,
        help="float64 values per chunk of the per-stage Gram measurement (the probe's own: the default)",
    )
    parser.add_argument("--memory-child", nargs=2, type=int, metavar=("N", "BATCHES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(*args.memory_child, args.batch_size)
        return

    print(
        f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}, batch {args.batch_size}, "
        f"median (min..max) of {args.reps} interleaved rounds"
    )
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
    ok &= stage_projection_report(args.batch_size, args.reps, args.gram_chunk_elements)
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
