"""Device selection, autocast dtype, seeding, determinism and CPU count (DESIGN.md section 5).

Supports CUDA, Ascend NPUs (only when ``torch_npu`` imports; it registers the ``npu``
device type with PyTorch), Apple MPS and the CPU. ``torch_npu`` is imported in exactly one
place, :func:`import_torch_npu`, which names the install command when it is missing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random

import numpy as np
import torch

from common.errors import UserError

NPU_INSTALL_HINT = "pip install -r requirements-npu.txt (torch_npu for Ascend NPUs, with the CANN toolkit)"


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


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """Mixed-precision dtype for training on ``device``: bf16 where supported, else None (fp32)."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "npu":
        return torch.bfloat16
    return None  # CPU and MPS train in float32: bf16 autocast there is slower or unsupported


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


def rng_state() -> dict:
    """Every RNG state a training step consumes, for checkpoints (tensors and plain types only)."""
    state = {
        "python": random.getstate(),
        "numpy": _numpy_state_to_tensors(np.random.get_state()),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` captured."""
    random.setstate(_as_python_state(state["python"]))
    np.random.set_state(_numpy_state_from_tensors(state["numpy"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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
