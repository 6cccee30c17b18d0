"""Job module of ``03_growth_vs_scratch.py``: function-preserving growth against training from scratch.

Paper, "Function-preserving growth": CIFAR-10 ResNet-10, -11, -12 and -13 grown one globally
zero-output block at a time, against the same final architectures trained from random
initialisation (docs/decisions.md, section "Function-preserving growth", for every choice below).

Protocol (one growth run per final depth N and seed):

- The run starts from a randomly initialised ResNet-8 (the sweep's ResNet-8 of that seed at step 0: same
  initialisation, same batches) and trains the sweep's epochs on the sweep's one schedule. Its ``k``-th block goes
  in before the epoch the preset's fraction ``insert_at[k - 1]`` gives (:meth:`~common.presets.growth_vs_scratch.GrowthPreset.insert_epochs`),
  where the sweep's ResNet-(8+k) has it (stage ``(k - 1) mod 3``, at its end: :func:`common.models.resnet.grow`),
  at a zero output: the network's own block ``z + V relu(BN(conv_U z))`` with ``V = 0``, the probe's ``conv3x3``
  candidate at that place, ``U`` drawn from :func:`block_seed` and the place. The growth
  engine (:mod:`common.training.growing`) checks the function bit for bit in float64 in train and eval mode, keeps
  every old parameter's optimizer state, gives the new block none, and never restarts the schedule.
- Scratch is the sweep's own run of ResNet-(8+N) (:func:`~common.experiments.shared.resnet_sweep.sweep_configs`): the same epochs,
  schedule, seed and batches; a finished sweep run is reused, a missing one trained here (under ``resnet_sweep/``).
- The ablation (``ablation_depths``): the same growth run with the optimizer and the schedule restarted at every
  insertion (the earlier stage-by-stage recipe, in the engine), so the report shows what the restart alone costs.

Each growth run has its own directory (``<out>/growth_vs_scratch/<dataset>-grown-resnet<d>-n<N>-seed<s>-<hash>``,
``-restart`` for the ablation) and resumes from its checkpoint. :func:`collect_records` reads the finished runs; the
tables' rows are built in :mod:`common.experiments.growth_vs_scratch_tables` (the comparison at equal steps and the
restart's cost), written here as markdown (:func:`markdown_table`, :func:`ablation_markdown`) and files.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from common.data.vision import VisionData
from common.errors import ParamError, UserError
from common.experiments.growth_vs_scratch_config import GrowthRun
from common.experiments.growth_vs_scratch_tables import ARMS, METHODS, METRICS, tail_fall, tail_slope
from common.experiments.shared.resnet_sweep import (
    growth_hooks,
    preset_seeds,
    sweep_configs,
    train_resnet_run,
)
from common.models.resnet import ResNet, depth_label, grow
from common.presets.growth_vs_scratch import growth_preset, insert_fractions
from common.runs import atomic, run_store, tables
from common.runs.run_store import RunSpec
from common.science.branch_scale import ratio_summary
from common.training.growing import Insertion, RunGrowth

log = logging.getLogger(__name__)

EXPERIMENT = "growth_vs_scratch"
INSERTION = "cyclic, end of stage (k-1) mod 3"  # where the k-th block goes (common.models.resnet.extra_block_position)
ZERO_INIT = "conv3x3 block, V = 0, U Kaiming-normal from (block seed, place)"


# ----------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class GrowthPlan:
    """Every run of one invocation: per (seed, N) a growth run and the sweep's scratch run; the ablation's runs."""

    depths: tuple[int, ...]  # N of the table's rows
    seeds: tuple[int, ...]
    insert_at: tuple[float, ...]  # the preset's fractions
    epochs: int  # every run's (the sweep's)
    growth: dict[tuple[int, int], dict]  # (seed, N) -> growth run config
    scratch: dict[tuple[int, int], dict]  # (seed, N) -> the sweep's run config
    ablation: dict[tuple[int, int], dict]  # (seed, N) -> growth run config, restarted at every insertion

    def jobs(self) -> list[dict]:
        """What the launcher runs: every growth run, the ablation's, then every scratch run."""
        return [*self.growth.values(), *self.ablation.values(), *self.scratch.values()]

    def describe(self, out: str | Path) -> str:
        """One line per depth: its insertion epochs and each run's state; the ablation's."""
        lines = []
        for n in self.depths:
            at = self.growth[(self.seeds[0], n)]["growth"]["epochs"]
            states = ", ".join(
                f"seed {s} growth {_state(out, self.growth[(s, n)])} / scratch {_state(out, self.scratch[(s, n)])}"
                + (f" / restart {_state(out, self.ablation[(s, n)])}" if (s, n) in self.ablation else "")
                for s in self.seeds
            )
            lines.append(f"ResNet-{depth_label(n)}: blocks in before epochs {', '.join(map(str, at))}; {states}")
        lines.append(
            f"every run trains {self.epochs} epochs on one schedule (scratch: the sweep's run); growth runs under "
            f"{Path(out) / EXPERIMENT}, each resuming from its checkpoint"
        )
        return "\n".join(lines)


def _state(out: str | Path, config: dict) -> str:
    return "done" if run_store.is_done(run_store.run_dir(out, config)) else "todo"


def growth_plan(
    *, preset: str = "smoke", overrides: dict | None = None, seeds: Sequence[int] = (0,), **sweep_keywords: Any
) -> GrowthPlan:
    """Plan the growth, scratch and ablation runs (docs/decisions.md, section "Function-preserving growth").
    ``sweep_keywords`` are :func:`~common.experiments.shared.resnet_sweep.sweep_configs`'s others (``dataset``, ``data_root``,
    ``device``, ``compile``, ``synthetic``): every run is one of the sweep's configs.

    ``overrides``: fields of the preset's :class:`~common.presets.growth_vs_scratch.GrowthPreset`, None meaning "the
    preset's": ``depths``, ``insert_at`` (fractions of the run, one per block), ``ablation_depths`` (left out with
    ``depths`` given: the preset's among them, else the deepest of them where the preset has an ablation),
    ``train_subset`` (as in :func:`~common.experiments.shared.resnet_sweep.sweep_configs`).
    """
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if "insert_at" in given:
        given["insert_at"] = insert_fractions(given["insert_at"])
    for key in ("depths", "ablation_depths"):
        if key in given:
            given[key] = tuple(sorted(set(given[key])))
    base = growth_preset(preset)
    if "depths" in given and "ablation_depths" not in given and base.ablation_depths:  # the preset's, at these depths
        kept = tuple(n for n in base.ablation_depths if n in given["depths"])
        given["ablation_depths"] = kept or (max(given["depths"]),)
    p = replace(base, **given)
    seeds = tuple(dict.fromkeys(seeds))
    if not seeds:
        raise ParamError("seeds", "(none)", "give at least one seed")
    keys = {"depths": p.depths, "train_subset": p.train_subset}
    sweep = sweep_configs(preset=preset, overrides=keys, seeds=seeds, **sweep_keywords)
    scratch = {(c["seed"], c["depth_n"]): c for c in sweep}
    epochs = sweep[0]["train"]["epochs"]
    for n in p.depths:
        p.insert_epochs(epochs, n)  # each insertion on an epoch of its own, before any run directory exists
    growth = {key: growth_config(c, p.insert_at, p.insert_epochs(epochs, key[1])) for key, c in scratch.items()}
    ablation = {
        key: growth_config(c, p.insert_at, p.insert_epochs(epochs, key[1]), restart=True)
        for key, c in scratch.items()
        if key[1] in p.ablation_depths
    }
    return GrowthPlan(p.depths, seeds, p.insert_at, epochs, growth, scratch, ablation)


def default_seeds(preset: str, seed: int) -> list[int]:
    """The seeds without ``--seeds``: the growth preset's count from ``seed`` (mini: the sweep's two), else the sweep
    preset's growth seeds (:func:`~common.experiments.shared.resnet_sweep.preset_seeds`)."""
    count = growth_preset(preset).seeds
    return [seed + i for i in range(count)] if count else preset_seeds(preset, seed, growth=True)


def growth_config(base: dict, insert_at: Sequence[float], epochs: Sequence[int], *, restart: bool = False) -> dict:
    """The growth run of the sweep's config ``base`` (the final ResNet-(8+N)): the same data, widths, recipe and
    seed, from a ResNet-8 with N blocks inserted before ``epochs``; ``restart``: the ablation."""
    n = base["depth_n"]
    name = f"{base['dataset']}-grown-resnet{base['depth_label']}-n{n}-seed{base['seed']}"
    return {
        **base,
        "experiment": EXPERIMENT,
        "name": name + ("-restart" if restart else ""),
        "growth": {
            "start_depth_n": 0,
            "insert_at": list(insert_at[:n]),
            "epochs": list(epochs),
            "insertion": INSERTION,
            "zero_init": ZERO_INIT,
            "schedule": "restarted at every insertion" if restart else "one",
        },
    }


def is_growth(config: dict) -> bool:
    return config.get("experiment") == EXPERIMENT and "growth" in config


def is_restart(config: dict) -> bool:
    return is_growth(config) and config["growth"].get("schedule") != "one"


# ----------------------------------------------------------------------------- jobs
def growth_vs_scratch_run(spec: RunSpec) -> dict:
    """Job function of script 03: a growth run (the engine of :mod:`common.training.growing`) or a scratch run (the
    sweep's job)."""
    if not is_growth(spec.config):
        return train_resnet_run(spec)
    return train_resnet_run(spec, starting_resnet, run_growth, run=GrowthRun.from_config(spec.config))


def starting_resnet(run: GrowthRun, data: VisionData) -> tuple[ResNet, dict]:
    """The randomly initialised ResNet-8 a growth run starts from (the global RNG seeded with the run's seed, as the
    sweep's ResNet-8 of that seed), checked to grow into ResNet-(8+N)'s exact modules and ``state_dict`` shapes."""
    model = run.resnet(data.num_classes, depth_n=run.growth.start_depth_n)
    final = copy.deepcopy(model)
    for _ in run.growth.epochs:
        grow(final, 0)
    shapes = {k: tuple(v.shape) for k, v in final.state_dict().items()}
    with torch.device("meta"):  # shapes only: the global RNG stays as the sweep's run of this seed leaves it
        target = {k: tuple(v.shape) for k, v in run.resnet(data.num_classes).state_dict().items()}
    if shapes != target:
        raise RuntimeError(f"growth does not reach ResNet-{run.depth_label}: {sorted(set(shapes) ^ set(target))}")
    return model, {}


def run_growth(run: GrowthRun, data: VisionData, device: torch.device) -> RunGrowth:
    """The growth plan of one run: block ``k`` before ``growth.epochs[k - 1]``, drawn from :func:`block_seed`; the
    float64 check and the FLOP count of :func:`~common.experiments.shared.resnet_sweep.growth_hooks`."""
    plan = run.growth
    insertions = tuple(Insertion(e, block_seed(run.seed, k)) for k, e in enumerate(plan.epochs, start=1))
    return RunGrowth(
        insertions=insertions,
        insert=lambda model, seed, place: grow(model, seed),
        restart=plan.restart,
        **growth_hooks(data, device),
    )


def block_seed(seed: int, k: int) -> int:
    """Seed of the random weights ``U`` of the ``k``-th block a run of seed ``seed`` inserts (with its place:
    :func:`common.science.tangent.protocol_seed`)."""
    return int(hashlib.sha256(f"growth-block:{int(seed)}:{int(k)}".encode()).hexdigest()[:15], 16)


# ----------------------------------------------------------------------------- results
def collect_records(plan: GrowthPlan, out: str | Path, which: str = "growth") -> list[dict]:
    """One record per (method, depth, seed) from finished runs: ``growth`` (the one-schedule runs) or ``restart``
    (the ablation's) against the same seed's scratch run, at the table's depths (the ablation's: its own).

    ``train_flops``: growth's as counted during the run; scratch's the same count at its fixed depth (the growth
    run's FLOPs per image at the final depth, the same architecture) times the images it trained (steps x batch).
    ``train_loss_slope``: the running training loss's least-squares slope per epoch over the run's last epochs
    (:func:`~common.experiments.growth_vs_scratch_tables.tail_slope`), to say whether it had converged.
    """
    grown = plan.growth if which == "growth" else plan.ablation
    records = []
    for (seed, n), config in sorted(grown.items()):
        result = finished_result(out, config)
        per_image = int(result["growth"]["flops_per_example"])
        for method, c in ((which, config), ("scratch", plan.scratch[(seed, n)])):
            r = result if c is config else finished_result(out, c)
            flops = r["train_flops"] if c is config else per_image * r["steps"] * c["train"]["batch_size"]
            records.append(
                {
                    "method": "growth" if method == which else method,
                    "depth_n": n,
                    "depth_label": depth_label(n),
                    "seed": seed,
                    "epochs": r["epochs"],
                    "total_epochs": r["epochs"],
                    "train_flops": float(flops),
                    "train_loss_slope": tail_slope(history := run_store.read_metrics(run_store.run_dir(out, c))),
                    "train_loss_tail_fall": tail_fall(history),
                    **branch_columns(r if c is config else None),
                    **{k: r[k] for k in METRICS},
                }
            )
    return records


def branch_columns(result: dict | None) -> dict[str, float]:
    """A growth run's blocks at its end, branch output against input (``growth.branch_ratios``): the mean over its
    inserted blocks (``branch_inserted``) and over its original three (``branch_original``); NaN for a scratch run
    (no record of it) or a growth run from before the records held it."""
    ratios = ((result or {}).get("growth") or {}).get("branch_ratios")
    summary = ratio_summary(ratios) if ratios else {}
    return {f"branch_{kind}": summary.get(f"{kind}_mean", math.nan) for kind in ("inserted", "original")}


def finished_result(out: str | Path, config: dict) -> dict:
    path = run_store.run_dir(out, config)
    if not run_store.is_done(path):
        raise UserError(f"{path} is not finished; rerun 03_growth_vs_scratch.py with the same flags to run it")
    return run_store.read_run(path).result


def markdown_table(rows: Sequence[dict]) -> str:
    """The table as markdown: growth | scratch per metric (mean ± std over seeds), winners, FLOPs, paper values."""
    note = (
        f"Mean ± sample std over {_seeds(rows)} seed(s); reduction = scratch - growth test loss (%: of the scratch mean). "
        "Both sides train the same epochs and steps on one schedule; growth starts from a ResNet-8 and spends fewer "
        "FLOPs (counted by common/training/flops.py at each epoch's depth). Slope: the running training loss's change per "
        "epoch over the last 10% of the epochs (near 0: levelled off); fall: how much its least-squares line fell "
        "over those epochs, as a fraction of its last value. Branch / input: the norm of a block's branch output "
        "V psi(z) against its input on the clean training images at the end of the growth run, averaged over the "
        "inserted blocks and over the three the ResNet-8 started with (common/science/branch_scale.py). "
        "In parentheses: the paper's CIFAR-10 values (common/presets/paper.py; per architecture it reports only which "
        "method has the lower loss, and the smallest and largest test-loss reductions)."
    )
    return f"{tables.markdown_table(rows, TABLE_COLUMNS)}\n\n{note}"


def _seeds(rows: Sequence[dict]) -> int:
    return rows[0]["seeds"] if rows else 0


def _cell(r: dict, key: str) -> str:
    mean, std = r[key], r.get(f"{key}_std", math.nan)
    return f"{mean:.4f}" + ("" if math.isnan(std) else f" ± {std:.4f}")


def _with_paper(text: str, value) -> str:
    if value is None:
        return text
    return f"{text} ({value})" if isinstance(value, str) else f"{text} ({value:.4f})"


def epochs_cell(r: dict) -> str:
    """``growth / scratch`` epochs of one row ("-" where not recorded: the mean row)."""
    values = [r.get(f"{m}_epochs") for m in METHODS]
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
        return "-"
    return " / ".join(str(int(v)) for v in values)


def _pair_cell(r: dict, key: str, fmt: str, methods: Sequence[str] = METHODS) -> str:
    """``a / b``: each method's mean of ``key`` (empty ``key``: the columns ``methods`` name; "-" where absent)."""
    values = [r.get(f"{m}_{key}" if key else m) for m in methods]
    return " / ".join("-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt) for v in values)


def _reduction_cell(r: dict) -> str:
    reduction = f"{_cell(r, 'test_loss_reduction')} = {100 * r['test_loss_reduction_rel']:.1f}%"
    if r["paper_test_loss_reduction"] is not None:
        rel = r["paper_test_loss_reduction_rel"]
        reduction += f" ({r['paper_test_loss_reduction']:.4f}" + (f" = {100 * rel:.1f}%)" if rel is not None else ")")
    return reduction


def _loss_column(method: str, metric: str) -> tables.Column:
    """``<method> <metric>``: mean ± std, the paper's value beside it."""
    key = f"{method}_{metric}"
    return tables.Column(key.replace("_", " "), lambda r: _with_paper(_cell(r, key), r[f"paper_{key}"]))


TABLE_COLUMNS = (  # the markdown table of growth_table's rows
    tables.Column("model", fmt=""),
    tables.Column("epochs: growth / scratch", epochs_cell),
    tables.Column("training FLOPs: growth / scratch", lambda r: _pair_cell(r, "train_flops", ".3g")),
    *(_loss_column(m, "train_loss") for m in METHODS),
    tables.Column("lower train loss", lambda r: _with_paper(r["train_winner"], r["paper_train_winner"])),
    tables.Column(
        "growth's branch / input at the end: inserted / original blocks",
        lambda r: _pair_cell(r, "", ".3f", ("growth_branch_inserted", "growth_branch_original")),
    ),
    tables.Column("train-loss slope: growth / scratch", lambda r: _pair_cell(r, "train_loss_slope", ".2e")),
    tables.Column("fall over the last 10%: growth / scratch", lambda r: _pair_cell(r, "train_loss_tail_fall", ".1%")),
    *(_loss_column(m, "test_loss") for m in METHODS),
    tables.Column("test-loss reduction", _reduction_cell),
    tables.Column("lower test loss", lambda r: _with_paper(r["test_winner"], r["paper_test_winner"])),
    *(tables.Column(f"{m} test acc", lambda r, m=m: _cell(r, f"{m}_test_acc")) for m in METHODS),
)


# ----------------------------------------------------------------------------- the restart ablation

ABLATION_COLUMNS = (
    tables.Column("model", fmt=""),
    *(tables.Column(f"{a} train loss", lambda r, a=a: _cell(r, f"{a}_train_loss")) for a in ARMS),
    tables.Column("restart's cost, train loss", lambda r: _cell(r, "restart_cost_train_loss")),
    *(tables.Column(f"{a} test loss", lambda r, a=a: _cell(r, f"{a}_test_loss")) for a in ARMS),
    tables.Column("restart's cost, test loss", lambda r: _cell(r, "restart_cost_test_loss")),
    *(tables.Column(f"{a} test acc", lambda r, a=a: _cell(r, f"{a}_test_acc")) for a in ARMS),
    tables.Column("training FLOPs: " + " / ".join(ARMS), lambda r: _pair_cell(r, "train_flops", ".3g", ARMS)),
    tables.Column("train-loss slope: " + " / ".join(ARMS), lambda r: _pair_cell(r, "train_loss_slope", ".2e", ARMS)),
)


def ablation_markdown(rows: Sequence[dict]) -> str:
    """The restart ablation's table as markdown (the rows of
    :func:`~common.experiments.growth_vs_scratch_tables.ablation_table`), with what each arm is."""
    note = (
        f"Mean ± sample std over {_seeds(rows)} seed(s). growth: one schedule, optimizer state kept at every insertion; "
        "restart: the same insertions with a fresh optimizer and the warm-up and cosine restarted over each segment "
        "(the earlier stage-by-stage recipe); scratch: the sweep's run. Cost = restart - growth, paired by seed "
        "(positive: the restart is worse)."
    )
    return f"{tables.markdown_table(rows, ABLATION_COLUMNS)}\n\n{note}"


# ----------------------------------------------------------------------------- files
def table_stem(dataset: str, plan: GrowthPlan, kind: str = "table") -> str:
    """Name of a table's files: ``table`` (growth against scratch) or ``ablation``, the dataset, the runs' epochs,
    the insertion fractions in percent, the seeds."""
    at = "-".join(f"{100 * f:g}" for f in plan.insert_at[: max(plan.depths)])
    return f"{kind}-{dataset}-e{plan.epochs}-at{at}-seeds{'-'.join(map(str, plan.seeds))}"


def write_table(rows: Sequence[dict], out: str | Path, stem: str, markdown: str | None = None) -> tuple[Path, Path]:
    """``<out>/growth_vs_scratch/<stem>.csv`` and ``.md`` (default: :func:`markdown_table`), written atomically."""
    return atomic.atomic_write_table(Path(out) / EXPERIMENT, stem, rows, markdown or markdown_table(rows))


__all__ = [
    "ABLATION_COLUMNS",
    "ARMS",
    "EXPERIMENT",
    "GrowthPlan",
    "ablation_markdown",
    "block_seed",
    "collect_records",
    "default_seeds",
    "epochs_cell",
    "growth_config",
    "growth_plan",
    "growth_vs_scratch_run",
    "is_growth",
    "is_restart",
    "markdown_table",
    "run_growth",
    "starting_resnet",
    "table_stem",
    "write_table",
]
