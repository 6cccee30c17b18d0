"""The GPU check: what only a CUDA GPU or an Ascend NPU confirms, and the speeds the sweep's GPU-hours depend on.

Replaces ``accelerator_check.py`` and ``gpu_throughput.py``; docs/gpu-checklist.md says what each item should show.
``--cpu-dry-run``: every item on the CPU at toy sizes (eager backend, gloo): checks the script. Exit 1: an item failed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import gc
import itertools
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import torch
import torch._dynamo
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.data.loader import TensorLoader
from common.data.vision import CIFAR10_STATS
from common.errors import UserError
from common.launch.cli import comma_ints
from common.models.gpt import GPT, GPTConfig
from common.models.resnet import ResNet, ResNetConfig, depth_label
from common.runs import atomic, record_io, run_store
from common.science.precision import float32_reduced, float64_device, math_mode, supports_float64
from common.science.probe import probe_activation_gradients
from common.science.projection import GramAccumulator
from common.training import checkpoints, distributed, evaluation, parallel
from common.training import device as devices
from common.training.compile import compiled
from common.training.epoch import NonFiniteLossError, classification_loss, train_epoch
from common.training.loop import train
from common.training.recipes import AdamWRecipe, Schedule, SGDRecipe, TrainSettings

TOL_FLOAT64, TOL_FLOAT32, TOL_EIGH = 1e-10, 1e-4, 1e-10
SIZES = {  # name: (the full check on one GPU, the CPU dry run)
    **dict(train_images=(50_000, 128), test_images=(10_000, 64), image_size=(32, 16), widths=((16, 32, 64), (4, 8, 8))),
    **dict(batch_size=(128, 32), depths=((0, 6, 12), (0, 1, 2)), resume_images=(2048, 64), resume_epochs=(3, 2)),
    **dict(probe_batch=(32, 8), probe_batches=(2, 2), memory_depth=(12, 1), memory_batch=(128, 8), probe_reps=(5, 2)),
    **dict(gram_rows=(65_536, 1024), gram_k=(576, 36), gram_d=(64, 4), rank_k=(576, 36), rank_r=(200, 12), reps=(3, 1)),
    **dict(gpt=((12, 768, 1024, 50304), (2, 32, 32, 64)), gpt_probe_batch=(8, 8), gpt_batch=(16, 2), gpt_steps=(20, 2)),
    **dict(pair=((8, 512, 128), (2, 32, 16)), sharing=((1, 4, 8), (1, 2)), share_steps=(150, 4)),
    **dict(compile_depths=((0, 12, 24), (0, 2))),
}  # gpt: GPT-2 Small's L, d, T, vocabulary; pair: item 10's L, d, T; gram_k = 9 * 64: a stage-3 conv3x3 candidate
ITEMS: list[tuple[int, str, Callable]] = []  # (number, title, fn(check, results) -> its numbers and "status")


def item(number: int, title: str) -> Callable:
    return lambda fn: ITEMS.append((number, title, fn)) or fn


def memory_mib(dev: torch.device, stat: str = "max_memory_allocated") -> float | None:  # the peak (or stat); CPU: None
    value = None if dev.type == "cpu" else getattr(getattr(torch, dev.type), stat)(dev)
    return None if value is None else value / 2**20


def loader(n: int, s, dev: torch.device, data_seed: int, batch: int | None = None, **keys) -> TensorLoader:
    g, shape = torch.Generator().manual_seed(data_seed), (n, 3, s.image_size, s.image_size)
    x, y = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g), torch.randint(0, 10, (n,), generator=g)
    keys = {"train": True, "mean": CIFAR10_STATS[0], "std": CIFAR10_STATS[1], "channels_last": True, **keys}
    return TensorLoader(x, y, batch or s.batch_size, device=dev, **keys)


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def resnet(depth: int, s, seed: int = 0, running_stats: bool = False) -> ResNet:  # running_stats: not the fresh 0/1
    torch.manual_seed(seed)
    model = ResNet(ResNetConfig(extra_blocks=depth, widths=s.widths))
    with torch.no_grad():
        for i in range(3 if running_stats else 0):
            model(torch.randn(16, 3, s.image_size, s.image_size, generator=torch.Generator().manual_seed(i)))
    return model.eval() if running_stats else model


def small_gpt(layers: int, width: int, length: int, vocab: int, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(n_layer=layers, n_embd=width, n_head=max(1, width // 64), block_size=length, vocab_size=vocab))


def token_batch(batch: int, length: int, vocab: int, seed: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.randint(0, vocab, (batch, length + 1), generator=torch.Generator().manual_seed(seed))
    return w[:, :-1].to(dev), w[:, 1:].to(dev)


def train_step(model, x, y, dev: torch.device, optimizer: torch.optim.Optimizer) -> None:
    with devices.autocast(dev, True):
        loss = classification_loss(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def timed(fn: Callable, dev: torch.device, reps: int = 1) -> float:
    marks = [time.perf_counter()] + [(fn(), devices.synchronize(dev), time.perf_counter())[2] for _ in range(reps)]
    return statistics.median(b - a for a, b in itertools.pairwise(marks))


def stop_after(after: int | None, epoch: int, record: dict) -> None:  # an on_epoch_end, after bound: kill the run
    if epoch == after:
        raise KeyboardInterrupt


def spawn(fn: Callable, n: int, folder: Path, *args) -> list[dict]:
    folder.mkdir()
    mp.spawn(fn, args=(folder, *args), nprocs=n, join=True)
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(n)]


@item(1, "precision and device capabilities")
def precision_item(check, results: dict) -> dict:
    out = dict(autocast_dtype=devices.precision_name(dev := check.device), bf16_native=devices.bf16_supported(dev))
    out.update(float64_supported=supports_float64(dev), float64_device=str(float64_device(dev)))
    out["bf16_with_emulation"] = dev.type == "cuda" and bool(torch.cuda.is_bf16_supported(including_emulation=True))
    consistent = (out["autocast_dtype"] == "bfloat16") == out["bf16_native"]  # bf16 exactly where native, never float16
    return {"status": "pass" if consistent else "fail", **out, "math_mode_default": math_mode()}


@item(2, "ResNet-8/14/20 eager and compiled, bf16: s per 50k-image epoch, images/s, compiles, memory; after train()")
def training_item(check, results: dict) -> dict:
    dev, s, rows, failures = check.device, check.sizes, [], []
    strict = dev.type == "cuda" or check.dry_run  # where the sweep compiles (--compile auto); elsewhere only tried
    recipe, test = SGDRecipe(epochs=2, lr=0.05, warmup_epochs=0.5), loader(s.test_images, s, dev, 1, 500, train=False)
    for n, mode in itertools.product(s.depths, ("eager", "compiled")):
        name, model, run_dir = f"ResNet-{depth_label(n)} {mode}", resnet(n, s), check.workdir / f"train-n{n}-{mode}"
        keys = dict(run_dir=run_dir, settings=TrainSettings(recipe, compile=mode == "compiled", channels_last=True))
        memory_mib(dev, "reset_peak_memory_stats")
        start, data = time.perf_counter(), loader(s.train_images, s, dev, 0)
        try:
            with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):  # no silent fallback to eager
                summary = train(model, data, {"test": test}, device=dev, desc=name, **keys)
        except Exception as exc:  # compiling where the sweep does not may fail: recorded, not a failure
            if strict or mode == "eager":
                raise
            rows.append({"depth": depth_label(n), "n": n, "mode": mode, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        first, *_, last = run_store.read_metrics(run_dir)
        row = dict(depth=depth_label(n), n=n, mode=mode, epoch_s_per_50k=last["epoch_time_s"] * 50_000 / s.train_images)
        row.update(images_per_s=last["images_per_s"], first_epoch_extra_s=first["epoch_time_s"] - last["epoch_time_s"])
        row.update(frames_compiled=(summary.get("compile") or {}).get("frames"), peak_memory_mib=memory_mib(dev))
        row.update(wall_s_with_compile=time.perf_counter() - start, final_test_loss_float32=summary["test_loss"])
        row[f"last_epoch_test_loss_{summary['autocast_dtype']}"] = last["test_loss"]
        mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
        row.update(allocated_after_mib=memory_mib(dev, "memory_allocated"), parameters_mib=mib)
        row.update(final_eval_math_mode=summary["final_eval_math_mode"], final_eval_dtype=summary["final_eval_dtype"])
        full = row["final_eval_dtype"] == "float32" and not float32_reduced(row["final_eval_math_mode"])
        rows.append(row)
        row["checks"] = {
            "compiles (no recompile limit reached)": bool(row["frames_compiled"]) or not strict or mode == "eager",
            "finite test loss": math.isfinite(summary["test_loss"]),
            "no gradient left": all(p.grad is None for p in model.parameters()),
            "final evaluation in float32 without TF32/HF32": full,
        }
        failures += [f"{name}: {claim}" for claim, ok in row["checks"].items() if not ok]
    out = dict(compile_must_work=strict, autocast_dtype=devices.precision_name(dev), default_math_mode=math_mode())
    out.update(train_images=s.train_images, rows=rows)
    return {"status": "fail: " + "; ".join(failures) if failures else "pass", **out}


@item(3, "kill and resume under deterministic mode: bit-identical weights")
def resume_item(check, results: dict) -> dict:
    dev, s, cudnn, folder = check.device, check.sizes, torch.backends.cudnn, check.workdir
    keys = dict(settings=TrainSettings(SGDRecipe(epochs=s.resume_epochs, lr=0.05), channels_last=True), device=dev)
    previous = torch.are_deterministic_algorithms_enabled(), cudnn.benchmark, cudnn.deterministic
    try:
        devices.set_deterministic(True)
        for name, seed, kill in (("whole", 0, None), ("resumed", 0, 1), ("resumed", 123, None)):  # killed, resumed
            devices.seed_everything(0)  # the second init of "resumed" differs: its checkpoint must win
            with contextlib.suppress(KeyboardInterrupt if kill else ()):
                data, stop = loader(s.resume_images, s, dev, 2, seed=3), functools.partial(stop_after, kill)
                train(resnet(0, s, seed), data, {}, run_dir=folder / name, on_epoch_end=stop, desc=name, **keys)
    finally:
        torch.use_deterministic_algorithms(previous[0])
        cudnn.benchmark, cudnn.deterministic = previous[1:]
    whole, resumed = checkpoints.load_weights(folder / "whole"), checkpoints.load_weights(folder / "resumed")
    floats = {k: x.double() for k, x in whole.items() if x.is_floating_point()}
    worst = max(((x - resumed[k]).abs().max() / x.abs().max().clamp_min(1e-30)).item() for k, x in floats.items())
    worst = worst if all(torch.equal(x, resumed[k]) for k, x in whole.items() if k not in floats) else math.inf
    state = devices.rng_state(dev)
    rng_ok = torch.equal(*[devices.set_rng_state(state, dev) or torch.rand(4, device=dev) for _ in range(2)])
    out = dict(bit_identical=worst == 0.0, max_relative_difference=worst, rng_round_trip=rng_ok)
    out["accelerator_rng_state_shape"] = {k: list(v.shape) for k, v in state.items() if k in devices.rng_accelerators()}
    ok, why = worst == 0.0 and rng_ok, f"fail: max relative weight difference {worst:.3e}, rng round trip {rng_ok}"
    return {"status": "pass" if ok else why, **out, "autocast_dtype": devices.precision_name(dev)}


def probe_agreement(check, results: dict, dtype: torch.dtype, tolerance: float) -> dict:
    s, dev, g = check.sizes, check.device, torch.Generator().manual_seed(4)
    if dtype == torch.float64 and not supports_float64(dev):
        return {"status": f"skipped: {dev.type} has no float64 (the probe keeps its float64 sums on the CPU there)"}
    shape = (s.probe_batches, s.probe_batch, 3, s.image_size, s.image_size)
    batches = list(zip(torch.randn(shape, generator=g, dtype=dtype), torch.randint(0, 10, shape[:2], generator=g)))
    on_cpu = probe_activation_gradients(resnet(0, s, running_stats=True).to(dtype), batches, exact=True)
    moved, model = [(x.to(dev), y.to(dev)) for x, y in batches], resnet(0, s, running_stats=True).to(dev, dtype)
    on_dev = probe_activation_gradients(model, moved, exact=True)
    pairs = list(zip(on_cpu.scores, on_dev.scores, strict=True))
    keys = ("ag_norm", "growth_value", "growth_value_pooled")
    worst = {key: max(relative(getattr(a, key), getattr(b, key)) for a, b in pairs) for key in keys}
    ok = max(worst.values()) <= tolerance and not (dtype == torch.float32 and float32_reduced(on_dev.math_mode))
    out = dict(tolerance=tolerance, max_relative_difference=worst, candidates=len(pairs))
    out.update(tangent_ranks_equal=all(a.tangent_rank == b.tangent_rank for a, b in pairs))
    out.update(device_math_mode=on_dev.math_mode, float64_ran_on=on_dev.float64_device)
    return {"status": "pass" if ok else "fail", **out}


for _n, _dtype, _tol in ((4, torch.float64, TOL_FLOAT64), (5, torch.float32, TOL_FLOAT32)):
    _title = f"probe on the device vs the CPU, {str(_dtype)[6:]} model and batch, TF32 off: AG_l, V_S,l to {_tol:g}"
    item(_n, _title)(functools.partial(probe_agreement, dtype=_dtype, tolerance=_tol))


@item(6, "exact projection: float64 Gram statistics GFLOP/s; eigh of rank-deficient Gram matrices as on the CPU")
def projection_item(check, results: dict) -> dict:
    s, dev, g = check.sizes, check.device, torch.Generator().manual_seed(5)
    n, k, d = s.gram_rows, s.gram_k, s.gram_d
    psi, grad = torch.randn(n, k, generator=g).to(dev), torch.randn(n, d, generator=g).to(dev)  # float32, as probed
    accs = [GramAccumulator(k, d, device=dev) for _ in range(s.reps + 1)]
    times = [devices.synchronize(dev) or timed(functools.partial(acc.update, psi, grad), acc.device) for acc in accs]
    best = min(times[1:])  # the first call warms up; P += Psi^T Psi and X += Psi^T G: 2 n k (k + d) FLOPs
    gram = dict(gflop_per_s=2.0 * n * k * (k + d) / best / 1e9, seconds=best, rows=n, k=k, d=d)
    k, r, n, g, found = s.rank_k, s.rank_r, 4 * s.rank_k, torch.Generator().manual_seed(6), []
    psi = torch.randn(n, r, generator=g, dtype=torch.float64) @ torch.randn(r, k, generator=g, dtype=torch.float64)
    grad = torch.randn(n, d, generator=g, dtype=torch.float64)
    for where in (torch.device("cpu"), dev):
        acc = GramAccumulator(k, d, device=where)
        acc.update(psi.to(float64_device(where)), grad.to(float64_device(where)))
        found.append((acc.rank(), acc.growth_value(), str(acc.device)))
    (cpu_rank, cpu_v, _), (dev_rank, dev_v, ran_on) = found
    eigh = dict(k=k, true_rank=r, cpu_rank=cpu_rank, device_rank=dev_rank, relative_difference_v=relative(cpu_v, dev_v))
    ok = cpu_rank == dev_rank == r and eigh["relative_difference_v"] <= TOL_EIGH
    eigh.update(tolerance=TOL_EIGH, ran_on=ran_on)
    return {"status": "pass" if ok else "fail", "gram": {**gram, "ran_on": str(accs[0].device)}, "eigh": eigh}


@item(7, "ResNet-20, batch 128: AG and exact probe against a training step; the exact probe's peak memory")
def probe_cost_item(check, results: dict) -> dict:
    dev, s = check.device, check.sizes
    model = resnet(s.memory_depth, s, running_stats=True).to(dev, memory_format=torch.channels_last)
    x, y = next(iter(loader(s.memory_batch, s, dev, 7, s.memory_batch)))
    memory_mib(dev, "reset_peak_memory_stats")
    probe_activation_gradients(model, [(x, y)], exact=True)
    out = dict(model=f"ResNet-{depth_label(s.memory_depth)}", batch=s.memory_batch, exact_probe_mib=memory_mib(dev))
    step = functools.partial(train_step, model.train(), x, y, dev, torch.optim.SGD(model.parameters(), 0.01, 0.9))
    fns = {"train_step": step, "ag_probe": functools.partial(probe_activation_gradients, model, [(x, y)])}
    fns["exact_probe"] = functools.partial(probe_activation_gradients, model, [(x, y)], exact=True)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _, (name, fn) in itertools.product(range(s.probe_reps + 1), fns.items()):  # interleaved, after a warm-up
        times[name].append(timed(fn, dev))
    median = {name: statistics.median(ts[1:]) for name, ts in times.items()}
    out.update(median_s=median, ag_over_train_step=median["ag_probe"] / median["train_step"])
    out.update(exact_over_train_step=median["exact_probe"] / median["train_step"])
    rows = results.get(2, {}).get("rows", [])
    out["training_peak_mib"] = {f"ResNet-{r['depth']} {r['mode']}": r.get("peak_memory_mib") for r in rows}
    return {"status": "pass", **out}


@item(8, "GPT-2 Small: probe in sub-batches (same AG_l, peak memory falling); compiled bf16 step, tokens/s, MFU")
def gpt2_item(check, results: dict) -> dict:
    dev, s, (layers, width, length, vocab) = check.device, check.sizes, check.sizes.gpt
    model = small_gpt(layers, width, length, vocab).to(dev).eval()
    x, y = token_batch(s.gpt_probe_batch, length, vocab, 9, dev)
    subs, scores, peaks = (s.gpt_probe_batch, max(1, s.gpt_probe_batch // 4), 1), {}, {}
    for sub in subs:
        devices.empty_cache(dev)
        memory_mib(dev, "reset_peak_memory_stats")
        scores[sub] = probe_activation_gradients(model, [(x, y)], loss_fn=classification_loss, sub_batch=sub).scores
        peaks[sub] = memory_mib(dev)
    pairs = [(a, b) for sub in subs[1:] for a, b in zip(scores[subs[0]], scores[sub], strict=True)]
    worst = max(relative(a.ag_norm, b.ag_norm) for a, b in pairs)
    falls = dev.type == "cpu" or peaks[subs[0]] > peaks[subs[1]] > peaks[subs[2]]
    out = dict(max_relative_difference_ag=worst, peak_memory_mib_by_sub_batch={str(k): v for k, v in peaks.items()})
    out.update(tokens=s.gpt_probe_batch * length, layers=layers, width=width)
    x, optimizer = torch.randint(0, vocab, (s.gpt_batch, length), device=dev), AdamWRecipe(1, 6e-4, 1)
    with compiled(model.train(), True):  # its blocks compiled as runs compile them; AdamW, bf16 autocast
        step = functools.partial(train_step, model, x, x, dev, optimizer.make_optimizer(model))
        first, steady = timed(step, dev), timed(step, dev, s.gpt_steps)
    try:  # the peak table's module imports the text stack (datasets, tiktoken): only where it is installed
        from common.experiments.gpt2_ascend import peak_flops

        peak, source = peak_flops(devices.device_name(dev), results["peak_tflops"]), "gpt2_ascend.PEAK_BF16_TFLOPS"
    except ImportError as exc:
        peak, source = (results["peak_tflops"] or 0) * 1e12 or None, f"no table ({exc.name} missing)"
    source = "--peak-tflops" if results["peak_tflops"] else source
    tokens_per_s, flops = s.gpt_batch * length / steady, model.flops_per_token()
    step = dict(batch=s.gpt_batch, step_s=steady, first_step_s=first, tokens_per_s=tokens_per_s, flops_per_token=flops)
    step.update(mfu=tokens_per_s * flops / peak if peak else None, peak_flops=peak, peak_source=source)
    why = f"fail: AG_l differs by {worst:.2e} or memory {peaks} does not fall"
    return {"status": "pass" if worst <= TOL_FLOAT32 and falls else why, **out, "training_step": step}


def cpu_run_worker(rank: int, folder: Path) -> None:  # item 9's fresh process: a --device cpu run, then its answer
    x, settings = torch.randint(0, 7, (4, 5)), TrainSettings(SGDRecipe(epochs=2, lr=0.1))
    model = torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.Linear(4, 7))
    train(model, [(x, x)], {}, run_dir=folder / "run", settings=settings, device=torch.device("cpu"))
    (folder / f"rank{rank}.json").write_text(json.dumps({"cuda_initialised": torch.cuda.is_initialized()}))


@item(9, "a --device cpu training run on this node creates no CUDA context")
def cpu_run_item(check, results: dict) -> dict:
    if not torch.cuda.is_available():
        return {"status": "skipped: no CUDA here, no context to create (tests/benchmarks/test_gpu_check.py: the rule)"}
    [found] = spawn(cpu_run_worker, 1, check.workdir / "cpu-run")
    return {"status": "fail" if found["cuda_initialised"] else "pass", **found, "cuda_visible": True}


@item(10, "two processes: DDP and FSDP2 (placement, bf16 parameters, resume), split evaluation, NaN, waits")
def two_process_item(check, results: dict) -> dict:
    if (visible := 2 if (dev := check.device).type == "cpu" else devices.accelerator_count()) < 2:
        return {"status": f"skipped: {visible} {dev.type} device visible; this item needs 2 (NCCL / HCCL between them)"}
    with socket.socket() as sock:
        port = sock.bind(("127.0.0.1", 0)) or sock.getsockname()[1]
    ranks = spawn(two_process_worker, 2, check.workdir / "two-processes", port, dev.type, vars(check.sizes))
    if errors := [f"rank {r}: {f['error'].strip().splitlines()[-1]}" for r, f in enumerate(ranks) if "error" in f]:
        return {"status": "fail: " + "; ".join(errors), "ranks": ranks}
    bf16 = "bfloat16" if devices.precision_name(dev) == "bfloat16" else "float32"
    for rank, f in enumerate(ranks):
        split, alone, placement = f["split"], f["alone"], f["placement_peak_mib"] or 0.0
        f["checks"] = {
            "ddp and fsdp agree (1e-2)": relative(f["ddp_val_loss"], f["fsdp_val_loss"]) < 1e-2,
            "fsdp shards before moving (placement peak < 3/4 of the model)": placement < f["full_model_mib"] * 0.75,
            "parameters are DTensors on the device": f["sharded"] and f["parameter_devices"] == [f["device"]],
            "bf16 parameters where bf16 autocast runs": f["fsdp_param_dtype"] == bf16 and f["fsdp_bf16_finite"],
            "a killed fsdp run resumes (1e-2)": relative(f["fsdp_val_loss"], f["resumed_val_loss"]) < 1e-2,
            "split evaluation equals one process (1e-6)": relative(split["loss"], alone["loss"]) < 1e-6,
            "split evaluation counts every target once": split["n"] == alone["n"],
            "a NaN on rank 1 stops both processes": "at step 1 " in (f["nan_message"] or ""),
            "the others wait for rank 0": rank == 0 or f["waited_s"] >= 0.75,
            "the group is bound to the device": dev.type != "cuda" or f["bound_device"] == f["device"],
        }
    failures = [f"rank {r}: {name}" for r, f in enumerate(ranks) for name, ok in f["checks"].items() if not ok]
    return {"status": "fail: " + ", ".join(failures) if failures else "pass", "ranks": ranks}


def two_process_worker(rank: int, folder: Path, port: int, device_type: str, sizes: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank))
    os.environ.update(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", DS_DIST_TIMEOUT_MIN="5")
    torch.set_num_threads(1 if device_type == "cpu" else torch.get_num_threads())
    out, (layers, width, length), vocab = {}, sizes["pair"], 257
    try:
        info = distributed.init_distributed(device_type)
        dev, group = distributed.process_device(torch.device(device_type), info), torch.distributed.group.WORLD
        out.update(backend=info.backend, device=str(dev), bound_device=str(getattr(group, "bound_device_id", None)))
        gpt, recipe = functools.partial(small_gpt, layers, width, length, vocab), AdamWRecipe(4, 1e-3, 2)
        batches = [token_batch(4, length, vocab, 100 + 10 * i + rank, dev) for i in range(2)]  # each process its own
        val = [token_batch(4, length, vocab, 200 + i, dev) for i in range(3)]  # the same validation batches everywhere
        fsdp, nan = TrainSettings(recipe, fsdp=True), TrainSettings(recipe, nan_check_every=1)
        run = functools.partial(train, train_loader=batches, eval_loaders={"val": val}, device=dev)
        out["ddp_val_loss"] = run(gpt(), run_dir=folder / "ddp", settings=TrainSettings(recipe))["val_loss"]
        model = gpt()
        out["full_model_mib"] = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
        gc.collect()  # the DDP run's model and buckets
        devices.empty_cache(dev)
        before, _ = memory_mib(dev, "memory_allocated"), memory_mib(dev, "reset_peak_memory_stats")
        parallel.place_model(model, dev, fsdp)
        out["placement_peak_mib"] = memory_mib(dev) - before if dev.type != "cpu" else None
        out["parameter_devices"] = sorted({str(p.device) for p in model.parameters()})
        out["sharded"] = parallel.is_sharded(model)
        out["fsdp_val_loss"] = run(model, run_dir=folder / "fsdp", settings=fsdp)["val_loss"]
        bf16 = TrainSettings(recipe, fsdp=True, fsdp_bf16_params=True)
        bf16 = run(gpt(), run_dir=folder / "fsdp-bf16", settings=bf16)
        out.update(fsdp_bf16_val_loss=bf16["val_loss"], fsdp_param_dtype=bf16.get("fsdp_param_dtype"))
        out["fsdp_bf16_finite"] = math.isfinite(bf16["val_loss"])
        with contextlib.suppress(KeyboardInterrupt):
            run(gpt(), run_dir=folder / "fsdp-resumed", settings=fsdp, on_epoch_end=functools.partial(stop_after, 1))
        out["resumed_val_loss"] = run(gpt(seed=1), run_dir=folder / "fsdp-resumed", settings=fsdp)["val_loss"]
        out["split"] = evaluation.evaluate(gpt().to(dev), val, dev)
        out["alone"] = evaluation.evaluate(gpt().to(dev), val, dev, split=False)
        net, calls, factor = gpt(), [], math.nan if rank == 1 else 1.0  # rank 1: NaN after one training forward
        net.register_forward_hook(lambda m, _, y: y * factor if m.training and (calls.append(m) or calls[1:]) else None)
        try:
            out["nan_message"] = run(net, run_dir=folder / "nan", settings=nan) and None
        except NonFiniteLossError as exc:
            out["nan_message"] = str(exc)
        start = time.perf_counter()
        time.sleep(1.0 if rank == 0 else 0.0)  # rank 0 alone (a probe, a download); the other waits
        distributed.wait_for_all()
        out["waited_s"] = time.perf_counter() - start
    except Exception:
        out["error"] = traceback.format_exc()
    finally:
        Path(folder, f"rank{rank}.json").write_text(json.dumps(out, default=str))
        distributed.destroy_distributed()


def share_worker(rank: int, folder: Path, n: int, device_type: str, sizes: dict) -> None:
    dev, s, recipe = torch.device(device_type), SimpleNamespace(**sizes), SGDRecipe(epochs=1, lr=0.05, warmup_epochs=0)
    torch.set_num_threads(1 if device_type == "cpu" else torch.get_num_threads())
    model, settings = resnet(0, s).to(dev, memory_format=torch.channels_last), TrainSettings(recipe, channels_last=True)
    for steps in (2, s.share_steps):  # a warm-up (cuDNN, allocator), then the timed epoch
        batches = loader(steps * s.batch_size, s, dev, 0)
        while steps == s.share_steps and len(list(folder.glob("ready-*"))) < n:
            (folder / f"ready-{rank}").touch()
            time.sleep(0.01)
        start, keys = time.time(), dict(schedule=Schedule.of(recipe, len(batches)), step=0, settings=settings)
        train_epoch(model, recipe.make_optimizer(model), batches, device=dev, **keys)
        devices.synchronize(dev)
    result = {"start": start, "end": time.time(), "images": steps * s.batch_size}
    (folder / f"rank{rank}.json").write_text(json.dumps(result))


@item(11, "one device shared by 1, 4, 8 training processes (ResNet-8 eager): images/s of all against one alone")
def sharing_item(check, results: dict) -> dict:
    rows = []
    for n in check.sizes.sharing:
        outs = spawn(share_worker, n, check.workdir / f"sharing-{n}", n, check.device.type, vars(check.sizes))
        wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
        rows.append({"processes": n, "wall_s": wall, "images_per_s": sum(o["images"] for o in outs) / wall})
    rows = [{**row, "speedup_vs_one": row["images_per_s"] / rows[0]["images_per_s"]} for row in rows]
    return {"status": "pass", "rows": rows, "batch": check.sizes.batch_size, "sharing": "time-slicing (no MPS)"}


@item(12, "compile time against N: the first compiled training step minus a steady one (torch.compiler.reset() first)")
def compile_item(check, results: dict) -> dict:
    dev, s, rows = check.device, check.sizes, []
    x, y = next(iter(loader(s.batch_size, s, dev, 0)))
    for n in s.compile_depths:
        model = resnet(n, s).to(dev, memory_format=torch.channels_last)
        with compiled(model, True):  # a fresh compiler state, as every run starts from
            step = functools.partial(train_step, model, x, y, dev, torch.optim.SGD(model.parameters(), 0.01, 0.9))
            first, steady = timed(step, dev), timed(step, dev, 3)
        rows.append({"depth": depth_label(n), "n": n, "compile_s": first - steady, "step_s": steady})
    return {"status": "pass", "rows": rows}


def run_check(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--device", default="auto", help="auto (CUDA, then NPU), cuda, npu (default: auto)")
    parser.add_argument("--cpu-dry-run", action="store_true", help="every item on the CPU at toy sizes: the script")
    parser.add_argument("--depths", type=comma_ints, help="item 2's extra blocks N (default: 0,6,12: ResNet-8/14/20)")
    parser.add_argument("--items", type=comma_ints, help="run only these items, e.g. 1,2,8 (default: all)")
    parser.add_argument("--budget-s", type=float, default=1200.0, help="start no item after this (default: 1200 s)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak for item 8's MFU")
    parser.add_argument("--out", default=None, help="JSON report (default: runs/gpu_check/<device>-<time>.json)")
    args = parser.parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before any cuBLAS handle: item 3's deterministic mode
    dev = torch.device("cpu") if args.cpu_dry_run else devices.resolve_device(args.device)
    s = SimpleNamespace(**{k: v[args.cpu_dry_run] for k, v in SIZES.items()})
    s.depths = tuple(args.depths or s.depths)
    stamp, mode, total = datetime.datetime.now(datetime.UTC), "cpu-dry-run" if args.cpu_dry_run else "full", time.time()
    device = dict(type=dev.type, name=devices.device_name(dev), visible=devices.accelerator_count())
    props = torch.cuda.get_device_properties(dev) if dev.type == "cuda" else None
    device.update(capability=props and f"{props.major}.{props.minor}", memory_gib=props and props.total_memory / 2**30)
    device.update(torch=torch.__version__, cuda=torch.version.cuda, python=sys.version.split()[0], host=os.uname()[1])
    report = dict(date=stamp.isoformat(timespec="seconds"), mode=mode, device=device, sizes=vars(s), items=[])
    results, threads, compile_ = {"peak_tflops": args.peak_tflops}, torch.get_num_threads(), torch.compile
    out_path = Path(args.out or f"runs/gpu_check/{dev.type}-{stamp.strftime('%Y%m%d-%H%M%S')}.json")
    with contextlib.ExitStack() as restore, tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        restore.callback(torch.set_num_threads, threads)
        if args.cpu_dry_run:  # one thread is fastest at toy sizes and immune to other processes' load
            torch.set_num_threads(1)
            torch.compile = functools.partial(compile_, backend="eager")  # no C++ compiler needed
            restore.callback(setattr, torch, "compile", compile_)
        check = SimpleNamespace(device=dev, sizes=s, dry_run=args.cpu_dry_run, workdir=Path(tmp))
        for number, title, fn in [i for i in ITEMS if args.items is None or i[0] in args.items]:
            out, start = {"status": "skipped: the time budget (--budget-s) was spent"}, time.time()
            if not (args.cpu_dry_run or dev.type != "cpu"):
                out["status"] = "skipped: no accelerator (CUDA or NPU) here; --cpu-dry-run runs the script on the CPU"
            elif start - total <= args.budget_s:
                try:
                    out = fn(check, results)
                except Exception as exc:  # one item's failure must not hide the others
                    out = {"status": f"fail: {type(exc).__name__}: {exc}"} | {"traceback": traceback.format_exc()}
            results[number] = out | {"seconds": (took := time.time() - start)}
            report["items"].append({"number": number, "title": title, **results[number]})
            word, _, why = out["status"].partition(":")
            print(f"{number}. {title}: {word.upper()}{f' ({why.strip()})' if why else ''} [{took:.1f} s]", flush=True)
    report.update(budget_s=args.budget_s, seconds=time.time() - total)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    atomic.atomic_write_json(out_path, report)
    failed = [str(i["number"]) for i in report["items"] if i["status"].startswith("fail")]
    print(f"GPU check on {device['name']} ({mode}): {len(report['items'])} items, failed: {failed}; report: {out_path}")
    return record_io.read_json(out_path)


def main(argv=None) -> int:
    try:  # exit status 1 when an item failed
        return int(any(i["status"].startswith("fail") for i in run_check(argv)["items"]))
    except UserError as exc:  # e.g. --device npu without torch_npu: one line, exit 2
        print(f"gpu_check.py: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
