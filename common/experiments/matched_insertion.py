"""Job module of ``06_matched_insertion.py``: the activation-gradient-matched insertion of App. H.1.

Construction (our reading of H.1, docs/decisions.md, section "Matched insertion"): freeze a trained
sweep model; at one candidate ``l``, fixed before any gradient is seen, take the protocol's standard
zero-output block ``h(z) = V psi(z)`` (``common.science.tangent``, ``U_l`` seeded as in the probe) and fit
its terminal projection ``V`` alone, ``psi`` fixed, by least squares so that the block's output
matches ``-alpha g_i`` for every training example ``i``, where ``g_i = d loss_i / d z_i`` is the
gradient of example ``i``'s own loss (per-example targets). The fit is ``W* = P^+ X`` of the
streamed Gram statistics (:func:`common.science.gram.per_example_tangent_regression`, nothing of size
``n x d`` kept), so the block outputs ``-alpha Pi g`` with ``Pi`` the orthogonal projection onto the
tangent space ``{Psi W}``. The block is then inserted for real (``common.science.growth.insert_zero_block``,
``V = -alpha W*``) and the training loss is evaluated at once, in eval mode over the whole split,
with no task-loss training.

Prediction: the first-order change of the mean training loss is ``-alpha ||Pi G||^2 / n`` (``n``
examples, ``G`` the per-example gradient rows); in the pooled mean-loss normalisation of the
probe (rows ``G / n``, ``V_S,l = ||Pi G|| / n``) that is ``-alpha n V_S,l^2``. Had the targets been
the rows of the pooled gradient ``G / n`` instead, the change would be ``-alpha V_S,l^2``, ``n``
times smaller: every row also reports that reading (``predicted_change_pooled_targets``).
Two more readings of H.1's target and scale are computed beside ours (docs/decisions.md, section
"Matched insertion"), as first-order predictions from the same statistics: ``predicted_change_exact_targets``
``= -alpha ||G||^2 / n``, the change had the block's output equalled ``-alpha g_i`` exactly (no
projection: what "matched" would give under realizability, the largest any block can give), and
``predicted_change_unit_targets`` ``= -alpha ||Pi G||^2 / (n rms)`` with ``rms = ||G|| / sqrt(n)``,
the change had ``alpha`` been a step length in activation space (targets ``-alpha g_i / rms``).
The paper's drops (about 7e-4 at ``alpha = 1e-3``) are of the exact-target reading's order, not
ours (docs/decisions.md, section "Matched insertion": 9e-4 against 2e-7 on a CIFAR-10 subset).

Candidate (``--candidate``, default ``stage1-end``): the end of stage 1, the input of stage 2's first
block, at every depth, so that the drops compared across depths are drops at one kind of tensor
(the stage-1 width and resolution); ``next`` (where the cyclic growth rule puts the next block)
moves between stages with the depth (ResNet-34's is the head's input).

Rows (``rows.csv`` per run, ``summary-<dataset>.csv/.md`` over runs): depth, candidate, ``alpha``,
training loss before and after, measured and predicted change, their ratio, the fit's relative
residual ``||Pi g - g|| / ||g||``, the test-loss change, and the paper's value beside it. The float64 measurement
of the losses and its floors are in :mod:`common.experiments.matched_insertion_measure`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from common.data.loader import TensorLoader
from common.data.vision import warn_unused_data_root
from common.errors import ParamError, UserError
from common.experiments.matched_insertion_config import MatchedRun
from common.experiments.matched_insertion_measure import (
    BELOW_PRECISION,
    MEASURED,
    Batches,
    measure_losses,
    measurement_floors,
    precision_status,
)
from common.experiments.shared.resnet_sweep import CONFIG_KEYS as SWEEP_CONFIG_KEYS
from common.experiments.shared.resnet_sweep_records import finished_sweep_runs, load_sweep_run, train_command
from common.models.resnet import BACKBONE_DEPTH, blocks_per_stage, extra_block_position
from common.presets.choose import choose_preset
from common.presets.matched_insertion import FITS, PRESETS, MatchedPreset
from common.presets.paper import MATCHED_INSERTION_ALPHA, MATCHED_INSERTION_REDUCTION
from common.presets.train_resnet_sweep import DEFAULT_DATASET, EVAL_BATCH_SIZE
from common.runs import atomic, run_store, tables
from common.science.activations import activation_gradients, probe_mode
from common.science.gram import TangentRegression, per_example_tangent_regression
from common.science.precision import full_precision
from common.science.tangent import make_zero_block
from common.training.device import resolve_device
from common.training.long_run import TIMED_STEPS, StepClock

log = logging.getLogger(__name__)

EXPERIMENT = "matched_insertion"
REORDER_SEED = 0  # the permutation of the floor's second float64 pass (a measurement setting, not a result)
GD_MAX_EXAMPLES = 4096  # the gradient-descent check caches z and g: small cases only
ROW_COLUMNS = (
    "depth_label",
    "depth_n",
    "seed",
    "candidate",
    "candidate_name",
    "alpha",
    "train_loss_before",
    "train_loss_after",
    "measured_change",
    "measured_change_precision",
    "predicted_change",
    "ratio",
    "measured_change_float32",
    "measured_change_float32_precision",
    "float32_gap",
    "float64_order_spread",
    "measurement_floor",
    "relative_residual",
    "predicted_change_pooled_targets",
    "predicted_change_exact_targets",
    "predicted_change_unit_targets",
    "growth_value_pooled",
    "test_loss_before",
    "test_loss_after",
    "test_change",
    "paper_change",
    "fit",
)


# ----------------------------------------------------------------------------- the construction
def fit_by_gradient_descent(
    model: nn.Module,
    batches: Batches,
    regression: TangentRegression,
    *,
    seed: int,
    steps: int,
    loss_fn=F.cross_entropy,
) -> torch.Tensor:
    """``W`` fitted by plain gradient descent on ``(1 / 2n) sum_r ||psi_r W - g_r||^2``, a check of ``P^+ X``.

    An independent route: the inserted block's real ``psi`` and ``V`` under autograd, on ``z`` and the
    per-example gradients cached from one pass (small cases only, at most ``GD_MAX_EXAMPLES``).
    Starts at ``W = 0`` and steps ``n / lambda_max(P)``, so it converges to the minimum-norm solution.
    """
    if regression.examples > GD_MAX_EXAMPLES:
        raise ParamError(
            "fit",
            "gradient-descent",
            f"caches every example and is a check for small cases (at most {GD_MAX_EXAMPLES} examples, got "
            f"{regression.examples}); use closed-form",
        )
    candidate = model.candidates()[regression.index]
    cached = []
    with probe_mode(model, "eval"):
        for x, y in batches():
            _, (z,), (g,) = activation_gradients(model, x, y, loss_fn, [candidate])
            cached.append((z, g * x.shape[0]))  # per-example gradients (eval mode: examples independent)
    block = make_zero_block(regression.family, regression.gram.d, seed, regression.index, like=cached[0][0]).eval()
    with torch.no_grad():  # psi is fixed: its features are computed once, only V is under autograd
        features = [(block.psi(z), g) for z, g in cached]
    weight = block.terminal.weight
    step = regression.examples / float(torch.linalg.eigvalsh(regression.gram.P).max())
    fix = "interrupt and pass a smaller --gd-steps (the fit is a check for small cases), or let it run"
    clock = StepClock(steps, f"--gd-steps {steps}", fix, min_steps=TIMED_STEPS)
    clock.start(0)
    for done in range(steps):
        clock.tick(done)
        weight.grad = None
        objective = sum(0.5 * (block.terminal(f) - g).square().sum() for f, g in features) / regression.examples
        objective.backward()
        with torch.no_grad():
            weight -= step * weight.grad
    return weight.detach().reshape(weight.shape[0], -1).T.double()


def matched_insertion(
    model: nn.Module,
    train_batches: Batches,
    index: int,
    alphas: Sequence[float],
    *,
    seed: int = 0,
    loss_fn=F.cross_entropy,
    test_batches: Batches | None = None,
    fit: str = "closed-form",
    gd_steps: int | None = None,
    reordered_batches: Batches | None = None,
) -> list[dict]:
    """One row per ``alpha``: insert the fitted block at candidate ``index`` and measure the training loss at once.

    ``train_batches()`` / ``test_batches()`` return a fresh pass over the split each call (nothing is
    cached). The fit runs on ``model`` as it is; the losses before and after are measured twice
    (:func:`measure_losses`): with the model **in float64** (a float64 copy, on the CPU where the
    device has no float64: ``train_loss_*``, ``measured_change``) and in float32 (``*_float32``), with
    the measurement floors of the parent model beside them (:func:`measurement_floors`); the test loss,
    not part of H.1's prediction, in float32.
    ``gd_steps``: the gradient-descent fit's steps (its preset's ``gd_steps``; that fit only, which needs it).
    ``reordered_batches()`` is a second pass over the same training examples in another batch order
    (None: each batch of ``train_batches`` with its examples reversed). Everything runs under the
    probe's precision guard (:func:`common.science.precision.full_precision`: no TF32 on GPUs), recorded as
    ``math_mode`` in each row.
    """
    if fit not in FITS:
        raise ParamError("fit", fit, f"use one of {', '.join(FITS)}")
    if fit == "gradient-descent" and gd_steps is None:
        raise ParamError("gd_steps", gd_steps, "the gradient-descent fit needs its number of steps")
    with full_precision() as mode:
        regression = per_example_tangent_regression(model, train_batches(), index, loss_fn=loss_fn, seed=seed)
        w = regression.gram.solution()  # Psi W* ~ G: the least-squares fit of the per-example gradients
        fit_gap = None
        if fit == "gradient-descent":
            w_gd = fit_by_gradient_descent(model, train_batches, regression, seed=seed, steps=gd_steps, loss_fn=loss_fn)
            fit_gap = float(torch.linalg.matrix_norm(w_gd - w) / torch.linalg.matrix_norm(w).clamp_min(1e-300))
            w = w_gd
        reordered = reordered_batches or (lambda: ((x.flip(0), y.flip(0)) for x, y in train_batches()))
        weights = [-alpha * w for alpha in alphas]
        losses = measure_losses(
            model, index, regression.family, seed, weights, train_batches, reordered, test_batches, loss_fn
        )
        fit_record = {"fit": fit, "fit_gap_closed_form": fit_gap, "loss_dtype": "float64"}
        fit_record |= {"float64_device": str(losses["float64_device"]), "math_mode": mode}
        name = model.candidates()[index].name
        return [insertion_row(index, name, alpha, k, regression, losses, fit_record) for k, alpha in enumerate(alphas)]


def insertion_row(
    index: int, name: str, alpha: float, k: int, regression: TangentRegression, losses: dict, fit_record: dict
) -> dict:
    """The row of the ``k``-th target scale ``alpha``: the losses before and after (:func:`measure_losses`), measured
    against predicted change, the floors, the other readings' predictions and how the fit was made."""
    floors = measurement_floors(losses)
    v_pooled = regression.pooled_growth_value()
    before, before32, test_before = losses["before"], losses["before_float32"], losses["test_before"]
    after, after32, test_after = losses["after"][k], losses["after_float32"][k], losses["test_after"][k]
    predicted = regression.first_order_change(alpha)
    change, change32 = after - before, after32 - before32
    status = precision_status(change, floors["measurement_floor"])
    return {
        "candidate": index,
        "candidate_name": name,
        "alpha": alpha,
        "train_loss_before": before,
        "train_loss_after": after,
        "measured_change": change,
        "measured_change_precision": status,
        "predicted_change": predicted,
        "ratio": change / predicted if predicted != 0 and status == MEASURED else None,
        "train_loss_before_float32": before32,
        "train_loss_after_float32": after32,
        "measured_change_float32": change32,
        "measured_change_float32_precision": precision_status(change32, floors["float32_gap"]),
        **floors,
        "relative_residual": regression.relative_residual(),
        "predicted_change_pooled_targets": -alpha * v_pooled**2,
        **alternative_readings(regression, alpha),
        "growth_value_pooled": v_pooled,
        "examples": regression.examples,
        "tangent_rank": regression.gram.rank(),
        "tangent_dim": regression.gram.k,
        "test_loss_before": test_before,
        "test_loss_after": test_after,
        "test_change": None if test_before is None else test_after - test_before,
        **fit_record,
    }


def alternative_readings(regression: TangentRegression, alpha: float) -> dict[str, float]:
    """First-order changes under two other readings of H.1's target and scale (module docstring), from ``P``, ``X``.

    ``exact``: the block outputs ``-alpha g_i`` exactly: ``-alpha ||G||^2 / n``. ``unit``: the targets are
    ``-alpha g_i / rms`` with ``rms = ||G|| / sqrt(n)`` (``alpha`` a step length), fitted as ours:
    ``-alpha ||Pi G||^2 / (n rms)``.
    """
    n, g, pi = regression.examples, regression.gram.grad_norm(), regression.gram.growth_value()
    rms = g / math.sqrt(n)
    return {
        "predicted_change_exact_targets": -alpha * g**2 / n,
        "predicted_change_unit_targets": -alpha * pi**2 / (n * rms) if rms > 0 else 0.0,
    }


# ----------------------------------------------------------------------------- runs
def stage_end_candidate(extra_blocks: int, stage: int = 0) -> int:
    """The candidate at the end of ``stage`` (0-based) of ResNet-(8+N): the input of the next stage's first block
    (the head's input after the last stage), where the cyclic rule of B.1 adds that stage's blocks."""
    return sum(blocks_per_stage(extra_blocks)[: stage + 1])


def resolve_candidates(rule: str | int, extra_blocks: int) -> list[int]:
    """Candidate indices of ResNet-(8+N) under ``--candidate``: ``stage1-end``, ``next``, ``all`` or one index.

    ``stage1-end`` (the default) is the end of stage 1 at every depth (:func:`stage_end_candidate`);
    ``next`` is where the cyclic growth rule of B.1 would put the next block
    (:func:`common.models.resnet.extra_block_position`, the growth chain's rule). Both are fixed by the
    architecture before any gradient.
    """
    count = sum(blocks_per_stage(extra_blocks)) + 1
    if rule == "stage1-end":
        return [stage_end_candidate(extra_blocks)]
    if rule == "next":
        return [extra_block_position(extra_blocks)[1]]
    if rule == "all":
        return list(range(count))
    index = int(rule)  # a rule the preset checked (common.presets.matched_insertion.MatchedPreset): an index now
    if not 0 <= index < count:
        raise ParamError("candidate", index, f"ResNet-{BACKBONE_DEPTH + extra_blocks} has candidates 0..{count - 1}")
    return [index]


def matched_configs(
    preset: str = "smoke",
    overrides: dict | None = None,
    *,
    out: str | Path = "runs",
    dataset: str | None = None,
    seeds: Sequence[int] | None = None,
    seed: int = 0,
    device: str = "auto",
    data_root: str | None = None,
) -> list[dict]:
    """One run per finished sweep run (depth N, seed): its candidates, alphas and fit.

    ``preset``: a preset of :data:`common.presets.matched_insertion.PRESETS`, whose ``depths`` are the paper's four (N = 0, 6,
    12, 26) with ``paper`` and every finished depth of the sweep (None) with ``smoke`` and ``mini``; ``overrides``: its
    fields set otherwise (None: the preset's). A missing depth is a :class:`UserError` naming the script-01 command
    that trains it. Seeds default to those with a run at every depth (mini's third seed, trained at 03's depths only,
    stays out: the design stays balanced). ``seed`` seeds ``U_l``.
    """
    p = choose_preset(PRESETS, preset, overrides)
    dataset = dataset or DEFAULT_DATASET[preset]
    warn_unused_data_root(dataset, data_root)
    by_depth: dict[tuple[int, int], Path] = {}
    for directory in finished_sweep_runs(out, dataset):
        config = run_store.read_config(directory, SWEEP_CONFIG_KEYS)
        by_depth.setdefault((config["depth_n"], config["seed"]), directory)
    wanted = list(p.depths) if p.depths is not None else sorted({n for n, _ in by_depth})
    balanced = sorted({s for _, s in by_depth if all((n, s) in by_depth for n in wanted)})
    seed_list = list(seeds) if seeds is not None else balanced or sorted({s for _, s in by_depth}) or [0]
    require_design(wanted, seed_list, by_depth, preset=preset, dataset=dataset, out=out, seeds=seeds)
    configs = []
    for s in seed_list:
        for n in wanted:
            directory = by_depth[(n, s)]
            sweep = run_store.read_config(directory, SWEEP_CONFIG_KEYS)
            configs.append(matched_config(p, directory, sweep, dataset, seed, device=device, data_root=data_root))
    return configs


def require_design(wanted, seed_list, by_depth: dict, *, preset: str, dataset: str, out, seeds) -> None:
    """Refuse a design with no depth (nothing finished to default to) or a (depth, seed) without a finished sweep run,
    in one line naming the script-01 command that trains what is missing."""
    missing = [n for n in wanted for s in seed_list if (n, s) not in by_depth]
    if not wanted:  # nothing finished to default to (the parser refuses an empty --depths)
        raise UserError(
            f"no finished sweep runs for --dataset {dataset} under {Path(out) / 'resnet_sweep'}; train them first: "
            f"{train_command(preset, dataset, out, seeds=seeds)}"
        )
    if missing:
        grid = sorted(set(missing))
        missing_seeds = sorted({s for n in grid for s in seed_list if (n, s) not in by_depth})
        raise UserError(
            f"no finished sweep run for --dataset {dataset} at N = {','.join(map(str, grid))} (seeds {','.join(map(str, missing_seeds))}) "
            f"under {Path(out) / 'resnet_sweep'}; train them first: {train_command(preset, dataset, out, depths=grid, seeds=missing_seeds)}"
        )


def matched_config(
    p: MatchedPreset, directory: Path, sweep: dict, dataset: str, seed: int, *, device: str, data_root
) -> dict:
    """The run config of the matched insertion on the sweep run in ``directory`` (its config ``sweep``)."""
    n, s = sweep["depth_n"], sweep["seed"]
    return {
        "experiment": EXPERIMENT,
        "name": f"{dataset}-resnet{sweep['depth_label']}-n{n}-seed{s}-cand{p.candidate}",
        "dataset": dataset,
        "depth_n": n,
        "depth_label": sweep["depth_label"],
        "seed": s,
        "sweep_run": directory.name,
        "candidate_rule": str(p.candidate),
        "candidates": resolve_candidates(p.candidate, n),
        "alphas": list(p.alphas),
        "fit": p.fit,
        **({"gd_steps": p.gd_steps} if p.fit == "gradient-descent" else {}),
        "block_seed": seed,
        "split": "train",
        "targets": "per_example",
        "loss_dtype": "float64",  # losses of the model in float64, float32 beside (older runs: float32)
        "runtime": {
            "device": device,
            "sweep_dir": str(directory.resolve()),
            "data_root": str(Path(data_root).expanduser().resolve()) if data_root else None,
            "batch_size": EVAL_BATCH_SIZE,
        },
    }


def matched_insertion_run(spec: run_store.RunSpec) -> dict:
    """Job function of script 06: the matched insertion at every configured candidate of one trained model."""
    run = MatchedRun.from_config(spec.config)
    path = run_store.prepare_run(spec.out, spec.config)
    runtime = run.runtime
    device = resolve_device(runtime.device or "auto")
    model, data = load_sweep_run(runtime.sweep_dir, data_root=runtime.data_root, device=device)
    batch = runtime.batch_size
    keys = {"mean": data.mean, "std": data.std, "device": device}
    train_loader = TensorLoader(data.x_train, data.y_train, batch, train=False, **keys)
    test_loader = TensorLoader(data.x_test, data.y_test, batch, train=False, **keys)
    # The second float64 pass of the floor: the same training examples, permuted, so every batch differs.
    order = torch.randperm(len(data.y_train), generator=torch.Generator().manual_seed(REORDER_SEED))
    reordered = TensorLoader(data.x_train[order], data.y_train[order], batch, train=False, **keys)
    rows = []
    for index in run.candidates:
        log.info("%s: matched insertion at candidate %d (%d training examples)", run.name, index, len(data.y_train))
        for row in matched_insertion(
            model,
            lambda: train_loader,
            index,
            list(run.alphas),
            seed=run.block_seed,
            test_batches=lambda: test_loader,
            fit=run.fit,
            gd_steps=run.gd_steps,
            reordered_batches=lambda: reordered,
        ):
            rows.append(
                {
                    "depth_label": run.depth_label,
                    "depth_n": run.depth_n,
                    "seed": run.seed,
                    **row,
                    "paper_change": paper_change(run.depth_label, row["alpha"]),
                }
            )
    atomic.atomic_write_csv(path / "rows.csv", rows)
    result = {k: getattr(run, k) for k in ("dataset", "depth_n", "depth_label", "seed", "sweep_run", "fit")}
    result.update(rows=rows, device=device.type)
    run_store.write_result(path, result)
    return result


def paper_change(depth_label: int, alpha: float) -> float | None:
    """The paper's training-loss change at ResNet-``depth_label`` (H.1: a drop, so negative), at its alpha only."""
    drop = MATCHED_INSERTION_REDUCTION.get(depth_label)
    return -drop if drop is not None and math.isclose(alpha, MATCHED_INSERTION_ALPHA) else None


def summary_stem(config: dict) -> str:
    """``summary-<dataset>``: the summary files that list every finished matched-insertion run on that dataset."""
    return f"summary-{config.get('dataset')}"


def summary_rows(results: Iterable[dict]) -> list[dict]:
    """Every row of every run, ordered by (depth, seed, candidate, alpha), in the table's columns."""
    rows = [row for r in results for row in r["rows"]]
    rows.sort(key=lambda r: (r["depth_n"], r["seed"], r["candidate"], r["alpha"]))
    return [{k: r.get(k) for k in ROW_COLUMNS} for r in rows]


SUMMARY_COLUMNS = (  # the markdown table of summary_rows; an always-present number that is NaN shows "nan"
    tables.Column("model", lambda r: f"ResNet-{r['depth_label']}"),
    tables.Column("seed", fmt=""),
    tables.Column("candidate", "candidate_name", fmt=""),
    tables.Column("alpha", fmt="g", missing="nan"),
    tables.Column("train loss", "train_loss_before", ".5f", missing="nan"),
    tables.Column("after", "train_loss_after", ".5f", missing="nan"),
    tables.Column("measured", lambda r: shown_change(r, ""), fmt=""),
    tables.Column("predicted", "predicted_change", "+.3e", missing="nan"),
    tables.Column("ratio", fmt=".4f", missing="-"),  # "-" where the prediction is 0 or the change below the floor
    tables.Column("floor", "measurement_floor", ".1e", missing="nan"),
    tables.Column("float32", lambda r: shown_change(r, "_float32"), fmt=""),
    tables.Column("float32 floor", "float32_gap", ".1e", missing="nan"),
    tables.Column("residual", "relative_residual", ".3f", missing="nan"),
    tables.Column("pooled-target pred.", "predicted_change_pooled_targets", "+.2e"),
    tables.Column("exact-target pred.", "predicted_change_exact_targets", "+.2e"),
    tables.Column("unit-target pred.", "predicted_change_unit_targets", "+.2e"),
    tables.Column("test change", "test_change", "+.2e"),
    tables.Column("paper", "paper_change", ".1e"),
)


def shown_change(row: dict, tag: str) -> str:
    """A measured change as the table shows it: its value, or "below precision" within its floor (never a sign)."""
    status = row.get(f"measured_change{tag}_precision")
    value = row.get(f"measured_change{tag}")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "nan"
    return "below precision" if status == BELOW_PRECISION else format(value, "+.3e")


def summary_markdown(rows: Sequence[dict]) -> str:
    """The table as markdown: measured against predicted change, the other readings' predictions, the paper's value."""
    note = (
        "measured: training-loss change right after inserting the fitted block (eval mode, whole split, no training), "
        "the model in float64; floor: its measurement floor, the larger of the spread of two float64 passes in "
        "different batch orders and one float64 rounding unit of the loss; float32: the same change with the model "
        "in float32, its floor |L_float32 - L_float64| of the parent; a change within its floor shows 'below "
        "precision' (no sign is read off it); "
        "predicted: the first-order change -alpha ||Pi g||^2 / n with per-example targets g_i = d loss_i / d z_i (our reading); "
        "first-order predictions of other readings: pooled-target (the pooled-gradient rows as targets, -alpha V_S,l^2), "
        "exact-target (the block's output equal to -alpha g_i, no projection: -alpha ||g||^2 / n), unit-target (targets "
        "-alpha g_i / rms(g), alpha a step length); residual: ||Pi g - g|| / ||g||; paper: H.1 (common/presets/paper.py, at "
        "alpha = 1e-3 only)."
    )
    return f"{tables.markdown_table(rows, SUMMARY_COLUMNS)}\n\n{note}"
