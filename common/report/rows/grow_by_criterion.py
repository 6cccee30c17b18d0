"""The claims report's rows about growth by the criterion (script 09), beyond the paper, and 08's tables and curves
of it.

Read from 09's runs under ``<out>/grow_by_criterion`` (as :mod:`common.report.record_scan` read them, the report's
preset only) and 01's sweep records of the same preset and dataset (:class:`Records`' ``sweep``). Every
run of 09 trains on one budget B of training FLOPs, so its final clean training loss is the loss at equal FLOPs:

- rows: the regime of the design (issue 57, :func:`depth_regime`; the report lists it after every claim): at B, does the sweep's run that defines B
  (the deeper network) reach a lower clean training loss than 09's ``none`` arm, the ResNet-8 trained on the same
  FLOPs (:func:`common.report.rules.grow_by_criterion.depth_pays_at_equal_flops`); "yes" or "no", not counted among
  the claims. Then the criterion's loss against each other arm's (``cyclic``, ``random``, ``ag``, and the controls
  ``none`` and ``scratch``), paired over seeds (:func:`common.report.rules.grow_by_criterion.placement_lower_train_loss`);
  and where the controller's own stop rule stopped the criterion against the sweep's N*
  (:func:`~common.report.rules.grow_by_criterion.stop_within_depths`). Placement (``cyclic``, ``random``, ``ag``) is
  judged at any design; the rows against ``none`` and ``scratch`` and the stop row (:data:`NEEDS_DEPTH_TO_PAY`) are
  judged only where the regime says yes, else "not decidable at this design: depth does not pay at equal FLOPs here"
  with both losses (:func:`gate`). Without 09 records every row is "not run", naming the command;
- 08's tables: per arm at B (:func:`budget_rows`: the losses, the test loss beside and not scored, depth, FLOPs,
  why growth stopped); the FLOPs the criterion needed to reach the sweep's mean loss at N* against the sweep's own
  cost to find N* (:func:`compute_rows`); the post-hoc stopping rules on the probe records, apart
  (:func:`stop_rows`); the curves of figure 10 (:func:`curves`).

The sweep's records hold no FLOP count: :func:`sweep_flops` counts each sweep run's training FLOPs from its
architecture (:func:`common.experiments.shared.resnet_sweep.build_resnet` of its config, :func:`common.training.flops.training_flops` at its
training images and epochs), the counter 09 uses, so the sweep and 09's runs share one compute axis.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from common.experiments import grow_by_criterion
from common.experiments.grow_by_criterion_calibration import CALIBRATION
from common.experiments.grow_by_criterion_controller import STOP_RULE
from common.experiments.shared.resnet_sweep import build_resnet
from common.models.resnet import ResNetConfig, depth_label
from common.presets.make_figures import report_preset
from common.report import grow_by_criterion_stopping
from common.report.left_out import reading
from common.report.records import GROW, SWEEP, Records, collect
from common.report.rules import grow_by_criterion as grow_by_criterion_rules
from common.report.rules import verdicts
from common.report.rules.cases import case_named
from common.report.rules.grow_by_criterion import mean_sd, paired_differences
from common.report.rules.statistics import Estimate
from common.report.verdict_row import BASE_DESIGN, REGIME_ROW, claim_row, describe
from common.training.flops import training_flops

CRITERION = "criterion"
COMPARED = {  # the other arms, and how a row names them
    "cyclic": "cyclic placement",
    "random": "random placement",
    "ag": "placement by the largest AG_l",
    "none": "the ResNet-8 never grown",
    "scratch": "its own final architecture trained from scratch",
}
NEEDS_DEPTH_TO_PAY = ("none", "scratch", None)  # the rows judged only where depth pays at B (None: the stop row)
PLACEMENT_CASE = "placement_lower_train_loss (paired over seeds)"
STOP_CASE = "stop_within_depths"
BEYOND = "- (beyond the paper: it never grows by V_S,l)"


def grow_command(preset: str, out: str | Path) -> str:
    """The command that makes 09's records of ``preset`` (a "not run" row names it)."""
    return f"python 09_grow_by_criterion.py{report_preset(preset).preset_flag(preset)} --out {out}"


def grow_runs(rec: Records) -> pd.DataFrame:
    """09's usable runs of the report's preset under ``rec.out`` (one row per arm and seed, by policy and seed; empty
    without): those :func:`common.report.records.load_records` read, else read now (the malformed ones left out)."""
    frame = rec.grow if rec.grow is not None else collect(Path(rec.out), GROW, [])
    if frame.empty or "preset" not in frame:
        return pd.DataFrame()
    frame = frame[frame["preset"] == rec.preset]
    return frame.sort_values(["policy", "seed"], ignore_index=True)


def by_seed(frame: pd.DataFrame, policy: str, column: str = "train_loss") -> dict[int, float]:
    """Seed -> ``column`` of ``policy``'s runs."""
    rows = frame[frame["policy"] == policy]
    return {int(r["seed"]): float(r[column]) for r in rows.to_dict("records")}


def stops(frame: pd.DataFrame) -> tuple[dict[int, int | None], int]:
    """Seed -> the depth where the criterion's own stop rule stopped growth (None: it did not: the cap or the growth
    phase did), and K, the fewest blocks a run the rule did not stop reached (such a run stops at K + 1 or later, a
    lower bound); with every run stopped by the rule, the most blocks any reached. A run the rule stopped early
    says nothing of how far the others went, so it never lowers K."""
    rows = frame[frame["policy"] == CRITERION].to_dict("records")
    out = {int(r["seed"]): (int(r["depth_n"]) if (r.get("stop") or {}).get("why") == STOP_RULE else None) for r in rows}
    open_depths = [int(r["depth_n"]) for r in rows if out[int(r["seed"])] is None]
    return out, min(open_depths) if open_depths else max((int(r["depth_n"]) for r in rows), default=0)


def grow_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """The rows about growth by the criterion, per dataset (module docstring)."""
    k = grow_by_criterion_rules.STOP_TOLERANCE
    specs = [
        *((f"beyond the paper: within one run's FLOPs, growing where V_S,l is largest reaches a lower training loss "
           f"than {label}", other) for other, label in COMPARED.items()),
        (f"beyond the paper: the controller's stop rule stops growth within ±{k} depths of where the sweep stops "
         "improving", None),
    ]  # fmt: skip
    fns = [grow_by_criterion_rules.placement_lower_train_loss] * len(COMPARED) + [
        grow_by_criterion_rules.stop_within_depths
    ]
    frame = grow_runs(rec)
    command = grow_command(rec.preset, rec.out)
    arms = [(CRITERION, other) if other else (CRITERION,) for _, other in specs]
    first_gated = next(i for i, (_, other) in enumerate(specs) if other in NEEDS_DEPTH_TO_PAY)
    if frame.empty:
        rows = [claim_row(c, BEYOND, fn, None, f"none: {command}", rec.preset) for (c, _), fn in zip(specs, fns)]
        rows = [reading(row, GROW, policy=policies) for row, policies in zip(rows, arms)]
        return [*rows[:first_gated], regime_row(rec, None, None, cmd), *rows[first_gated:]]
    rows = []
    for dataset, group in frame.groupby("dataset", sort=True):
        sweep = rec.sweep[rec.sweep["dataset"] == dataset] if len(rec.sweep) else pd.DataFrame()
        regime = depth_regime(group, sweep)
        for i, ((claim, other), fn, policies) in enumerate(zip(specs, fns, arms)):
            if i == first_gated:  # before the rows it gates (the report moves it after every claim)
                rows.append(regime_row(rec, str(dataset), regime, cmd))
            row = dataset_row(rec, group, sweep, f"{claim} ({dataset})", fn, other, cmd)
            rows.append(reading(row, GROW, dataset=str(dataset), policy=policies))
            if other is None:
                reading(row, SWEEP, dataset=str(dataset))
            if other in NEEDS_DEPTH_TO_PAY:
                rows[-1] = regime_reads(gate(row, regime), str(dataset))
    return rows


# ----------------------------------------------------------------------------- the regime: does depth pay at B?
REGIME_CLAIM = (
    "the regime of 09's design: at equal training FLOPs (the budget B) depth pays, the sweep's deeper network that "
    "defines B reaching a lower clean training loss than the ResNet-8 trained on B (09's none arm)"
)
REGIME_SAID = (
    "- (beyond the paper; not a claim, not counted: the rows against the ResNet-8 never grown, against scratch and "
    "about the stop rule are judged only where it says yes)"
)
REGIME_WORDS = {  # the regime row's verdict cell, by its rule's verdict
    verdicts.HOLDS: "yes: depth pays at equal FLOPs here",
    verdicts.FAILS: "no: depth does not pay at equal FLOPs here",
    verdicts.UNDECIDABLE: verdicts.UNDECIDABLE,
}
GATED = {  # a gated row's verdict, by the regime's verdict (None: the regime has no records)
    verdicts.FAILS: "depth does not pay at equal FLOPs here",
    verdicts.UNDECIDABLE: "depth is not shown to pay at equal FLOPs here",
    None: "whether depth pays at equal FLOPs here is not known",
}
BUDGET_MATCH = 1e-3  # a sweep run "spent B" when its counted training FLOPs are within 0.1% of B (the same counter)


@dataclass(frozen=True)
class DepthRegime:
    """Whether depth pays at B on one dataset's records (:func:`depth_regime`): the rule's outcome (None: no records
    to judge it on, ``why`` says which), the two sides' mean losses and the deeper network's name."""

    outcome: verdicts.Outcome | None
    why: str = ""
    sweep: bool = False  # what is missing (outcome None) is the sweep's run at B, not 09's none runs
    budget: float = math.nan
    shallow: float | None = None
    deep: float | None = None
    deep_name: str = "the deeper network"
    seeds: tuple[int, ...] = ()
    runs: int = 0

    def losses(self) -> str:
        """``ResNet-8 0.00598, ResNet-13 0.0328 (clean training loss at B, means)`` (the gated rows' numbers)."""
        if self.shallow is None or self.deep is None:
            return self.why
        return f"clean training loss at B: ResNet-8 {self.shallow:.3g}, {self.deep_name} {self.deep:.3g} (means)"


def depth_regime(group: pd.DataFrame, sweep: pd.DataFrame) -> DepthRegime:
    """09's ``none`` runs against the sweep's runs whose counted training FLOPs are B (:func:`sweep_flops`, within
    :data:`BUDGET_MATCH`), both at B: :func:`~common.report.rules.grow_by_criterion.depth_pays_at_equal_flops`."""
    none = group[group["policy"] == "none"]
    if none.empty:
        return DepthRegime(None, "no none runs (the ResNet-8 never grown)")
    budget = float(none["budget_flops"].iloc[0])
    counted = sweep_flops(sweep)
    at_b = counted[(counted["flops"] - budget).abs() <= BUDGET_MATCH * budget] if len(counted) else counted
    if at_b.empty:
        return DepthRegime(None, f"no sweep run spent B = {budget:.3g} training FLOPs", sweep=True, budget=budget)
    depths = sorted({int(n) for n in at_b["depth_n"]})
    name = "/".join(f"ResNet-{depth_label(n)}" for n in depths)
    shallow, deep = [float(v) for v in none["train_loss"]], [float(v) for v in at_b["train_loss"]]
    outcome = grow_by_criterion_rules.depth_pays_at_equal_flops(shallow, deep, "ResNet-8 never grown", name)
    seeds = tuple(sorted({int(s) for s in (*none["seed"], *at_b["seed"])}))
    means = mean_sd(shallow)[0], mean_sd(deep)[0]
    return DepthRegime(outcome, "", False, budget, *means, name, seeds, len(none) + len(at_b))


def regime_row(rec: Records, dataset: str | None, regime: DepthRegime | None, cmd: dict[str, str]) -> dict:
    """The regime row of ``dataset`` (kind :data:`~common.report.verdict_row.REGIME_ROW`): "yes" or "no" with its
    numbers; "not run" naming what is missing and the command that makes it (``regime`` None: no 09 records)."""
    fn = grow_by_criterion_rules.depth_pays_at_equal_flops
    claim = f"{REGIME_CLAIM} ({dataset})" if dataset else REGIME_CLAIM
    if regime is None or regime.outcome is None:
        grow = f"{grow_command(rec.preset, rec.out)} --policy none"
        what = f"none: {grow}" if regime is None else f"{regime.why}: {cmd.get('sweep') if regime.sweep else grow}"
        return reading(claim_row(claim, REGIME_SAID, fn, None, what, rec.preset, kind=REGIME_ROW), GROW, policy="none")
    outcome = verdicts.Outcome(REGIME_WORDS[regime.outcome.verdict], regime.outcome.value)
    extra = f"09's none runs and the sweep's {regime.deep_name} runs, B = {regime.budget:.3g} training FLOPs"
    records = describe(rec.preset, str(dataset), regime.seeds, regime.runs, extra)
    return regime_reads(claim_row(claim, REGIME_SAID, fn, outcome, records, rec.preset, kind=REGIME_ROW), str(dataset))


def regime_reads(row: dict, dataset: str) -> dict:
    """``row``, noted as reading what the regime reads: 09's none runs and the sweep, of ``dataset``."""
    return reading(reading(row, GROW, dataset=dataset, policy="none"), SWEEP, dataset=dataset)


def gate(row: dict, regime: DepthRegime) -> dict:
    """A row judged only where depth pays at B (:data:`NEEDS_DEPTH_TO_PAY`): as it is where the regime says yes or the
    row has no records; else "not decidable at this design" saying why, with both losses, its own rule's reading kept
    in the reproduced value (not a verdict) and no power (its rule is not what decides it)."""
    said = regime.outcome.verdict if regime.outcome is not None else None
    if said == verdicts.HOLDS or row["_outcome"] is None:
        return row
    why = f"{verdicts.UNDECIDABLE_AT_DESIGN}: {GATED[said]} ({regime.losses()})"
    row["reproduced"] = verdicts.clauses(
        f"not judged, {GATED[said]}", f"its rule reads (not a verdict): {row['reproduced']}"
    )
    row["_outcome"] = verdicts.Outcome(why, row["reproduced"])
    row["_design"] = None
    return row


def dataset_row(rec: Records, group: pd.DataFrame, sweep: pd.DataFrame, name: str, fn, other: str | None, cmd) -> dict:
    """One row on one dataset's runs: the criterion against ``other``, or (None) its stop rule against the sweep."""
    if other is not None:
        policies = (CRITERION, other)
        outcome, design = placement_outcome(group, other)
    else:
        policies = (CRITERION,)
        outcome, design = stop_outcome(group, sweep, cmd)
    if outcome is None:
        missing = ", ".join(p for p in policies if p not in set(group["policy"]))
        what = f"no {missing} runs: {grow_command(rec.preset, rec.out)} --policy {','.join(policies)}"
        return claim_row(name, BEYOND, fn, None, what, rec.preset)
    used = group[group["policy"].isin(policies)]
    budget = used["budget_flops"].iloc[0]
    extra = f"policies {', '.join(policies)}, B = {budget:.3g} training FLOPs each"
    records = describe(rec.preset, str(group["dataset"].iloc[0]), used["seed"], len(used), extra)
    if other is None and len(sweep):
        records += f"; sweep {len(sweep)} runs at N = {','.join(map(str, sorted(set(sweep['depth_n']))))}"
    return claim_row(name, BEYOND, fn, outcome, records, rec.preset, design=design)


def placement_outcome(frame: pd.DataFrame, other: str):
    """The criterion against ``other`` at B, paired over seeds: (outcome, design); (None, None) without both."""
    if not {CRITERION, other} <= set(frame["policy"]):
        return None, None
    mine, theirs = by_seed(frame, CRITERION), by_seed(frame, other)
    outcome = grow_by_criterion_rules.placement_lower_train_loss(mine, theirs, other, None)
    paired = len(paired_differences(mine, theirs))
    return outcome, (case_named(PLACEMENT_CASE), replace(BASE_DESIGN, grow_seeds=paired))


def stop_outcome(group: pd.DataFrame, sweep: pd.DataFrame, cmd: dict[str, str]):
    """The criterion's online stops against the sweep's N*: (outcome, design); (None, None) without criterion runs."""
    if CRITERION not in set(group["policy"]):
        return None, None
    stopped, reached = stops(group)
    design = (case_named(STOP_CASE), replace(BASE_DESIGN, grow_seeds=len(stopped), grow_rounds=reached))
    if sweep.empty or sweep["depth_n"].nunique() < 2:
        why = f"the sweep has {sweep['depth_n'].nunique() if len(sweep) else 0} depth(s): no N* ({cmd['sweep']})"
        return verdicts.Outcome(verdicts.UNDECIDABLE, why), design
    plateau = grow_by_criterion_stopping.sweep_plateau(sweep)
    outcome = grow_by_criterion_rules.stop_within_depths(stopped, plateau.depth_n, reached)
    why = sorted({(r.get("stop") or {}).get("why") for r in group[group["policy"] == CRITERION].to_dict("records")})
    value = verdicts.clauses(outcome.value, plateau.text, f"why growth stopped: {', '.join(map(str, why))}")
    return verdicts.Outcome(outcome.verdict, value), design


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


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    mean, sd = mean_sd(values)
    return f"{mean:.4g}" if len(values) < 2 else f"{mean:.4g} ± {sd:.2g}"


def budget_rows(frame: pd.DataFrame) -> list[dict]:
    """Per arm at B: seeds, final depth (each seed's), clean training loss (mean ± sd over seeds), the paired
    difference arm - criterion with its 95% interval, test loss and accuracy (beside, not scored), training and
    probe FLOPs (means), and why growth stopped."""
    mine = by_seed(frame, CRITERION)
    rows = []
    for policy, group in frame.groupby("policy", sort=False):
        group = group.sort_values("seed")
        loss = by_seed(group, policy)
        d = {s: loss[s] - mine[s] for s in sorted(set(loss) & set(mine))} if policy != CRITERION else {}
        paired = "-"
        if len(d) >= 2:
            mean, sd = mean_sd(list(d.values()))
            paired = Estimate(mean, sd / math.sqrt(len(d)), len(d) - 1).text()
        elif len(d) == 1:
            paired = f"{next(iter(d.values())):+.4g} (one seed)"
        rows.append({
            "policy": policy,
            "seeds": ",".join(str(int(s)) for s in group["seed"]),
            "depth_n": ",".join(str(int(n)) for n in group["depth_n"]),
            "train_loss": _spread(list(loss.values())),
            "minus_criterion": paired,
            "test_loss (not scored)": _spread([float(v) for v in group["test_loss"]]),
            "test_acc": _spread([float(v) for v in group.get("test_acc", pd.Series(dtype=float))]),
            "train_flops": f"{group['train_flops'].mean():.3g}",
            "probe_flops (estimate)": f"{group.get('probe_flops', pd.Series([0])).fillna(0).mean():.3g}",
            "budget_flops": f"{group['budget_flops'].iloc[0]:.3g}",
            "stopped": "; ".join(sorted({str((r.get('stop') or {}).get('why')) for r in group.to_dict('records')})),
        })  # fmt: skip
    order = [CRITERION, *COMPARED]
    return sorted(rows, key=lambda r: order.index(r["policy"]) if r["policy"] in order else len(order))


def curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Figure 10's curves: per run its clean training loss against cumulative training FLOPs
    (:func:`common.experiments.grow_by_criterion.curve`), one row per point with ``policy`` and ``seed``."""
    rows = []
    for run in frame.to_dict("records"):
        for point in grow_by_criterion.curve(run["run_dir"], run):
            rows.append({"policy": run["policy"], "seed": run["seed"], **point})
    return pd.DataFrame(rows, columns=["policy", "seed", "epoch", "train_flops", "train_loss", "cost_flops"])


def compute_rows(points: pd.DataFrame, sweep: pd.DataFrame) -> list[dict] | str:
    """The FLOPs each criterion run needed to reach the sweep's mean clean training loss at N* (training and probe
    FLOPs, the first point of its curve, :func:`curves`' ``points``, at or below it), against the sweep's own cost to find N*: one run at every depth
    of its grid up to the first one past N* (what it took to see the plateau), the means over seeds summed. A sentence
    where the sweep has no N*."""
    plateau = grow_by_criterion_stopping.sweep_plateau(sweep)
    if plateau.depth_n is None:
        return plateau.text
    spent = sweep_flops(sweep).groupby("depth_n")["flops"].mean().sort_index()
    past = [n for n in spent.index if n > plateau.depth_n]
    find = float(spent[spent.index <= (past[0] if past else plateau.depth_n)].sum())
    rows = []
    for seed, group in points[points["policy"] == CRITERION].groupby("seed", sort=True):
        hit = group[group["train_loss"] <= plateau.train_loss].sort_values("train_flops")
        first = hit.iloc[0] if len(hit) else None
        rows.append({
            "seed": int(seed), "target_train_loss": plateau.train_loss, "target_depth_n": plateau.depth_n,
            "reached": first is not None,
            "criterion_flops": None if first is None else float(first["cost_flops"]),
            "sweep_flops_to_find_n_star": find,
            "ratio": None if first is None else float(first["cost_flops"]) / find,
        })  # fmt: skip
    return rows


def stop_rows(frame: pd.DataFrame, sweep: pd.DataFrame) -> list[dict]:
    """The post-hoc stopping rules (:mod:`common.report.grow_by_criterion_stopping`, read after the runs, apart from the controller's
    own rule) on every policy run's probes: where each would have stopped, against the sweep's N* when it has two
    depths or more."""
    probes = grow_by_criterion.probe_frame(frame)
    if probes.empty:
        return []
    table = grow_by_criterion_stopping.stop_table(probes)
    if len(sweep) and sweep["depth_n"].nunique() >= 2:
        table = grow_by_criterion_stopping.stops_against_sweep(table, sweep)
    return _plain(table)


def ratio_table(rec: Records, group: pd.DataFrame, dataset: str) -> list[dict]:
    """08's ``grow_stop_ratio`` table (:func:`common.report.grow_by_criterion_stopping.ratio_rows`): the controller's
    ratio against the numbers of candidates and branches, on the calibration record (``<out>/grow_calibration``, the
    images no 09 run uses, where the constants were fixed) and on 09's runs of ``dataset``."""
    calibration = grow_by_criterion.read_runs(Path(rec.out) / CALIBRATION)
    if len(calibration) and {"preset", "dataset"} <= set(calibration):
        calibration = calibration[(calibration["preset"] == rec.preset) & (calibration["dataset"] == dataset)]
    probes = pd.concat(
        [
            grow_by_criterion_stopping.ratio_probes(calibration, "calibration") if len(calibration) else None,
            grow_by_criterion_stopping.ratio_probes(group, f"09 {rec.preset}"),
        ]
    )
    return grow_by_criterion_stopping.ratio_rows(probes)


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
    "NEEDS_DEPTH_TO_PAY",
    "REGIME_CLAIM",
    "DepthRegime",
    "depth_regime",
    "gate",
    "budget_rows",
    "compute_rows",
    "curves",
    "grow_claims",
    "grow_command",
    "grow_runs",
    "placement_outcome",
    "ratio_table",
    "stop_rows",
    "stops",
    "sweep_flops",
]
