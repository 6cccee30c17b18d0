"""Job module of ``09_grow_by_criterion.py``: the growth value ``V_S,l`` as a growth controller (beyond the paper).

One run per (arm, seed), each on the same budget ``B`` of training FLOPs and the same schedule, a function of the
fraction of ``B`` spent (docs/decisions.md, section "Growth by the criterion (09_grow_by_criterion.py)", for every
choice below):

- a *policy* arm (``criterion``, ``ag``, ``cyclic``, ``random``) starts from the sweep's randomly initialised
  ResNet-8 of its seed (same initialisation and batches as 01's run) and grows inside its run (the engine of
  :mod:`common.training.growing`: one schedule, every old parameter's optimizer state kept, none for a new block, the
  function checked bit for bit in float64 at each insertion): every ``every`` epochs while less than ``grow_until``
  of ``B`` is spent, :class:`~common.experiments.grow_by_criterion_controller.Controller` probes, applies the stop rule and
  inserts one ``conv3x3`` zero-output block where the policy says;
- ``none``: the ResNet-8, never grown, on the same ``B`` (so more epochs than a deeper network);
- ``scratch``: the criterion's final architecture of the same seed (read from its finished run, trained here first
  when missing), trained from random initialisation on the same ``B``: the ResNet-8 as the sweep initialises it, the
  blocks' ``U_l`` from their seeds, their ``V_l`` Kaiming-normal as the sweep's (:func:`scratch_resnet`).

``B`` is the training FLOPs of the sweep's run at the preset's ``budget_depth_n`` (:func:`budget_flops`, counted by
:mod:`common.training.flops` as every FLOP here). A run trains whole epochs while the next one fits in what is left of ``B``.
Every run has its own directory (``<out>/grow_by_criterion/<dataset>-<arm>-seed<s>-<hash>``), resumes from its
checkpoint (the insertions and probe records in it: a killed run decides again from the same state, bit-identically
on the CPU) and ends with ``result.json``: the sweep's keys, ``depth_n`` its final depth, ``policy``, ``stop`` (why and
where growth stopped), ``probes`` (every probe's record), ``curve`` (clean training loss against cumulative FLOPs),
``train_flops``, ``probe_flops`` and ``budget_flops``.

:func:`run_table` gives one row per run, written as CSV and markdown (:func:`write_table`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from common.data.vision import VisionData
from common.errors import ParamError, UserError
from common.experiments.grow_by_criterion_config import CriterionRun
from common.experiments.grow_by_criterion_controller import Controller, probe_examples
from common.experiments.shared.resnet_sweep import (
    growth_hooks,
    load_sweep_data,
    sweep_configs,
    train_resnet_run,
)
from common.models.resnet import ResNet, init_weights
from common.models.resnet_flops import resnet_training_flops_per_image
from common.presets.choose import choose_preset
from common.presets.grow_by_criterion import POLICIES, PRESETS, GrowPreset, policies_of
from common.runs import atomic, locks, run_store, tables
from common.runs.locks import RunLocked
from common.runs.run_store import RunSpec
from common.science.branch_scale import ratio_summary
from common.science.growth import insert_zero_block
from common.training.flops import training_flops
from common.training.growing import RunGrowth

log = logging.getLogger(__name__)

EXPERIMENT = "grow_by_criterion"
BLOCK = "conv3x3 zero-output block (common.tangent), U_l seeded by its probe's seed"
SCRATCH_V = "Kaiming-normal from the block's seed, as the sweep initialises every V (U_l random from its seed)"
LOCK_POLL_S = 5.0  # how often a scratch run waiting for its criterion run looks again
RECORD_KEYS = ("policy", "seed", "depth_n", "train_loss", "test_loss", "train_flops", "budget_flops", "stop")


# ----------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class GrowPlan:
    """Every run of one invocation: per (arm, seed) one config."""

    preset: GrowPreset
    seeds: tuple[int, ...]
    configs: dict[tuple[str, int], dict]  # (arm, seed) -> run config

    def jobs(self) -> list[dict]:
        """What the launcher runs, scratch last (it starts from the criterion's finished run)."""
        order = {arm: i for i, arm in enumerate(self.preset.policies)}
        last = len(order)
        keys = sorted(self.configs, key=lambda k: (last if k[0] == "scratch" else order[k[0]], k[1]))
        return [self.configs[k] for k in keys]

    def describe(self, out: str | Path) -> str:
        lines = []
        for (arm, seed), config in sorted(self.configs.items()):
            state = "done" if run_store.is_done(run_store.run_dir(out, config)) else "todo"
            lines.append(f"{arm} seed {seed}: {state}")
        p = self.preset
        lines.append(
            f"every run trains on B = the training FLOPs of the sweep's ResNet-{8 + p.budget_depth_n} run, one "
            f"schedule over B; a probe every {p.every} epochs while under {p.grow_until:g} of B, one "
            f"{BLOCK} per probe, at most {p.cap}; growth stops when max V_S,l / max V_b < {p.ratio_below:g} on "
            f"{p.in_a_row} probes in a row; runs under {Path(out) / EXPERIMENT}"
        )
        return "\n".join(lines)


def grow_plan(
    *, preset: str = "smoke", overrides: dict | None = None, seeds: Sequence[int] = (0,), **sweep_keywords: Any
) -> GrowPlan:
    """Plan the runs. ``overrides``: fields of :class:`common.presets.grow_by_criterion.GrowPreset` (None: the preset's);
    ``sweep_keywords``: :func:`common.experiments.shared.resnet_sweep.sweep_configs`'s others (``dataset``, ``data_root``, ``device``,
    ``compile``, ``synthetic``). ``scratch`` brings ``criterion`` along (it reads its architecture)."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if isinstance(given.get("policies"), str):  # --policy's comma-separated text
        given["policies"] = policies_of(given["policies"])
    p = choose_preset(PRESETS, preset, given)
    if "scratch" in p.policies and "criterion" not in p.policies:
        p = replace(p, policies=("criterion", *p.policies))
    seeds = tuple(dict.fromkeys(seeds))
    if not seeds:
        raise ParamError("seeds", "(none)", "give at least one seed")
    keys = {"depths": sorted({0, p.budget_depth_n}), "train_subset": p.train_subset}
    sweep = sweep_configs(preset=preset, overrides=keys, seeds=list(seeds), **sweep_keywords)
    start = {c["seed"]: c for c in sweep if c["depth_n"] == 0}
    reference = next(c for c in sweep if c["depth_n"] == p.budget_depth_n)
    epochs = int(reference["train"]["epochs"])
    max_epochs = math.ceil(epochs * depth_ratio(p.budget_depth_n, reference)) + 1  # the loop's bound: B ends it
    if epochs < p.every:
        raise ParamError(
            "every", p.every, f"the budget is {epochs} epochs of ResNet-{8 + p.budget_depth_n}: probe more often"
        )
    probe = {
        "batch_size": p.probe_batch_size,
        "n_batches": p.probe_batches,
        "held_out": p.held_out,
        "app_g": p.app_g,
        "alpha": p.saturation_alpha,
        "cal_fraction": p.saturation_cal_fraction,
        "delta": None,
    }
    growth = {
        "budget_depth_n": p.budget_depth_n,
        "budget_epochs": epochs,
        "every": p.every,
        "grow_until": p.grow_until,
        "cap": p.cap,
        "ratio_below": p.ratio_below,
        "in_a_row": p.in_a_row,
        "block": BLOCK,
    }
    configs = {}
    for seed in seeds:
        for arm in p.policies:
            configs[(arm, seed)] = run_config(start[seed], arm, growth, probe, max_epochs)
        if "scratch" in p.policies:
            source = run_store.run_dir("", configs[("criterion", seed)])
            configs[("scratch", seed)]["growth"]["scratch_of"] = str(source)
    return GrowPlan(p, seeds, configs)


def run_config(sweep: dict, arm: str, growth: dict, probe: dict, max_epochs: int) -> dict:
    """The run of ``arm`` from the sweep's ResNet-8 config ``sweep``: its data, widths, recipe and seed; at most
    ``max_epochs`` epochs (the budget ends it), the clean training loss at every probe's cadence."""
    every = growth["every"]
    return {
        **sweep,
        "experiment": EXPERIMENT,
        "name": f"{sweep['dataset']}-{arm}-seed{sweep['seed']}",
        "policy": arm,
        "train": {**sweep["train"], "epochs": int(max_epochs)},
        "growth": dict(growth, **({"scratch_v": SCRATCH_V} if arm == "scratch" else {})),
        "probe": probe,
        "runtime": {**sweep["runtime"], "clean_curve": True, "eval_every": every},
    }


def depth_ratio(depth_n: int, config: dict) -> float:
    """Training FLOPs per image of ResNet-(8+``depth_n``) over ResNet-8's, at ``config``'s widths (32 x 32, 10
    classes: the ratio bounds the epochs of a run, :func:`budget_flops` counts the budget itself). Counted on the meta
    device from four cached models (:func:`common.models.resnet_flops.resnet_training_flops_per_image`), so planning
    takes the same time at every depth: building and counting ResNet-1008 itself took minutes (a dry run's hang)."""
    widths = tuple(config["model"]["widths"])
    return resnet_training_flops_per_image(depth_n, widths) / resnet_training_flops_per_image(0, widths)


def budget_flops(run: CriterionRun, data: VisionData) -> int:
    """B: the training FLOPs of the sweep's run of depth ``growth.budget_depth_n`` on ``data`` (its architecture,
    ``growth.budget_epochs`` epochs of whole batches; :mod:`common.training.flops`, the count every run here uses)."""
    g = run.growth
    model = run.resnet(data.num_classes, depth_n=g.budget_depth_n)
    images = epoch_examples(run, data)
    return training_flops(model, data.image_shape, data.num_classes, images, g.budget_epochs)


def epoch_examples(run: CriterionRun, data: VisionData) -> int:
    """Images one epoch trains on: whole batches (the training loader drops the last partial one)."""
    batch = run.train.batch_size
    return len(data.y_train) // batch * batch


def default_seeds(preset: str, seed: int) -> list[int]:
    """The seeds without ``--seeds``: the preset's count from ``seed`` (mini: three)."""
    return [seed + i for i in range(PRESETS[preset].seeds if preset in PRESETS else 1)]


# ----------------------------------------------------------------------------- jobs
def grow_run(spec: RunSpec, data: VisionData | None = None) -> dict:
    """Job function of script 09: one (arm, seed) run (module docstring). ``data``: train on these images instead of
    the config's (:mod:`common.experiments.grow_by_criterion_calibration`)."""
    run = CriterionRun.from_config(spec.config)
    if run.policy == "scratch":
        source = RunSpec(config=criterion_config(spec.config), out=spec.out)
        _ensure_finished(source)
        criterion = run_store.read_result(source.dir)
        make_model = lambda r, d: scratch_resnet(r, d, criterion)  # noqa: E731
    else:
        make_model = starting_resnet
    finish = lambda result, model: finish_result(result, model, run)  # noqa: E731
    return train_resnet_run(spec, make_model, run_growth, finish, data=data, run=run)


def criterion_config(scratch: dict) -> dict:
    """The config of the criterion run a scratch run takes its architecture from (same seed and settings)."""
    growth = {k: v for k, v in scratch["growth"].items() if k not in ("scratch_of", "scratch_v")}
    config = {**scratch, "policy": "criterion", "name": scratch["name"].replace("-scratch-", "-criterion-"),
              "growth": growth}  # fmt: skip
    if str(run_store.run_dir("", config)) != scratch["growth"]["scratch_of"]:
        raise UserError(f"{scratch['name']}: its criterion run {scratch['growth']['scratch_of']} is not this plan's")
    return config


def _ensure_finished(spec: RunSpec) -> None:
    """Run the criterion run ``spec`` unless it is finished; under ``--launcher local`` or SLURM its own job may hold
    it: wait for the holder (a dead holder's stale lock is taken over, :class:`common.runs.locks.RunLock`)."""
    while not run_store.is_done(spec.dir):
        log.info("grow by criterion: the scratch run needs %s", spec.name)
        run_store.prepare_run(spec.out, spec.config)
        try:
            with locks.RunLock(spec.dir):
                if not run_store.is_done(spec.dir):
                    grow_run(spec)
        except RunLocked:
            time.sleep(LOCK_POLL_S)


def starting_resnet(run: CriterionRun, data: VisionData) -> tuple[ResNet, dict]:
    """The sweep's randomly initialised ResNet-8 of the run's seed (the global RNG as its 01 run seeds it)."""
    return run.resnet(data.num_classes, depth_n=0), {}


def scratch_resnet(run: CriterionRun, data: VisionData, criterion: dict) -> tuple[ResNet, dict]:
    """The criterion's final architecture from random initialisation: the sweep's ResNet-8 of the seed as the sweep
    initialises it, the criterion's blocks inserted in its order with their ``U_l`` (random, from their seeds) and
    ``V_l`` drawn as the sweep draws every block's ``V`` (:func:`~common.models.resnet.init_weights`, from the block's
    seed: :data:`SCRATCH_V`): the same architecture and block family as the grown network, initialised as any network
    of the sweep is."""
    model, _ = starting_resnet(run, data)
    inserted = criterion["growth"]["inserted"]
    for record in inserted:
        block = insert_zero_block(model, int(record["place"]), seed=int(record["seed"]))
        init_weights(block.terminal, torch.Generator().manual_seed(int(record["seed"])))
    architecture = [{"place": int(r["place"]), "seed": int(r["seed"])} for r in inserted]
    return model, {"architecture": architecture, "scratch_of": run.growth.scratch_of}


def run_growth(run: CriterionRun, data: VisionData, device: torch.device) -> RunGrowth:
    """The run's growth: the controller for a policy arm, none for the controls; every arm on the budget."""
    budget = budget_flops(run, data)
    policy = run.policy in POLICIES
    decide = Controller(run, probe_examples(run, data, device), budget) if policy else None
    return RunGrowth(
        insertions=(),
        insert=lambda model, seed, place: (place, insert_zero_block(model, place, seed=seed)),
        decide=decide,
        budget_flops=budget,
        epoch_examples=epoch_examples(run, data),
        schedule_epochs=run.growth.budget_epochs,
        **growth_hooks(data, device),
    )


def finish_result(result: dict, model: ResNet, run: CriterionRun) -> dict:
    """The sweep's result with 09's keys: the arm, the final depth, why growth stopped, the probes."""
    growth = result.get("growth", {})
    probes = growth.get("probes", [])
    depth = len(model.blocks) - 3
    last = probes[-1] if probes else {}
    stop = {
        "why": last.get("stopped") or ("no growth (a control)" if not probes else "budget spent while growing"),
        "epoch": last.get("epoch"),
        "fraction": last.get("fraction"),
        "text": last.get("why"),
    }
    return {
        **result,
        "policy": run.policy,
        "depth_n": depth,
        "depth_label": 8 + depth,
        "stop": stop,
        "probes": probes,
        "probe_flops": int(growth.get("probe_flops", 0)),
        "budget_flops": int(growth["budget_flops"]),
    }


# ----------------------------------------------------------------------------- results
def read_runs(out: str | Path, problems: list | None = None) -> pd.DataFrame:
    """Every finished run under ``<out>/grow_by_criterion``, one row per run (:data:`RECORD_KEYS` among the columns,
    with the config's ``preset``, ``dataset`` and ``run_dir``), sorted by policy and seed. ``problems``: as
    :func:`common.runs.run_store.scan_runs`'s (malformed runs left out, listed there)."""
    found = run_store.scan_runs(Path(out) / EXPERIMENT, problems=problems, result_keys=RECORD_KEYS)
    frame = pd.DataFrame([r.row for r in found])
    if frame.empty:
        return pd.DataFrame(columns=["policy", "seed", "depth_n"])
    return frame.sort_values(["policy", "seed"], ignore_index=True)


PROBE_COLUMNS = ("v_max", "ag_max", "v_ref", "ratio", "val_loss", "app_g_verdict", "app_g_lower", "app_g_upper",
                 "app_g_asymptotic_lower", "app_g_asymptotic_upper", "chosen_candidate", "stopped")  # fmt: skip


def probe_frame(runs_frame: pd.DataFrame) -> pd.DataFrame:
    """One row per measured probe of every run of ``runs_frame`` (:func:`read_runs`): ``policy``, ``seed``,
    ``round`` (the probe's index), ``epoch``, ``depth_n`` (before its insertion), :data:`PROBE_COLUMNS`,
    ``train_loss`` (the clean training loss evaluated at that epoch), ``test_loss`` (not measured: NaN) and
    ``flops_cum`` (training FLOPs so far): what the post-hoc stopping rules of :mod:`common.report.grow_by_criterion_stopping` read."""
    rows = []
    for run in runs_frame.to_dict("records"):
        clean = {r["epoch"]: r.get("clean_loss") for r in run_store.read_metrics(run["run_dir"])}
        for probe in run.get("probes") or []:
            if "v_max" not in probe:  # a record of why growth stopped, nothing measured
                continue
            rows.append({
                "policy": run["policy"], "seed": run["seed"], "dataset": run.get("dataset"),
                "round": probe["probe"], "epoch": probe["epoch"], "depth_n": probe["depth_n"],
                **{k: probe.get(k) for k in PROBE_COLUMNS},
                "train_loss": clean.get(probe["epoch"]), "test_loss": math.nan, "flops_cum": probe["train_flops"],
            })  # fmt: skip
    frame = pd.DataFrame(rows, columns=["policy", "seed", "dataset", "round", "epoch", "depth_n", *PROBE_COLUMNS,
                                        "train_loss", "test_loss", "flops_cum"])  # fmt: skip
    frame["app_g_verdict"] = frame["app_g_verdict"].fillna("no verdict")
    return frame.astype({c: float for c in ("app_g_lower", "app_g_upper", "app_g_asymptotic_lower",
                                            "app_g_asymptotic_upper", "train_loss")})  # fmt: skip


def curve(run_dir: str | Path, result: dict) -> list[dict]:
    """Clean training loss against cumulative training FLOPs: every evaluated epoch of ``metrics.jsonl``, then the
    final evaluation at the run's total (``cost_flops`` adds the probe FLOPs spent by then)."""
    points = []
    for r in run_store.read_metrics(run_dir):
        if r.get("clean_loss") is not None:
            points.append({"epoch": r["epoch"], "train_flops": r["train_flops"], "train_loss": r["clean_loss"],
                           "cost_flops": r["train_flops"] + r.get("probe_flops", 0)})  # fmt: skip
    total = {"epoch": result["epochs"], "train_flops": result["train_flops"], "train_loss": result["train_loss"],
             "cost_flops": result["train_flops"] + result.get("probe_flops", 0)}  # fmt: skip
    if not points or points[-1]["epoch"] != total["epoch"]:
        points.append(total)
    else:
        points[-1] = total
    return points


TABLE_KEYS = (
    "policy", "seed", "depth_n", "stop_why", "stop_epoch", "probes", "epochs", "train_flops", "probe_flops",
    "budget_flops", "train_loss", "test_loss", "test_acc", "branch_inserted", "branch_original", "wall_s",
)  # fmt: skip


def run_table(records: Sequence[dict]) -> list[dict]:
    """One row per run: :data:`TABLE_KEYS` of each record (``stop_*`` from its ``stop``; ``probes`` counted;
    ``branch_*``: the mean branch / input norm of its inserted and of its other blocks at the end, from
    ``growth.branch_ratios``)."""
    rows = []
    for r in records:
        stop = r.get("stop") or {}
        row = {k: r.get(k) for k in TABLE_KEYS}
        row.update(stop_why=stop.get("why"), stop_epoch=stop.get("epoch"), probes=len(r.get("probes") or []))
        ratios = ratio_summary((r.get("growth") or {}).get("branch_ratios") or [])
        row.update(branch_inserted=ratios["inserted_mean"], branch_original=ratios["original_mean"])
        rows.append(row)
    return rows


def collect_records(plan: GrowPlan, out: str | Path) -> list[dict]:
    """Every run's result of the plan, in (arm, seed) order."""
    records = []
    for _, config in sorted(plan.configs.items()):
        path = run_store.run_dir(out, config)
        if not run_store.is_done(path):
            raise UserError(f"{path} is not finished; rerun 09_grow_by_criterion.py with the same flags")
        records.append(run_store.read_result(path, RECORD_KEYS))
    return records


def _number(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


TABLE_COLUMNS = tuple(tables.Column(k.replace("_", " "), lambda r, k=k: _number(r[k])) for k in TABLE_KEYS)


def markdown_table(rows: Sequence[dict]) -> str:
    note = (
        "One row per run; every run trains on the same budget of training FLOPs (budget flops) and schedule. depth n: "
        "blocks added to the ResNet-8 (scratch: the criterion's, from random initialisation); stop why / epoch: why "
        "and when growth stopped; probe flops: the controller's measuring, apart from training; losses clean, final; "
        "branch inserted / original: the norm of a block's branch output against its input on the clean training "
        "images at the end, averaged over the inserted blocks (scratch: the criterion's, trained from the start) and "
        "over the others."
    )
    return f"{tables.markdown_table(rows, TABLE_COLUMNS)}\n\n{note}"


def table_stem(dataset: str, plan: GrowPlan) -> str:
    p = plan.preset
    policies, seeds = "-".join(p.policies), "-".join(map(str, plan.seeds))
    return f"table-{dataset}-{policies}-b{p.budget_depth_n}-p{p.every}-seeds{seeds}"


def write_table(rows: Sequence[dict], out: str | Path, stem: str) -> tuple[Path, Path]:
    """``<out>/grow_by_criterion/<stem>.csv`` and ``.md``, written atomically."""
    return atomic.atomic_write_table(Path(out) / EXPERIMENT, stem, rows, markdown_table(rows))


def check_grow_data(configs: Sequence[dict]) -> None:
    """The data every run reads is there (before any run directory is made)."""
    for config in configs:
        load_sweep_data(CriterionRun.from_config(config))


__all__ = [
    "EXPERIMENT",
    "RECORD_KEYS",
    "GrowPlan",
    "budget_flops",
    "check_grow_data",
    "collect_records",
    "curve",
    "default_seeds",
    "grow_plan",
    "grow_run",
    "markdown_table",
    "probe_frame",
    "read_runs",
    "run_table",
    "table_stem",
    "write_table",
]
