"""Job module of ``03_growth_vs_scratch.py``: function-preserving growth against training from scratch.

Paper, "Function-preserving growth": CIFAR-10 ResNet-10, -11, -12 and -13 grown one globally
zero-output block at a time, against the same final architectures trained from random
initialisation (docs/decisions.md, section "Function-preserving growth", for every choice below).

Protocol (one growth chain per seed):

- The chain starts from a ResNet-8 (N = 0) trained with the sweep's job and recipe for the parent's epochs: at
  the sweep's epochs (paper, smoke) it is the sweep's own run of ``01_train_resnet_sweep.py``, reused, or trained
  here when missing; at any other (mini) a run of this experiment (``<dataset>-parent-resnet8-n0-seed<s>-e<epochs>``).
- Stage ``N`` (N = 1, 2, ...) loads the trained model of stage ``N - 1``, inserts extra block
  ``N - 1`` where the sweep's ResNet-(8+N) has it (stage ``(N - 1) mod 3``, at its end;
  :func:`common.models.resnet.grow`) at a zero output (zero-gamma on its last BatchNorm), checks
  that the outputs are unchanged bit for bit in float64 in train and eval mode
  (:func:`common.growth.check_function_preserved`), and trains with the sweep's recipe for
  ``stage_epochs`` (fresh optimiser: every momentum buffer starts at zero; the warm-up and cosine
  schedule restart). The trained model at N = 2, 3, 4, 5 is the grown ResNet-10, ..., -13.
- Each stage is a run with its own directory (``<out>/growth_vs_scratch/<dataset>-grown-resnet<d>-n<N>-seed<s>-<hash>``)
  whose identity names its parent's run directory, so a change anywhere upstream gives new
  stages. The chain is one job (:func:`growth_vs_scratch_run` on the chain's last stage): it
  runs every unfinished stage in order, each resuming from its own checkpoint, so a requeued or
  rerun job continues from the last finished stage and never redoes one.
- Scratch is the sweep's own job and configs (:func:`~common.resnet_sweep.sweep_configs`) for ResNet-(8+N), in
  one or more arms of different budgets: ``total`` (the epochs the grown ResNet-(8+N) has behind it, the parent's
  plus N stages': the arm the claims report's verdicts read) and ``sweep`` (the sweep's fixed epochs) by default.
  At the sweep's epochs the config *is* the sweep's run, so a finished sweep run is reused; any other budget is a
  run of this experiment (``<dataset>-scratch-resnet<d>-n<N>-seed<s>-e<epochs>``), so that script 02 never probes
  it. Each arm has its own table.

:func:`growth_table` builds the comparison (means over seeds, the relative test-loss reduction
of the mean, the per-row winner, the paper's values from ``common/paper.py`` beside them).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from common import runs, tables
from common.data.loader import TensorLoader
from common.data.vision import VisionData
from common.errors import ParamError, UserError
from common.growth import check_function_preserved
from common.models.resnet import ResNet, depth_label, extra_block_position, grow
from common.paper import (
    GROWTH_DEPTHS,
    GROWTH_LOWER_TEST_LOSS,
    GROWTH_LOWER_TRAIN_LOSS,
    GROWTH_MEAN_TEST_LOSS,
    GROWTH_MEAN_TRAIN_LOSS,
    GROWTH_TEST_ABS_REDUCTION_RANGE,
    GROWTH_TEST_RELATIVE_REDUCTION,
)
from common.presets.growth import growth_preset, scratch_budgets
from common.resnet_sweep import build_resnet, load_trained_resnet, sweep_configs, train_resnet_run
from common.runs import RunSpec

log = logging.getLogger(__name__)

EXPERIMENT = "growth_vs_scratch"
INSERTION = (
    "cyclic, end of stage (N-1) mod 3"  # where stage N puts its block (common.models.resnet.extra_block_position)
)
ZERO_INIT = "zero-gamma: last BatchNorm weight and bias 0, both convolutions Kaiming-normal"
CHECK_BATCH = 8  # training images in the run-time function-preservation check
METRICS = ("train_loss", "test_loss", "test_acc")
METHODS = ("growth", "scratch")


# ----------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class ScratchArm:
    """The scratch runs of one budget: ``total`` (growth's epochs in all at each depth: the arm the verdicts read),
    ``sweep`` (the sweep's fixed epochs: its runs), ``per-stage`` (one stage's epochs) or ``e<epochs>`` (given)."""

    budget: str
    epochs: dict[int, int]  # N -> epochs of each scratch run
    runs: dict[tuple[int, int], dict]  # (seed, N) -> config
    seeds: tuple[int, ...]  # the chains' seeds this arm pairs with (mini's sweep arm: the sweep's two)


@dataclass(frozen=True)
class GrowthPlan:
    """Every run of one invocation: per seed the chain's parent ResNet-8 and its stage configs, and each scratch arm."""

    depths: tuple[int, ...]  # N of the table's rows
    seeds: tuple[int, ...]
    parents: dict[int, dict]  # seed -> the chain's ResNet-8 config (the sweep's own run at the sweep's epochs)
    chains: dict[int, list[dict]]  # seed -> stage configs for N = 1 .. max(depths)
    arms: tuple[ScratchArm, ...]  # the first is the arm the claims report's verdicts read (docs/decisions.md)
    stage_epochs: int
    parent_epochs: int
    sweep_epochs: int

    @property
    def scratch(self) -> dict[tuple[int, int], dict]:
        """The first arm's runs: (seed, N) -> config."""
        return self.arms[0].runs

    @property
    def scratch_epochs(self) -> dict[int, int]:
        """The first arm's epochs: N -> epochs."""
        return self.arms[0].epochs

    def jobs(self) -> list[dict]:
        """What the launcher runs: each chain's last stage (it runs the whole chain), then every scratch run once."""
        scratch = {runs.run_dir("", c): c for arm in self.arms for _, c in sorted(arm.runs.items())}
        return [self.chains[s][-1] for s in self.seeds] + list(scratch.values())

    def stage(self, seed: int, n: int) -> dict:
        return self.chains[seed][n - 1]

    def growth_epochs(self, n: int) -> int:
        """Every epoch behind the grown ResNet-(8+N): the parent's plus N stages'."""
        return self.parent_epochs + n * self.stage_epochs

    def describe(self, out: str | Path) -> str:
        """One line per chain: the parent and every stage, each ``[done]`` or ``[todo]``; one line per scratch arm."""
        lines = []
        for seed in self.seeds:
            kind = "sweep run" if self.parent_epochs == self.sweep_epochs else f"{self.parent_epochs} epochs"
            links = [f"ResNet-8 ({_state(out, self.parents[seed])}, {kind})"]
            links += [f"ResNet-{c['depth_label']} ({_state(out, c)})" for c in self.chains[seed]]
            lines.append(f"growth chain seed {seed}: " + " -> ".join(links))
        lines.append(
            f"each chain is one job (its last stage), which runs every unfinished stage in order in its own run "
            f"directory under {Path(out) / EXPERIMENT}; stages train {self.stage_epochs} epochs, after a ResNet-8 of "
            f"{self.parent_epochs}; growth's epochs in all: "
            + ", ".join(f"ResNet-{depth_label(n)} {self.growth_epochs(n)}" for n in self.depths)
        )
        for i, arm in enumerate(self.arms):
            role = "the verdicts' arm" if i == 0 and arm.budget == "total" else "beside it" if i else "its only arm"
            lines.append(
                f"scratch ({arm.budget}, {role}): "
                + ", ".join(f"ResNet-{depth_label(n)} {e}" for n, e in sorted(arm.epochs.items()))
                + " epochs"
                + ("" if arm.seeds == self.seeds else f", seeds {', '.join(map(str, arm.seeds))} (the sweep's)")
            )
        return "\n".join(lines)


def _state(out: str | Path, config: dict) -> str:
    return "done" if runs.is_done(runs.run_dir(out, config)) else "todo"


def growth_plan(
    *, preset: str = "smoke", overrides: dict | None = None, seeds: Sequence[int] = (0,), **sweep_keywords: Any
) -> GrowthPlan:
    """Plan the growth chains and scratch runs (budgets and their defaults: docs/decisions.md, section
    "Function-preserving growth"). ``sweep_keywords`` are :func:`~common.resnet_sweep.sweep_configs`'s others
    (``dataset``, ``data_root``, ``device``, ``compile``, ``synthetic``): every run is one of the sweep's configs.

    ``overrides``: fields of the preset's :class:`~common.presets.growth.GrowthPreset`, None meaning "the
    preset's": ``depths`` (N of the table's rows), ``stage_epochs`` (every growth stage's; None in the preset: the
    sweep's epochs), ``parent_epochs`` (the chain's ResNet-8's; None: the sweep's, so the chain starts from the
    sweep's own run), ``train_subset`` (as in :func:`~common.resnet_sweep.sweep_configs`: the parent, every stage
    and scratch train on the same images), and the scratch arms: ``scratch_epochs`` alone if given, else
    ``scratch_budget``, one or more of ``total`` (growth's epochs in all: the parent's plus N stages'), ``sweep``
    (the sweep's epochs: its finished runs are reused) and ``per-stage`` (one stage's epochs). A scratch run at the
    sweep's epochs is the sweep's own run.
    """
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if isinstance(given.get("scratch_budget"), str):
        given["scratch_budget"] = scratch_budgets(given["scratch_budget"])
    if "depths" in given:
        given["depths"] = tuple(sorted(set(given["depths"])))
    p = replace(growth_preset(preset), **given)
    seeds = tuple(dict.fromkeys(seeds))
    if not seeds:
        raise ParamError("seeds", "(none)", "give at least one seed")

    def sweep(depths: Sequence[int], seeds: Sequence[int], epochs: int | None = None) -> list[dict]:
        """The sweep's configs at ``epochs`` (None: its own)."""
        keys = {"depths": depths, "epochs": epochs, "train_subset": p.train_subset}
        return sweep_configs(preset=preset, overrides=keys, seeds=seeds, **sweep_keywords)

    sweep_epochs = sweep([0], seeds[:1])[0]["train"]["epochs"]
    stage_epochs, parent_epochs = p.chain_epochs(sweep_epochs)

    def scratch_config(config: dict, role: str = "scratch") -> dict:
        """The sweep's config at its epochs is the sweep's run; at any other budget a run of this experiment."""
        if config["train"]["epochs"] == sweep_epochs:
            return config
        return {**config, "experiment": EXPERIMENT, "name": _scratch_name(config, role)}

    parents = {s: scratch_config(c, "parent") for s, c in zip(seeds, sweep([0], seeds, parent_epochs), strict=True)}
    chains = {}
    for seed in seeds:
        chain, parent = [], parents[seed]
        for base in sweep(range(1, max(p.depths) + 1), [seed], stage_epochs):
            chain.append(_stage_config(base, parent))
            parent = chain[-1]
        chains[seed] = chain
    arms = []
    for budget, epochs in p.arm_epochs(sweep_epochs).items():
        arm_seeds = p.arm_seeds(budget, seeds)
        configs = {(c["seed"], n): scratch_config(c) for n in p.depths for c in sweep([n], arm_seeds, epochs[n])}
        arms.append(ScratchArm(budget, epochs, configs, arm_seeds))
    return GrowthPlan(p.depths, seeds, parents, chains, tuple(arms), stage_epochs, parent_epochs, sweep_epochs)


def _stage_config(base: dict, parent: dict) -> dict:
    """Stage N's config: the sweep's config of ResNet-(8+N) at the stage's epochs, plus its growth step.

    Identity: the data, model widths and recipe of ``base``, the parent's run directory (whose
    hash covers the parent's own parent, so the identity covers the whole chain), where the block
    goes and how it starts. ``runtime["chain"]``: the configs of the parent ResNet-8 and of every
    earlier stage, so the job can run any of them that is unfinished.
    """
    n = base["depth_n"]
    stage, index = extra_block_position(n - 1)
    runtime = {**base["runtime"], "chain": [*parent.get("runtime", {}).get("chain", []), _without_chain(parent)]}
    return {
        **{k: v for k, v in base.items() if k != "runtime"},
        "experiment": EXPERIMENT,
        "name": f"{base['dataset']}-grown-resnet{base['depth_label']}-n{n}-seed{base['seed']}",
        "growth": {
            "parent": runs.run_dir("", parent).as_posix(),  # <experiment>/<name>-<hash8>, relative to --out
            "insertion": INSERTION,
            "stage": stage,
            "block_index": index,
            "zero_init": ZERO_INIT,
        },
        "runtime": runtime,
    }


def _without_chain(config: dict) -> dict:
    runtime = {k: v for k, v in config.get("runtime", {}).items() if k != "chain"}
    return {**config, "runtime": runtime}


def _scratch_name(config: dict, role: str = "scratch") -> str:
    return f"{config['dataset']}-{role}-resnet{config['depth_label']}-n{config['depth_n']}-seed{config['seed']}-e{config['train']['epochs']}"


def is_stage(config: dict) -> bool:
    return config.get("experiment") == EXPERIMENT and "growth" in config


# ----------------------------------------------------------------------------- jobs
def growth_vs_scratch_run(spec: RunSpec) -> dict:
    """Job function of script 03: a growth chain (given its last stage) or a scratch run (the sweep's job)."""
    return run_growth_chain(spec) if is_stage(spec.config) else train_resnet_run(spec)


def run_growth_chain(spec: RunSpec) -> dict:
    """Run every unfinished run of the chain ending at ``spec`` in order: the sweep's ResNet-8, then each stage.

    Finished runs are skipped; the first unfinished one resumes from its checkpoint. Returns the
    result of ``spec``'s stage.
    """
    chain = spec.config.get("runtime", {}).get("chain", [])
    links = [*chain, spec.config]
    result: dict = {}
    for position, config in enumerate(links):
        if is_stage(config):  # its own chain: the links before it
            runtime = {**config.get("runtime", {}), "chain": [_without_chain(c) for c in links[:position]]}
            config = {**config, "runtime": runtime}
        link = RunSpec(config=config, out=spec.out)
        if runs.is_done(link.dir):
            result = runs.read_run(link.dir).result  # an edited or malformed link is one line (common.runs.read_run)
            continue
        log.info("growth chain: running %s (%d of %d)", link.name, position + 1, len(links))
        runs.prepare_run(link.out, link.config)
        with runs.RunLock(link.dir):  # another process training this link (the sweep's ResNet-8): one line
            if runs.is_done(link.dir):  # another process finished it since the look above
                result = runs.read_result(link.dir)
            else:
                result = train_growth_stage(link) if is_stage(config) else train_resnet_run(link)
    return result


def train_growth_stage(spec: RunSpec) -> dict:
    """One growth stage: the parent's trained model, grown by one zero-output block, trained; resumes.

    The parent run must be finished (:func:`run_growth_chain` sees to it). The run's result holds
    the sweep's keys plus ``growth``: parent, inserted position, and the run-time check's
    float64 output differences in train and eval mode (both 0.0, or the job fails).
    """
    parent_dir = Path(spec.out) / spec.config["growth"]["parent"]
    if not runs.is_done(parent_dir):
        raise UserError(
            f"{spec.name}: its parent run {parent_dir} is not finished; run the whole chain (03_growth_vs_scratch.py)"
        )
    return train_resnet_run(spec, lambda config, data: grown_model(config, data, parent_dir))


def grown_model(config: dict, data: VisionData, parent_dir: str | Path) -> tuple[ResNet, dict]:
    """The parent's trained ResNet-(8+N-1) grown to ResNet-(8+N), checked, and the growth record.

    The new block's random weights come from a generator seeded by (seed, N)
    (:func:`block_seed`), so they do not depend on the global RNG. Raises
    :class:`common.growth.GrowthBrokeFunction` if the outputs change in float64 (train or eval
    mode) and :class:`RuntimeError` if the grown model's ``state_dict`` keys or shapes differ
    from a freshly built ResNet-(8+N)'s.
    """
    parent = load_trained_resnet(parent_dir)
    if parent.config.extra_blocks != config["depth_n"] - 1:
        raise RuntimeError(
            f"{parent_dir} holds ResNet-{depth_label(parent.config.extra_blocks)}, not the parent of N = {config['depth_n']}"
        )
    model = copy.deepcopy(parent)
    generator = torch.Generator().manual_seed(block_seed(config["seed"], config["depth_n"]))
    index, _ = grow(model, generator)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    scratch = {k: tuple(v.shape) for k, v in build_resnet(config, data.num_classes).state_dict().items()}
    if shapes != scratch:
        raise RuntimeError(
            f"grown model's state_dict differs from ResNet-{config['depth_label']}'s: {sorted(set(shapes) ^ set(scratch))}"
        )
    n = CHECK_BATCH
    x, _ = next(iter(TensorLoader(data.x_train[:n], data.y_train[:n], n, train=False, mean=data.mean, std=data.std)))
    diff = check_function_preserved(parent, model, x, what=f"{config['name']}: inserting block {index}")
    record = {
        "parent": config["growth"]["parent"],
        "block_index": index,
        "stage": model.stage_of_block[index],
        "function_check": {"dtype": "float64", "batch": int(x.shape[0]), "max_abs_diff": diff},
    }
    return model.train(), {"growth": record}


def block_seed(seed: int, n: int) -> int:
    """Seed of the random weights of the block stage ``n`` inserts under run seed ``seed``."""
    return int(hashlib.sha256(f"growth-block:{int(seed)}:{int(n)}".encode()).hexdigest()[:15], 16)


# ----------------------------------------------------------------------------- results
def collect_records(plan: GrowthPlan, out: str | Path, arm: ScratchArm | None = None) -> list[dict]:
    """One record per (method, depth, seed) of the table of one scratch arm (default: the first), from finished runs,
    for the arm's seeds (each growth chain paired with the same seed's scratch run).

    ``epochs`` is the run's own; ``total_epochs`` every epoch behind the model: for growth the parent
    ResNet-8's plus every stage's up to depth N (each stage restarts the schedule), for scratch its own.
    """
    arm = arm or plan.arms[0]
    records = []
    for seed in arm.seeds:
        behind = finished_result(out, plan.parents[seed])["epochs"]
        for n in range(1, max(plan.depths) + 1):
            behind += finished_result(out, plan.stage(seed, n))["epochs"]
            if n not in plan.depths:
                continue
            for method, config in (("growth", plan.stage(seed, n)), ("scratch", arm.runs[(seed, n)])):
                result = finished_result(out, config)
                records.append(
                    {
                        "method": method,
                        "depth_n": n,
                        "depth_label": depth_label(n),
                        "seed": seed,
                        "epochs": result["epochs"],
                        "total_epochs": behind if method == "growth" else result["epochs"],
                        **{k: result[k] for k in METRICS},
                    }
                )
    return records


def finished_result(out: str | Path, config: dict) -> dict:
    path = runs.run_dir(out, config)
    if not runs.is_done(path):
        raise UserError(f"{path} is not finished; rerun 03_growth_vs_scratch.py with the same flags to run it")
    return runs.read_run(path).result


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; NaN for one value)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else math.nan


def _winner(growth: float, scratch: float) -> str:
    return "growth" if growth < scratch else "scratch" if scratch < growth else "tie"


def growth_table(records: Iterable[dict]) -> list[dict]:
    """Rows of the comparison: one per final architecture, then ``mean``.

    ``records``: dicts with ``method`` (growth or scratch), ``depth_n``, ``seed`` and
    ``train_loss`` / ``test_loss`` / ``test_acc`` (and ``total_epochs``, optional). Per row, each
    metric's mean and sample std over seeds, the absolute test- and training-loss reductions
    ``scratch - growth`` (per seed, then mean and std over seeds: the paired spread the claims
    test) and the relative test-loss reduction ``(scratch - growth) / scratch`` (of the means), the
    winner (lower mean loss) for train and test loss, and each side's total epochs
    (``growth_epochs``, ``scratch_epochs``; None on the mean row). The mean row averages the
    architectures per seed first, then over seeds; its relative reduction is that of the mean test
    losses (as the paper's 11.8%). Paper columns (``paper_*``, from common/paper.py) where the paper
    reports a value.
    """
    by = {}
    for r in records:
        by.setdefault((r["depth_n"], r["method"]), {})[r["seed"]] = r
    depths = sorted({n for n, _ in by})
    seeds = sorted({s for cell in by.values() for s in cell})
    for n in depths:
        for method in METHODS:
            if set(by.get((n, method), {})) != set(seeds):
                raise ValueError(
                    f"ResNet-{depth_label(n)} {method}: records for seeds {sorted(by.get((n, method), {}))}, expected {seeds}"
                )
    per_seed = {  # (row, method, metric) -> values over seeds; row "mean" averages the architectures first
        (n, method, metric): [by[(n, method)][s][metric] for s in seeds]
        for n in depths
        for method in METHODS
        for metric in METRICS
    }
    for method in METHODS:
        for metric in METRICS:
            per_seed[("mean", method, metric)] = [
                statistics.fmean(by[(n, method)][s][metric] for n in depths) for s in seeds
            ]
    rows = []
    for key in [*depths, "mean"]:
        row = {
            "model": f"ResNet-{depth_label(key)}" if key != "mean" else "mean",
            "depth_n": key if key != "mean" else None,
            "seeds": len(seeds),
        }
        for method in METHODS:
            for metric in METRICS:
                row[f"{method}_{metric}"], row[f"{method}_{metric}_std"] = _mean_std(per_seed[(key, method, metric)])
        for metric in ("test_loss", "train_loss"):
            reductions = [
                s - g
                for g, s in zip(per_seed[(key, "growth", metric)], per_seed[(key, "scratch", metric)], strict=True)
            ]
            row[f"{metric}_reduction"], row[f"{metric}_reduction_std"] = _mean_std(reductions)
        for method in METHODS:
            epochs = {by[(key, method)][s].get("total_epochs") for s in seeds} if key != "mean" else {None}
            row[f"{method}_epochs"] = epochs.pop() if len(epochs) == 1 else max(e for e in epochs if e is not None)
        row["test_loss_reduction_rel"] = (
            row["test_loss_reduction"] / row["scratch_test_loss"] if row["scratch_test_loss"] else math.nan
        )
        row["train_winner"] = _winner(row["growth_train_loss"], row["scratch_train_loss"])
        row["test_winner"] = _winner(row["growth_test_loss"], row["scratch_test_loss"])
        row.update(paper_columns(row["model"]))
        rows.append(row)
    return rows


def paper_columns(model: str) -> dict:
    """The paper's values for one row (``ResNet-d`` or ``mean``); None where it reports none."""
    losses = (("train_loss", GROWTH_MEAN_TRAIN_LOSS), ("test_loss", GROWTH_MEAN_TEST_LOSS))
    keys = [f"{m}_{loss}" for loss, _ in losses for m in METHODS]
    out = dict.fromkeys(f"paper_{k}" for k in (*keys, "test_loss_reduction", "test_loss_reduction_rel"))
    out |= dict.fromkeys(("paper_train_winner", "paper_test_winner"))
    if model == "mean":
        out.update({f"paper_{m}_{loss}": paper[m] for loss, paper in losses for m in METHODS})
        out.update(
            paper_test_loss_reduction=GROWTH_MEAN_TEST_LOSS["scratch"] - GROWTH_MEAN_TEST_LOSS["growth"],
            paper_test_loss_reduction_rel=GROWTH_TEST_RELATIVE_REDUCTION,
            paper_train_winner=_winner(GROWTH_MEAN_TRAIN_LOSS["growth"], GROWTH_MEAN_TRAIN_LOSS["scratch"]),
            paper_test_winner=_winner(GROWTH_MEAN_TEST_LOSS["growth"], GROWTH_MEAN_TEST_LOSS["scratch"]),
        )
    elif model in {f"ResNet-{d}" for d in GROWTH_DEPTHS}:
        out["paper_train_winner"] = "growth" if model in GROWTH_LOWER_TRAIN_LOSS else "scratch"
        out["paper_test_winner"] = "growth" if model in GROWTH_LOWER_TEST_LOSS else "scratch"
        out["paper_test_loss_reduction"] = GROWTH_TEST_ABS_REDUCTION_RANGE.get(model)
    return out


def markdown_table(rows: Sequence[dict]) -> str:
    """The table as markdown: growth | scratch per metric (mean ± std over seeds), winners, paper values."""
    seeds = rows[0]["seeds"] if rows else 0
    note = (
        f"Mean ± sample std over {seeds} seed(s); reduction = scratch - growth test loss (%: of the scratch mean). "
        "Epochs in all: growth counts the parent ResNet-8's and every stage's (each stage restarts the schedule), "
        "scratch its own run's. "
        "In parentheses: the paper's CIFAR-10 values (common/paper.py; per architecture it reports only which "
        "method has the lower loss, and the smallest and largest test-loss reductions)."
    )
    return f"{tables.markdown_table(rows, TABLE_COLUMNS)}\n\n{note}"


def _cell(r: dict, key: str) -> str:
    mean, std = r[key], r.get(f"{key}_std", math.nan)
    return f"{mean:.4f}" + ("" if math.isnan(std) else f" ± {std:.4f}")


def _with_paper(text: str, value) -> str:
    if value is None:
        return text
    return f"{text} ({value})" if isinstance(value, str) else f"{text} ({value:.4f})"


def epochs_cell(r: dict) -> str:
    """``growth / scratch`` total epochs of one row ("-" where not recorded: the mean row, tables written before)."""
    values = [r.get(f"{m}_epochs") for m in METHODS]
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
        return "-"
    return " / ".join(str(int(v)) for v in values)


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
    tables.Column("epochs in all: growth / scratch", epochs_cell),
    *(_loss_column(m, "train_loss") for m in METHODS),
    tables.Column("lower train loss", lambda r: _with_paper(r["train_winner"], r["paper_train_winner"])),
    *(_loss_column(m, "test_loss") for m in METHODS),
    tables.Column("test-loss reduction", _reduction_cell),
    tables.Column("lower test loss", lambda r: _with_paper(r["test_winner"], r["paper_test_winner"])),
    *(tables.Column(f"{m} test acc", lambda r, m=m: _cell(r, f"{m}_test_acc")) for m in METHODS),
)


def table_stem(dataset: str, plan: GrowthPlan, arm: ScratchArm | None = None) -> str:
    """Name of one arm's table files: dataset, the parent's epochs where they are not the sweep's, stage epochs,
    scratch epochs (one value, or the range ``a-b`` of the equal-epoch arm), the arm's seeds."""
    arm = arm or plan.arms[0]
    scratch = sorted(set(arm.epochs.values()))
    scratch_tag = str(scratch[0]) if len(scratch) == 1 else f"{scratch[0]}-{scratch[-1]}"
    seeds = "-".join(map(str, arm.seeds))
    parent = "" if plan.parent_epochs == plan.sweep_epochs else f"-parent{plan.parent_epochs}"
    return f"table-{dataset}{parent}-stage{plan.stage_epochs}-scratch{scratch_tag}-seeds{seeds}"


def write_table(rows: Sequence[dict], out: str | Path, stem: str) -> tuple[Path, Path]:
    """``<out>/growth_vs_scratch/<stem>.csv`` and ``.md``, written atomically."""
    return runs.atomic_write_table(Path(out) / EXPERIMENT, stem, rows, markdown_table(rows))


__all__ = [
    "EXPERIMENT",
    "GrowthPlan",
    "ScratchArm",
    "block_seed",
    "collect_records",
    "epochs_cell",
    "growth_plan",
    "growth_table",
    "growth_vs_scratch_run",
    "grown_model",
    "markdown_table",
    "paper_columns",
    "run_growth_chain",
    "table_stem",
    "train_growth_stage",
    "write_table",
]
