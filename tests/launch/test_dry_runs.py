"""Every dry run answers in seconds at every value inside the bounds (issue 59, item 2).

For every numbered script and every row of the bounds table (``common.launch.bounds``) that one of its flags has, the
script's ``main`` runs in this process with ``--dry-run`` and that flag at the row's extremes, one at a time: its lowest
and its highest value, and for a list flag the longest list the row allows (its most values, up to the highest). The
answer, the plan or a one-line refusal of a combination the plan cannot hold (exit 2), must come within
:data:`LIMIT_S`. The limit guards against hangs; it is no speed test: each script first answers one plain dry run
untimed (its imports), then the slowest case here (09 at ``--seeds``' 1,000 values: 6,000 planned runs) answered in
about 2 s on a 2-core machine at load 8, the others in well under a second, while a plan superlinear in a value (09's
``--budget-depth 1000`` once built and counted a ResNet-1008: minutes, never answering in 300 s) fails it by far.
"""

from __future__ import annotations

import argparse
import importlib
import time
from pathlib import Path

import pytest

from common.launch import bounds
from common.presets import expand_decoder as expand_presets
from common.presets import grow_by_criterion as grow_presets

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in ROOT.glob("[0-9][0-9]_*.py") if not p.name.startswith("08"))  # 08 plans nothing
LIMIT_S = 10.0
SWEEP = ["--preset", "smoke", "--dataset", "synthetic", "--device", "cpu"]
READS_THE_SWEEP = {"02": SWEEP, "06": SWEEP}  # their plans start from finished sweep runs: given one (below)
NAMES = {("09", "policies"): grow_presets.ARMS, ("10", "policies"): expand_presets.ARMS}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A finished sweep run (01: ResNet-8, synthetic images, one epoch), so that 02's and 06's dry runs plan."""
    out = tmp_path_factory.mktemp("sweep") / "runs"
    argv = [*SWEEP, "--depths", "0", "--epochs", "1", "--out", str(out)]
    assert importlib.import_module("01_train_resnet_sweep").main(argv) == 0
    return out


def extremes(prog: str, action: argparse.Action, bound: bounds.Bound) -> dict[str, list[str]]:
    """``{label: flags}``: ``action``'s flag at each extreme of ``bound``."""
    flag = max(action.option_strings, key=len)
    repeated = isinstance(action, argparse._AppendAction)  # --alpha 0.1 --alpha 0.2, not 0.1,0.2

    def given(values: list) -> list[str]:
        texts = [str(v) for v in values]
        return [x for t in texts for x in (flag, t)] if repeated else [flag, ",".join(texts)]

    if bound.size is not None and bound.low is None:  # a list of names, or 03's fractions
        if action.dest == "insert_at":
            return {"most": given([(i + 1) / (bound.size + 1) for i in range(bound.size)])}
        names = NAMES.get((prog[:2], action.dest), [f"name{i}" for i in range(bound.size)])
        return {"most": given(list(names)[: bound.size])}
    number = float if repeated or not float(bound.high).is_integer() else int
    found = {"lowest": given([number(bound.low)]), "highest": given([number(bound.high)])}
    if bound.size is not None:
        high = number(bound.high)
        found["most"] = (
            given([high - i for i in range(bound.size)])
            if repeated
            else [flag, f"{int(high) - bound.size + 1}:{int(high)}"]  # a range: how a user asks for many
        )
    return found


def dry_run_cases(script: str) -> dict[str, list[str]]:
    parser = importlib.import_module(script).build_parser()
    cases = {}
    for action in parser._actions:
        bound = bounds.bound_of(parser.prog, action.dest) if action.option_strings else None
        if bound is not None:
            cases.update({f"{action.dest} {k}": v for k, v in extremes(parser.prog, action, bound).items()})
    return cases


def answer_s(script: str, argv: list[str], capsys) -> tuple[float, int, str]:
    """Seconds ``script``'s ``main(argv)`` took, its exit code, and its last stderr line."""
    main = importlib.import_module(script).main
    start = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's refusals
        code = exc.code
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err.strip().splitlines()
    return seconds, code, err[-1] if err else ""


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_dry_run_at_every_bounds_extreme_answers_within_seconds(script, sweep, tmp_path, capsys):
    base = READS_THE_SWEEP.get(script[:2], ["--preset", "smoke"])
    out = sweep if script[:2] in READS_THE_SWEEP else tmp_path / "out"
    before = sorted(sweep.rglob("*"))
    argv = [*base, "--dry-run", "--out", str(out)]
    answer_s(script, argv, capsys)  # untimed: the imports a first call makes
    cases = dry_run_cases(script)
    slow, wrong = [], []
    for label, flags in cases.items():
        seconds, code, last = answer_s(script, [*argv, *flags], capsys)
        if seconds > LIMIT_S:
            slow.append(f"{label}: {seconds:.1f} s")
        if code not in (0, 2) or "Traceback" in last or (code == 2 and f"{script}.py: error:" not in last):
            wrong.append(f"{label}: exit {code}: {last}")
    assert not slow, f"{script}: dry runs slower than {LIMIT_S} s: {slow}"
    assert not wrong, f"{script}: neither a plan nor one error line: {wrong}"
    assert len(cases) >= 10, sorted(cases)  # the shared SLURM and run flags alone are seven rows
    assert not (tmp_path / "out").exists() and sorted(sweep.rglob("*")) == before  # a dry run creates nothing


def test_the_issues_dry_runs_of_09_answer_within_seconds(tmp_path, capsys):
    """The cases that once hung: ``--budget-depth 1000`` (300 s without an answer) and with it 1,000 seeds probed
    every 3 epochs (over 60 s)."""
    main = ["--preset", "smoke", "--dry-run", "--out", str(tmp_path / "out")]
    answer_s("09_grow_by_criterion", main, capsys)  # untimed: the imports
    for flags in (["--budget-depth", "1000"], ["--seeds", "0:999", "--budget-depth", "1000", "--every", "3"]):
        seconds, code, _ = answer_s("09_grow_by_criterion", [*main, *flags], capsys)
        assert code == 0 and seconds < LIMIT_S, (flags, code, seconds)
    assert not (tmp_path / "out").exists()
