"""--launcher slurm against a real SLURM cluster (brought up by tests/conftest.py::slurm_cluster).

Job arrays, requeue-and-resume after submitit's preemption signal, failure reports, no double
submission, and a two-task distributed job. Every wait is bounded, so a broken cluster fails
the test instead of hanging it. No test races the machine's speed (issue 59): a job a test needs queued waits on a
gate file the test creates, and a job a test interrupts mid-run holds after its second epoch until the signal comes
(``tests/helpers/jobs.py``); the bounds are guards against hangs, far above the normal waits.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from common.errors import UserError
from common.experiments.shared.resnet_sweep import sweep_configs, train_resnet_run
from common.launch import slurm, submitit_jobs
from common.launch.launcher import default_log_folder, launch
from common.runs import record_io, run_store
from common.runs.run_store import make_specs
from common.training.checkpoints import load_weights
from tests.helpers.jobs import (
    demo_configs,
    distributed_job,
    epoch_configs,
    epoch_train_job,
    failing_job,
    rank_failure_job,
    square_job,
)
from tests.helpers.resnet_jobs import held_resnet_run

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "slurm" / "local.toml"
HELD_AFTER = 2  # the epoch after which an interrupted job's first execution waits for its signal
WAIT_S = 600  # a hang guard: every wait here normally ends within 30 s, and a loaded machine takes a few times that


def params(job_kind: str = "train", **overrides) -> dict:
    """AutoExecutor parameters from the test cluster's profile, as launch_from_args makes them."""
    resolved = slurm.resolve(slurm.load_profile(PROFILE), job_kind)
    return {**resolved.executor_params(), **overrides}


def record(spec) -> dict:
    return record_io.read_json(spec.dir / slurm.JOB_RECORD)


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


def run_demo(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from tests.helpers.jobs import demo_main; raise SystemExit(demo_main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S)


def test_smoke_sweep_runs_as_one_job_array_with_the_inline_records(tmp_path):
    inline = launch(square_job, make_specs(demo_configs([1, 2, 3]), tmp_path / "inline"))
    specs = make_specs(demo_configs([1, 2, 3]), tmp_path / "slurm")
    results = launch(square_job, specs, launcher="slurm", executor_params=params(), wait=True, wait_timeout_s=WAIT_S)
    assert results == inline
    assert [len(run_store.read_metrics(s.dir)) for s in specs] == [1, 1, 1]
    job_ids = [record(s)["job_id"] for s in specs]
    assert len({j.split("_")[0] for j in job_ids}) == 1 and all("_" in j for j in job_ids), job_ids  # one array
    array_id = job_ids[0].split("_")[0]
    # logs under the run root, and the submitted #SBATCH lines are what --dry-run prints
    for job_id in job_ids:
        assert (tmp_path / "slurm" / "submitit" / job_id / f"{job_id}_0_log.out").is_file()
    submitted = (tmp_path / "slurm" / "submitit" / array_id / f"{array_id}_submission.sh").read_text()
    preview = slurm.sbatch_preview(slurm.with_repo_on_path(params()), default_log_folder(specs), len(specs))
    assert preview and all(line in submitted.splitlines() for line in preview.splitlines()), preview


def test_submitted_runs_are_collected_by_a_rerun_with_wait_not_submitted_twice(tmp_path):
    """The jobs of the first command wait on a gate file, so they are still queued (or running) when the second
    command looks, however slow the machine; the gate opens once the second has said what it found."""
    gate = tmp_path / "gate"
    out = tmp_path / "runs"
    flags = ["--launcher", "slurm", "--slurm-profile", str(PROFILE), "--out", str(out), "--xs", "1,2,3", "--gate"]
    first = run_demo(*flags, str(gate))
    assert first.returncode == 0, first.stderr
    assert "submitted 3 runs as SLURM job array" in first.stdout and "rerun this command with --wait" in first.stdout
    assert "results:" not in first.stdout  # submitted, not waited
    report, stdout = collect_then_open(["--wait", *flags, str(gate)], gate, tmp_path / "second.err")
    assert report.startswith("submitted nothing; 0 already finished, 3 already queued"), report
    assert "results: 1->1 2->4 3->9" in stdout, stdout
    specs = make_specs(demo_configs([1, 2, 3]), out)
    assert [len(run_store.read_metrics(s.dir)) for s in specs] == [1, 1, 1]  # each job ran once


def collect_then_open(args: list[str], gate: Path, err: Path) -> tuple[str, str]:
    """Run the demo with ``args`` (a rerun with ``--wait``); once it has printed its submission report, create
    ``gate`` (the jobs it waits for then finish). Its report line and whole stdout; it must exit 0."""
    code = "import sys; from tests.helpers.jobs import demo_main; raise SystemExit(demo_main(sys.argv[1:]))"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
        lines: list[str] = []
        reader = threading.Thread(target=read_and_open, args=(proc.stdout, lines, gate), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=WAIT_S)
        finally:
            gate.touch()  # whatever happened, no job stays held
            proc.kill()
        reader.join(timeout=WAIT_S)
    assert proc.returncode == 0, err.read_text()[-3000:]
    report = next((line for line in lines if line.startswith("submitted")), "")
    return report, "".join(lines)


def read_and_open(stream, lines: list[str], gate: Path) -> None:
    for line in stream:
        lines.append(line)
        if line.startswith("submitted"):  # the report: what the rerun found is said; let the jobs finish
            gate.touch()


def test_failing_job_is_reported_with_its_log_and_not_marked_finished(tmp_path):
    specs = make_specs(demo_configs([7]), tmp_path)
    with pytest.raises(
        UserError, match=r"1 of 1 runs failed.*: x7-\w+: RuntimeError: deliberate failure in x7 \(log: .*\.err\)"
    ) as info:
        launch(failing_job, specs, launcher="slurm", executor_params=params(), wait=True, wait_timeout_s=WAIT_S)
    log_path = Path(str(info.value).rsplit("(log: ", 1)[1].rstrip(")"))
    assert "deliberate failure in x7" in log_path.read_text()
    assert not run_store.is_done(specs[0].dir)


@dataclass
class Preempted:
    """One run interrupted on SLURM (``slurm_fn`` on ``slurm_configs``) and its uninterrupted
    inline twin (``inline_fn`` on ``inline_configs``: same identity, same run directory name)."""

    inline_fn: object
    slurm_fn: object
    inline_configs: list
    slurm_configs: list
    epochs: int
    specs: list | None = None
    reference: dict | None = None
    result: dict | None = None
    epochs_at_interrupt: int = 0


@pytest.fixture(scope="module")
def preempted(tmp_path_factory, slurm_cluster) -> dict[str, Preempted]:
    """Two runs submitted together, each held after its second epoch's checkpoint and sent submitit's preemption
    signal there (``job._interrupt()``: SIGTERM then USR2), then collected by launching again with ``wait`` (which
    attaches to the queued jobs): a small checkpointing job and the real ``train_resnet_run``. The hold makes the
    interruption land mid-run on any machine; sharing one requeue round trip (~25 s) keeps the file under 3 minutes.

    Once more, in fresh directories, when SLURM killed a job's own ``scontrol requeue`` (:func:`requeue_killed`): then
    there was no requeue to test, and the rerun rightly submitted the run again."""
    for _ in range(2):
        cases = preempt_and_collect(tmp_path_factory.mktemp("preempt"))
        if cases is not None:
            return cases
    pytest.fail("both attempts: SLURM's SIGTERM killed the job's own scontrol requeue, so nothing was requeued")


def requeue_killed(job_record: dict) -> bool:
    """Whether the job's own ``scontrol requeue`` died of the SIGTERM that SLURM sends the job step as the requeue
    starts (seen on this single-node cluster under load: the job then ends, exit code 1, and is not requeued)."""
    err = slurm.attach(job_record).paths.stderr
    text = err.read_text() if err.is_file() else ""
    return "'scontrol', 'requeue'" in text and "SIGTERM" in text


def preempt_and_collect(base: Path) -> dict[str, Preempted] | None:
    """:func:`preempted`'s one attempt under ``base``; None when a requeue was killed (:func:`requeue_killed`)."""
    resnet = sweep_configs(
        preset="smoke",
        dataset="synthetic",
        device="cpu",
        compile="off",
        synthetic={"num_train": 256, "num_test": 64, "image_size": 16},
        overrides={"depths": [0], "epochs": 5},
    )
    held = [{**c, "runtime": {**c["runtime"], "hold_after": HELD_AFTER}} for c in resnet]
    cases = {
        "tiny": Preempted(
            epoch_train_job,
            epoch_train_job,
            epoch_configs([3], epochs=6),
            epoch_configs([3], epochs=6, hold_after=HELD_AFTER),
            6,
        ),
        "resnet": Preempted(train_resnet_run, held_resnet_run, resnet, held, 5),
    }
    for name, case in cases.items():
        case.specs = make_specs(case.slurm_configs, base / name / "slurm")
        assert launch(case.slurm_fn, case.specs, launcher="slurm", executor_params=params(), wait=False) is None
    waiting = dict(cases)
    deadline = time.monotonic() + WAIT_S
    while waiting:
        for name, case in list(waiting.items()):
            case.epochs_at_interrupt = len(run_store.read_metrics(case.specs[0].dir))
            if case.epochs_at_interrupt >= HELD_AFTER:  # held there until the signal (tests/helpers/jobs.py)
                waiting.pop(name)
                if case.epochs_at_interrupt < case.epochs:  # else the test fails: the run ended first
                    slurm.attach(record(case.specs[0]))._interrupt()  # checkpoint() -> requeue
        assert time.monotonic() < deadline, f"no epoch {HELD_AFTER} within {WAIT_S} s: {sorted(waiting)}"
        time.sleep(0.1)
    for name, case in cases.items():  # the references train while the interrupted jobs requeue
        [case.reference] = launch(case.inline_fn, make_specs(case.inline_configs, base / name / "inline"))
    killed = False
    for case in cases.values():  # every case collected, so that no job outlives the attempt
        first = record(case.specs[0])
        [case.result] = launch(
            case.slurm_fn, case.specs, launcher="slurm", executor_params=params(), wait=True, wait_timeout_s=WAIT_S
        )
        if record(case.specs[0])["job_id"] != first["job_id"] and requeue_killed(first):
            killed = True
            continue
        assert record(case.specs[0])["job_id"] == first["job_id"]  # collected, not submitted again
    return None if killed else cases


def test_preempted_run_is_requeued_resumes_and_ends_bit_identical(preempted):
    case = preempted["tiny"]
    assert case.epochs_at_interrupt < case.epochs  # the signal landed mid-run
    stdout = slurm.attach(record(case.specs[0])).paths.stdout.read_text()
    assert "Requeued job" in stdout
    resumed = [int(line.split()[-1]) for line in stdout.splitlines() if line.startswith("resumed from epoch")]
    assert len(resumed) == 1 and case.epochs_at_interrupt <= resumed[0] < case.epochs, stdout
    assert len({m["pid"] for m in run_store.read_metrics(case.specs[0].dir)}) == 2  # two executions of one run
    assert case.result == case.reference  # same loss and sha256 of every weight tensor


def test_preempted_resnet_training_resumes_and_ends_bit_identical(preempted):
    case = preempted["resnet"]
    assert case.epochs_at_interrupt < case.epochs  # the signal landed mid-run
    paths = slurm.attach(record(case.specs[0])).paths
    assert "Requeued job" in paths.stdout.read_text()
    log = paths.stderr.read_text()
    resumed = re.findall(r"resuming \S+ after epoch (\d+)", log)  # common.training.loop's log line
    assert len(resumed) == 1 and case.epochs_at_interrupt <= int(resumed[0]) < case.epochs, log[-3000:]
    slurm_dir = case.specs[0].dir
    inline_dir = slurm_dir.parents[2] / "inline" / slurm_dir.relative_to(slurm_dir.parents[1])
    ours, theirs = load_weights(slurm_dir), load_weights(inline_dir)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    for key in ("train_loss", "test_loss", "test_acc"):
        assert case.result[key] == case.reference[key], key


def test_distributed_job_runs_one_process_per_task(tmp_path):
    specs = make_specs([{"experiment": "dist", "name": "allreduce"}], tmp_path)
    [result] = launch(
        distributed_job,
        specs,
        launcher="slurm",
        executor_params=params(tasks_per_node=2),
        wait=True,
        wait_timeout_s=WAIT_S,
    )
    assert result == {"world_size": 2, "sum": 3.0, "backend": "gloo"}


def test_a_failing_rank_ends_every_task_of_a_distributed_job(tmp_path):
    specs = make_specs([{"experiment": "dist", "name": "rank1fails", "hang_s": 3000}], tmp_path)
    distributed = slurm.resolve(slurm.load_profile(PROFILE), "gpt2", distributed=True).executor_params()
    assert (
        launch(
            rank_failure_job, specs, launcher="slurm", executor_params={**distributed, "tasks_per_node": 2}, wait=False
        )
        is None
    )
    job = slurm.attach(record(specs[0]))

    def ended() -> bool:
        states = slurm.squeue_states()
        return states is not None and states.get(job.job_id) not in slurm.ALIVE_STATES

    wait_until(ended, WAIT_S, "srun --kill-on-bad-exit to end rank 0, which would otherwise wait 3,000 s")
    assert submitit_jobs.failed_task(job) == (1, "RuntimeError: deliberate failure on rank 1")
    assert not job.task(0).paths.result_pickle.exists() and not run_store.is_done(specs[0].dir)  # rank 0 was ended
