"""GPU throughput check (issue 33): what the sweep's GPU-hours depend on, in one run of at most 8 minutes on one GPU.

Apart from ``benchmarks/accelerator_check.py`` (correctness on the device); this one measures speed. Parts, each
timed and written to one JSON report (``--out``, default ``runs/gpu_throughput/<device>-<time>.json``):

1. ``epoch``: seconds per 50,000-image CIFAR-shaped epoch of ResNet-8 and ResNet-20 (N = 0 and 6, batch 128,
   the sweep's own loader and ``common.training.loop.train_epoch``, bf16 autocast), eager and compiled; measured over
   ``--images`` images after one warm-up epoch (which holds the compilation) and scaled to 50,000.
2. ``sharing``: 1, 4 and 8 processes training ResNet-8 (eager) on the one device at once, started as
   subprocesses of this script (no launcher, no MPS daemon: plain time-slicing), each timed after a common
   start line: images/s of all together against one alone (what ``--runs-per-device K`` gains).
3. ``compile``: seconds to compile the whole model against N (``torch.compiler.reset()`` first, as every run
   does), the first compiled training step minus a steady one.
4. ``probe``: the AG probe and the exact probe (``common.science.probe.probe_activation_gradients``, ``exact=True``) of
   ResNet-20 on one batch of 128 against one training step (forward, backward, SGD step) of the same batch.
5. ``gpt2``: GPT-2 Small (L = 12, 16 x 1024 tokens, bf16, compiled) step time, tokens/s and MFU against the
   datasheet dense bf16 peak (``--peak-tflops`` overrides the table of ``common.experiments.gpt2_ascend``).

A part that would start after ``--budget-s`` (default 420 s) is skipped, and the report says so. It needs only
torch, numpy and transformers' companions (no submitit, no datasets: the peak table is imported only if its
module loads). ``--device cpu --quick`` runs every part at toy sizes on the CPU in seconds: it checks the
script, not a device (the compiled variants then use dynamo's ``eager`` backend).

    .venv/bin/python benchmarks/gpu_throughput.py                      # CUDA (or an NPU)
    .venv/bin/python benchmarks/gpu_throughput.py --device cpu --quick # toy sizes: checks the script only
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.data.loader import TensorLoader
from common.data.vision import make_synthetic
from common.models.gpt import GPT, GPTConfig
from common.models.resnet import ResNet, ResNetConfig, depth_label
from common.science.probe import probe_activation_gradients
from common.training import device as devices
from common.training.compile import compiled as regional_compile
from common.training.loop import classification_loss, train_epoch
from common.training.recipes import AdamWRecipe, Schedule, SGDRecipe, TrainSettings

EPOCH_IMAGES = 50_000  # a CIFAR-10 training epoch
WIDTHS = (16, 32, 64)  # the sweep's CIFAR widths


@dataclass(frozen=True)
class Sizes:
    images: int = 10_000  # images per timed epoch (scaled to EPOCH_IMAGES)
    image_size: int = 32
    batch: int = 128
    depths: tuple[int, ...] = (0, 6)  # ResNet-8 and ResNet-20
    compile_depths: tuple[int, ...] = (0, 12, 24)
    sharing: tuple[int, ...] = (1, 4, 8)
    share_steps: int = 150
    probe_reps: int = 5
    gpt: dict | None = None
    gpt_batch: int = 16
    gpt_steps: int = 20

    @classmethod
    def quick(cls) -> Sizes:
        gpt = {"n_layer": 2, "n_embd": 32, "n_head": 2, "block_size": 32, "vocab_size": 256}
        return cls(64, 8, 16, (0, 1), (0, 2), (1, 2), 4, 2, gpt, 2, 2)


def sync(dev: torch.device) -> None:
    devices.synchronize(dev)


def resnet(n: int, dev: torch.device) -> ResNet:
    torch.manual_seed(0)
    return ResNet(ResNetConfig(extra_blocks=n, widths=WIDTHS, num_classes=10)).to(
        dev, memory_format=torch.channels_last
    )


def loader(sizes: Sizes, dev: torch.device, images: int | None = None) -> TensorLoader:
    data = make_synthetic(num_train=images or sizes.images, num_test=16, image_size=sizes.image_size, seed=0)
    keys = {"mean": data.mean, "std": data.std, "device": dev, "channels_last": True}
    return TensorLoader(data.x_train.to(dev), data.y_train.to(dev), sizes.batch, train=True, seed=0, **keys)


COMPILED = contextlib.ExitStack()  # the benchmark's compiled models stay compiled until the process ends


def compiled(model, dev: torch.device, quick: bool):
    """``model``'s training forward compiled as runs compile it (:func:`common.training.compile.compiled`: each repeated
    block, a fresh compiler state), with the ``eager`` backend on the CPU or ``--quick``."""
    backend = "eager" if quick or dev.type == "cpu" else None
    return COMPILED.enter_context(regional_compile(model, True, backend=backend)).forward(model)


def epoch_seconds(model, forward, batches: TensorLoader, dev: torch.device) -> tuple[float, float]:
    """(first epoch's seconds: compilation and warm-up included, the second's)."""
    recipe = SGDRecipe(epochs=2, lr=0.05, warmup_epochs=0.0)
    settings = TrainSettings(recipe, channels_last=True)
    optimizer = recipe.make_optimizer(model)
    schedule = Schedule.of(recipe, len(batches))
    out, step = [], 0
    for epoch in range(2):
        batches.set_epoch(epoch)
        start = time.perf_counter()
        stats = train_epoch(forward, optimizer, batches, schedule=schedule, step=step, settings=settings, device=dev)
        step = stats.step
        sync(dev)
        out.append(time.perf_counter() - start)
    return out[0], out[1]


def epoch_part(sizes: Sizes, dev: torch.device, quick: bool) -> dict:
    batches, rows = loader(sizes, dev), []
    scale = EPOCH_IMAGES / (len(batches) * sizes.batch)
    for n in sizes.depths:
        for mode in ("eager", "compiled"):
            model = resnet(n, dev)
            forward = compiled(model, dev, quick) if mode == "compiled" else model
            first, second = epoch_seconds(model, forward, batches, dev)
            rows.append(
                {
                    "depth": depth_label(n),
                    "n": n,
                    "mode": mode,
                    "epoch_s_50k": second * scale,
                    "images_per_s": len(batches) * sizes.batch / second,
                    "first_epoch_extra_s": first - second,  # compilation and warm-up
                }
            )
    return {"rows": rows, "batch": sizes.batch, "timed_images": len(batches) * sizes.batch}


def share_worker(args) -> None:
    """One sharing process: warm up, write its ready file, wait for all, time ``share_steps`` steps; print JSON."""
    dev = devices.resolve_device(args.device)
    sizes = Sizes.quick() if args.quick else Sizes()
    batches = loader(sizes, dev, images=sizes.batch * sizes.share_steps)
    model = resnet(0, dev)
    epoch_seconds(model, model, loader(sizes, dev, images=sizes.batch * 2), dev)  # warm-up (cuDNN, allocator)
    folder = Path(args.share_dir)
    (folder / f"ready-{os.getpid()}").touch()
    while len(list(folder.glob("ready-*"))) < args.share_n:
        time.sleep(0.01)
    start = time.time()
    recipe = SGDRecipe(epochs=1, lr=0.05, warmup_epochs=0.0)
    optimizer = recipe.make_optimizer(model)
    schedule = Schedule.of(recipe, len(batches))
    settings = TrainSettings(recipe, channels_last=True)
    train_epoch(model, optimizer, batches, schedule=schedule, step=0, settings=settings, device=dev)
    sync(dev)
    print(json.dumps({"start": start, "end": time.time(), "images": len(batches) * sizes.batch}), flush=True)


def sharing_part(sizes: Sizes, dev: torch.device, quick: bool) -> dict:
    rows = []
    for n in sizes.sharing:
        with tempfile.TemporaryDirectory() as folder:
            cmd = [sys.executable, __file__, "--worker", "--device", dev.type, "--share-dir", folder]
            cmd += ["--share-n", str(n), *(["--quick"] if quick else [])]
            env = {**os.environ, **({"OMP_NUM_THREADS": "1"} if dev.type == "cpu" else {})}
            procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) for _ in range(n)]
            outs = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
        wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
        rows.append({"processes": n, "wall_s": wall, "images_per_s": sum(o["images"] for o in outs) / wall})
    alone = rows[0]["images_per_s"]
    for row in rows:
        row["speedup_vs_one"] = row["images_per_s"] / alone
    return {"rows": rows, "model": "ResNet-8 eager", "batch": sizes.batch, "sharing": "time-slicing (no MPS)"}


def train_step_fn(model, forward, x, y, dev, optimizer=None):
    """One timed training step: autocast forward, loss, backward, step (SGD with momentum unless ``optimizer``)."""
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        with devices.autocast(dev, True):
            loss = classification_loss(forward(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def batch_of(sizes: Sizes, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = next(iter(loader(sizes, dev, images=sizes.batch)))
    return x, y


def timed(fn, dev: torch.device) -> float:
    start = time.perf_counter()
    fn()
    sync(dev)
    return time.perf_counter() - start


def compile_part(sizes: Sizes, dev: torch.device, quick: bool) -> dict:
    x, y = batch_of(sizes, dev)
    rows = []
    for n in sizes.compile_depths:
        model = resnet(n, dev)
        step = train_step_fn(model, compiled(model, dev, quick), x, y, dev)
        first = timed(step, dev)
        steady = statistics.median(timed(step, dev) for _ in range(3))
        rows.append({"depth": depth_label(n), "n": n, "compile_s": first - steady, "step_s": steady})
    return {"rows": rows, "what": "first compiled training step minus a steady one, after torch.compiler.reset()"}


def probe_part(sizes: Sizes, dev: torch.device, quick: bool) -> dict:
    x, y = batch_of(sizes, dev)
    model = resnet(6, dev)
    fns = {
        "train_step": train_step_fn(model, model, x, y, dev),
        "ag_probe": lambda: probe_activation_gradients(model, [(x, y)]),
        "exact_probe": lambda: probe_activation_gradients(model, [(x, y)], exact=True),
    }
    times = {name: [] for name in fns}
    for fn in fns.values():
        timed(fn, dev)  # warm-up
    for _ in range(sizes.probe_reps):
        for name, fn in fns.items():
            times[name].append(timed(fn, dev))
    median = {name: statistics.median(ts) for name, ts in times.items()}
    return {
        "model": "ResNet-20",
        "batch": sizes.batch,
        "median_s": median,
        "ag_over_train_step": median["ag_probe"] / median["train_step"],
        "exact_over_train_step": median["exact_probe"] / median["train_step"],
    }


def gpt_peak(dev: torch.device, override_tflops: float | None) -> tuple[float | None, str]:
    if override_tflops:
        return override_tflops * 1e12, "--peak-tflops"
    try:  # the table's module imports the text stack (datasets, tiktoken): only where it is installed
        from common.experiments.gpt2_ascend import peak_flops
    except ImportError as exc:
        return None, f"no table ({exc.name} missing); pass --peak-tflops"
    return peak_flops(devices.device_name(dev)), "common.experiments.gpt2_ascend.PEAK_BF16_TFLOPS"


def gpt2_part(sizes: Sizes, dev: torch.device, quick: bool, peak_tflops: float | None) -> dict:
    config = GPTConfig(**(sizes.gpt or {"n_layer": 12}))
    torch.manual_seed(0)
    model = GPT(config).to(dev)
    optimizer = AdamWRecipe(steps=1, lr=6e-4, eval_interval=1).make_optimizer(model)
    forward = compiled(model, dev, quick)
    x = torch.randint(0, config.vocab_size, (sizes.gpt_batch, config.block_size), device=dev)
    step = train_step_fn(model, forward, x, x, dev, optimizer)
    first = timed(step, dev)
    steady = statistics.median(timed(step, dev) for _ in range(sizes.gpt_steps))
    tokens_per_s = sizes.gpt_batch * config.block_size / steady
    flops = model.flops_per_token()
    peak, source = gpt_peak(dev, peak_tflops)
    return {
        "config": {"n_layer": config.n_layer, "n_embd": config.n_embd, "block_size": config.block_size},
        "batch": sizes.gpt_batch,
        "step_s": steady,
        "first_step_s": first,
        "tokens_per_s": tokens_per_s,
        "flops_per_token": flops,
        "mfu": tokens_per_s * flops / peak if peak else None,
        "peak_flops": peak,
        "peak_source": source,
    }


def run(args) -> dict:
    dev = devices.resolve_device(args.device)
    sizes = Sizes.quick() if args.quick else Sizes()
    start = time.perf_counter()
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": devices.device_name(dev),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "quick": args.quick,
        "budget_s": args.budget_s,
        "parts": {},
    }
    parts = {
        "epoch": lambda: epoch_part(sizes, dev, args.quick),
        "sharing": lambda: sharing_part(sizes, dev, args.quick),
        "probe": lambda: probe_part(sizes, dev, args.quick),
        "gpt2": lambda: gpt2_part(sizes, dev, args.quick, args.peak_tflops),
        "compile": lambda: compile_part(sizes, dev, args.quick),  # last: the deepest compile is the longest part
    }
    for name, part in parts.items():
        if name not in args.parts:
            continue
        if time.perf_counter() - start > args.budget_s:
            report["parts"][name] = {"skipped": f"budget of {args.budget_s:.0f} s spent"}
            continue
        began = time.perf_counter()
        try:
            report["parts"][name] = {**part(), "seconds": time.perf_counter() - began}
        except Exception as exc:  # one failing part must not lose the others' numbers
            report["parts"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        print(f"{name}: {json.dumps(report['parts'][name], default=str)[:400]}", flush=True)
    report["elapsed_s"] = time.perf_counter() - start
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (CUDA, then NPU, then MPS, then CPU), cuda, npu, cpu")
    parser.add_argument("--quick", action="store_true", help="toy sizes (seconds on a CPU): checks the script only")
    parser.add_argument("--out", type=Path, default=None, help="JSON report path")
    parser.add_argument("--budget-s", type=float, default=420.0, help="start no part after this many seconds")
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak for the MFU")
    parser.add_argument("--parts", nargs="+", default=["epoch", "sharing", "probe", "gpt2", "compile"])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one process of part 2
    parser.add_argument("--share-dir", help=argparse.SUPPRESS)
    parser.add_argument("--share-n", type=int, default=1, help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        share_worker(args)
        return 0
    report = run(args)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    out = args.out or Path("runs") / "gpu_throughput" / f"{devices.resolve_device(args.device).type}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"report: {out} ({report['elapsed_s']:.0f} s)")
    return 1 if any("error" in part for part in report["parts"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
