"""Accelerator check: what only breaks on a CUDA GPU or an Ascend NPU, in one run (< 8 minutes on one GPU).

Run it on any CUDA or NPU machine; each numbered item prints PASS, FAIL or SKIPPED with its
numbers, and the JSON report (``--out``, default ``runs/accelerator_check/<device>-<time>.json``)
holds them all with the date, the device and the versions. Record the numbers in
``benchmarks/README.md``. Exit status 1 when an item failed.

    .venv/bin/python benchmarks/accelerator_check.py                  # the accelerator torch finds
    .venv/bin/python benchmarks/accelerator_check.py --device npu --depths 0,12
    .venv/bin/python benchmarks/accelerator_check.py --cpu-dry-run    # toy sizes on the CPU, seconds

Items (the code users run: ``common.training.loop.train``, ``common.science.probe``, ``common.science.projection`` and
``common.science.precision``):

1. Precision and device: bf16 autocast only where native, the probe's math mode, where float64 runs.
2. Compiled bf16 training of ResNet-8, -14 and -20 (``--depths``), all in one process as an inline
   sweep runs them: 2 epochs over 50,000 CIFAR-shaped synthetic images (10,000 test); seconds per
   50,000-image epoch and images/s of the second epoch (compilation excluded); frames compiled per
   depth: every depth must compile and none may reach dynamo's recompile limit; peak memory.
3. Kill and resume on the device under PyTorch's deterministic mode: bit-identical weights, else
   the largest relative difference; the device RNG state round trip.
4. The probe on the device against the CPU, same model and batch, in float64: ``AG_l`` and
   ``V_S,l`` agree to 1e-10 relative (skipped where the device has no float64).
5. The same in float32 with TF32 off (the probe's own guard): agreement to 1e-4.
6. The exact projection's float64 Gram statistics: GFLOP/s on the device (or where they ran).
7. ``eigh`` of rank-deficient float64 Gram matrices on the device: the rank and ``V_S,l`` of the CPU.
8. Peak memory of the exact probe (ResNet-20, batch 128) beside that of training (item 2).
9. The probe of a GPT-2 Small in sub-batches (8 x 1024 tokens; sub-batches of 8, 2, 1): the same
   ``AG_l`` to 1e-4, and peak memory falling with the sub-batch.
10. After ``train``: no gradient left, the final evaluation without TF32 (HF32 on an NPU) and recorded so.
11. A ``--device cpu`` training run in a fresh process on this GPU node creates no CUDA context.
12. Two processes (needs 2 devices; NCCL or HCCL): DDP and FSDP2 train the same GPT like each
    other; FSDP2 shards before anything reaches the device (peak memory of the placement below the
    whole model), with bf16 parameters on request; the validation split over the processes equals
    one process; a killed FSDP run resumes; a NaN on one process stops both; the group is bound to
    its device and the processes can wait for rank 0 outside the collective watchdog.

Without an accelerator every item is skipped (the report says so). ``--cpu-dry-run`` runs every
item on the CPU against the CPU at toy sizes (item 12 on two gloo processes): it checks that the
script works, not a device. ``docs/gpu-checklist.md`` lists what each item confirms.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import json
import math
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch._dynamo
import torch.distributed as dist
import torch.multiprocessing as mp
from torch._dynamo.utils import counters

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.data.loader import TensorLoader
from common.data.vision import CIFAR10_STATS
from common.errors import UserError
from common.models.gpt import GPT, GPTConfig
from common.models.resnet import ResNet, ResNetConfig, depth_label
from common.runs import atomic, record_io, run_store
from common.science.precision import float32_reduced, float64_device, math_mode, supports_float64
from common.science.probe import probe_activation_gradients
from common.science.projection import GramAccumulator
from common.training import device as devices
from common.training.distributed import destroy_distributed, init_distributed, process_device, wait_for_all
from common.training.loop import NonFiniteLossError, classification_loss, evaluate, load_weights, train
from common.training.parallel import is_sharded, place_model
from common.training.recipes import AdamWRecipe, SGDRecipe, TrainSettings

TOL_FLOAT64, TOL_FLOAT32, TOL_EIGH = 1e-10, 1e-4, 1e-10


@dataclass(frozen=True)
class Sizes:
    """How big each item is: the full check (one GPU, < 8 minutes) or the CPU dry run (seconds)."""

    train_images: int = 50_000
    test_images: int = 10_000
    image_size: int = 32
    widths: tuple[int, int, int] = (16, 32, 64)
    batch_size: int = 128
    depths: tuple[int, ...] = (0, 6, 12)  # ResNet-8, -14, -20
    epochs: int = 2
    resume_images: int = 2048
    resume_epochs: int = 3
    probe_batch: int = 32
    probe_batches: int = 2
    memory_depth: int = 12
    memory_batch: int = 128
    gram_rows: int = 65_536
    gram_k: int = 576  # 9 * 64: the conv3x3 tangent features of a stage-3 candidate
    gram_d: int = 64
    rank_k: int = 576
    rank_r: int = 200
    reps: int = 3
    decoder_layers: int = 12  # item 9: GPT-2 Small
    decoder_width: int = 768
    decoder_length: int = 1024
    decoder_batch: int = 8
    decoder_vocab: int = 50304
    pair_layers: int = 8  # item 12: blocks much larger than the embeddings, so one unit is a fraction of the model
    pair_width: int = 512
    pair_length: int = 128


DRY = Sizes(
    train_images=128,
    test_images=64,
    image_size=16,
    widths=(4, 8, 8),
    batch_size=32,
    depths=(0, 1, 2),
    epochs=2,
    resume_images=64,
    resume_epochs=2,
    probe_batch=8,
    probe_batches=2,
    memory_depth=1,
    memory_batch=8,
    gram_rows=1024,
    gram_k=36,
    gram_d=4,
    rank_k=36,
    rank_r=12,
    reps=1,
    decoder_layers=2,
    decoder_width=32,
    decoder_length=32,
    decoder_batch=8,
    decoder_vocab=64,
    pair_layers=2,
    pair_width=32,
    pair_length=16,
)


@dataclass
class Check:
    device: torch.device
    sizes: Sizes
    dry_run: bool
    workdir: Path

    @property
    def active(self) -> bool:
        return self.dry_run or self.device.type != "cpu"

    @property
    def cpu(self) -> torch.device:
        return torch.device("cpu")


ITEMS: list[tuple[int, str, Callable[[Check, dict], dict]]] = []


def item(number: int, title: str):
    """Register a numbered item; it returns its numbers and ``status`` ("pass", "fail", "skipped: ...")."""

    def register(fn):
        ITEMS.append((number, title, fn))
        return fn

    return register


# ----------------------------------------------------------------------------- helpers
def reset_peak(dev: torch.device) -> None:
    if dev.type != "cpu":
        getattr(torch, dev.type).reset_peak_memory_stats(dev)


def allocated_mib(dev: torch.device) -> float | None:
    """Device memory allocated now (None on the CPU)."""
    if dev.type == "cpu":
        return None
    return getattr(torch, dev.type).memory_allocated(dev) / 2**20


def peak_mib(dev: torch.device) -> float | None:
    """Peak allocated device memory since :func:`reset_peak` (None on the CPU)."""
    if dev.type == "cpu":
        return None
    return getattr(torch, dev.type).max_memory_allocated(dev) / 2**20


def synthetic_images(n: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g), torch.randint(
        0, 10, (n,), generator=g
    )


def max_relative_difference(a: dict, b: dict) -> float:
    """Largest ``|a - b| / max|a|`` over the tensors of two state dicts (0.0: bit-identical)."""
    worst = 0.0
    for key, x in a.items():
        if not x.is_floating_point():
            worst = max(worst, 0.0 if torch.equal(x, b[key]) else math.inf)
            continue
        diff = (x.double() - b[key].double()).abs().max().item()
        worst = max(worst, diff / max(x.double().abs().max().item(), 1e-30))
    return worst


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def resnet(depth: int, sizes: Sizes, seed: int = 0) -> ResNet:
    torch.manual_seed(seed)
    return ResNet(ResNetConfig(extra_blocks=depth, widths=sizes.widths))


def with_running_stats(model: ResNet, sizes: Sizes) -> ResNet:
    """BatchNorm running statistics from a few train-mode forwards (not the fresh 0/1)."""
    model.train()
    with torch.no_grad():
        for i in range(3):
            model(torch.randn(16, 3, sizes.image_size, sizes.image_size, generator=torch.Generator().manual_seed(i)))
    return model.eval()


# ----------------------------------------------------------------------------- items
@item(1, "precision and device capabilities")
def precision_item(check: Check, report: dict) -> dict:
    dev = check.device
    out = {
        "autocast_dtype": devices.precision_name(dev),
        "bf16_native": devices.bf16_supported(dev),
        "float64_supported": supports_float64(dev),
        "float64_device": str(float64_device(dev)),
        "math_mode_default": math_mode(),
    }
    if dev.type == "cuda":
        out["bf16_with_emulation"] = bool(torch.cuda.is_bf16_supported(including_emulation=True))
    # bf16 autocast exactly where the device has native bf16 (else float32, never float16)
    consistent = (out["autocast_dtype"] == "bfloat16") == out["bf16_native"]
    return {"status": "pass" if consistent else "fail", **out}


@item(2, "compiled bf16 training: seconds per 50,000-image epoch, images/s, compiles per depth")
def training_item(check: Check, report: dict) -> dict:
    dev, sizes = check.device, check.sizes
    compile_on = dev.type == "cuda"  # the sweep's --compile auto
    x_train, y_train = synthetic_images(sizes.train_images, sizes.image_size, seed=0)
    x_test, y_test = synthetic_images(sizes.test_images, sizes.image_size, seed=1)
    keys = {"mean": CIFAR10_STATS[0], "std": CIFAR10_STATS[1], "device": dev, "channels_last": True}
    settings = TrainSettings(
        SGDRecipe(epochs=sizes.epochs, lr=0.05, warmup_epochs=0.5), compile=compile_on, channels_last=True
    )
    depths, failures = {}, []
    for n in sizes.depths:
        model = resnet(n, sizes)
        train_loader = TensorLoader(x_train, y_train, sizes.batch_size, train=True, seed=0, **keys)
        test_loader = TensorLoader(x_test, y_test, 500, train=False, **keys)
        reset_peak(dev)
        frames = counters["frames"]["ok"]
        start = time.perf_counter()
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            summary = train(
                model,
                train_loader,
                {"test": test_loader},
                run_dir=check.workdir / f"train-n{n}",
                settings=settings,
                device=dev,
                desc=f"ResNet-{depth_label(n)}",
            )
        last = run_store.read_metrics(check.workdir / f"train-n{n}")[-1]
        compiled = counters["frames"]["ok"] - frames
        depths[f"ResNet-{depth_label(n)}"] = {
            "epoch_s_per_50k": last["epoch_time_s"] * 50_000 / sizes.train_images,
            "images_per_s": last["images_per_s"],
            "frames_compiled": compiled if compile_on else None,
            "wall_s_with_compile": time.perf_counter() - start,
            "peak_memory_mib": peak_mib(dev),
            "final_test_loss_float32": summary["test_loss"],
            "last_epoch_test_loss_" + summary["autocast_dtype"]: last["test_loss"],
        }
        if compile_on and compiled < 1:
            failures.append(f"ResNet-{depth_label(n)} compiled nothing")
        if not math.isfinite(summary["test_loss"]):
            failures.append(f"ResNet-{depth_label(n)} test loss {summary['test_loss']}")
    return {
        "status": "fail: " + "; ".join(failures) if failures else "pass",
        "compiled": compile_on,
        "autocast_dtype": devices.precision_name(dev),
        "batch_size": sizes.batch_size,
        "train_images": sizes.train_images,
        "depths": depths,
    }


@item(3, "kill and resume under deterministic mode: bit-identical weights")
def resume_item(check: Check, report: dict) -> dict:
    dev, sizes = check.device, check.sizes
    x, y = synthetic_images(sizes.resume_images, sizes.image_size, seed=2)
    keys = {"mean": CIFAR10_STATS[0], "std": CIFAR10_STATS[1], "device": dev, "channels_last": True}
    settings = TrainSettings(SGDRecipe(epochs=sizes.resume_epochs, lr=0.05), channels_last=True)

    def run(name: str, model_seed: int, kill_after: int | None = None) -> None:
        def stop(epoch: int, record: dict) -> None:
            if epoch == kill_after:
                raise KeyboardInterrupt

        devices.seed_everything(0)
        model = resnet(0, sizes, seed=model_seed)
        loader = TensorLoader(x, y, sizes.batch_size, train=True, seed=3, **keys)
        train(
            model, loader, {}, run_dir=check.workdir / name, settings=settings, device=dev, on_epoch_end=stop, desc=name
        )

    previous = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
    )
    try:
        devices.set_deterministic(True)
        run("whole", 0)
        with contextlib.suppress(KeyboardInterrupt):  # killed after its first epoch
            run("resumed", 0, kill_after=1)
        run("resumed", 123)  # a different init: the checkpoint must win
    finally:
        torch.use_deterministic_algorithms(previous[0])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = previous[1], previous[2]
    worst = max_relative_difference(load_weights(check.workdir / "whole"), load_weights(check.workdir / "resumed"))
    state = devices.rng_state(dev)
    devices.set_rng_state(state, dev)
    first = torch.rand(4, device=dev)
    devices.set_rng_state(state, dev)
    rng_ok = torch.equal(first, torch.rand(4, device=dev))
    accelerator_rng = {k: list(v.shape) for k, v in state.items() if k in devices.rng_accelerators()}
    ok = worst == 0.0 and rng_ok
    return {
        "status": "pass" if ok else f"fail: max relative weight difference {worst:.3e}, rng round trip {rng_ok}",
        "bit_identical": worst == 0.0,
        "max_relative_difference": worst,
        "rng_round_trip": rng_ok,
        "accelerator_rng_state_shape": accelerator_rng,
        "autocast_dtype": devices.precision_name(dev),
    }


def _probe_pair(check: Check, dtype: torch.dtype) -> dict:
    """The exact probe of one model and batch on the device and on the CPU; largest relative differences."""
    sizes = check.sizes
    model = with_running_stats(resnet(0, sizes), sizes).to(dtype)
    g = torch.Generator().manual_seed(4)
    batches = [
        (
            torch.randn(sizes.probe_batch, 3, sizes.image_size, sizes.image_size, generator=g, dtype=dtype),
            torch.randint(0, 10, (sizes.probe_batch,), generator=g),
        )
        for _ in range(sizes.probe_batches)
    ]
    on_cpu = probe_activation_gradients(copy.deepcopy(model), batches, exact=True)
    on_dev = probe_activation_gradients(
        copy.deepcopy(model).to(check.device),
        [(x.to(check.device), y.to(check.device)) for x, y in batches],
        exact=True,
    )
    worst = {}
    for key in ("ag_norm", "growth_value", "growth_value_pooled"):
        worst[key] = max(
            relative(getattr(a, key), getattr(b, key)) for a, b in zip(on_cpu.scores, on_dev.scores, strict=True)
        )
    ranks_equal = [a.tangent_rank for a in on_cpu.scores] == [b.tangent_rank for b in on_dev.scores]
    return {
        "max_relative_difference": worst,
        "tangent_ranks_equal": ranks_equal,
        "candidates": len(on_cpu.scores),
        "device_math_mode": on_dev.math_mode,
        "device_float64_ran_on": on_dev.float64_device,
    }


@item(4, "probe on the device vs the CPU, float64 model and batch: AG_l, V_S,l to 1e-10")
def probe_float64_item(check: Check, report: dict) -> dict:
    if not supports_float64(check.device):
        return {
            "status": f"skipped: {check.device.type} has no float64 (the probe keeps its float64 sums on the CPU there)"
        }
    out = _probe_pair(check, torch.float64)
    ok = max(out["max_relative_difference"].values()) <= TOL_FLOAT64
    return {"status": "pass" if ok else "fail", "tolerance": TOL_FLOAT64, **out}


@item(5, "probe on the device vs the CPU, float32 with TF32 off: AG_l, V_S,l to 1e-4")
def probe_float32_item(check: Check, report: dict) -> dict:
    out = _probe_pair(check, torch.float32)
    reduced = float32_reduced(out["device_math_mode"])
    ok = max(out["max_relative_difference"].values()) <= TOL_FLOAT32 and not reduced
    return {"status": "pass" if ok else "fail", "tolerance": TOL_FLOAT32, **out}


@item(6, "exact projection: float64 Gram statistics GFLOP/s")
def gram_item(check: Check, report: dict) -> dict:
    sizes, dev = check.sizes, check.device
    n, k, d = sizes.gram_rows, sizes.gram_k, sizes.gram_d
    g = torch.Generator().manual_seed(5)
    psi, grad = (
        torch.randn(n, k, generator=g).to(dev),
        torch.randn(n, d, generator=g).to(dev),
    )  # float32, as the probe gives them
    times = []
    for _ in range(sizes.reps + 1):  # the first call warms up
        acc = GramAccumulator(k, d, device=dev)
        devices.synchronize(dev)
        start = time.perf_counter()
        acc.update(psi, grad)
        devices.synchronize(acc.device)
        times.append(time.perf_counter() - start)
    best = min(times[1:])
    flops = 2.0 * n * k * (k + d)  # P += Psi^T Psi, X += Psi^T G
    return {
        "status": "pass",
        "gflop_per_s": flops / best / 1e9,
        "seconds": best,
        "rows": n,
        "k": k,
        "d": d,
        "ran_on": str(acc.device),
    }


@item(7, "eigh of rank-deficient float64 Gram matrices on the device: rank and V_S,l match the CPU")
def eigh_item(check: Check, report: dict) -> dict:
    sizes = check.sizes
    k, r, d, n = sizes.rank_k, sizes.rank_r, sizes.gram_d, 4 * sizes.rank_k
    g = torch.Generator().manual_seed(6)
    psi = torch.randn(n, r, generator=g, dtype=torch.float64) @ torch.randn(r, k, generator=g, dtype=torch.float64)
    grad = torch.randn(n, d, generator=g, dtype=torch.float64)
    results = {}
    for where in (check.cpu, check.device):
        acc = GramAccumulator(k, d, device=where)
        acc.update(psi.to(float64_device(where)), grad.to(float64_device(where)))
        results[str(where)] = (acc.rank(), acc.growth_value(), str(acc.device))
    (cpu_rank, cpu_v, _), (dev_rank, dev_v, ran_on) = results[str(check.cpu)], results[str(check.device)]
    diff = relative(cpu_v, dev_v)
    ok = cpu_rank == dev_rank == r and diff <= TOL_EIGH
    return {
        "status": "pass" if ok else "fail",
        "k": k,
        "true_rank": r,
        "cpu_rank": cpu_rank,
        "device_rank": dev_rank,
        "relative_difference_v": diff,
        "tolerance": TOL_EIGH,
        "ran_on": ran_on,
    }


@item(8, "peak memory: exact probe (ResNet-20, batch 128) and training (item 2)")
def memory_item(check: Check, report: dict) -> dict:
    dev, sizes = check.device, check.sizes
    if dev.type == "cpu":
        return {"status": "skipped: device memory statistics need an accelerator"}
    model = with_running_stats(resnet(sizes.memory_depth, sizes), sizes).to(dev)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(sizes.memory_batch, 3, sizes.image_size, sizes.image_size, generator=g).to(dev)
    y = torch.randint(0, 10, (sizes.memory_batch,), generator=g).to(dev)
    reset_peak(dev)
    probe_activation_gradients(model, [(x, y)], exact=True)
    training = report.get(2, {}).get("depths", {})
    return {
        "status": "pass",
        "exact_probe_peak_mib": peak_mib(dev),
        "model": f"ResNet-{depth_label(sizes.memory_depth)}",
        "batch": sizes.memory_batch,
        "training_peak_mib": {name: r.get("peak_memory_mib") for name, r in training.items()},
    }


def small_gpt(sizes: Sizes, *, layers: int, width: int, length: int, vocab: int, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(n_layer=layers, n_embd=width, n_head=max(1, width // 64), block_size=length, vocab_size=vocab))


def token_batch(batch: int, length: int, vocab: int, seed: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(0, vocab, (batch, length + 1), generator=g)
    return w[:, :-1].to(dev), w[:, 1:].to(dev)


@item(9, "decoder probe in sub-batches: the same AG_l, peak memory falling with the sub-batch")
def probe_sub_batch_item(check: Check, report: dict) -> dict:
    dev, sizes = check.device, check.sizes
    model = (
        small_gpt(
            sizes,
            layers=sizes.decoder_layers,
            width=sizes.decoder_width,
            length=sizes.decoder_length,
            vocab=sizes.decoder_vocab,
        )
        .to(dev)
        .eval()
    )
    x, y = token_batch(sizes.decoder_batch, sizes.decoder_length, sizes.decoder_vocab, 9, dev)
    subs = (sizes.decoder_batch, max(1, sizes.decoder_batch // 4), 1)
    results, peaks = {}, {}
    for sub in subs:
        devices.empty_cache(dev)
        reset_peak(dev)
        results[sub] = probe_activation_gradients(model, [(x, y)], loss_fn=classification_loss, sub_batch=sub)
        peaks[sub] = peak_mib(dev)
    worst = max(
        relative(a.ag_norm, b.ag_norm)
        for sub in subs[1:]
        for a, b in zip(results[subs[0]].scores, results[sub].scores, strict=True)
    )
    falls = dev.type == "cpu" or peaks[subs[0]] > peaks[subs[1]] > peaks[subs[2]]
    ok = worst <= TOL_FLOAT32 and falls
    return {
        "status": "pass" if ok else f"fail: AG_l differs by {worst:.2e} or memory {peaks} does not fall",
        "max_relative_difference_ag": worst,
        "peak_memory_mib_by_sub_batch": {str(k): v for k, v in peaks.items()},
        "tokens": sizes.decoder_batch * sizes.decoder_length,
        "layers": sizes.decoder_layers,
        "width": sizes.decoder_width,
    }


@item(10, "after train(): no gradient left; the final evaluation without TF32/HF32, recorded so")
def after_training_item(check: Check, report: dict) -> dict:
    dev, sizes = check.device, check.sizes
    x, y = synthetic_images(sizes.resume_images, sizes.image_size, seed=10)
    keys = {"mean": CIFAR10_STATS[0], "std": CIFAR10_STATS[1], "device": dev}
    model = resnet(0, sizes)
    loader = TensorLoader(x, y, sizes.batch_size, train=True, seed=0, **keys)
    clean = TensorLoader(x, y, 500, train=False, **keys)
    summary = train(
        model,
        loader,
        {"test": clean},
        final_eval_loaders={"train": clean},
        run_dir=check.workdir / "after-training",
        settings=TrainSettings(SGDRecipe(epochs=1, lr=0.05)),
        device=dev,
        desc="after-training",
    )
    mode = summary["final_eval_math_mode"]
    no_grads = all(p.grad is None for p in model.parameters())
    reduced = float32_reduced(mode)
    allocated = allocated_mib(dev)
    ok = no_grads and not reduced and summary["final_eval_dtype"] == "float32"
    return {
        "status": "pass" if ok else f"fail: gradients left {not no_grads}, final evaluation math mode {mode}",
        "final_eval_math_mode": mode,
        "default_math_mode": math_mode(),
        "allocated_after_mib": allocated,
        "parameters_mib": sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20,
    }


CPU_RUN = """
import sys, torch
sys.path.insert(0, {root!r})
from torch import nn
from common.train import SGDRecipe, TrainSettings, train
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(7, 4), nn.Linear(4, 7))
batches = [(torch.randint(0, 7, (4, 5)), torch.randint(0, 7, (4, 5)))]
train(model, batches, {{}}, run_dir={run_dir!r}, settings=TrainSettings(SGDRecipe(epochs=2, lr=0.1)), device=torch.device("cpu"))
print("cuda initialised:", torch.cuda.is_initialized())
"""


@item(11, "a --device cpu training run on this node creates no CUDA context")
def cpu_run_item(check: Check, report: dict) -> dict:
    if not torch.cuda.is_available():
        return {
            "status": "skipped: no CUDA here, so there is no context to create (tests/benchmarks/test_accelerators.py checks the RNG rule)"
        }
    code = CPU_RUN.format(root=str(Path(__file__).resolve().parents[1]), run_dir=str(check.workdir / "cpu-run"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    line = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    ok = proc.returncode == 0 and line == "cuda initialised: False"
    return {
        "status": "pass" if ok else f"fail: {line} {proc.stderr[-300:]}",
        "printed": line,
        "cuda_visible": torch.cuda.is_available(),
    }


@item(12, "two processes: DDP and FSDP2 (placement, bf16 parameters, resume), split evaluation, NaN, waits")
def two_process_item(check: Check, report: dict) -> dict:
    dev = check.device
    visible = 2 if dev.type == "cpu" else devices.accelerator_count()
    if visible < 2:
        return {"status": f"skipped: {visible} {dev.type} device visible; this item needs 2 (NCCL / HCCL between them)"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = check.workdir / "two-processes"
    out.mkdir()
    mp.spawn(two_process_worker, args=(port, dev.type, str(out), asdict(check.sizes)), nprocs=2, join=True)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    errors = [f"rank {r}: {f['error'].strip().splitlines()[-1]}" for r, f in enumerate(ranks) if "error" in f]
    if errors:
        print("".join(f.get("error", "") for f in ranks), file=sys.stderr)
        return {"status": "fail: " + "; ".join(errors), "ranks": ranks}
    failures = [f"rank {r}: {name}" for r, f in enumerate(ranks) for name, ok in f["checks"].items() if not ok]
    return {"status": "fail: " + ", ".join(failures) if failures else "pass", "ranks": ranks}


def two_process_worker(rank: int, port: int, device_type: str, workdir: str, sizes: dict) -> None:
    """One of item 12's two processes: joins like torchrun, runs :func:`two_process_checks`, writes ``rank<r>.json``."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE="2",
        DS_DIST_TIMEOUT_MIN="5",
    )
    if device_type == "cpu":
        torch.set_num_threads(1)
    found: dict = {}
    try:
        info = init_distributed(device_type)
        dev = process_device(torch.device(device_type), info)
        group = dist.distributed_c10d._get_default_group()
        found.update(backend=info.backend, device=str(dev), bound_device=str(getattr(group, "bound_device_id", None)))
        found.update(
            two_process_checks(
                rank, dev, Path(workdir), Sizes(**{k: tuple(v) if isinstance(v, list) else v for k, v in sizes.items()})
            )
        )
    except Exception:
        found["error"] = traceback.format_exc()
    finally:
        Path(workdir, f"rank{rank}.json").write_text(json.dumps(found, default=str))
        destroy_distributed()


class _NaNAfter(torch.nn.Module):
    """A model whose training outputs turn NaN on rank 1 after ``after`` training forwards."""

    def __init__(self, inner: torch.nn.Module, after: int) -> None:
        super().__init__()
        self.inner, self.after, self.calls = inner, after, 0

    def forward(self, x):
        out = self.inner(x)
        if self.training:
            self.calls += 1
            if dist.get_rank() == 1 and self.calls > self.after:
                out = out * float("nan")
        return out


def two_process_checks(rank: int, dev: torch.device, workdir: Path, sizes: Sizes) -> dict:
    """What item 12 measures in each process; ``checks`` maps each claim to True (holds) or False."""
    layers, width, length, vocab = sizes.pair_layers, sizes.pair_width, sizes.pair_length, 257

    def gpt(seed: int = 0) -> GPT:
        return small_gpt(sizes, layers=layers, width=width, length=length, vocab=vocab, seed=seed)

    batches = [token_batch(4, length, vocab, 100 + 10 * i + rank, dev) for i in range(2)]  # each process its own data
    val = [token_batch(4, length, vocab, 200 + i, dev) for i in range(3)]  # the same validation batches everywhere
    recipe = AdamWRecipe(steps=4, lr=1e-3, eval_interval=2)

    def run(
        name: str, settings: TrainSettings, model: torch.nn.Module | None = None, kill_after: int | None = None
    ) -> dict:
        def stop(epoch: int, record: dict) -> None:
            if epoch == kill_after:
                raise KeyboardInterrupt

        return train(
            model or gpt(),
            batches,
            {"val": val},
            run_dir=workdir / name,
            settings=settings,
            device=dev,
            on_epoch_end=stop,
        )

    out: dict = {}
    ddp = run("ddp", TrainSettings(recipe))
    model = gpt()
    full_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    gc.collect()  # the DDP run's model and buckets
    devices.empty_cache(dev)
    before = allocated_mib(dev)
    reset_peak(dev)
    place_model(model, dev, TrainSettings(recipe, fsdp=True))
    placement_mib = peak_mib(dev) - before if dev.type != "cpu" else None
    devices_seen = sorted({str(p.device) for p in model.parameters()})
    fsdp = run("fsdp", TrainSettings(recipe, fsdp=True), model=model)
    bf16 = run("fsdp-bf16", TrainSettings(recipe, fsdp=True, fsdp_bf16_params=True))
    with contextlib.suppress(KeyboardInterrupt):
        run("fsdp-resumed", TrainSettings(recipe, fsdp=True), kill_after=1)
    resumed = run("fsdp-resumed", TrainSettings(recipe, fsdp=True), model=gpt(seed=1))
    alone = evaluate(gpt().to(dev), val, dev, split=False)
    split = evaluate(gpt().to(dev), val, dev)
    try:
        run("nan", TrainSettings(recipe, nan_check_every=1), model=_NaNAfter(gpt(), after=1))
        nan_message = None
    except NonFiniteLossError as exc:
        nan_message = str(exc)
    start = time.perf_counter()
    if rank == 0:
        time.sleep(1.0)  # rank 0 alone (a probe, a download); the other waits
    wait_for_all()
    out.update(
        ddp_val_loss=ddp["val_loss"],
        fsdp_val_loss=fsdp["val_loss"],
        fsdp_bf16_val_loss=bf16["val_loss"],
        resumed_val_loss=resumed["val_loss"],
        full_model_mib=full_mib,
        placement_peak_mib=placement_mib,
        parameter_devices=devices_seen,
        split=split,
        alone=alone,
        nan_message=nan_message,
        waited_s=time.perf_counter() - start,
        fsdp_param_dtype=bf16.get("fsdp_param_dtype"),
    )
    bf16_expected = "bfloat16" if devices.precision_name(dev) == "bfloat16" else "float32"
    out["checks"] = {
        "ddp and fsdp agree (1e-2)": relative(ddp["val_loss"], fsdp["val_loss"]) < 1e-2,
        "fsdp shards before moving (placement peak < 3/4 of the model)": dev.type == "cpu"
        or placement_mib < 0.75 * full_mib,
        "parameters are DTensors on the device": is_sharded(model) and devices_seen == [str(dev)],
        "bf16 parameters where bf16 autocast runs": bf16.get("fsdp_param_dtype") == bf16_expected
        and math.isfinite(bf16["val_loss"]),
        "a killed fsdp run resumes (1e-2)": relative(fsdp["val_loss"], resumed["val_loss"]) < 1e-2,
        "split evaluation equals one process (1e-6)": relative(split["loss"], alone["loss"]) < 1e-6
        and split["n"] == alone["n"],
        "a NaN on rank 1 stops both processes": nan_message is not None and "at step 1 " in nan_message,
        "the others wait for rank 0": rank == 0 or out["waited_s"] >= 0.75,
        "the group is bound to the device": dev.type != "cuda" or bound_to(dev),
    }
    return out


def bound_to(dev: torch.device) -> bool:
    """Whether the default process group is bound to ``dev`` (``init_process_group(device_id=...)``)."""
    return getattr(dist.distributed_c10d._get_default_group(), "bound_device_id", None) == dev


# ----------------------------------------------------------------------------- driver
def device_description(dev: torch.device) -> dict:
    out = {"type": dev.type, "torch": torch.__version__, "python": platform.python_version(), "host": platform.node()}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        out.update(
            name=props.name,
            capability=f"{props.major}.{props.minor}",
            memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
            visible=torch.cuda.device_count(),
        )
    elif dev.type == "npu":
        out.update(name=torch.npu.get_device_name(dev), visible=int(torch.npu.device_count()))  # type: ignore[attr-defined]
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (CUDA, then NPU), cuda, npu (default: auto)")
    parser.add_argument(
        "--cpu-dry-run", action="store_true", help="every item on the CPU at toy sizes (checks the script)"
    )
    parser.add_argument(
        "--depths", default=None, help="item 2's extra blocks N, e.g. 0,12 (default: 0,6,12 = ResNet-8/14/20)"
    )
    parser.add_argument(
        "--out", default=None, help="JSON report path (default: runs/accelerator_check/<device>-<time>.json)"
    )
    return parser


def run_check(argv=None) -> dict:
    """Run every item; print one line each; write and return the report."""
    args = build_parser().parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before any cuBLAS handle: item 3's deterministic mode
    dev = torch.device("cpu") if args.cpu_dry_run else devices.resolve_device(args.device)
    sizes = DRY if args.cpu_dry_run else Sizes()
    if args.depths:
        sizes = Sizes(**{**sizes.__dict__, "depths": tuple(int(v) for v in args.depths.split(","))})
    stamp = datetime.datetime.now(datetime.UTC)
    report = {
        "date": stamp.isoformat(timespec="seconds"),
        "mode": "cpu-dry-run" if args.cpu_dry_run else "full",
        "device": device_description(dev),
        "sizes": sizes.__dict__,
        "items": [],
    }
    print(
        f"accelerator check on {report['device'].get('name', dev.type)} ({report['mode']}), torch {torch.__version__}"
    )
    results: dict[int, dict] = {}
    total = time.perf_counter()
    threads = torch.get_num_threads()
    if args.cpu_dry_run:
        torch.set_num_threads(1)  # toy sizes: one thread is fastest, and immune to other processes' load
    with contextlib.ExitStack() as restore, tempfile.TemporaryDirectory(prefix="accelerator-check-") as tmp:
        restore.callback(torch.set_num_threads, threads)
        check = Check(device=dev, sizes=sizes, dry_run=args.cpu_dry_run, workdir=Path(tmp))
        for number, title, fn in ITEMS:
            start = time.perf_counter()
            if not check.active:
                out = {
                    "status": "skipped: no accelerator (CUDA or NPU) here; --cpu-dry-run exercises the script on the CPU"
                }
            else:
                try:
                    out = fn(check, results)
                except Exception as exc:  # one item's failure must not hide the others
                    traceback.print_exc()
                    out = {"status": f"fail: {type(exc).__name__}: {exc}"}
            out["seconds"] = time.perf_counter() - start
            results[number] = out
            report["items"].append({"number": number, "title": title, **out})
            verdict = out["status"].split(":")[0].upper()
            detail = out["status"][len(verdict) + 1 :].strip() if ":" in out["status"] else ""
            print(
                f"{number}. {title}: {verdict}{(' (' + detail + ')') if detail else ''} [{out['seconds']:.1f} s]",
                flush=True,
            )
    report["seconds"] = time.perf_counter() - total
    out_path = Path(args.out or f"runs/accelerator_check/{dev.type}-{stamp.strftime('%Y%m%d-%H%M%S')}.json")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    atomic.atomic_write_json(out_path, report)
    failed = [i["number"] for i in report["items"] if i["status"].startswith("fail")]
    print(
        f"{len(report['items']) - len(failed)} of {len(report['items'])} items passed or skipped"
        f"{'; failed: ' + ', '.join(map(str, failed)) if failed else ''}; {report['seconds']:.0f} s; report: {out_path}"
    )
    return record_io.read_json(out_path)


def main(argv=None) -> int:
    try:
        report = run_check(argv)
    except UserError as exc:  # e.g. --device npu without torch_npu: one line, exit 2
        print(f"accelerator_check.py: error: {exc}", file=sys.stderr)
        return 2
    return 1 if any(i["status"].startswith("fail") for i in report["items"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
