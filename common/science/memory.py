"""The exact probe's memory, estimated before anything is allocated, and the memory this process may still take.

:func:`probe_bytes` adds up what :func:`common.science.probe.probe_activation_gradients` holds, from each place's
sizes (:class:`PlaceSize`: ``k`` tangent features, width ``d``, the pooled gradient rows ``n`` and a batch's rows):

- with ``exact``, per place, its pooled statistics from the first batch to the end, all places at once: the rows
  ``Psi`` and ``G`` (``n (k + d)`` float64 values; for ``conv3x3`` ``psi``'s output, ``C = k / 9`` values per row,
  not its im2col rows: ``row_values``) in the rows x rows form (``rows_form`` and ``n < k``,
  :mod:`common.science.row_gram`), else ``P`` and ``X`` (``k (k + d)``), and the zero-output block's ``U_l`` (``k d``
  values of the model's dtype); and, one place at a time, a batch's statistics while they are pooled (``2 k^2 + k
  d`` in the ``k x k`` form, with the structured conv route's block sums) or the factorisation (:data:`SOLVE_COPIES`
  ``k x k`` matrices: the Cholesky factor, the inverse and its square for the certificate, or the eigenvectors and
  LAPACK's workspace; :data:`ROWS_COPIES` ``n x n`` ones in the rows form);
- with ``contributions`` (App. G), per place the running mean, the fixed direction and the queued examples of
  :class:`common.science.projection.ContributionMoments` (``k d`` values each), and the result's ``C_l``;
- the model's activations: ``activation_bytes`` per example (measured by the caller on one example) times the
  examples of one pass, and the states and their gradients at the places.

:func:`available_bytes` is the least of the machine's available memory (``MemAvailable`` in ``/proc/meminfo``), the
process's address-space limit (``RLIMIT_AS``, less the address space it already maps, ``VmSize``) and its cgroup's
``memory.max`` (cgroup v2, less ``memory.current``; ``max``: none); on a CUDA device, the device's free memory.
Linux only; elsewhere the limits it cannot read are left out (None when none is known).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

import torch

from common.science.projection import BLOCK_ELEMENTS, PAIR_BUFFER

F64 = 8  # bytes per float64 value
SOLVE_COPIES = 5  # k x k matrices alive while one place is factorised (module docstring)
ROWS_COPIES = 8  # n x n ones in the rows form: psi_pad^T psi_pad (<= 5.1 n^2 at 4 x 4 maps), K, a shifted view
MEMINFO = Path("/proc/meminfo")
STATUS = Path("/proc/self/status")
CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class PlaceSize:
    """One place's sizes: ``k`` tangent features, width ``d``, pooled gradient rows, the rows of one pass and the
    state's bytes per example."""

    name: str
    k: int
    d: int
    rows: int  # pooled: examples x rows per example
    pass_rows: int  # rows of the largest forward/backward pass (batch or sub-batch)
    state_bytes: int  # bytes of the state z_l of one example
    row_values: int = 0  # values of Psi the rows form keeps per row (0: k; conv3x3 keeps psi's C = k / 9)
    dtype_bytes: int = 4  # bytes per value of the model's dtype (the zero-output block's U_l)

    def rows_form(self, allowed: bool = True) -> bool:
        return allowed and self.rows < self.k


def exact_bytes(place: PlaceSize, rows_form: bool) -> tuple[int, int]:
    """``(held, transient)`` bytes of one place's exact statistics: held from its first batch to the end, transient
    while a batch is pooled or the place is factorised (module docstring)."""
    k, d, n, b = place.k, place.d, place.rows, place.pass_rows
    block = place.dtype_bytes * k * d  # the zero-output block's U_l (psi), kept; V_l only while it is made
    if place.rows_form(rows_form):
        held = F64 * n * ((place.row_values or k) + d) + block
        batch = (F64 + place.dtype_bytes) * b * (place.row_values or k) + 2 * F64 * b * d + block
        solve = held + F64 * (ROWS_COPIES * n * n + 2 * n * d)  # the rows joined once, K, its factors
        return held, max(batch, solve)
    held = F64 * k * (k + d) + block
    batch = F64 * (2 * k * k + k * d + (b * (k + d) if rows_form else 0))
    solve = F64 * (SOLVE_COPIES * k * k + k * d)
    if rows_form:  # the rows kept so far are folded into P and X once they reach k
        batch = max(batch, F64 * 2 * k * (k + d))
    return held, max(batch, solve)


def contribution_bytes(place: PlaceSize, direction: bool) -> tuple[int, int]:
    """``(held, transient)`` bytes of one place's App. G moments (module docstring)."""
    kd = place.k * place.d
    pair_buffer = max(2, min(PAIR_BUFFER, BLOCK_ELEMENTS // (2 * kd)))
    held = F64 * kd * (2 + (1 if direction else 0) + 3 * pair_buffer)  # mean, C_l, direction, queue and pairs
    held += place.dtype_bytes * kd  # the zero-output block's U_l
    return held, F64 * 3 * max(kd, place.pass_rows * max(place.k, place.d))


def probe_bytes(
    places: list[PlaceSize],
    *,
    exact: bool = False,
    rows_form: bool = True,
    contributions: bool = False,
    direction: bool = False,
    activation_bytes: int = 0,
    pass_examples: int = 1,
) -> int:
    """The estimated peak of one probe (module docstring): what every place holds, the largest transient, and the
    activations of one pass of ``pass_examples`` examples."""
    held, transient = 0, 0
    for place in places:
        for on, sizes in (
            (exact, exact_bytes(place, rows_form)),
            (contributions, contribution_bytes(place, direction)),
        ):
            if on:
                held, transient = held + sizes[0], max(transient, sizes[1])
    states = sum(2 * p.state_bytes for p in places) * pass_examples  # z_l and dL/dz_l at every place
    return held + transient + activation_bytes * pass_examples + states


def _meminfo_available() -> int | None:
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _address_space_left() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        line = next(x for x in STATUS.read_text().splitlines() if x.startswith("VmSize:"))
        mapped = int(line.split()[1]) * 1024
    except (OSError, StopIteration, ValueError, IndexError):
        mapped = 0
    return max(soft - mapped, 0)


def _cgroup_left() -> int | None:
    try:
        limit = (CGROUP / "memory.max").read_text().strip()
    except OSError:
        return None
    if limit == "max":
        return None
    try:
        used = int((CGROUP / "memory.current").read_text().strip())
    except (OSError, ValueError):
        used = 0
    return max(int(limit) - used, 0)


def available_bytes(device: torch.device | str | None = None) -> tuple[int | None, str]:
    """``(bytes, what sets them)``: the least of the limits of the module docstring (None: none could be read)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0]), f"the free memory of {device}"
    found = [
        (_meminfo_available(), "the machine's available memory (MemAvailable)"),
        (_address_space_left(), "the process's address-space limit (ulimit -v)"),
        (_cgroup_left(), "the cgroup's memory.max"),
    ]
    known = [(b, what) for b, what in found if b is not None]
    return min(known) if known else (None, "unknown")
