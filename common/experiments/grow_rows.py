"""The claims report's rows about growth by the criterion (script 09), beyond the paper, and 08's tables of its
stopping rules and of the trajectories against the fixed sweep (01).

Read from 09's records under ``<out>/grow_by_criterion`` (:func:`common.experiments.grow_by_criterion.read_trajectories`,
the report's preset only) and 01's sweep records of the same preset and dataset (:class:`Records`' ``sweep``). The
rules are :mod:`common.claim_rules.grow`'s; the stopping rules and the comparisons are
:mod:`common.growth_stopping`'s (docs/decisions.md, sections "Stopping rules for growth by the criterion (09)" and
"Claims about growth by the criterion (09)"). Without 09 records every row is "not run", naming the command.

The sweep's records hold no FLOP count: :func:`sweep_flops` counts each sweep run's training FLOPs from its
architecture (:func:`common.resnet_sweep.build_resnet` of its config, :func:`common.flops.training_flops` at its
training images and epochs), the counter 09 uses for its rounds, so that the sweep's depths and the trajectories
share one compute axis.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pandas as pd

from common import claims, growth_stopping
from common.claim_rules.cases import case_named
from common.claim_rules.grow import paired_differences
from common.experiments import grow_by_criterion
from common.experiments.records import Records
from common.experiments.report_rows import BASE_DESIGN, claim_row, describe
from common.flops import training_flops
from common.models.resnet import ResNetConfig
from common.presets.report import report_preset
from common.resnet_sweep import build_resnet

CRITERION = "criterion"
COMPARED = ("cyclic", "random")  # the placements the criterion is compared with
PLACEMENT_CASE = "placement_lower_train_loss (paired over seeds)"
STOP_CASE = "stop_within_depths"
BEYOND = "- (beyond the paper: it never grows by V_S,l)"


def grow_command(preset: str, out: str | Path) -> str:
    """The command that makes 09's records of ``preset`` (a "not run" row names it)."""
    return f"python 09_grow_by_criterion.py{report_preset(preset).preset_flag(preset)} --out {out}"


def grow_trajectories(rec: Records) -> pd.DataFrame:
    """09's rounds of the report's preset under ``rec.out`` (one row per policy, seed and round; empty without)."""
    if not (Path(rec.out) / grow_by_criterion.EXPERIMENT).is_dir():
        return pd.DataFrame()
    frame = grow_by_criterion.read_trajectories(rec.out)
    if frame.empty or "preset" not in frame:
        return pd.DataFrame()
    return frame[frame["preset"] == rec.preset].reset_index(drop=True)


def shared_round(frame: pd.DataFrame, policies: tuple[str, ...]) -> int | None:
    """K: the last round every trajectory of ``policies`` reached (None when one of them has no trajectory)."""
    rows = frame[frame["policy"].isin(policies)]
    if set(policies) - set(rows["policy"]):
        return None
    return int(rows.groupby(["policy", "seed"])["round"].max().min())


def at_round(frame: pd.DataFrame, policy: str, k: int, column: str = "train_loss") -> dict[int, float]:
    """Seed -> ``column`` at round ``k`` of ``policy``'s trajectories."""
    rows = frame[(frame["policy"] == policy) & (frame["round"] == k)]
    return {int(r["seed"]): float(r[column]) for r in rows.to_dict("records")}


def placement_outcome(frame: pd.DataFrame, other: str) -> tuple[claims.Outcome | None, int | None, int]:
    """The criterion against ``other`` at the round they share: (outcome, K, paired seeds); None without both."""
    k = shared_round(frame, (CRITERION, other))
    if k is None:
        return None, None, 0
    if k == 0:
        return claims.Outcome(claims.UNDECIDABLE, "no round grown: K = 0"), 0, 0
    mine, theirs = at_round(frame, CRITERION, k), at_round(frame, other, k)
    outcome = claims.placement_lower_train_loss(mine, theirs, other, k)
    return outcome, k, len(paired_differences(mine, theirs))


def stops_c(frame: pd.DataFrame, policy: str = CRITERION) -> tuple[dict[int, int | None], int]:
    """Seed -> depth where stop rule (c) stops ``policy``'s trajectory (None: it did not), and the last round all
    reached."""
    stops, last = {}, None
    for seed, trajectory in frame[frame["policy"] == policy].groupby("seed"):
        stop = growth_stopping.v_max_fallen(trajectory)
        stops[int(seed)] = stop.depth_n if stop.fired else None
        top = int(trajectory["round"].max())
        last = top if last is None else min(last, top)
    return stops, int(last or 0)


def grow_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """The rows about growth by the criterion, per dataset: the criterion against cyclic and random placement,
    and stop rule (c) against the sweep's N* (module docstring)."""
    k = claims.STOP_TOLERANCE
    specs = [
        *(
            (f"beyond the paper: placing by V_S,l reaches a lower training loss than {o} placement after K rounds", o)
            for o in COMPARED
        ),
        (f"beyond the paper: stop rule (c) stops within ±{k} depths of where the sweep stops improving", None),
    ]
    fns = [claims.placement_lower_train_loss] * len(COMPARED) + [claims.stop_within_depths]
    frame = grow_trajectories(rec)
    command = grow_command(rec.preset, rec.out)
    if frame.empty:
        return [claim_row(c, BEYOND, fn, None, f"none: {command}", rec.preset) for (c, _), fn in zip(specs, fns)]
    rows = []
    for dataset, group in frame.groupby("dataset", sort=True):
        sweep = rec.sweep[rec.sweep["dataset"] == dataset] if len(rec.sweep) else pd.DataFrame()
        for (claim, other), fn in zip(specs, fns):
            name = f"{claim} ({dataset})"
            if other is not None:
                outcome, rounds, paired = placement_outcome(group, other)
                policies = (CRITERION, other)
                design = (case_named(PLACEMENT_CASE), replace(BASE_DESIGN, grow_seeds=paired, grow_rounds=rounds or 0))
            else:
                outcome, rounds, policies, design = stop_outcome(group, sweep, cmd)
            if outcome is None:
                missing = ", ".join(p for p in policies if p not in set(group["policy"]))
                what = f"no {missing} trajectories: {command} --policy {','.join(policies)}"
                rows.append(claim_row(name, BEYOND, fn, None, what, rec.preset))
                continue
            used = group[group["policy"].isin(policies)]
            extra = f"policies {', '.join(policies)}, K = {rounds}"
            records = describe(rec.preset, dataset, used["seed"], int((used["round"] > 0).sum()), extra)
            if other is None and len(sweep):
                records += f"; sweep {len(sweep)} runs at N = {','.join(map(str, sorted(set(sweep['depth_n']))))}"
            rows.append(claim_row(name, BEYOND, fn, outcome, records, rec.preset, design=design))
    return rows


def stop_outcome(group: pd.DataFrame, sweep: pd.DataFrame, cmd: dict[str, str]):
    """Stop rule (c) on the criterion's trajectories against the sweep's N*: (outcome, K, policies, design)."""
    policies = (CRITERION,)
    if CRITERION not in set(group["policy"]):
        return None, None, policies, None
    stops, rounds = stops_c(group)
    design = (case_named(STOP_CASE), replace(BASE_DESIGN, grow_seeds=len(stops), grow_rounds=rounds))
    if sweep.empty or sweep["depth_n"].nunique() < 2:
        why = f"the sweep has {sweep['depth_n'].nunique() if len(sweep) else 0} depth(s): no N* ({cmd['sweep']})"
        return claims.Outcome(claims.UNDECIDABLE, why), rounds, policies, design
    plateau = growth_stopping.sweep_plateau(sweep)
    outcome = claims.stop_within_depths(stops, plateau.depth_n, rounds)
    return claims.Outcome(outcome.verdict, claims.clauses(outcome.value, plateau.text)), rounds, policies, design


# ----------------------------------------------------------------------------- 08's tables and the sweep's compute
@functools.cache
def _run_flops(depth_n: int, widths: tuple, num_classes: int, size: int, images: int, epochs: int) -> int:
    model = build_resnet({"depth_n": depth_n, "model": {"widths": list(widths)}, "dataset": "cifar10"}, num_classes)
    return training_flops(model, (3, size, size), num_classes, images, epochs)


def sweep_flops(sweep: pd.DataFrame) -> pd.DataFrame:
    """The sweep's runs with ``flops``, each run's training FLOPs counted from its architecture (module docstring):
    3-channel images (every sweep dataset's, digits included), 32 x 32 unless the config's data says another size."""
    if sweep.empty:
        return sweep
    out = []
    for r in sweep.to_dict("records"):
        data = r.get("data") if isinstance(r.get("data"), dict) else {}
        default = ResNetConfig.for_dataset(r["dataset"], 0, 1).widths
        widths = tuple((r.get("model") if isinstance(r.get("model"), dict) else {}).get("widths", default))
        size = int(data.get("image_size") or 32)
        args = (int(r["depth_n"]), widths, int(r["num_classes"]), size, int(r["train_size"]), int(r["epochs"]))
        out.append(_run_flops(*args))
    return sweep.assign(flops=[float(f) for f in out])


def stop_rows(frame: pd.DataFrame, sweep: pd.DataFrame) -> list[dict]:
    """Every stopping rule x policy x seed: where it stops, the losses and compute there, and against the sweep's
    N* (:func:`common.growth_stopping.stops_against_sweep`) when the sweep has two depths or more."""
    table = growth_stopping.stop_table(frame)
    if len(sweep) and sweep["depth_n"].nunique() >= 2:
        table = growth_stopping.stops_against_sweep(table, sweep)
    return _plain(table)


def comparison_rows(frame: pd.DataFrame, sweep: pd.DataFrame) -> dict[str, list[dict] | str]:
    """Grown against scratch-trained training and test loss, and the compute to reach the sweep's best training
    loss (:mod:`common.growth_stopping`); the test-loss comparison is a sentence where the sweep over-fits."""
    test = growth_stopping.compare_test_loss(frame, sweep)
    return {
        "train_loss": _plain(growth_stopping.compare_train_loss(frame, sweep)),
        "test_loss": test if isinstance(test, str) else _plain(test),
        "compute": _plain(growth_stopping.compute_to_reach(frame, sweep_flops(sweep))),
    }


def _plain(table: pd.DataFrame) -> list[dict]:
    """Rows of plain values: None where pandas has NA or NaN (the CSV's empty cells)."""
    return [{k: (None if _missing(v) else v) for k, v in r.items()} for r in table.astype(object).to_dict("records")]


def _missing(value) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


__all__ = [
    "COMPARED",
    "CRITERION",
    "comparison_rows",
    "grow_claims",
    "grow_command",
    "grow_trajectories",
    "placement_outcome",
    "shared_round",
    "stop_rows",
    "stops_c",
    "sweep_flops",
]
