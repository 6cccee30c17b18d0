"""Two-process (gloo) scenarios for tests/launch/test_gpu_cluster_paths.py: what a GPU cluster's multi-process jobs do, on the CPU.

In an importable module: ``torch.multiprocessing`` starts a fresh interpreter for each process,
which imports it again. :func:`scenarios_worker` runs every scenario of
:data:`SCENARIOS` in one pair of processes (one start-up for all; the memory scenario first, while
the processes are fresh) and writes what each process saw to ``<out>/rank<r>.json``. A collective
that hangs fails after ``DS_DIST_TIMEOUT_MIN`` (here 1 minute).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import time
import traceback
import weakref
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import torch
from torch import nn

from common.experiments import pythia_cpt_models
from common.experiments.pythia_cpt_config import CPTModel
from common.runs import run_store
from common.training import device as devices
from common.training import parallel
from common.training.checkpoints import load_weights
from common.training.distributed import destroy_distributed, env_info, init_distributed
from common.training.epoch import NonFiniteLossError
from common.training.evaluation import evaluate
from common.training.loop import train
from common.training.parallel import is_sharded, place_model, resume
from common.training.recipes import AdamWRecipe, TrainSettings

CPU = torch.device("cpu")
VOCAB = 11


class Blocks(nn.Module):
    """Token ids ``(B, T)`` -> logits ``(B, T, V)``: an embedding, ``depth`` residual tanh blocks (``blocks``: FSDP units), a head."""

    def __init__(self, width: int = 8, depth: int = 2, vocab: int = VOCAB) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth))
        self.head = nn.Linear(width, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.embed(x)
        for block in self.blocks:
            z = z + block(z)
        return self.head(z)


def token_batches(n: int, seed: int = 0, batch: int = 2, length: int = 5) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randint(0, VOCAB, (batch, length), generator=g), torch.randint(0, VOCAB, (batch, length), generator=g))
        for _ in range(n)
    ]


def join_as(rank: int, port: int, world: int = 2) -> None:
    """torchrun's variables for ``rank`` of ``world`` on one node, then :func:`init_distributed` (gloo)."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        DS_DIST_TIMEOUT_MIN="1",
    )
    torch.set_num_threads(1)
    init_distributed("cpu")


# ----------------------------------------------------------------------------- scenarios
def evaluation_split(rank: int, out: Path) -> dict:
    """Five batches over two processes (3 forwards each, one of rank 1's a repeat): the same numbers as one process."""
    torch.manual_seed(0)
    model = Blocks()
    forwards = []
    model.register_forward_pre_hook(lambda module, args: forwards.append(1))
    batches = token_batches(5)
    alone = evaluate(model, batches, CPU, split=False)
    forwards.clear()
    split = evaluate(model, batches, CPU)
    count = len(forwards)
    ddp = evaluate(nn.parallel.DistributedDataParallel(model), batches, CPU)  # a DDP forward is a collective
    return {"alone": alone, "split": split, "ddp": ddp, "forwards": count}


class NaNOnRank(nn.Module):
    """:class:`Blocks` whose training outputs turn NaN on ``rank`` from its ``after``-th training forward on."""

    def __init__(self, rank: int, after: int) -> None:
        super().__init__()
        self.inner, self.rank, self.after, self.calls = Blocks(), rank, after, 0

    def forward(self, x):
        out = self.inner(x)
        if self.training:
            self.calls += 1
            if torch.distributed.get_rank() == self.rank and self.calls > self.after:
                out = out * float("nan")
        return out


def non_finite_on_one_rank(rank: int, out: Path) -> dict:
    """Rank 1's loss turns NaN at its 4th step; both processes must stop with the same step named."""
    torch.manual_seed(0)
    settings = TrainSettings(AdamWRecipe(steps=8, lr=0.01, eval_interval=4), nan_check_every=2)
    try:
        train(NaNOnRank(rank=1, after=3), token_batches(4), {}, run_dir=out / "nan", settings=settings, device=CPU)
    except NonFiniteLossError as exc:
        return {"raised": type(exc).__name__, "message": str(exc)}
    return {"raised": None}


def fsdp_placement(rank: int, out: Path) -> dict:
    """Every ``Module.to(<device>)`` during :func:`place_model` with ``fsdp``, and whether the parameters were DTensors then."""
    moves = []
    original = nn.Module.to

    def spy(self, *args, **kwargs):
        if any(isinstance(a, torch.device | str) for a in (*args, kwargs.get("device"))):
            moves.append({"module": type(self).__name__, "sharded": is_sharded(self)})
        return original(self, *args, **kwargs)

    torch.manual_seed(0)
    model = Blocks(width=8, depth=3)
    full = {name: p.numel() for name, p in model.named_parameters()}
    nn.Module.to = spy
    try:
        place_model(model, CPU, TrainSettings(AdamWRecipe(steps=1, lr=0.01, eval_interval=1), fsdp=True))
    finally:
        nn.Module.to = original
    params = dict(model.named_parameters())
    return {
        "moves": moves,
        "all_dtensors": all(type(p).__name__ == "DTensor" for p in params.values()),
        "mesh_device": params["head.weight"].device_mesh.device_type,
        "local_fraction": sum(p.to_local().numel() for p in params.values()) / sum(full.values()),
    }


def resume_reads_once(rank: int, out: Path, fsdp: bool) -> dict:
    """An uninterrupted run, and one killed after epoch 1 then resumed (a fresh init: the checkpoint must win).

    Records every ``torch.load`` of the checkpoint in this process, and (rank 0) whether the two
    runs' final weights are bit-identical.
    """
    loads = []
    original = torch.load

    def spy(f, *args, **kwargs):
        if Path(str(f)).name == run_store.CHECKPOINT:
            loads.append(kwargs.get("mmap", False))
        return original(f, *args, **kwargs)

    settings = TrainSettings(AdamWRecipe(steps=3, lr=0.01, eval_interval=1), fsdp=fsdp)
    batches = token_batches(1, seed=rank)  # each process its own batch: DDP/FSDP average their gradients

    def run(name: str, seed: int, kill_after: int | None = None) -> dict:
        def stop(epoch: int, record: dict) -> None:
            if epoch == kill_after:
                raise KeyboardInterrupt

        torch.manual_seed(seed)
        return train(
            Blocks(),
            batches,
            {"val": token_batches(3)},
            run_dir=out / name,
            settings=settings,
            device=CPU,
            on_epoch_end=stop,
        )

    wrapped = []
    original_ddp = parallel.DistributedDataParallel

    class RecordingDDP(original_ddp):
        def __init__(self, *args, **kwargs):
            wrapped.append(kwargs.get("gradient_as_bucket_view", False))
            super().__init__(*args, **kwargs)

    tag = "fsdp" if fsdp else "ddp"
    parallel.DistributedDataParallel = RecordingDDP
    try:
        whole = run(f"{tag}-whole", 0)
    finally:
        parallel.DistributedDataParallel = original_ddp
    with contextlib.suppress(KeyboardInterrupt):
        run(f"{tag}-resumed", 0, kill_after=1)
    torch.load = spy
    try:
        resumed = run(f"{tag}-resumed", 123)
    finally:
        torch.load = original
    found = {
        "loads": loads,
        "val_loss": [whole["val_loss"], resumed["val_loss"]],
        "steps": resumed["steps"],
        "ddp_bucket_view": wrapped,
    }
    if rank == 0:
        a, b = load_weights(out / f"{tag}-whole"), load_weights(out / f"{tag}-resumed")
        found["bit_identical"] = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return found


def fsdp_bf16_parameters(rank: int, out: Path) -> dict:
    """FSDP2 with bf16 parameters where bf16 autocast runs (faked on the CPU): the dtypes a forward sees, and the records."""
    native = devices.bf16_supported
    devices.bf16_supported = lambda device: True  # bf16 autocast on the CPU, as on an A100
    try:
        torch.manual_seed(0)
        model = Blocks()
        seen = set()
        model.blocks[0][0].register_forward_pre_hook(
            lambda module, args: seen.add(str(module.weight.dtype))
        )  # inside the unit
        settings = TrainSettings(AdamWRecipe(steps=2, lr=0.01, eval_interval=1), fsdp=True, fsdp_bf16_params=True)
        summary = train(
            model, token_batches(1), {"val": token_batches(1)}, run_dir=out / "bf16", settings=settings, device=CPU
        )
    finally:
        devices.bf16_supported = native
    return {
        "forward_dtypes": sorted(seen),
        "sharded_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
        "fsdp_param_dtype": summary["fsdp_param_dtype"],
        "final_eval_dtype": summary["final_eval_dtype"],
        "settings_recorded": settings.fsdp_bf16_params,
    }


def hub_download_once_per_node(rank: int, out: Path) -> dict:
    """``snapshot_download`` of a Hub model under torchrun: who calls it, whether from the cache only, and when."""
    calls = []

    def fake_snapshot_download(repo, revision=None, allow_patterns=None, local_files_only=False):
        start = time.time()
        if not local_files_only:
            time.sleep(1.0)  # a download takes a while; the others must wait for it
        calls.append({"local_files_only": local_files_only, "start": start, "end": time.time()})
        return str(out / "hub-model")

    original = huggingface_hub.snapshot_download
    huggingface_hub.snapshot_download = fake_snapshot_download
    try:
        config = {"model": {"model": "tests/tiny-neox", "revision": "step7", "tiny": None}, "seed": 0}
        pythia_cpt_models.fetch_model(
            config
        )  # what 04_pythia_cpt.py's main() does in every process: nothing under torchrun
        before_job = len(calls)
        info = env_info()
        run = SimpleNamespace(model=CPTModel("tests/tiny-neox", "step7", None), seed=0)  # what the job reads
        pythia_cpt_models.fetch_on_each_node(run, info)
        pythia_cpt_models.load_run_model(run, out, hash_weights=False, local_only=info.world_size > 1)
    finally:
        huggingface_hub.snapshot_download = original
    return {"calls_in_main": before_job, "calls": calls}


def big_blocks() -> Blocks:
    """~8.4M parameters (8 blocks of width 1024): weights 34 MB, an AdamW checkpoint ~100 MB, well above RSS noise."""
    return Blocks(width=1024, depth=8, vocab=64)


BIG_SETTINGS = TrainSettings(AdamWRecipe(steps=2, lr=1e-3, eval_interval=1))


def big_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randint(0, 64, (1, 4), generator=g), torch.randint(0, 64, (1, 4), generator=g))]


def kib(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (the peak since the last :func:`reset_peak`) of this process, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """Restart this process's peak resident memory (``VmHWM``) at its current size (Linux >= 4.0)."""
    Path("/proc/self/clear_refs").write_text("5")


def resume_memory(rank: int, out: Path) -> dict:
    """Peak RSS while :func:`common.training.parallel.resume` applies ``<out>/big``'s checkpoint (written by one process), above the RSS before.

    Also whether any tensor of the loaded checkpoint's model state outlives the resume.
    """
    torch.manual_seed(1)
    model = big_blocks()
    optimizer = BIG_SETTINGS.recipe.make_optimizer(model)
    alive = []
    original = run_store.load_checkpoint

    def spy(*args, **kwargs):
        state = original(*args, **kwargs)
        alive.extend(weakref.ref(t) for t in state["model"].values())
        return state

    gc.collect()
    run_store.load_checkpoint = spy
    try:
        reset_peak()
        before = kib("VmRSS")
        info = resume(out / "big", model, optimizer, shard=False, device=CPU)
        peak = kib("VmHWM")
    finally:
        run_store.load_checkpoint = original
    gc.collect()
    return {
        "extra_kib": peak - before,
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "epoch": info["epoch"],
        "loaded": bool(alive),
        "alive_after": sum(r() is not None for r in alive),
        "optimizer_state_bytes": sum(
            t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values() if t.dim() > 0
        ),
    }


def write_big_checkpoint(out: Path) -> None:
    """One process trains :func:`big_blocks` for one of its two epochs into ``<out>/big`` and is killed: a resumable checkpoint."""

    def stop(epoch: int, record: dict) -> None:
        raise KeyboardInterrupt

    torch.manual_seed(1)
    with contextlib.suppress(KeyboardInterrupt):
        train(
            big_blocks(), big_batches(), {}, run_dir=out / "big", settings=BIG_SETTINGS, device=CPU, on_epoch_end=stop
        )


SCENARIOS = {
    "resume_memory": resume_memory,  # first: the processes' memory is fresh
    "evaluation_split": evaluation_split,
    "non_finite_on_one_rank": non_finite_on_one_rank,
    "fsdp_placement": fsdp_placement,
    "resume_ddp": lambda rank, out: resume_reads_once(rank, out, fsdp=False),
    "resume_fsdp": lambda rank, out: resume_reads_once(rank, out, fsdp=True),
    "fsdp_bf16_parameters": fsdp_bf16_parameters,
    "hub_download_once_per_node": hub_download_once_per_node,
}


def scenarios_worker(rank: int, port: int, out: str) -> None:
    """Every scenario in turn in this process (rank ``rank`` of 2); ``<out>/rank<r>.json``: ``{scenario: what it saw}``."""
    join_as(rank, port)
    found = {}
    for name, scenario in SCENARIOS.items():
        try:
            found[name] = scenario(rank, Path(out))
        except Exception:  # recorded, so that the test names the scenario; the next one still runs
            found[name] = {"error": traceback.format_exc()}
    Path(out, f"rank{rank}.json").write_text(json.dumps(found, default=str))
    destroy_distributed()
