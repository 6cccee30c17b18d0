"""Numerical precision, decided in one place: float32 without TF32/HF32, and where float64 runs.

A leaf module (it imports nothing else from this package), so the science modules and the
infrastructure both use it. Two decisions live here (docs/decisions.md):

- float32 math mode: TF32, which cuDNN convolutions use by default on Ampere and later GPUs, and
  HF32, which torch_npu allows for convolutions by default on Ascend NPUs, compute to only ~1e-3
  relative precision. :func:`full_precision` switches both off for float32 matrix products and
  convolutions (and restores every flag afterwards); the probe (``AG_l``, ``V_S,l``, ``C_l``), the
  matched insertion and the final evaluation of a training run compute under it. :func:`math_mode`
  says how float32 computes now, for run records; :func:`float32_reduced` and
  :func:`float32_reduced_on` read such a record or the current flags.
- float64 (:func:`supports_float64`, :func:`float64_device`): the statistics of tensors on a
  device are computed in float64 there when the device has float64 matrix products and ``eigh``
  (CUDA, the CPU), else on the CPU. Apple MPS has no float64 and Ascend NPUs lack float64 matrix
  products and ``eigh`` (or cast to float32 silently), which the float64 rank tolerance of the
  exact growth value cannot survive; there the rows move to the CPU *before* the cast to float64.

torch >= 2.9 sets TF32 per backend and operator through ``torch.backends.*.fp32_precision``
(``"ieee"``, ``"tf32"``, or ``"none"``: inherit the parent's); the oldest torch this project pins
(2.14.0, ``requirements-npu.txt``) has it, so the older ``allow_tf32`` flags are never touched (the
two APIs must not be mixed: reading a legacy flag after a new-API write can raise).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator

import torch

NO_FLOAT64_DEVICE_TYPES = frozenset({"mps", "npu"})  # no (or silently float32) float64 GEMM / eigh

# The ``torch.backends`` leaves whose ``fp32_precision`` the guard sets, each with its parents (for "none").
PRECISION_LEAVES = {
    "cuda.matmul": (),
    "cudnn.conv": ("cudnn",),
    "cudnn.rnn": ("cudnn",),
    "mkldnn.matmul": ("mkldnn",),
    "mkldnn.conv": ("mkldnn",),
    "mkldnn.rnn": ("mkldnn",),
}
TF32_KEYS = ("cuda_matmul", "cudnn_conv", "cudnn_rnn")  # the GPU leaves of a math mode record where TF32 applies


# ----------------------------------------------------------------------------- float64
def supports_float64(device: torch.device | str) -> bool:
    """Whether ``device`` computes float64 matrix products and ``eigh`` natively.

    The capability answer behind :func:`float64_device`; tests override it (``monkeypatch``) to
    simulate a device without float64 on a CPU-only machine.
    """
    kind = device.type if hasattr(device, "type") else str(device).split(":")[0]  # a torch.device, or "npu:0"
    return kind not in NO_FLOAT64_DEVICE_TYPES


def float64_device(device: torch.device | str | None) -> torch.device:
    """Where float64 statistics of tensors living on ``device`` are computed: there, or on the CPU."""
    if device is None or not supports_float64(device):
        return torch.device("cpu")
    return torch.device(device)


# ----------------------------------------------------------------------------- float32 math mode
def precision_flag(path: str):
    """The ``torch.backends`` object at dotted ``path`` (``"cudnn.conv"``) that holds an ``fp32_precision``."""
    return operator.attrgetter(path)(torch.backends)


def _npu_hf32_flags() -> dict[str, object]:
    """``torch.npu.conv`` and ``torch.npu.matmul`` by op name, where torch_npu registered them (their ``allow_hf32``).

    Never imports torch_npu: without it there is nothing to find.
    """
    npu = getattr(torch, "npu", None)
    found = {}
    for op in ("conv", "matmul"):
        obj = getattr(npu, op, None)
        if obj is not None and hasattr(obj, "allow_hf32"):
            found[op] = obj
    return found


def math_mode() -> dict:
    """How float32 matrix products and convolutions compute now, for run records.

    ``{"api": "fp32_precision", "<backend>_<op>": "ieee" | "tf32", ..., "tf32": bool}``: ``tf32`` is
    True when CUDA matmuls or cuDNN convolutions/RNNs may use TF32 (ignored on other devices). Where
    torch_npu is loaded, also ``npu_conv_hf32``, ``npu_matmul_hf32`` and ``hf32`` (either allowed).
    """
    mode: dict = {"api": "fp32_precision"}  # the record's shape since torch 2.9; kept so records compare
    for leaf, parents in PRECISION_LEAVES.items():
        chain = [precision_flag(p).fp32_precision for p in (leaf, *parents)]
        mode[leaf.replace(".", "_")] = next((v for v in chain if v != "none"), "ieee")
    mode["tf32"] = any(mode[k] == "tf32" for k in TF32_KEYS)
    hf32 = _npu_hf32_flags()
    if hf32:
        mode.update({f"npu_{op}_hf32": bool(obj.allow_hf32) for op, obj in hf32.items()})
        mode["hf32"] = any(bool(obj.allow_hf32) for obj in hf32.values())
    return mode


def float32_reduced(mode: dict) -> bool:
    """Whether a :func:`math_mode` record lets float32 compute in reduced precision (TF32 or HF32)."""
    return bool(mode["tf32"] or mode.get("hf32", False))


def float32_reduced_on(device: torch.device) -> bool:
    """Whether float32 on ``device`` computes in reduced precision by default now (CUDA's TF32, an NPU's HF32)."""
    mode = math_mode()
    return (device.type == "cuda" and mode["tf32"]) or (device.type == "npu" and mode.get("hf32", False))


@contextlib.contextmanager
def full_precision() -> Iterator[dict]:
    """Switch TF32 (and an NPU's HF32) off for float32 matmuls and convolutions; restore every previous setting on exit.

    Use it around any float32 computation whose numbers are compared across devices or against
    float64 identities. Yields :func:`math_mode` as it is inside (record it with the results).
    Every ``fp32_precision`` leaf of :data:`PRECISION_LEAVES` is set to ``"ieee"``; with torch_npu
    loaded also ``torch.npu.conv.allow_hf32`` and ``torch.npu.matmul.allow_hf32`` are off. Not
    thread-safe (the flags are global).
    """
    with _ieee_float32(), _no_hf32():
        yield math_mode()


@contextlib.contextmanager
def _ieee_float32() -> Iterator[None]:
    """Every ``fp32_precision`` leaf at ``"ieee"``, restored on exit."""
    leaves = {p: precision_flag(p) for p in PRECISION_LEAVES}
    saved = {p: obj.fp32_precision for p, obj in leaves.items()}
    try:
        for obj in leaves.values():
            obj.fp32_precision = "ieee"
        yield
    finally:
        for p, obj in leaves.items():
            obj.fp32_precision = saved[p]


@contextlib.contextmanager
def _no_hf32() -> Iterator[None]:
    """``torch.npu.{conv,matmul}.allow_hf32`` False where torch_npu is loaded, restored on exit."""
    flags = _npu_hf32_flags()
    saved = {op: obj.allow_hf32 for op, obj in flags.items()}
    try:
        for obj in flags.values():
            obj.allow_hf32 = False
        yield
    finally:
        for op, obj in flags.items():
            obj.allow_hf32 = saved[op]
