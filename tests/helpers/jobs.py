"""Small job functions and a demo command line for the launcher, CLI and SLURM tests.

They live in an importable module (not a test file) because submitit pickles jobs by reference.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import torch

from common.launch.cli import comma_ints, entry_point, make_parser, parse_args
from common.launch.launcher import launch_from_args
from common.runs import run_store
from common.runs.run_store import make_specs
from common.training.distributed import destroy_distributed, init_distributed

HOLD_S = 600  # the longest a held job waits for its test: a guard, the test releases (or interrupts) it in seconds


def hold_until(done, what: str) -> None:
    """Wait, polling, until ``done()``: the state a test needs is held, never raced (issue 59: no test may depend
    on the machine's speed). After :data:`HOLD_S` it raises, so a test that never releases fails instead of hanging."""
    deadline = time.monotonic() + HOLD_S
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"held {HOLD_S} s waiting for {what}; the test never released it")
        time.sleep(0.05)


def square_job(spec) -> dict:
    """Record ``x`` and ``x**2``; one metrics line per execution (to count re-runs).

    ``config["runtime"]["gate"]`` (optional): the job waits until that file exists, so a test holds it queued or
    running as long as it needs; ``config["runtime"]["sleep_s"]`` (optional) keeps the job busy that long first.
    """
    path = run_store.prepare_run(spec.out, spec.config)
    run_store.append_metrics(path, {"x": spec.config["x"], "pid": os.getpid()})
    runtime = spec.config.get("runtime", {})
    if runtime.get("gate"):
        hold_until(Path(runtime["gate"]).exists, f"the gate file {runtime['gate']}")
    time.sleep(runtime.get("sleep_s", 0))
    result = {"x": spec.config["x"], "y": spec.config["x"] ** 2}
    run_store.write_result(path, result)
    return result


def failing_job(spec) -> dict:
    run_store.prepare_run(spec.out, spec.config)
    raise RuntimeError(f"deliberate failure in {spec.config['name']}")


def device_report_job(spec) -> dict:
    """Record the devices this job's process was given, its number of processes, and when it ran.

    ``config["runtime"]["sleep_s"]`` keeps it busy that long; only rank 0 writes the run.
    """
    start = time.time()
    time.sleep(spec.config.get("runtime", {}).get("sleep_s", 0))
    result = {
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "npu": os.environ.get("ASCEND_RT_VISIBLE_DEVICES"),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "start": start,
        "end": time.time(),
    }
    if os.environ.get("RANK", "0") == "0":
        run_store.write_result(run_store.prepare_run(spec.out, spec.config), result)
    return result


def demo_configs(xs, sleep_s: float = 0.0, gate: str | None = None) -> list[dict]:
    """Configs of :func:`square_job`; ``sleep_s`` and ``gate`` are runtime, not identity."""
    given = {k: v for k, v in (("sleep_s", sleep_s), ("gate", gate)) if v}
    runtime = {"runtime": given} if given else {}
    return [{"experiment": "demo", "name": f"x{x}", "x": x, **runtime} for x in xs]


@entry_point
def demo_main(argv=None) -> int:
    parser = make_parser("demo sweep for the CLI tests")
    parser.add_argument("--xs", type=comma_ints, default=[1, 2, 3])
    parser.add_argument("--sleep-s", type=float, default=0.0, help="seconds each job sleeps")
    parser.add_argument("--gate", default=None, help="each job waits until this file exists")
    args = parse_args(parser, argv)
    specs = make_specs(demo_configs(args.xs, args.sleep_s, args.gate), args.out)
    results = launch_from_args(square_job, specs, args, job_kind="probe")
    if results is not None:
        print("results:", " ".join(f"{r['x']}->{r['y']}" for r in results))
    return 0


# ----------------------------------------------------------------------------- checkpointing job
def epoch_configs(seeds, *, epochs: int = 4, hold_after: int = 0) -> list[dict]:
    """Configs of :func:`epoch_train_job`; ``hold_after`` is runtime, not identity."""
    return [
        {"experiment": "epochs", "name": f"seed{s}", "seed": s, "epochs": epochs, "runtime": {"hold_after": hold_after}}
        for s in seeds
    ]


def hold_for_a_signal(epoch: int) -> None:
    """Hold a first execution after ``epoch``'s checkpoint until a signal ends the process (submitit's preemption
    signal: ``checkpoint()``, requeue, exit), so a test interrupts it mid-run however fast or slow the machine."""
    print(f"holding after epoch {epoch} for a signal", flush=True)
    hold_until(lambda: False, f"a signal after epoch {epoch}")


def epoch_train_job(spec) -> dict:
    """Train a tiny MLP for ``epochs`` epochs, checkpointing after each; resume from the last one.

    Deterministic: the data and each epoch's batch order come from generators seeded by
    (seed, epoch), so an interrupted-and-resumed run ends with bit-identical weights. Each
    first execution (not a resumed one) holds after epoch ``runtime.hold_after`` (0: never) until a signal ends it
    (:func:`hold_for_a_signal`: a test interrupts it mid-run); a resume prints ``resumed from epoch E`` to the job's
    stdout.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same reduction order in every process
    try:
        return _epoch_train(spec)
    finally:
        torch.set_num_threads(threads)


def _epoch_train(spec) -> dict:
    cfg = spec.config
    path = run_store.prepare_run(spec.out, cfg)
    torch.manual_seed(cfg["seed"])
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(cfg["seed"])
    x = torch.randn(256, 8, generator=data)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    start, loss = 0, float("nan")
    state = run_store.resume_state(path)
    resumed = state is not None
    if resumed:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, loss = state["epoch"], state["loss"]
        print(f"resumed from epoch {start}", flush=True)
    for epoch in range(start, cfg["epochs"]):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1000 * cfg["seed"] + epoch))
        for batch in order.split(32):
            optimizer.zero_grad()
            batch_loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch])
            batch_loss.backward()
            optimizer.step()
            loss = batch_loss.item()
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1, "loss": loss}
        run_store.save_checkpoint(run_store.checkpoint_path(path), state)
        run_store.append_metrics(path, {"epoch": epoch + 1, "loss": loss, "pid": os.getpid()})
        print(f"epoch {epoch + 1} of {cfg['epochs']} done", flush=True)
        if not resumed and epoch + 1 == cfg.get("runtime", {}).get("hold_after"):
            hold_for_a_signal(epoch + 1)
    result = {"epochs": cfg["epochs"], "loss": loss, "weights_sha256": weights_digest(model.state_dict())}
    run_store.write_result(path, result)
    return result


def weights_digest(state_dict: dict) -> str:
    """sha256 over every tensor's bytes, in key order: equal digests mean bit-identical weights."""
    digest = hashlib.sha256()
    for key in sorted(state_dict):
        digest.update(key.encode())
        digest.update(state_dict[key].detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


# ----------------------------------------------------------------------------- distributed job
def distributed_job(spec) -> dict:
    """Every rank joins the process group and all-reduces ``rank + 1``; rank 0 records the sum."""
    info = init_distributed("cpu")
    value = torch.tensor([float(info.rank + 1)])
    if info.world_size > 1:
        torch.distributed.all_reduce(value)
    result = {"world_size": info.world_size, "sum": value.item(), "backend": info.backend}
    if info.is_main:
        run_store.write_result(run_store.prepare_run(spec.out, spec.config), result)
    destroy_distributed()
    return result


def rank_failure_job(spec) -> dict:
    """Rank 1 raises at once; rank 0 stays busy ``config["hang_s"]`` seconds, as a rank waiting
    for the failed one would (in a collective, or through long rank-0 work)."""
    if os.environ.get("RANK", "0") != "0":
        raise RuntimeError(f"deliberate failure on rank {os.environ['RANK']}")
    time.sleep(spec.config["hang_s"])
    result = {"hung": spec.config["hang_s"]}
    run_store.write_result(run_store.prepare_run(spec.out, spec.config), result)
    return result
