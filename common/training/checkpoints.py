"""A run's resumable checkpoint and final weights, and the end of its lifecycle (with :mod:`common.runs.run_store`).

- :func:`resume_run`: the checkpoint of a killed run applied to its model and optimizer (read by rank 0 only:
  :func:`common.training.parallel.resume`), its metrics lines after that checkpoint's epoch dropped (a fresh start:
  all of them), so the resumed run trains those epochs again and ends with bit-identical weights on the CPU;
- :data:`WEIGHTS`: the final weights ``model.pt`` of a run, written by :func:`save_weights` and read by
  :func:`load_weights`;
- :func:`finish_run`: ``result.json`` last (the run is finished), then the checkpoint dropped.

The checkpoint itself (model, optimizer, schedule, RNG states, epoch) is written after a round by
:func:`common.training.loop.train`.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from torch import nn

from common.errors import UserError
from common.runs import atomic, record_io, run_store
from common.training.parallel import rank, resume

WEIGHTS = "model.pt"  # final weights of a finished run: {"model": state_dict}


def resume_run(
    run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer, *, shard: bool, device: torch.device
) -> dict | None:
    """The checkpoint of ``run_dir`` applied to ``model`` and ``optimizer`` (None: there is none, a fresh start), the
    metrics lines of epochs after it dropped; under torch.distributed only rank 0 touches the metrics."""
    main = rank() == 0
    if main:  # a crash mid-append left a torn last line: cut it off once, before the lines are counted
        record_io.repair_jsonl(run_dir / run_store.METRICS)
    resumed = resume(run_dir, model, optimizer, shard=shard, device=device)
    if resumed is None and main:
        truncate_metrics(run_dir, 0)  # a fresh start (e.g. after a deleted checkpoint): no earlier epochs remain
    if resumed is not None and main:
        truncate_metrics(run_dir, resumed["epoch"])
    return resumed


def truncate_metrics(run_dir: Path, epochs_done: int) -> None:
    """Drop metric lines of epochs after the checkpoint (written just before a crash)."""
    records = run_store.read_metrics(run_dir)
    kept = [r for r in records if r.get("epoch", 0) <= epochs_done]
    if len(kept) != len(records):
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept)
        atomic.atomic_write_bytes(Path(run_dir) / run_store.METRICS, text.encode())


def save_weights(run_dir: Path, weights: dict) -> None:
    """The final weights (a full ``state_dict``) in ``run_dir/model.pt``, on the CPU."""
    run_store.save_checkpoint(run_dir / WEIGHTS, {"model": {k: v.cpu() for k, v in weights.items()}})


def finish_run(run_dir: str | Path, result: dict, *, keep_checkpoint: bool = False) -> None:
    """Write ``result.json`` (last: the run is finished), then drop the resumable checkpoint."""
    run_store.write_result(run_dir, result)
    if not keep_checkpoint:
        with contextlib.suppress(FileNotFoundError):
            run_store.checkpoint_path(run_dir).unlink()


def load_weights(run_dir: str | Path, map_location="cpu") -> dict:
    """The final ``state_dict`` a finished run saved with :func:`train`.

    A missing or unreadable ``model.pt`` is a :class:`UserError` whose fix is to delete the whole run
    directory: deleting ``model.pt`` alone would leave ``result.json`` marking the run finished.
    """
    path = Path(run_dir) / WEIGHTS
    fix = f"delete the run directory {run_dir} and rerun the command that trained it (it trains that run again)"
    if not path.is_file():
        raise UserError(f"{path} is missing from a finished run; {fix}")
    state = run_store.load_checkpoint(path, map_location, fix=fix)
    if not isinstance(state.get("model"), dict):
        raise UserError(f"{path} holds no model weights; {fix}")
    return state["model"]
