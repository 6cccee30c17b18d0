"""What breaks only on GPU clusters (issue 23), checked on the CPU: two gloo processes, fake environments, spies.

The two-process checks share one pair of processes (:func:`two_ranks`, the scenarios of
``tests/helpers/dist_jobs.py``): each test reads what its scenario saw in both. What needs a real GPU is in
``benchmarks/gpu_check.py`` and ``docs/gpu-checklist.md``.
"""

from __future__ import annotations

import datetime
import json
import logging
import socket
import time

import pytest
import torch
import torch.multiprocessing as mp
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from common.errors import UserError
from common.experiments.pythia_cpt import cpt_configs
from common.runs import run_store
from common.training import distributed
from tests.helpers.dist_jobs import scenarios_worker, write_big_checkpoint

SCENARIO_TIMEOUT_S = 900  # both processes, every scenario (about 20 s; 52 s at load 8 on 2 cores): a hang guard only


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """``{rank: {scenario: what it saw}}`` from one pair of gloo processes started at once."""
    out = tmp_path_factory.mktemp("two-ranks")
    torch.manual_seed(0)
    GPTNeoXForCausalLM(
        GPTNeoXConfig(
            vocab_size=257,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
        )
    ).save_pretrained(out / "hub-model")
    write_big_checkpoint(out)
    context = mp.start_processes(
        scenarios_worker, args=(free_port(), str(out)), nprocs=2, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + SCENARIO_TIMEOUT_S
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the two processes did not finish within {SCENARIO_TIMEOUT_S} s: a collective hangs")
    return {r: json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)}


def seen(two_ranks, scenario: str) -> list[dict]:
    """What both processes saw in ``scenario`` (rank 0, rank 1); a scenario that raised fails here with its traceback."""
    found = [two_ranks[r][scenario] for r in (0, 1)]
    for r, f in enumerate(found):
        assert "error" not in f, f"rank {r} in {scenario}:\n{f['error']}"
    return found


# ----------------------------------------------------------------------------- 2. NCCL timeouts, rank-0 windows
def test_validation_split_over_two_processes_equals_one_process(two_ranks):
    for r, f in enumerate(seen(two_ranks, "evaluation_split")):
        for way in ("split", "ddp"):
            assert f[way]["n"] == f["alone"]["n"] and f[way]["acc"] == f["alone"]["acc"], (r, way)
            assert f[way]["loss"] == pytest.approx(f["alone"]["loss"], rel=1e-12), (
                r,
                way,
            )  # float64 sums, another order
        assert f["forwards"] == 3, r  # ceil(5 / 2): rank 1 repeats one of its 2 batches, uncounted


def test_init_distributed_passes_the_timeout_binds_the_gpu_and_opens_a_cpu_group_to_wait_in(monkeypatch):
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(distributed.TIMEOUT_ENV, raising=False)
    calls = {}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kwargs: calls.update(init=kwargs))
    monkeypatch.setattr(distributed.dist, "new_group", lambda **kwargs: calls.update(group=kwargs) or "cpu-group")
    info = distributed.init_distributed("cuda")
    assert info.device == "cuda:1" and calls["init"]["backend"] == "nccl"
    assert calls["init"]["device_id"] == torch.device("cuda", 1)
    assert calls["init"]["timeout"] == datetime.timedelta(minutes=distributed.DEFAULT_TIMEOUT_MIN)
    assert calls["group"] == {"backend": "gloo", "timeout": datetime.timedelta(minutes=distributed.WAIT_TIMEOUT_MIN)}
    monkeypatch.setenv(distributed.TIMEOUT_ENV, "90")
    distributed.init_distributed("cuda")
    assert calls["init"]["timeout"] == datetime.timedelta(minutes=90)
    monkeypatch.setenv(distributed.TIMEOUT_ENV, "soon")
    with pytest.raises(UserError, match="DS_DIST_TIMEOUT_MIN"):
        distributed.init_distributed("cuda")
    distributed.destroy_distributed()


def test_fewer_processes_than_visible_gpus_on_a_node_is_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="common.training.distributed"):
        assert distributed.warn_idle_devices("4", 8, "cuda")
        assert not distributed.warn_idle_devices("8", 8, "cuda") and not distributed.warn_idle_devices(None, 8, "cuda")
    [record] = caplog.records
    assert "4 processes on this node but 8 visible cuda devices: 4 stay idle" in record.getMessage()


def test_a_non_finite_loss_on_one_process_stops_every_process_at_the_same_step(two_ranks):
    rank0, rank1 = seen(two_ranks, "non_finite_on_one_rank")
    assert rank0["raised"] == rank1["raised"] == "NonFiniteLossError"
    assert "became nan at step 3 " in rank1["message"]
    assert "became non-finite in another process at step 3 " in rank0["message"]


def test_the_hub_model_is_downloaded_once_per_node_while_the_others_wait(two_ranks):
    rank0, rank1 = seen(two_ranks, "hub_download_once_per_node")
    assert rank0["calls_in_main"] == rank1["calls_in_main"] == 0  # 04's main() under torchrun leaves it to the job
    download = [c for c in rank0["calls"] if not c["local_files_only"]]
    assert len(download) == 1 and rank1["calls"] and all(c["local_files_only"] for c in rank1["calls"])
    assert min(c["start"] for c in rank1["calls"]) >= download[0]["end"]  # rank 1 loaded only after rank 0's download


# ----------------------------------------------------------------------------- 4. resume and checkpoint memory
@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_a_resumed_run_reads_its_checkpoint_on_rank_0_only_and_ends_like_the_uninterrupted_run(two_ranks, mode):
    rank0, rank1 = seen(two_ranks, f"resume_{mode}")
    assert rank0["loads"] == [False] and rank1["loads"] == []  # rank 0 reads it (on the CPU, not memory-mapped)
    assert rank0["bit_identical"] and rank0["steps"] == rank1["steps"] == 3
    assert rank0["val_loss"][0] == rank0["val_loss"][1] == rank1["val_loss"][1]
    assert rank0["ddp_bucket_view"] == ([True] if mode == "ddp" else [])  # DDP's gradients are views into its buckets


def test_resuming_on_two_processes_holds_the_checkpoint_once_and_drops_it(two_ranks):
    """Peak RSS while resume() applies a ~100 MB AdamW checkpoint (8.4M float32 parameters), above the RSS before it.

    Rank 1 never holds the checkpoint: it grows by its own optimizer state (2 x the parameters), received
    one tensor at a time, where loading the file would cost 3 x. Rank 0 holds it once while applying it
    (on the CPU its optimizer keeps the loaded tensors); afterwards no tensor of its model state is alive.
    Margin: half the parameters' bytes, ~17 MB, against RSS noise of a few MB.
    """
    rank0, rank1 = seen(two_ranks, "resume_memory")
    params = rank0["param_bytes"]
    assert rank0["epoch"] == rank1["epoch"] == 1
    assert rank1["optimizer_state_bytes"] == 2 * params and not rank1["loaded"]
    assert rank1["extra_kib"] * 1024 < rank1["optimizer_state_bytes"] + params / 2, rank1
    assert rank1["extra_kib"] * 1024 > rank1["optimizer_state_bytes"] - params / 2, rank1  # the measurement sees it
    assert rank0["loaded"] and rank0["alive_after"] == 0
    assert rank0["extra_kib"] * 1024 < 3 * params + params / 2, rank0


def test_checkpoints_are_written_straight_into_the_atomic_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    run_store.save_checkpoint(path, {"epoch": 1})
    targets = []
    original = torch.save

    def torn(obj, f, *args, **kwargs):
        targets.append(type(f).__name__)
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(OSError, match="disk full"):
        run_store.save_checkpoint(path, {"epoch": 2})
    monkeypatch.setattr(torch, "save", original)
    assert targets == ["BufferedWriter"]  # the temp file itself, not an in-memory copy of the whole checkpoint
    assert run_store.load_checkpoint(path) == {"epoch": 1} and [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


# ----------------------------------------------------------------------------- 5. and 8. FSDP
def test_fsdp_shards_the_cpu_model_before_anything_moves_it(two_ranks):
    for r, f in enumerate(seen(two_ranks, "fsdp_placement")):
        assert not [m for m in f["moves"] if not m["sharded"]], (r, f["moves"])  # no full-size copy to the device
        assert f["all_dtensors"] and f["mesh_device"] == "cpu", r
        assert 0.45 < f["local_fraction"] <= 0.6, (r, f["local_fraction"])  # each process holds about half


def test_fsdp_bf16_parameters_compute_in_bf16_keep_float32_shards_and_say_so(two_ranks):
    for r, f in enumerate(seen(two_ranks, "fsdp_bf16_parameters")):
        assert f["forward_dtypes"] == ["torch.bfloat16"] and f["sharded_dtypes"] == ["torch.float32"], (r, f)
        assert f["fsdp_param_dtype"] == f["final_eval_dtype"] == "bfloat16" and f["settings_recorded"], (r, f)


def test_fsdp_bf16_is_recorded_in_the_config_only_when_asked_for_and_never_in_the_identity():
    plain, sharded, bf16 = (
        cpt_configs(preset="smoke", **kw) for kw in ({}, {"fsdp": True}, {"fsdp": True, "fsdp_bf16": True})
    )
    assert all("fsdp_bf16_params" not in c["runtime"] for c in plain + sharded)
    assert all(c["runtime"]["fsdp_bf16_params"] is True for c in bf16)
    assert [run_store.config_hash(c) for c in bf16] == [run_store.config_hash(c) for c in plain]
    with pytest.raises(UserError, match="fsdp_bf16=True: .*needs fsdp"):
        cpt_configs(preset="smoke", fsdp_bf16=True)
