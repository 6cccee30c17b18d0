"""GPU time of a plan from its FLOP counts and a launch model per step (issue 33): every number here is an estimate.

No GPU has run this code yet, so each constant below is an assumption about an H100-class GPU (:data:`H100`) and
about this code's kernels (:data:`LAUNCH`), to be replaced by what ``benchmarks/gpu_check.py`` measures. The
model, for one run:

- A **phase** (training, the test-set evaluations every ``eval_every`` epochs, the final float32 evaluation, a
  probe's passes) is ``S`` steps doing ``F`` FLOPs in all at the sustained rate ``R`` of its precision, each step
  launching ``k`` kernels at a floor of ``t_launch`` each, plus ``t_host`` of Python per step. Alone on the device
  it takes ``max(F / R, S (k t_launch + t_host))``: the host queues kernels ahead of the device, so the slower of
  the two sets the pace. ``k`` is :attr:`LaunchModel.kernels_per_block` per residual block (and the stem) plus a
  fixed count (head, loss, the loader's augmentation, the optimiser).
- A **run** alone: its phases plus a fixed overhead ``t_0`` (process start and data, and for a training run the
  compilation of its block types, which regional compilation keeps independent of depth). Its compute ``C`` is
  ``sum F / R`` over its phases; its time alone ``T >= C``. A growth run of script 03 (:func:`growth_run`) is one
  run whose training and test-set phases are split into its segments between insertions, each at its own depth.
- **K runs per device** (``--runs-per-device K``): a run's share of the device is ``max(C, T / K)``. K runs fill
  one another's launch gaps and overheads until the device's arithmetic is the limit (ideal sharing, as under CUDA
  MPS; no memory or cache contention; a CPU core per run). K = 1 gives ``T``.
- A **plan**: the sum of its runs' shares, and never less than its longest run alone (a run cannot go faster than
  alone). The rolling pool starts the longest runs first (:func:`common.launch.local_pool.longest_first`), so it ends on
  short ones and the sum is a fair makespan for one device; on G devices divide by G.

FLOPs are not counted here: a training pass's are :func:`common.models.resnet_flops.resnet_training_flops_per_image`'s
(the one counter: PyTorch's on the meta device), and a forward pass is a third of that (the backward pass costs two
forwards); this module adds only the launch model on top. Dataset sizes come from
:data:`DATASET_SIZES` (a dry run loads no data). :func:`plan_estimate` estimates the unfinished runs of a plan,
:func:`describe` words it, each number marked "estimate"; ``--dry-run`` prints it
(:func:`common.launch.launcher.launch_from_args`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.errors import UserError
from common.models.resnet import ResNetConfig
from common.models.resnet_flops import resnet_training_flops_per_image
from common.presets.train_resnet_sweep import EVAL_BATCH_SIZE
from common.runs.run_store import RunSpec, read_config

ESTIMATE = "estimate"  # the word every printed number carries


@dataclass(frozen=True)
class Device:
    """An accelerator as the model sees it: sustained rates per precision and the cost of one kernel launch."""

    name: str
    bf16_flops: float  # sustained FLOP/s of training (bf16 autocast) on the sweep's narrow 3x3 convolutions
    fp32_flops: (
        float  # float32 with TF32 off: the final evaluation and the probes (common.science.precision.full_precision)
    )
    fp64_flops: float  # float64: the matched insertion's losses
    launch_s: float  # floor per kernel: CUDA launch plus the framework's dispatch and the compiled region's wrapper
    host_step_s: float  # Python per step outside the kernels (the loop, the optimiser's Python, the schedule)


# An H100-class GPU (H100 SXM or H200), every value an estimate until benchmarks/gpu_check.py measures it.
# bf16: 5% of the 989 TFLOP/s dense datasheet peak -- convolutions of 16 to 64 channels at 32 x 32 to 8 x 8 are
# memory-bound and use tensor cores badly (issue 33's reading: ResNet-108 reaches about 5% of the bf16 rate).
# float32 without TF32: ~40% of the 67 TFLOP/s float32 peak; float64 (no tensor-core convolutions): ~15% of 67.
# A kernel: 7 us, the middle of the 5-10 us that a CUDA launch through PyTorch costs on the host.
H100 = Device(
    name="H100-class GPU",
    bf16_flops=50e12,
    fp32_flops=25e12,
    fp64_flops=10e12,
    launch_s=7e-6,
    host_step_s=200e-6,
)


@dataclass(frozen=True)
class LaunchModel:
    """Kernels per step of the sweep's ResNets and the fixed costs of a run (each an estimate, counted by hand)."""

    # a training step per basic block: 2 convolutions x (forward, input gradient, weight gradient) = 6 cuDNN
    # kernels, ~10 fused BatchNorm / ReLU / add kernels forward and backward, ~4 of the optimiser's multi-tensor ones
    kernels_per_block: int = 20
    kernels_fixed: int = 40  # the stem, the head, the loss, the loader's crop / flip / normalise, the optimiser
    forward_kernels_per_block: int = 6  # an evaluation step: 2 convolutions, BatchNorm, ReLU, add (eval mode)
    forward_kernels_fixed: int = 12
    start_s: float = 15.0  # process start, imports, the data read and copied to the device
    compile_s: float = 30.0  # a training run's compilation of its block types (regional: independent of depth)
    exact_factor: float = 2.0  # 02 --exact: the Gram statistics of V_S,l about double a probe pass's FLOPs


LAUNCH = LaunchModel()

# (training images, test images, classes, image side) of each dataset a dry run can size without loading it; npz: an
# offline CIFAR-10 (its documented use), ImageNet-100: CMC's 100 classes (about 1,300 training images each).
DATASET_SIZES = {
    "cifar10": (50_000, 10_000, 10, 32),
    "cifar100": (50_000, 10_000, 100, 32),
    "npz": (50_000, 10_000, 10, 32),
    "imagenet100": (126_689, 5_000, 100, 64),
    "digits": (1_437, 360, 10, 32),
}


# ----------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class Phase:
    """``steps`` steps doing ``flops`` FLOPs in all at ``rate`` FLOP/s, each launching ``kernels`` kernels."""

    flops: float
    rate: float
    steps: int
    kernels: int

    def compute_s(self) -> float:
        return self.flops / self.rate

    def launch_s(self, device: Device = H100) -> float:
        return self.steps * (self.kernels * device.launch_s + device.host_step_s)

    def seconds(self, device: Device = H100) -> float:
        """Alone on the device: the slower of its arithmetic and its launches."""
        return max(self.compute_s(), self.launch_s(device))


@dataclass(frozen=True)
class RunEstimate:
    """One job's FLOPs, its pure compute ``C`` and its time alone ``T`` (seconds, estimates)."""

    name: str
    flops: float
    compute_s: float
    alone_s: float

    @classmethod
    def of(cls, name: str, phases: Sequence[Phase], overhead_s: float, device: Device = H100) -> RunEstimate:
        return cls(
            name,
            sum(p.flops for p in phases),
            sum(p.compute_s() for p in phases),
            overhead_s + sum(p.seconds(device) for p in phases),
        )

    def device_s(self, runs_per_device: int = 1) -> float:
        """Its share of the device with ``runs_per_device`` runs sharing it: ``max(C, T / K)``."""
        return max(self.compute_s, self.alone_s / runs_per_device)


@dataclass(frozen=True)
class PlanEstimate:
    """The estimates of a plan's unfinished jobs, and the names of the jobs the model has no estimate for."""

    runs: tuple[RunEstimate, ...]
    unknown: tuple[str, ...] = ()

    @property
    def flops(self) -> float:
        return sum(r.flops for r in self.runs)

    def gpu_s(self, runs_per_device: int = 1) -> float:
        """Seconds on one device: the sum of the runs' shares, at least the longest run alone."""
        if not self.runs:
            return 0.0
        return max(sum(r.device_s(runs_per_device) for r in self.runs), max(r.alone_s for r in self.runs))

    def longest_s(self) -> float:
        return max((r.alone_s for r in self.runs), default=0.0)


# ----------------------------------------------------------------------------- runs of scripts 01, 02, 03, 06
@dataclass(frozen=True)
class Shapes:
    """What a config's FLOPs and steps depend on: training and test images, classes, side, widths, blocks."""

    train: int
    test: int
    classes: int
    side: int
    widths: tuple[int, ...]
    depth_n: int

    @property
    def blocks(self) -> int:
        """Residual blocks plus the stem (which launches like one): 3 + N + 1."""
        return 4 + self.depth_n

    def training(self) -> float:
        return float(
            resnet_training_flops_per_image(self.depth_n, self.widths, (3, self.side, self.side), self.classes)
        )

    def forward(self) -> float:
        return self.training() / 3


def shapes_of(config: dict) -> Shapes | None:
    """A ResNet config's :class:`Shapes` (sweep, growth run, probe, matched), or None for an unknown
    dataset size. The training images are the config's subset (``data.train_subset.k``) when it names one."""
    dataset, data = config.get("dataset"), config.get("data", {})
    if dataset == "synthetic":
        sizes = (data.get("num_train", 512), data.get("num_test", 256), data.get("num_classes", 10))
        sizes = (*sizes, data.get("image_size", 32))
    elif dataset in DATASET_SIZES:
        sizes = DATASET_SIZES[dataset]
        sizes = (*sizes[:3], data.get("image_size") or sizes[3])
    else:
        return None
    subset = data.get("train_subset") or {}
    widths = tuple(config.get("model", {}).get("widths") or ResNetConfig.for_dataset(dataset, 0, sizes[2]).widths)
    return Shapes(subset.get("k", sizes[0]), sizes[1], sizes[2], sizes[3], widths, int(config["depth_n"]))


def training_phases(
    config: dict, s: Shapes, device: Device = H100, launch: LaunchModel = LAUNCH, epochs: range | None = None
) -> list[Phase]:
    """A training run's phases: its epochs of ``train // batch`` steps (bf16), the test set every ``eval_every``-th
    epoch and at the last (with ``test_every_epoch``; bf16 autocast), and the final float32 evaluation of the
    training and test images. ``epochs``: the (1-based) epochs whose training and test-set evaluations to count (a
    growth run's segment at one depth); None: all of the run's."""
    hp, runtime = config["train"], config.get("runtime", {})
    total, batch = int(hp["epochs"]), int(hp["batch_size"])
    epochs = range(1, total + 1) if epochs is None else epochs
    eval_batch = int(runtime.get("eval_batch_size", EVAL_BATCH_SIZE))
    train_kernels = launch.kernels_per_block * s.blocks + launch.kernels_fixed
    eval_kernels = launch.forward_kernels_per_block * s.blocks + launch.forward_kernels_fixed
    steps = len(epochs) * max(1, s.train // batch)
    phases = [Phase(steps * batch * s.training(), device.bf16_flops, steps, train_kernels)]
    if runtime.get("test_every_epoch", True):
        every = int(runtime.get("eval_every", 1))
        evaluations = len([e for e in epochs if e % every == 0 or e == total])
        batches = evaluations * math.ceil(s.test / eval_batch)
        phases.append(Phase(evaluations * s.test * s.forward(), device.bf16_flops, batches, eval_kernels))
    final = math.ceil(s.train / eval_batch) + math.ceil(s.test / eval_batch)
    phases.append(Phase((s.train + s.test) * s.forward(), device.fp32_flops, final, eval_kernels))
    return phases


def training_run(config: dict, device: Device = H100, launch: LaunchModel = LAUNCH) -> RunEstimate | None:
    """One training run of the sweep's job (01's runs, which are also 03's scratch runs)."""
    s = shapes_of(config)
    if s is None:
        return None
    return RunEstimate.of(
        config["name"], training_phases(config, s, device, launch), launch.start_s + launch.compile_s, device
    )


def growth_run(config: dict, device: Device = H100, launch: LaunchModel = LAUNCH) -> RunEstimate | None:
    """03's growth run (common/training/growing.py): one training run whose model grows, so that each segment between
    insertions, epochs ``[0, e1), [e1, e2), ..., [eN, epochs)``, trains and meets the test set at its own depth
    (ResNet-8, -9, ..., -(8+N)); the final evaluation at the final depth; one start and one compilation. The restart
    ablation's runs cost the same."""
    growth = config["growth"]
    bounds = [0, *growth["epochs"], int(config["train"]["epochs"])]
    phases: list[Phase] = []
    for k, (start, end) in enumerate(itertools.pairwise(bounds)):
        s = shapes_of({**config, "depth_n": growth["start_depth_n"] + k})
        if s is None:
            return None
        *segment, final = training_phases(config, s, device, launch, epochs=range(start + 1, end + 1))
        phases += segment
    return RunEstimate.of(config["name"], [*phases, final], launch.start_s + launch.compile_s, device)


def grow_run(config: dict, device: Device = H100, launch: LaunchModel = LAUNCH) -> RunEstimate | None:
    """09's run (common/experiments/grow_by_criterion.py): every arm spends B, the training FLOPs of the sweep's run
    at the budget depth, so its training is estimated as that run (``budget_depth_n``, ``budget_epochs``). A policy
    arm's probes come on top and are not estimated here (their FLOPs, an estimate of their own, are in its record:
    a third of B on the mini calibration run, mostly float64 Gram products)."""
    g = config["growth"]
    reference = {**config, "depth_n": g["budget_depth_n"], "train": {**config["train"], "epochs": g["budget_epochs"]}}
    return training_run(reference, device, launch)


def _sweep_shapes(config: dict) -> Shapes | None:
    """The shapes of the sweep run a probe or matched run reads (its training subset from that run's config)."""
    sweep_dir = config.get("runtime", {}).get("sweep_dir")
    try:
        sweep = read_config(sweep_dir) if sweep_dir else config
    except UserError:  # an unreadable sweep run: the probe's own keys (no subset)
        sweep = config
    return shapes_of({**sweep, "dataset": config["dataset"], "depth_n": config["depth_n"]})


def probe_run(config: dict, device: Device = H100, launch: LaunchModel = LAUNCH) -> RunEstimate | None:
    """02's probe of one model: the analysis batches and App. G's sample (every image of its split unless ``n``; the
    analysis batches' share of that split is not subtracted), each image one float32 pass of a training pass's
    FLOPs (forward, input gradients, the zero-output block's tangent contributions), ``exact``
    :attr:`LaunchModel.exact_factor` times that."""
    s = _sweep_shapes(config)
    if s is None:
        return None
    sat = config.get("saturation", {})
    held_out = s.test + (DATASET_SIZES.get(config["dataset"], (s.train,))[0] - s.train)  # and a subset's left-outs
    pool = {"test": s.test, "train": s.train}.get(sat.get("split"), held_out)
    images = config["n_batches"] * config["batch_size"] + (sat.get("n") or pool)
    factor = launch.exact_factor if config.get("exact") else 1.0
    kernels = launch.kernels_per_block * s.blocks + launch.kernels_fixed
    phase = Phase(images * s.training() * factor, device.fp32_flops, math.ceil(images / config["batch_size"]), kernels)
    return RunEstimate.of(config["name"], [phase], launch.start_s, device)


def matched_run(config: dict, device: Device = H100, launch: LaunchModel = LAUNCH) -> RunEstimate | None:
    """06's matched insertion on one model: per candidate one float32 regression pass over the training images (a
    training pass's FLOPs), and float64 forward passes: before and the floor's reordered pass over the training
    images, the test images before, and per alpha both splits after (float32 copies beside, at the float32 rate)."""
    s = _sweep_shapes(config)
    if s is None:
        return None
    batch = int(config.get("runtime", {}).get("batch_size", EVAL_BATCH_SIZE))
    alphas, candidates = len(config.get("alphas", [1])), len(config.get("candidates", [0]))
    train_passes, test_passes = 2 + alphas, 1 + alphas
    kernels = launch.kernels_per_block * s.blocks + launch.kernels_fixed
    eval_kernels = launch.forward_kernels_per_block * s.blocks + launch.forward_kernels_fixed
    forward = train_passes * s.train + test_passes * s.test
    batches = train_passes * math.ceil(s.train / batch) + test_passes * math.ceil(s.test / batch)
    phases = [Phase(s.train * s.training(), device.fp32_flops, math.ceil(s.train / batch), kernels)]
    for rate in (device.fp64_flops, device.fp32_flops):  # the float64 losses, their float32 copies beside
        phases.append(Phase(forward * s.forward(), rate, batches, eval_kernels))
    return RunEstimate.of(config["name"], phases * candidates, launch.start_s, device)


Estimator = Callable[[RunSpec], "RunEstimate | None"]
ESTIMATORS: dict[str, Estimator] = {  # by the config's experiment (03's scratch runs are the sweep's)
    "resnet_sweep": lambda spec: training_run(spec.config),
    "growth_vs_scratch": lambda spec: growth_run(spec.config),
    "ag_probe": lambda spec: probe_run(spec.config),
    "matched_insertion": lambda spec: matched_run(spec.config),
    "grow_by_criterion": lambda spec: grow_run(spec.config),
}


def plan_estimate(todo: Sequence[RunSpec]) -> PlanEstimate:
    """The estimates of the unfinished jobs ``todo``; a job of an experiment without an estimator (04, 05, 07, 10),
    or of a dataset whose size is not known before loading, is named in ``unknown``."""
    known, unknown = [], []
    for spec in todo:
        estimator = ESTIMATORS.get(spec.config.get("experiment", ""))
        estimate = estimator(spec) if estimator is not None else None
        if estimate is None:
            unknown.append(str(spec.config.get("name", "?")))
        else:
            known.append(estimate)
    return PlanEstimate(tuple(known), tuple(unknown))


def duration(seconds: float) -> str:
    """``1.25 h`` from an hour on, else ``42 min`` (``0.5 min`` below one)."""
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds / 60:.1f} min"


def describe(plan: PlanEstimate, runs_per_device: int = 1, packed: int = 4, device: Device = H100) -> str | None:
    """The dry run's lines: the plan's FLOPs and GPU time at K = 1, the given K and ``packed``, every number marked
    as an estimate; None when no job of the plan has an estimate."""
    if not plan.runs:
        return None
    ks = sorted({1, runs_per_device, packed})
    times = ", ".join(f"{duration(plan.gpu_s(k))} at --runs-per-device {k}" for k in ks)
    lines = [
        f"GPU time ({ESTIMATE}, not measured: common/launch/gpu_estimates.py's FLOP and launch model of one {device.name}): "
        f"{len(plan.runs)} jobs to run, {plan.flops:.3g} FLOPs ({ESTIMATE}); {times} ({ESTIMATE}s); the longest job "
        f"alone {duration(plan.longest_s())} ({ESTIMATE})"
    ]
    if plan.unknown:
        lines.append(f"  no {ESTIMATE} for {len(plan.unknown)} jobs (their experiment or data size is not modelled)")
    return "\n".join(lines)


__all__ = [
    "DATASET_SIZES",
    "ESTIMATE",
    "ESTIMATORS",
    "H100",
    "LAUNCH",
    "Device",
    "LaunchModel",
    "Phase",
    "PlanEstimate",
    "RunEstimate",
    "Shapes",
    "describe",
    "grow_run",
    "growth_run",
    "matched_run",
    "plan_estimate",
    "probe_run",
    "shapes_of",
    "training_phases",
    "training_run",
]
