"""common/launch/launcher.py, common/launch/local_pool.py: inline and submitit-local launching, skipping finished runs, local devices."""

import os
from types import SimpleNamespace

import pytest

from common.errors import UserError
from common.launch import local_pool
from common.launch.launcher import Plan, launch, launch_from_args
from common.launch.local_pool import VISIBLE_DEVICES_ENV, local_slots, run_in_slots, visible_device_ids
from common.runs import run_store
from common.runs.run_store import make_specs
from common.training.device import cpu_count
from tests.helpers.jobs import demo_configs, device_report_job, failing_job, square_job


def _executions(spec) -> int:
    return len(run_store.read_metrics(spec.dir))


def test_inline_runs_three_configs_and_skips_finished(tmp_path):
    specs = make_specs(demo_configs([1, 2, 3]), tmp_path)
    results = launch(square_job, specs, launcher="inline")
    assert [r["y"] for r in results] == [1, 4, 9]
    assert launch(square_job, specs, launcher="inline") == results
    assert [_executions(s) for s in specs] == [1, 1, 1]


def test_submitit_local_matches_inline_and_skips_finished(tmp_path):
    inline = launch(square_job, make_specs(demo_configs([1, 2, 3]), tmp_path / "inline"), launcher="inline")
    specs = make_specs(demo_configs([1, 2, 3]), tmp_path / "local")
    launch(square_job, specs[:1], launcher="inline")  # one already finished before submission
    local = launch(square_job, specs, launcher="local", executor_params={"timeout_min": 5})
    assert local == inline
    assert [_executions(s) for s in specs] == [1, 1, 1]
    job_folders = [p for p in (tmp_path / "local" / "submitit").iterdir() if p.name.isdigit()]
    assert len(job_folders) == 2  # only the two unfinished runs were submitted


def test_failed_local_job_is_reported_with_log_path_and_not_finished(tmp_path):
    specs = make_specs(demo_configs([7]), tmp_path)
    with pytest.raises(UserError, match=r"1 of 1 runs failed.*deliberate failure.*log: .*\.err"):
        launch(failing_job, specs, launcher="local", executor_params={"timeout_min": 5})
    assert not run_store.is_done(specs[0].dir)


def test_plan_describes_done_and_todo(tmp_path):
    specs = make_specs(demo_configs([1, 2]), tmp_path)
    launch(square_job, specs[:1])
    text = Plan.of(specs).describe()
    assert "2 planned runs: 1 finished, 1 to run" in text


# ----------------------------------------------------------------------------- --launcher local on devices
class PolledJob:
    """A job that is done after ``polls`` calls of ``done()``."""

    def __init__(self, polls: int):
        self.polls = polls

    def done(self) -> bool:
        self.polls -= 1
        return self.polls < 0


def test_slot_pool_never_runs_two_jobs_on_one_slot_and_keeps_every_slot_busy():
    durations = [3, 0, 5, 1, 0, 2, 4]
    busy: dict[int, PolledJob] = {}
    most = []

    def start(spec, slot):
        assert busy.get(slot) is None or busy[slot].polls < 0, f"slot {slot} already runs a job"
        busy[slot] = PolledJob(durations[spec])
        most.append(sum(job.polls >= 0 for job in busy.values()))
        return busy[slot]

    jobs = run_in_slots(list(range(len(durations))), [0, 1, 2], start, poll_s=0)
    assert [job.polls < 0 for job in jobs] == [True] * len(durations)  # all done, returned in order
    assert max(most) == 3


def fake_devices(monkeypatch, kind: str, listed: str) -> None:
    """This process sees the devices ``listed`` (a *_VISIBLE_DEVICES value) of ``kind``."""
    monkeypatch.setattr(local_pool, "resolve_device", lambda name: SimpleNamespace(type=kind))  # no torch_npu here
    monkeypatch.setattr(local_pool, "visible_devices", lambda k: len(listed.split(",")) if k == kind else 0)
    monkeypatch.setenv(VISIBLE_DEVICES_ENV[kind], listed)


def overlapping(results: list[dict]) -> list[tuple[dict, dict]]:
    return [
        (a, b)
        for i, a in enumerate(results)
        for b in results[i + 1 :]
        if a["start"] < b["end"] and b["start"] < a["end"]
    ]


def device_specs(tmp_path, n: int, sleep_s: float):
    return make_specs(
        [{"experiment": "devices", "name": f"r{i}", "runtime": {"sleep_s": sleep_s}} for i in range(n)], tmp_path
    )


def test_local_runs_each_get_one_of_the_parents_gpus_and_run_one_per_gpu(tmp_path, monkeypatch):
    fake_devices(monkeypatch, "cuda", "3,5")
    slots = local_slots("cuda", distributed=False)
    results = launch(device_report_job, device_specs(tmp_path, 3, 0.3), launcher="local", slots=slots)
    assert {r["cuda"] for r in results} == {"3", "5"} and all(r["world_size"] == 1 for r in results)
    for a, b in overlapping(results):  # runs at the same time never share a GPU, so at most 2 at once
        assert a["cuda"] != b["cuda"], (a, b)


def test_a_local_distributed_run_gets_every_npu_with_one_process_each(tmp_path, monkeypatch):
    fake_devices(monkeypatch, "npu", "4,6")
    [slot] = local_slots("npu", distributed=True)  # one slot: distributed runs go one at a time
    [result] = launch(device_report_job, device_specs(tmp_path, 1, 0), launcher="local", slots=[slot])
    assert (result["npu"], result["world_size"]) == ("4,6", 2)
    assert os.environ["ASCEND_RT_VISIBLE_DEVICES"] == "4,6"  # the launcher's own environment is restored


def test_local_slots_split_devices_between_one_process_runs_and_give_distributed_runs_all(monkeypatch):
    fake_devices(monkeypatch, "cuda", "1,2")
    assert [dict(s.params) for s in local_slots("cuda", distributed=True)] == [
        {"tasks_per_node": 2, "gpus_per_node": 2, "visible_gpus": (1, 2)}
    ]
    fake_devices(monkeypatch, "npu", "4,6")
    assert [(dict(s.env), s.params["tasks_per_node"]) for s in local_slots("npu", distributed=False)] == [
        ({"ASCEND_RT_VISIBLE_DEVICES": "4"}, 1),
        ({"ASCEND_RT_VISIBLE_DEVICES": "6"}, 1),
    ]


def test_local_slots_without_accelerators_are_the_cores_and_show_no_gpu(monkeypatch):
    slots = local_slots("cpu", distributed=True)
    assert len(slots) == cpu_count() and all(not s.params.get("gpus_per_node") for s in slots)
    assert len(local_slots("cpu", distributed=False)) == cpu_count()


def test_visible_devices_are_named_as_the_parent_names_them(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_device_ids("cuda", 3) == ["0", "1", "2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6, 2,-1,7")  # CUDA stops at the first invalid entry
    assert visible_device_ids("cuda", 2) == ["6", "2"]
    fake_devices(monkeypatch, "cuda", "GPU-8f2e,GPU-11aa")
    with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES=GPU-8f2e,GPU-11aa: --launcher local hands GPUs"):
        local_slots("cuda", distributed=False)


def test_scripts_whose_runs_are_one_process_refuse_torchrun(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    args = SimpleNamespace(launcher="inline", device="cpu", dry_run=False)
    specs = make_specs(demo_configs([1]), tmp_path)
    with pytest.raises(UserError, match=r"one of 4 processes \(torchrun.*one process per run.*--launcher local"):
        launch_from_args(square_job, specs, args, job_kind="probe")
    assert not specs[0].dir.exists()
