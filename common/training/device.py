"""Device selection, autocast dtype, seeding, determinism and CPU count (infrastructure, docs/design.md).

Supports CUDA, Ascend NPUs (only when ``torch_npu`` imports; it registers the ``npu``
device type with PyTorch), Apple MPS and the CPU. ``torch_npu`` is imported in exactly one
place, :func:`import_torch_npu`, which names the install command when it is missing.

Device capabilities decided here, each in one function (docs/decisions.md):

- mixed precision (:func:`autocast_dtype`): bf16 only where the device computes it natively
  (:func:`bf16_supported`: CUDA compute capability >= 8.0 without emulation, Ascend chips that
  report bf16); float32 everywhere else (no float16: it would need a ``GradScaler``);
- synchronisation for timing (:func:`synchronize`): ``torch.accelerator.synchronize`` (CUDA,
  NPU, MPS), so epoch times measure finished work, not the kernel queue;
- RNG state (:func:`rng_state`): the CPU generators plus the generator of the *current* device
  of the type the run computes on only, so a checkpoint resumes under any number of visible
  devices, and a CPU run on a GPU node never touches (or initialises) CUDA;
- ``cudnn.benchmark`` for training (:func:`cudnn_benchmark`): on for CUDA with static shapes, off under
  deterministic mode and when several runs share the device (:data:`RUNS_PER_DEVICE_ENV`).

Float64 support and the float32 math mode (TF32, HF32) are decided in :mod:`common.science.precision`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
from collections.abc import Iterator

import numpy as np
import torch

from common.errors import UserError

log = logging.getLogger(__name__)

NPU_INSTALL_HINT = "pip install -r requirements-npu.txt (torch_npu for Ascend NPUs, with the CANN toolkit)"
RUNS_PER_DEVICE_ENV = "RUNS_PER_DEVICE"  # K of --runs-per-device, in a job's environment where K > 1 (unset: 1)


@functools.cache
def import_torch_npu():
    """Import ``torch_npu`` (it registers the ``npu`` device type and ``torch.npu``), or explain.

    The project's one import inside a function: ``torch_npu`` exists only on Ascend machines.
    A missing or broken install is a :class:`UserError` naming the install command.
    """
    try:
        import torch_npu
    except Exception as exc:  # ImportError, or a CANN library that fails to load
        raise UserError(
            f"--device npu needs torch_npu, which does not import here ({type(exc).__name__}: {exc}); "
            f"install it with: {NPU_INSTALL_HINT}"
        ) from None
    return torch_npu


def npu_available() -> bool:
    """True when ``torch_npu`` imports and reports at least one NPU."""
    try:
        import_torch_npu()
    except UserError:
        return False
    return bool(getattr(torch, "npu", None) and torch.npu.is_available())


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def resolve_device(name: str = "auto") -> torch.device:
    """Map a ``--device`` value to a ``torch.device``; ``auto`` prefers cuda > npu > mps > cpu."""
    available = {
        "cuda": torch.cuda.is_available,
        "npu": npu_available,
        "mps": _mps_available,
        "cpu": lambda: True,
    }
    if name == "auto":
        name = next(kind for kind, ok in available.items() if ok())
    if name not in available:
        raise UserError(f"--device {name}: unknown device; use one of auto, {', '.join(available)}")
    if name == "npu":
        import_torch_npu()  # a missing torch_npu is named as such, with the install command
    if not available[name]():
        raise UserError(f"--device {name}: no such device is visible on this machine; use --device auto or cpu")
    return torch.device(name)


def accelerator_count() -> int:
    """Visible CUDA GPUs, else visible Ascend NPUs, else 0 (sizes one-process-per-device jobs)."""
    if torch.cuda.is_available():
        return torch.cuda.device_count()
    if npu_available():
        return int(torch.npu.device_count())
    return 0


def bf16_supported(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively (not through float32 emulation).

    CUDA: ``torch.cuda.is_bf16_supported(including_emulation=False)`` (True from compute
    capability 8.0, A100/H100; the default ``including_emulation=True`` also says True on V100 and
    T4, which emulate bf16 slowly). NPU: ``torch.npu.is_bf16_supported()`` (some Ascend chips lack
    bf16). CPU and MPS: False (bf16 autocast there is slower or unsupported).
    """
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    if device.type == "npu":
        ask = getattr(getattr(torch, "npu", None), "is_bf16_supported", None)
        if ask is None:
            log.warning("this torch_npu has no torch.npu.is_bf16_supported(); training in float32")
            return False
        return bool(ask())
    return False


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """Mixed-precision dtype for training on ``device``: bf16 where :func:`bf16_supported`, else None (float32)."""
    return torch.bfloat16 if bf16_supported(device) else None


def precision_name(device: torch.device, amp: bool = True) -> str:
    """``"bfloat16"`` or ``"float32"``: what :func:`autocast` computes in on ``device`` (for records)."""
    dtype = autocast_dtype(device) if amp else None
    return str(dtype or torch.float32).removeprefix("torch.")


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (timing); a no-op on the CPU.

    ``torch.accelerator.synchronize`` covers CUDA, NPU (torch_npu) and MPS alike.
    """
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def autocast(device: torch.device, enabled: bool = True) -> contextlib.AbstractContextManager:
    """``torch.autocast`` with :func:`autocast_dtype`, or a no-op where it is None."""
    dtype = autocast_dtype(device)
    if not enabled or dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and PyTorch (all devices) from one integer."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_deterministic(enabled: bool = True) -> None:
    """Deterministic kernels (for bit-identical CPU tests and resume checks)."""
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(enabled, warn_only=False)
    torch.backends.cudnn.benchmark = not enabled
    torch.backends.cudnn.deterministic = enabled


def cudnn_benchmark(device_type: str, *, deterministic: bool, runs_per_device: int, static_shapes: bool) -> bool:
    """Whether training turns ``torch.backends.cudnn.benchmark`` on (a pure function of its arguments).

    On for ``cuda`` when the training shapes are static (benchmark times every candidate algorithm once per
    shape, then keeps the fastest), unless determinism is asked for (the algorithm chosen would depend on
    timings: not reproducible) or several runs share the device (``runs_per_device`` > 1: timings taken while
    other processes compute pick by the load of the moment, the trial algorithms' workspaces compete for the
    shared memory, and records would no longer be those of the run alone). Off elsewhere (no cuDNN).
    """
    return device_type == "cuda" and static_shapes and not deterministic and runs_per_device == 1


def runs_per_device() -> int:
    """K of ``--runs-per-device``, from this job's environment (:data:`RUNS_PER_DEVICE_ENV`); 1 where unset."""
    value = os.environ.get(RUNS_PER_DEVICE_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else 1


@contextlib.contextmanager
def cudnn_benchmark_for(device: torch.device, static_shapes: bool = True) -> Iterator[bool]:
    """``cudnn.benchmark`` as :func:`cudnn_benchmark` decides for training on ``device`` (deterministic mode:
    ``torch.are_deterministic_algorithms_enabled()``) for the duration, then as it was; yields the decision."""
    on = cudnn_benchmark(
        device.type,
        deterministic=torch.are_deterministic_algorithms_enabled(),
        runs_per_device=runs_per_device(),
        static_shapes=static_shapes,
    )
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield on
    finally:
        torch.backends.cudnn.benchmark = before


def rng_accelerators() -> dict:
    """``{"cuda": torch.cuda, "npu": torch.npu}``, as far as available: the device RNGs a step may use.

    ``torch.npu`` exists only once ``torch_npu`` was imported (by :func:`resolve_device`); this
    never imports it. Tests replace this function to fake a multi-device machine.
    """
    found = {}
    if torch.cuda.is_available():
        found["cuda"] = torch.cuda
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        found["npu"] = npu
    return found


def rng_state(device: torch.device | None = None) -> dict:
    """Every RNG state a training step on ``device`` consumes, for checkpoints (tensors and plain types only).

    The CPU generators, plus the generator of ``device`` when it is an accelerator (CUDA, NPU): the
    *current* device's only (the one this process computes on: ``cuda:<local rank>`` under
    :mod:`common.training.distributed`), so the checkpoint does not depend on how many devices are visible.
    A CPU run stores no accelerator state: reading one would create a CUDA context on GPU 0 of a GPU
    node that the run never uses. ``device=None``: every available accelerator's (the older rule).
    """
    state = {
        "python": random.getstate(),
        "numpy": _numpy_state_to_tensors(np.random.get_state()),
        "torch": torch.get_rng_state(),
    }
    for kind, module in _rng_accelerators_of(device).items():
        state[kind] = module.get_rng_state()  # the current device's
    return state


def set_rng_state(state: dict, device: torch.device | None = None) -> None:
    """Restore what :func:`rng_state` captured; the state of ``device``'s type goes onto its current device.

    Works across device counts: a state saved with 4 visible GPUs resumes with 1. Checkpoints
    written before this rule hold one state per visible device (a list): the current device's
    entry is used when there is one, else the first. A state of an accelerator the run does not
    compute on now (a GPU run resumed with ``--device cpu``, or on a machine without GPUs) is
    ignored; ``device=None`` restores every available accelerator's.
    """
    random.setstate(_as_python_state(state["python"]))
    np.random.set_state(_numpy_state_from_tensors(state["numpy"]))
    torch.set_rng_state(state["torch"])
    for kind, module in _rng_accelerators_of(device).items():
        saved = state.get(kind)
        if saved is None:
            continue
        if isinstance(saved, list | tuple):  # older checkpoints: every visible device's state
            current = module.current_device()
            if len(saved) != module.device_count():
                log.info(
                    "%s RNG: the checkpoint saw %d devices, %d are visible now", kind, len(saved), module.device_count()
                )
            saved = saved[current] if current < len(saved) else saved[0]
        module.set_rng_state(saved)


def _rng_accelerators_of(device: torch.device | None) -> dict:
    """The accelerator RNG modules a run on ``device`` uses: its type's, or none on the CPU (None: all available)."""
    if device is not None and device.type not in ("cuda", "npu"):
        return {}
    found = rng_accelerators()
    return found if device is None else {k: v for k, v in found.items() if k == device.type}


def empty_cache(device: torch.device) -> None:
    """Hand the caching allocator's unused blocks on ``device`` back to the device (a no-op on the CPU).

    Before a phase with a different memory shape (the probe after training): what training cached
    in blocks of its own sizes is returned before the probe allocates in others.
    """
    if device.type != "cpu":
        torch.accelerator.empty_cache()  # the current device's, CUDA, NPU and MPS alike


def _as_python_state(state):
    # torch.save/load round-trips Python's RNG state tuple as lists; random.setstate wants tuples.
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _numpy_state_to_tensors(state) -> tuple:
    # weights_only=True loads tensors and plain types, not numpy arrays.
    name, keys, pos, has_gauss, cached = state
    return (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))


def _numpy_state_from_tensors(state) -> tuple:
    name, keys, pos, has_gauss, cached = state
    return (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached)


def cpu_count() -> int:
    """CPUs this process may use (respects affinity masks, unlike ``os.cpu_count``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        return os.cpu_count() or 1


@contextlib.contextmanager
def cpu_threads(count: int) -> Iterator[None]:
    """Run with ``count`` intra-op CPU threads, then restore the previous number."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def device_name(device: torch.device) -> str:
    """The accelerator's product name (``torch.cuda`` / ``torch.npu``), else the device type."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "npu":
        return str(torch.npu.get_device_name(device))  # type: ignore[attr-defined]
    return device.type
