"""common/launch.py: inline and submitit-local launching, skipping finished runs."""

import pytest

from common import runs
from common.errors import UserError
from common.launch import Plan, launch
from common.runs import make_specs
from tests.jobs import demo_configs, failing_job, square_job


def _executions(spec) -> int:
    return len(runs.read_metrics(spec.dir))


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
    assert not runs.is_done(specs[0].dir)


def test_plan_describes_done_and_todo(tmp_path):
    specs = make_specs(demo_configs([1, 2]), tmp_path)
    launch(square_job, specs[:1])
    text = Plan.of(specs).describe()
    assert "2 planned runs: 1 finished, 1 to run" in text
