"""Job module of ``09_grow_by_criterion.py``: the growth value ``V_S,l`` as a growth controller (beyond the paper).

One trajectory per (policy, seed), K rounds long (docs/decisions.md, section "Growth by the criterion
(09_grow_by_criterion.py)", for every choice below):

- Round 0 is the sweep's trained ResNet-8 (01's run, reused when it exists at the same data and preset, trained here
  with the sweep's own job otherwise), measured (:func:`common.experiments.grow_rounds.measure`: ``AG_l`` and
  ``V_S,l`` at every candidate on training batches; App. G's interval and the validation loss on held-apart images;
  the sweep's clean training loss, test loss and accuracy).
- Round r >= 1 loads round r - 1's trained model, reads the candidate its policy picks off round r - 1's
  measurement (criterion: argmax ``V_S,l``; ag: argmax ``AG_l``; cyclic: 03's schedule; random: seeded by (seed,
  r)), inserts the zero-output block of the ``conv3x3`` family the probe measured there (so ``V_S,l`` is that
  block's exact first-order value; the grown networks are not the sweep's BasicBlock ResNets), checks the outputs
  bit for bit in float64 in both BatchNorm modes, trains ``epochs_per_round`` epochs with the sweep's recipe (the
  schedule restarted, as 03), and measures the trained model.
- Each round is a run with its own directory (``<out>/grow_by_criterion/<dataset>-<policy>-r<r>-seed<s>-<hash>``)
  whose identity names its parent's, and its own ``result.json`` (:data:`RECORD_KEYS` and more). A trajectory is one
  job (:func:`grow_trajectory_run` on its last round) that runs its unfinished rounds in order, each resuming from its
  own checkpoint: a killed trajectory resumes at the round it was in, and a finished round is never retrained.

:func:`trajectory_table` gives one row per (policy, seed, round), written as CSV and markdown (:func:`write_table`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from common import runs, tables
from common.device import resolve_device, seed_everything
from common.errors import UserError
from common.experiments.grow_rounds import (
    choose,
    insert_chosen,
    load_round_model,
    measure,
    round_examples,
    train_round,
)
from common.flops import training_flops
from common.locks import RunLocked
from common.presets.choose import choose_preset
from common.presets.grow import PRESETS, GrowPreset, policies_of
from common.resnet_sweep import (
    load_sweep_data,
    load_trained_resnet,
    preset_seeds,
    sweep_configs,
    train_resnet_run,
)
from common.runs import RunSpec
from common.train import WEIGHTS

log = logging.getLogger(__name__)

EXPERIMENT = "grow_by_criterion"
BLOCK = "conv3x3 zero-output block (common.tangent), U_l seeded by the parent round's probe seed"
RECORD_KEYS = (  # what every round's result.json holds (the stopping rules read them as DataFrame columns)
    "policy", "seed", "round", "depth_n", "chosen_candidate", "chosen_v_s", "chosen_ag", "chosen_rank_v",
    "chosen_rank_ag", "candidates", "v_max", "ag_max", "app_g_verdict", "app_g_lower", "app_g_upper", "val_loss",
    "train_loss", "test_loss", "test_acc", "epochs_cum", "flops_cum", "wall_s",
)  # fmt: skip
LOCK_POLL_S = 5.0  # how often a trajectory waiting for a run its seed's policies share looks again
SHARED = "shared"  # round 0's ``policy``: one measured ResNet-8 per seed, every policy's first row
NO_CHOICE = dict.fromkeys(
    ("chosen_candidate", "chosen_index", "chosen_v_s", "chosen_ag", "chosen_rank_v", "chosen_rank_ag")
)


# ----------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class GrowPlan:
    """Every run of one invocation: per seed the sweep's ResNet-8, per (policy, seed) the round configs 0..K."""

    preset: GrowPreset
    seeds: tuple[int, ...]
    parents: dict[int, dict]  # seed -> the sweep's ResNet-8 config
    trajectories: dict[tuple[str, int], list[dict]]  # (policy, seed) -> round configs, round 0 first

    def jobs(self) -> list[dict]:
        """What the launcher runs: each trajectory's last round (it runs the whole trajectory)."""
        return [rounds[-1] for _, rounds in sorted(self.trajectories.items())]

    def describe(self, out: str | Path) -> str:
        lines = []
        for (policy, seed), rounds in sorted(self.trajectories.items()):
            done = sum(runs.is_done(runs.run_dir(out, c)) for c in rounds)
            lines.append(f"trajectory {policy} seed {seed}: rounds 0..{len(rounds) - 1}, {done} done")
        p = self.preset
        lines.append(
            f"each trajectory is one job under {Path(out) / EXPERIMENT}; round 0 is the sweep's ResNet-8, each later "
            f"round inserts one {BLOCK} and trains {p.epochs_per_round or 'the sweep'} epochs"
        )
        return "\n".join(lines)


def grow_plan(
    *, preset: str = "smoke", overrides: dict | None = None, seeds: Sequence[int] = (0,), **sweep_keywords: Any
) -> GrowPlan:
    """Plan the trajectories. ``overrides``: fields of :class:`common.presets.grow.GrowPreset` (None: the preset's);
    ``sweep_keywords``: :func:`common.resnet_sweep.sweep_configs`'s others (``dataset``, ``data_root``, ``device``,
    ``compile``, ``synthetic``)."""
    given = dict(overrides or {})
    if isinstance(given.get("policies"), str):  # --policy's comma-separated text
        given["policies"] = policies_of(given["policies"])
    p = choose_preset(PRESETS, preset, given)
    sweep = sweep_configs(
        preset=preset, overrides={"depths": [0], "train_subset": p.train_subset}, seeds=list(seeds), **sweep_keywords
    )
    parents = {c["seed"]: c for c in sweep}
    probe = {
        "batch_size": p.probe_batch_size,
        "n_batches": p.probe_batches,
        "held_out": p.held_out,
        "alpha": p.saturation_alpha,
        "cal_fraction": p.saturation_cal_fraction,
        "delta": p.saturation_delta,
    }
    trajectories = {}
    for policy in p.policies:
        for seed in seeds:
            epochs = p.epochs_per_round or parents[seed]["train"]["epochs"]
            trajectories[(policy, seed)] = _rounds(parents[seed], policy, p.rounds, epochs, probe)
    return GrowPlan(p, tuple(seeds), parents, trajectories)


def _shared_name(sweep: dict) -> str:
    return f"{sweep['dataset']}-r0-seed{sweep['seed']}"


def _rounds(sweep: dict, policy: str, rounds: int, epochs: int, probe: dict) -> list[dict]:
    """Round configs 0..K of one trajectory; each names its parent's run directory (relative to ``--out``). Round 0
    (the sweep's ResNet-8, measured) does not depend on the policy: its config is the same for every policy of a
    seed (``policy``: :data:`SHARED`), so it is one run that every trajectory of that seed starts from."""
    parent, out = str(runs.run_dir("", sweep)), []
    for r in range(rounds + 1):
        config = {
            "experiment": EXPERIMENT,
            "name": f"{sweep['dataset']}-{policy}-r{r}-seed{sweep['seed']}" if r else _shared_name(sweep),
            "preset": sweep["preset"],
            "dataset": sweep["dataset"],
            "policy": policy if r else SHARED,
            "seed": sweep["seed"],
            "round": r,
            "depth_n": r,
            "parent": parent,
            "block": BLOCK,
            "data": sweep["data"],
            "model": sweep["model"],
            "train": {**sweep["train"], "epochs": epochs if r else sweep["train"]["epochs"]},
            "probe": probe,
            "runtime": {**sweep["runtime"], "sweep": sweep},
        }
        out.append(config)
        parent = str(runs.run_dir("", config))
    return out


# ----------------------------------------------------------------------------- jobs
def trajectory_configs(config: dict) -> list[dict]:
    """The configs of round 0 .. ``config``'s round of the trajectory ending at ``config`` (a round >= 1)."""
    sweep = config["runtime"]["sweep"]
    epochs = config["train"]["epochs"] if config["round"] else sweep["train"]["epochs"]
    return _rounds(sweep, config["policy"], config["round"], epochs, config["probe"])


def default_seeds(preset: str, seed: int) -> list[int]:
    """The seeds 09 runs without ``--seeds``: 03's (:func:`common.resnet_sweep.preset_seeds` with ``growth``):
    ``--seed`` alone, under mini three seeds from it."""
    return preset_seeds(preset, seed, growth=True)


def grow_trajectory_run(spec: RunSpec) -> dict:
    """Job function: run every unfinished round of the trajectory ending at ``spec`` in order; its last result."""
    config, out = spec.config, Path(spec.out)
    sweep = config["runtime"]["sweep"]
    policy_rounds = trajectory_configs(config)
    _ensure_shared(RunSpec(config=sweep, out=out), train_resnet_run, "training the sweep's ResNet-8")
    first = RunSpec(config={**policy_rounds[0], "runtime": config["runtime"]}, out=spec.out)
    _ensure_shared(first, run_round, "measuring the shared round 0")
    result = runs.read_result(first.dir, RECORD_KEYS)
    for link_config in policy_rounds[1:]:
        link = RunSpec(config={**link_config, "runtime": config["runtime"]}, out=spec.out)
        if runs.is_done(link.dir):
            result = runs.read_result(link.dir, RECORD_KEYS)
            continue
        log.info("grow by criterion: running %s", link.name)
        runs.prepare_run(link.out, link.config)
        with runs.RunLock(link.dir):
            result = runs.read_result(link.dir) if runs.is_done(link.dir) else run_round(link)
    return result


def _ensure_shared(spec: RunSpec, job, what: str) -> None:
    """Run ``job(spec)`` unless ``spec``'s run is finished: the sweep's ResNet-8 and round 0, which the policies of
    one seed share. Under ``--launcher local`` or SLURM their jobs may reach it together, so the ones that find it
    locked wait for the holder (a holder that died leaves a stale lock, which :class:`common.locks.RunLock` takes
    over)."""
    while not runs.is_done(spec.dir):
        log.info("grow by criterion: %s %s", what, spec.name)
        runs.prepare_run(spec.out, spec.config)
        try:
            with runs.RunLock(spec.dir):
                if not runs.is_done(spec.dir):
                    job(spec)
        except RunLocked:
            time.sleep(LOCK_POLL_S)


def run_round(spec: RunSpec) -> dict:
    """One round: measure (round 0: the sweep's ResNet-8), or grow the parent, train, measure; writes result.json."""
    config, out = spec.config, Path(spec.out)
    path = runs.prepare_run(out, config)
    start = time.perf_counter()
    device = resolve_device(config["runtime"].get("device") or "auto")
    seed_everything(config["seed"] + 1000 * config["round"])
    sweep = config["runtime"]["sweep"]
    data = load_sweep_data(sweep)
    examples = round_examples(config, data, device)
    shape = tuple(data.x_train.shape[1:])
    parent_dir = out / config["parent"]
    if config["round"] == 0:
        model, trained = load_trained_resnet(parent_dir).to(device), runs.read_result(parent_dir)
        chain, choice, growth, history = [], NO_CHOICE, None, {"epochs_cum": trained["epochs"], "flops_cum": 0}
        state = {k: v.cpu() for k, v in model.state_dict().items()}  # the next round loads every parent alike
        runs.save_checkpoint(path / WEIGHTS, {"model": state})
    else:
        parent = runs.read_result(parent_dir, RECORD_KEYS)
        chain = parent["chain"]
        model = load_round_model(parent_dir, config, chain, data.num_classes).to(device)
        choice = choose(config["policy"], parent["candidates"], config["seed"], config["round"])
        link = {"index": choice["chosen_index"], "u_seed": parent["probe_seed"]}
        what = f"{config['name']}: inserting at {choice['chosen_candidate']}"
        model, growth = insert_chosen(model, link["index"], link["u_seed"], data, what)
        chain = [*chain, link]
        trained = train_round(model, config, data, path, device)
        history = {"epochs_cum": parent["epochs_cum"] + trained["epochs"], "flops_cum": parent["flops_cum"]}
    epochs = trained["epochs"]
    flops = training_flops(model, _input_shape(shape), data.num_classes, len(data.y_train), epochs)
    measured = measure(model, config, examples)
    result = {
        **{k: config[k] for k in ("dataset", "policy", "seed", "round", "depth_n")},
        **choice,
        "function_check": growth,
        "chain": chain,
        **{k: trained[k] for k in ("train_loss", "test_loss", "test_acc")},
        **measured,
        "epochs": epochs,
        "epochs_cum": history["epochs_cum"],
        "flops_round": flops,
        "flops_cum": history["flops_cum"] + flops,
        "train_size": len(data.y_train),
        "wall_s": (trained["wall_s"] if config["round"] else 0.0) + time.perf_counter() - start,
        "params": sum(q.numel() for q in model.parameters()),
    }
    runs.write_result(path, result)
    with_checkpoint = runs.checkpoint_path(path)
    if with_checkpoint.exists():
        with_checkpoint.unlink()
    return result


def _input_shape(stored: tuple) -> tuple:
    """(C, H, W) of the model's input from the stored images' shape (NHWC uint8, or NCHW)."""
    return stored if stored[0] in (1, 3) else (stored[2], stored[0], stored[1])


# ----------------------------------------------------------------------------- results
def collect_records(plan: GrowPlan, out: str | Path) -> list[dict]:
    """Every finished round's result of the plan, in (policy, seed, round) order."""
    records = []
    for _, rounds in sorted(plan.trajectories.items()):
        for config in rounds:
            path = runs.run_dir(out, config)
            if not runs.is_done(path):
                raise UserError(f"{path} is not finished; rerun 09_grow_by_criterion.py with the same flags")
            records.append(runs.read_result(path, RECORD_KEYS))
            records[-1]["policy"] = config["policy"] if config["round"] else rounds[-1]["policy"]
    return records


def read_trajectories(out: str | Path, problems: list | None = None) -> pd.DataFrame:
    """Every finished round under ``<out>/grow_by_criterion``, one row per round (:data:`RECORD_KEYS` among the
    columns, with the config's ``preset``, ``dataset`` and ``run_dir``), sorted by policy, seed and round: what the
    stopping rules read. ``problems``: as :func:`common.runs.scan_runs`'s (malformed rounds left out, listed there)."""
    found = runs.scan_runs(Path(out) / EXPERIMENT, problems=problems, result_keys=RECORD_KEYS)
    frame = pd.DataFrame([r.row for r in found], columns=None if found else ["policy", "seed", "round"])
    if not found:
        return frame
    shared, grown = frame[frame["round"] == 0], frame[frame["round"] > 0]
    starts = [  # the shared round 0 of a seed, once as the first row of each policy grown from it
        shared[shared["seed"] == seed].assign(policy=policy)
        for policy, seed in grown[["policy", "seed"]].drop_duplicates().itertuples(index=False)
    ]
    frame = pd.concat([*starts, grown], ignore_index=True)
    return frame.sort_values(["policy", "seed", "round"], ignore_index=True)


TABLE_KEYS = (
    "policy", "seed", "round", "depth_n", "chosen_candidate", "chosen_v_s", "chosen_ag", "chosen_rank_v",
    "chosen_rank_ag", "v_max", "ag_max", "app_g_verdict", "app_g_lower", "app_g_upper", "val_loss", "train_loss",
    "test_loss", "test_acc", "epochs_cum", "flops_cum", "wall_s",
)  # fmt: skip


def trajectory_table(records: Sequence[dict]) -> list[dict]:
    """One row per (policy, seed, round): :data:`TABLE_KEYS` of each record."""
    return [{k: r.get(k) for k in TABLE_KEYS} for r in records]


def _number(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


TABLE_COLUMNS = tuple(tables.Column(k.replace("_", " "), lambda r, k=k: _number(r[k])) for k in TABLE_KEYS)


def markdown_table(rows: Sequence[dict]) -> str:
    note = (
        "One row per (policy, seed, round); round 0 is the sweep's ResNet-8. chosen_*: the candidate this round's "
        "block went to, with its V_S,l, AG_l and ranks on the parent; v_max, ag_max, App. G and the losses are the "
        "round's trained model's; flops_cum: training FLOPs counted from the models (common.flops)."
    )
    return f"{tables.markdown_table(rows, TABLE_COLUMNS)}\n\n{note}"


def table_stem(dataset: str, plan: GrowPlan) -> str:
    p = plan.preset
    policies, seeds = "-".join(p.policies), "-".join(map(str, plan.seeds))
    epochs = p.epochs_per_round or "sweep"  # None: the sweep's epochs per round
    return f"table-{dataset}-{policies}-k{p.rounds}-e{epochs}-seeds{seeds}"


def write_table(rows: Sequence[dict], out: str | Path, stem: str) -> tuple[Path, Path]:
    """``<out>/grow_by_criterion/<stem>.csv`` and ``.md``, written atomically."""
    return runs.atomic_write_table(Path(out) / EXPERIMENT, stem, rows, markdown_table(rows))


def check_grow_data(configs: Sequence[dict]) -> None:
    """The data every trajectory reads is there (before any run directory is made)."""
    for config in configs:
        load_sweep_data(config["runtime"]["sweep"])


__all__ = [
    "EXPERIMENT",
    "RECORD_KEYS",
    "GrowPlan",
    "check_grow_data",
    "collect_records",
    "default_seeds",
    "grow_plan",
    "grow_trajectory_run",
    "markdown_table",
    "read_trajectories",
    "run_round",
    "table_stem",
    "trajectory_configs",
    "trajectory_table",
    "write_table",
]
