"""common/training/distributed.py: the torchrun environment and submitit's tasks give the same process group."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common.launch.launcher import launch
from common.runs.run_store import make_specs
from common.training.distributed import DistInfo, backend_for, destroy_distributed, init_distributed
from tests.helpers.jobs import distributed_job

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SUBMITIT_EXECUTOR")


def test_backend_follows_the_device():
    assert [backend_for(d) for d in ("cuda", "npu", "cpu", torch.device("cuda:1"))] == ["nccl", "hccl", "gloo", "nccl"]
    with pytest.raises(ValueError, match="mps"):
        backend_for("mps")


def test_a_single_process_is_a_no_op(monkeypatch):
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    assert init_distributed("cpu") == DistInfo(rank=0, world_size=1, local_rank=0, backend=None)
    assert not dist.is_initialized()


def _torchrun_like_worker(rank: int, port: int, out: str) -> None:
    """What torchrun gives each process: the five variables, nothing else."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank)
    )
    os.environ.pop("SUBMITIT_EXECUTOR", None)
    info = init_distributed("cpu")
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    Path(out, f"{rank}.json").write_text(
        json.dumps({"rank": info.rank, "world_size": info.world_size, "sum": value.item()})
    )
    destroy_distributed()


def test_two_processes_with_torchrun_variables_all_reduce_over_gloo(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_torchrun_like_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    got = sorted(json.loads(p.read_text())["rank"] for p in tmp_path.glob("*.json"))
    assert got == [0, 1]
    assert {json.loads(p.read_text())["sum"] for p in tmp_path.glob("*.json")} == {3.0}


def test_submitit_tasks_export_the_same_variables_and_join_one_group(tmp_path):
    specs = make_specs([{"experiment": "dist", "name": "allreduce"}], tmp_path)
    [result] = launch(distributed_job, specs, launcher="local", executor_params={"tasks_per_node": 2, "timeout_min": 5})
    assert result == {"world_size": 2, "sum": 3.0, "backend": "gloo"}
