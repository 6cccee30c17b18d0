"""common/runs/run_store.py: run directories, atomic writes, resume, collect."""

import json
import os
import time

import pytest
import torch

from common.errors import UserError
from common.runs import atomic, locks, run_store


def test_run_dir_is_derived_from_config_and_ignores_runtime(tmp_path):
    a = {"experiment": "sweep", "name": "resnet-9", "lr": 0.1}
    b = {**a, "runtime": {"device": "cuda"}}
    c = {**a, "lr": 0.2}
    assert run_store.run_dir(tmp_path, a) == run_store.run_dir(tmp_path, b)
    assert run_store.run_dir(tmp_path, a) != run_store.run_dir(tmp_path, c)
    assert run_store.run_dir(tmp_path, a).parent == tmp_path / "sweep"
    assert run_store.run_dir(tmp_path, a).name.startswith("resnet-9-")


def test_atomic_write_survives_crash_between_temp_write_and_rename(tmp_path, monkeypatch):
    target = tmp_path / "result.json"
    atomic.atomic_write_json(target, {"v": 1})

    def crash(src, dst):
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        atomic.atomic_write_json(target, {"v": 2})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temp file left behind


def test_crash_before_first_result_leaves_run_unfinished(tmp_path, monkeypatch):
    path = run_store.prepare_run(tmp_path, {"experiment": "e", "name": "n"})
    monkeypatch.setattr(os, "replace", lambda s, d: (_ for _ in ()).throw(OSError("crash")))
    with pytest.raises(OSError):
        run_store.write_result(path, {"loss": 0.1})
    monkeypatch.undo()
    assert not run_store.is_done(path)


def test_checkpoint_round_trip_loads_weights_only(tmp_path):
    state = {"model": {"w": torch.randn(3, 3, dtype=torch.float64)}, "epoch": 4, "rng": (1, [2, 3], None)}
    run_store.save_checkpoint(tmp_path / "checkpoint.pt", state)
    loaded = run_store.load_checkpoint(tmp_path / "checkpoint.pt")
    assert loaded["epoch"] == 4 and torch.equal(loaded["model"]["w"], state["model"]["w"])


def test_resume_state_none_then_checkpoint(tmp_path):
    path = run_store.prepare_run(tmp_path, {"experiment": "e", "name": "n"})
    assert run_store.resume_state(path) is None
    run_store.save_checkpoint(run_store.checkpoint_path(path), {"epoch": 2})
    assert run_store.resume_state(path) == {"epoch": 2}


def test_corrupt_checkpoint_is_a_user_error_naming_the_fix(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="delete it to restart"):
        run_store.load_checkpoint(tmp_path / "checkpoint.pt")


class NotAllowedInCheckpoints:
    """A plain class: ``weights_only=True`` must refuse to unpickle it."""


def test_checkpoint_with_arbitrary_pickle_is_refused(tmp_path):
    torch.save({"obj": NotAllowedInCheckpoints()}, tmp_path / "checkpoint.pt")
    with pytest.raises(UserError):
        run_store.load_checkpoint(tmp_path / "checkpoint.pt")


def test_resume_refuses_changed_config(tmp_path):
    config = {"experiment": "e", "name": "n", "lr": 0.1}
    path = run_store.prepare_run(tmp_path, config)
    stored = json.loads((path / "config.json").read_text())
    stored["lr"] = 0.5  # the directory now holds another run's config
    (path / "config.json").write_text(json.dumps(stored))
    with pytest.raises(UserError, match="lr"):
        run_store.prepare_run(tmp_path, config)


def test_resume_accepts_same_config_on_another_device(tmp_path):
    config = {"experiment": "e", "name": "n", "runtime": {"device": "cpu"}}
    first = run_store.prepare_run(tmp_path, config)
    assert run_store.prepare_run(tmp_path, {**config, "runtime": {"device": "cuda"}}) == first


def test_corrupt_config_is_a_user_error(tmp_path):
    config = {"experiment": "e", "name": "n"}
    path = run_store.prepare_run(tmp_path, config)
    (path / "config.json").write_text("{ half written")
    with pytest.raises(UserError, match="corrupt"):
        run_store.prepare_run(tmp_path, config)


def test_metrics_append_and_torn_last_line_is_ignored(tmp_path):
    run_store.append_metrics(tmp_path, {"epoch": 0})
    run_store.append_metrics(tmp_path, {"epoch": 1})
    with open(tmp_path / "metrics.jsonl", "a") as handle:
        handle.write('{"epoch": 2, "lo')
    assert run_store.read_metrics(tmp_path) == [{"epoch": 0}, {"epoch": 1}]


def test_collect_builds_one_row_per_finished_run(tmp_path):
    for depth in (1, 2, 3):
        config = {"experiment": "sweep", "name": f"d{depth}", "depth_n": depth, "runtime": {"device": "cpu"}}
        path = run_store.prepare_run(tmp_path, config)
        if depth != 3:  # the third run is unfinished and must not appear
            run_store.write_result(path, {"test_loss": 1.0 / depth})
    frame = run_store.collect(str(tmp_path / "sweep" / "*"))
    assert sorted(frame["depth_n"]) == [1, 2]
    assert set(frame.columns) >= {"depth_n", "test_loss", "runtime.device", "run_dir", "experiment"}
    assert frame.set_index("depth_n").loc[2, "test_loss"] == pytest.approx(0.5)


# ----------------------------------------------------------------------------- the run lock's rules
def holder_file(path, **record):
    (path / locks.LOCK).write_text(
        json.dumps({"host": locks.this_host(), "pid": 1, "renewed": time.time(), "lease_s": 300, **record})
    )


def test_a_run_lock_is_refused_while_its_holder_lives_and_taken_over_once_it_is_gone(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    live = {
        "a live process on this host": {"pid": 1},  # init: alive, and not ours
        "another host within its lease": {"host": "node-b", "renewed": time.time() - 100},
    }
    gone = {
        "an ended process on this host": {"pid": 2**22 + 7},  # beyond Linux's pid_max: no such process
        "another host past its lease": {"host": "node-b", "renewed": time.time() - 301},
        "this SLURM job before its requeue": {"host": "node-b", "job": "4242"},
        "a torn lock file": None,
    }
    for why, record in live.items():
        holder_file(tmp_path, **record)
        with pytest.raises(locks.RunLocked, match="another process is training this run"):
            locks.RunLock(tmp_path).acquire()
        assert json.loads((tmp_path / locks.LOCK).read_text())["pid"] == record.get("pid", 1), why  # left as it was
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    for why, record in gone.items():
        if record is None:
            (tmp_path / locks.LOCK).write_text('{"host": "node-b", "pi')
        else:
            holder_file(tmp_path, **record)
        with locks.RunLock(tmp_path):
            mine = json.loads((tmp_path / locks.LOCK).read_text())
            assert (mine["host"], mine["pid"], mine["job"]) == (locks.this_host(), os.getpid(), "4242"), why
        assert not (tmp_path / locks.LOCK).exists(), why  # released: removed


def test_a_run_lock_is_renewed_by_its_holder_and_reentrant(tmp_path):
    def renewed() -> float:
        """The lease's renewal time; -1 when read mid-write (the holder writes under its flock, this test reads
        without it)."""
        try:
            return json.loads((tmp_path / locks.LOCK).read_text())["renewed"]
        except json.JSONDecodeError:
            return -1.0

    with locks.RunLock(tmp_path, renew_s=0.05) as lock:
        deadline = time.monotonic() + 60  # a hang guard: renewals come every 0.05 s, later on a loaded machine
        first = renewed()
        while first < 0 and time.monotonic() < deadline:
            first = renewed()
        later = first
        while later <= first and time.monotonic() < deadline:  # waited for, not slept on (issue 59)
            time.sleep(0.05)
            later = renewed()
        assert first > 0 and later > first  # the background thread
        with locks.RunLock(tmp_path):  # a job locking its own run again (re-entrant)
            pass
        assert (tmp_path / locks.LOCK).is_file() and lock.renew()
    assert not (tmp_path / locks.LOCK).exists()
