"""common/launch/slurm.py without a cluster: profiles, flag overrides, --dry-run, waiting, test gating."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from submitit.core.utils import cloudpickle_dump

from common.errors import UserError
from common.launch import slurm, submitit_jobs
from common.launch.launcher import launch
from common.runs import atomic, run_store
from common.runs.run_store import make_specs
from tests.conftest import cluster_plan
from tests.helpers.jobs import demo_configs, square_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "slurm" / "example.toml"


def run_demo(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from tests.helpers.jobs import demo_main; raise SystemExit(demo_main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(text)
    return path


def test_every_shipped_profile_loads_and_example_names_every_key():
    for path in sorted((ROOT / "slurm").glob("*.toml")):
        slurm.load_profile(path)
    example = tomllib.loads(EXAMPLE.read_text())
    named = set(example) | {key for table in example.values() if isinstance(table, dict) for key in table}
    named |= set(re.findall(r"^# (\w+) = ", EXAMPLE.read_text(), re.MULTILINE))  # documented, commented out
    assert set(slurm.PROFILE_KEYS) <= named, set(slurm.PROFILE_KEYS) - named


def test_flags_override_the_job_kind_table_which_overrides_the_top_level(tmp_path):
    profile = slurm.load_profile(
        write(tmp_path, 'partition = "gpu"\ntime_min = 100\nmem_gb = 8\n[probe]\ntime_min = 10\n')
    )
    probe = slurm.resolve(profile, "probe", {"partition": "debug", "mem_gb": None})
    assert probe.values == {**slurm.BUILTIN, "partition": "debug", "time_min": 10, "mem_gb": 8}
    train = slurm.resolve(profile, "train", {})
    assert train.values["time_min"] == 100 and train.values["partition"] == "gpu"
    params = train.executor_params()
    assert params["timeout_min"] == 100 and params["slurm_partition"] == "gpu" and params["mem_gb"] == 8
    assert params["slurm_max_num_timeout"] == 3 and params["name"] == "ds-train"


def test_distributed_jobs_run_one_task_per_gpu_and_others_refuse_several(tmp_path):
    profile = slurm.load_profile(write(tmp_path, "gpus_per_node = 4\n[bad]\ntasks_per_node = 2\n"))
    assert slurm.resolve(profile, "gpt2", {}, distributed=True).executor_params()["tasks_per_node"] == 4
    assert slurm.resolve(profile, "train", {}).executor_params()["tasks_per_node"] == 1
    with pytest.raises(UserError, match="tasks_per_node = 2 for 'bad' jobs"):
        slurm.resolve(profile, "bad", {})
    no_gpu = slurm.resolve(slurm.load_profile(write(tmp_path, "gpus_per_node = 0\n")), "train", {})
    assert "gpus_per_node" not in no_gpu.executor_params()  # no --gpus-per-node on clusters without GRES


def test_a_distributed_profile_whose_tasks_differ_from_its_gpus_is_refused_naming_the_key(tmp_path):
    path = write(tmp_path, "[gpt2]\ngpus_per_node = 4\ntasks_per_node = 4\n")
    profile = slurm.load_profile(path)
    assert slurm.resolve(profile, "gpt2", {}, distributed=True).values["tasks_per_node"] == 4
    with pytest.raises(UserError) as info:
        slurm.resolve(profile, "gpt2", {"gpus_per_node": 8}, distributed=True)  # --gpus-per-node 8: 4 GPUs idle
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "tasks_per_node = 4" in message and "8 GPUs" in message
    example = slurm.load_profile(EXAMPLE)  # its [gpt2] follows the flag
    assert slurm.resolve(example, "gpt2", {"gpus_per_node": 8}, distributed=True).values["tasks_per_node"] == 8
    cpu_only = slurm.load_profile(write(tmp_path, "[gpt2]\ntasks_per_node = 2\n"))  # gloo ranks, no GPU
    assert slurm.resolve(cpu_only, "gpt2", {}, distributed=True).values["tasks_per_node"] == 2


@pytest.mark.parametrize(
    "gres, gpus",
    [
        ("gpu", 1),
        ("gpu:a100", 1),
        ("gpu:4", 4),
        ("gpu:a100:4", 4),
        ("gres/gpu:2", 2),
        ("nvme:1,gpu:h100:8(S:0-1)", 8),
        ("nvme:1", 0),
    ],
)
def test_gpus_requested_through_sbatch_gres_start_one_task_each(tmp_path, gres, gpus):
    assert slurm.gres_gpus(gres) == gpus
    profile = slurm.load_profile(write(tmp_path, f'[pythia]\nsbatch = {{gres = "{gres}"}}\n'))
    assert slurm.resolve(profile, "pythia", {}, distributed=True).executor_params()["tasks_per_node"] == max(1, gpus)


def test_a_one_process_job_asking_for_several_gpus_is_warned_about_the_idle_ones(tmp_path, caplog):
    profile = slurm.load_profile(write(tmp_path, 'sbatch = {gres = "gpu:4"}\n'))
    with caplog.at_level(logging.WARNING, logger="common.launch.slurm"):
        slurm.resolve(profile, "train", {})
    assert "request 4 GPUs per job: 3 sit idle" in caplog.text


def test_only_distributed_jobs_end_every_task_when_one_fails():
    profile = slurm.load_profile(EXAMPLE)
    assert slurm.resolve(profile, "gpt2", {}, distributed=True).executor_params()["slurm_srun_args"] == [
        "--kill-on-bad-exit=1"
    ]
    assert "slurm_srun_args" not in slurm.resolve(profile, "train", {}).executor_params()


@pytest.mark.parametrize(
    "text, needles",
    [
        (None, ["no such file", "slurm/example.toml"]),
        ("partition = gpu\n", ["not valid TOML", "slurm/example.toml"]),
        ('partiton = "gpu"\n', ["unknown key 'partiton'", "valid keys: partition"]),
        ('time_min = "2h"\n', ["time_min = '2h'", "must be int >= 1"]),
        ("[probe]\nmem_gb = 0\n", ["mem_gb = 0 at [probe]", "> 0"]),
        ("setup = [1]\n", ["setup = [1]", "list of strings"]),
    ],
)
def test_bad_profiles_are_one_line_user_errors_naming_the_fix(tmp_path, text, needles):
    path = tmp_path / "missing.toml" if text is None else write(tmp_path, text)
    with pytest.raises(UserError) as info:
        slurm.load_profile(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    for needle in needles:
        assert needle in message, message


def test_bad_profile_or_flag_on_the_command_line_exits_2_with_one_line(tmp_path):
    proc = run_demo("--launcher", "slurm", "--slurm-profile", str(tmp_path / "nope.toml"), "--out", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("error") == 1 and "no such file" in proc.stderr, proc.stderr
    proc = run_demo("--launcher", "slurm", "--time-min", "0", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--time-min" in proc.stderr and "integer >= 1" in proc.stderr, proc.stderr


def test_dry_run_prints_job_count_and_resolved_sbatch_lines_without_submitting(tmp_path):
    launch(square_job, make_specs(demo_configs([1]), tmp_path), launcher="inline")  # one run finished
    proc = run_demo(
        "--launcher",
        "slurm",
        "--slurm-profile",
        str(EXAMPLE),
        "--dry-run",
        "--out",
        str(tmp_path),
        "--partition",
        "big",
        "--mem-gb",
        "1.5",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "3 planned runs: 1 finished, 2 to run" in out
    assert (
        "would submit 2 jobs (one job array)" in out
        and "example.toml [probe]" in out
        and "flags --partition --mem-gb" in out
    )
    for line in (
        "#SBATCH --array=0-1%2",
        "#SBATCH --partition=big",  # flag beats profile
        "#SBATCH --mem=1536MB",  # flag beats [probe]
        "#SBATCH --time=60",  # [probe] beats top level
        "#SBATCH --account=my-project",  # top level
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --mail-type=FAIL",
        "#SBATCH --signal=USR2@120",
        "module load cuda/12.4",
    ):
        assert line in out.splitlines(), f"{line!r} missing from\n{out}"
    assert f"--output={tmp_path}/submitit/%A_%a/%A_%a_0_log.out" in out  # logs under the run root
    assert not (tmp_path / "submitit").exists()


class FakeJob:
    """The part of a submitit job :func:`common.launch.slurm.wait_for_jobs` uses."""

    def __init__(self, folder: Path, job_id: str):
        self.job_id, self.num_tasks = job_id, 1
        self.paths = SimpleNamespace(result_pickle=folder / f"{job_id}_result.pkl")

    def task(self, _):
        return self


def test_a_job_that_leaves_the_queue_without_a_result_is_reported_not_waited_for(tmp_path, monkeypatch):
    states = iter([{"7_0": "RUNNING", "7_1": "RUNNING"}, {"7_0": "RUNNING"}, {"7_0": "COMPLETED"}, {}])
    monkeypatch.setattr(slurm, "squeue_states", lambda: next(states, {}))
    done, killed = FakeJob(tmp_path, "7_0"), FakeJob(tmp_path, "7_1")
    seen = []

    def fake_sleep(_):  # the first job writes its result once the second has vanished
        seen.append(1)
        if len(seen) == 2:
            done.paths.result_pickle.write_bytes(b"")

    monkeypatch.setattr(slurm.time, "sleep", fake_sleep)
    lost = slurm.wait_for_jobs([done, killed], poll_s=0, lost_after_s=0)
    assert lost == {"7_1": "left the queue in state unknown (purged) without a result"}


def test_a_requeued_job_is_never_lost_and_the_wait_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "squeue_states", lambda: {"9": "PENDING"})
    monkeypatch.setattr(slurm.time, "sleep", lambda _: None)
    with pytest.raises(UserError, match=r"1 jobs still unfinished after 0 s \(9\); rerun with --wait"):
        slurm.wait_for_jobs([FakeJob(tmp_path, "9")], poll_s=0, lost_after_s=0, timeout_s=0.05)


def test_runs_whose_job_is_still_queued_are_not_submitted_again(tmp_path, monkeypatch):
    specs = make_specs(demo_configs([1, 2, 3]), tmp_path)
    for spec, job_id in zip(specs, ["5_0", "5_1", "5_2"], strict=True):
        run_store.prepare_run(spec.out, spec.config)
        atomic.atomic_write_json(
            spec.dir / slurm.JOB_RECORD, {"job_id": job_id, "folder": str(tmp_path / "%j"), "num_tasks": 1}
        )
    monkeypatch.setattr(slurm, "squeue_states", lambda: {"5_0": "RUNNING", "5_1": "FAILED", "5_2": "REQUEUED"})
    queued = slurm.queued_jobs(s.dir for s in specs)
    assert {d: j.job_id for d, j in queued.items()} == {specs[0].dir: "5_0", specs[2].dir: "5_2"}


@pytest.mark.parametrize(
    "facts, action",
    [
        ({"sinfo_ok": True, "root": False, "debian": False, "ci": True}, "use"),
        ({"sinfo_ok": False, "root": True, "debian": True, "ci": False}, "start"),
        ({"sinfo_ok": False, "root": False, "debian": True, "ci": False}, "skip"),
        ({"sinfo_ok": False, "root": True, "debian": False, "ci": False}, "skip"),
        ({"sinfo_ok": False, "root": False, "debian": True, "ci": True}, "fail"),
    ],
)
def test_slurm_tests_skip_with_a_reason_where_no_cluster_can_be_had_and_fail_in_ci(facts, action):
    got, reason = cluster_plan(**facts)
    assert got == action
    if action in ("skip", "fail"):
        assert "no SLURM cluster" in reason and ("not root" in reason or "not Debian" in reason)


def test_a_job_ended_by_one_failing_task_is_reported_with_that_tasks_error_and_log(tmp_path):
    paths = [
        SimpleNamespace(result_pickle=tmp_path / f"8_{t}_result.pkl", stderr=tmp_path / f"8_{t}_log.err")
        for t in range(2)
    ]
    job = SimpleNamespace(job_id="8", num_tasks=2, task=lambda t: SimpleNamespace(paths=paths[t]))
    traceback = "Traceback (most recent call last):\n  File 'x.py'\nRuntimeError: deliberate failure on rank 1\n"
    cloudpickle_dump(("error", traceback), paths[1].result_pickle)  # task 0 was killed: no outcome
    [spec] = make_specs(demo_configs([1]), tmp_path)
    with pytest.raises(
        UserError,
        match=r"x1-\w+: job 8 ended: task 1 failed: RuntimeError: deliberate failure on rank 1 \(log: \S+8_1_log\.err\)",
    ):
        submitit_jobs.raise_failures([(spec, job)], {"8": "left the queue in state FAILED without a result"})
