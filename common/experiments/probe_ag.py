"""Job module of ``02_probe_ag.py``: probe every trained sweep model (paper B.1, App. G).

Holds the probe's run configs (:func:`probe_configs`, identity: the sweep run and every probe
setting, the App. G statistic's name included), the job function (:func:`probe_sweep_run`: the
analysis batches through :func:`common.probe.probe_activation_gradients`, then the separated
saturation test of App. G on an independent sample) and the summary rows and table the script
prints and writes.

App. G (docs/decisions.md): the independent sample (every example of
``--saturation-split`` not in the analysis batches unless ``--saturation-n``; the default,
``held-out``, is every image the model never trained on: the training images a subset left out and
the test split, :func:`held_out_pool`) is split with a recorded seed into a calibration part (:data:`SATURATION_CAL_FRACTION` of it by default), whose
per-example contributions estimate the traces ``tr Sigma_l``, and a test part of ``n_test``
examples, whose pooled cross-gradients ``C_hat_l`` give ``Gamma_hat = max_l ||C_hat_l||``. The
interval ``[max(0, Gamma_hat - t), Gamma_hat + t]`` uses ``t = sqrt(sum_l tr_l^cal / (n_test alpha))``
(:func:`common.projection.saturation_interval`); its verdict is taken against ``delta`` when one is
given. Beside it, labelled and not used for the verdict, the asymptotic interval
(:func:`common.projection.asymptotic_interval`): a Bonferroni-normal interval on each ``||C_l||^2``
from the test part's ``U_l = ||C_hat_l||^2 - tr_l / n_test`` and ``tr(Sigma_l^2)``, and the variance of
the calibration part's contributions along the test part's ``C_hat_l`` (so each part is streamed once);
for both intervals the ``n_test`` at which each would exclude 0 (and delta) at the current estimates.
With ``--saturation-t`` there is no split: the whole sample gives ``C_hat_l`` and the
traces, the record carries the implied ``alpha``, and there is no asymptotic interval. With
``--bn-mode train`` the contributions are not per-example gradients: no interval, no verdict.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path

import torch

from common import runs
from common.data.vision import TensorLoader, class_balanced_indices, warn_unused_data_root
from common.device import resolve_device
from common.errors import UserError
from common.probe import BN_MODES, ProbeResult, probe_activation_gradients
from common.projection import (
    LOWER_ABOVE_DELTA,
    NO_VERDICT,
    SATURATION_STATISTIC,
    asymptotic_interval,
    exclusion_side,
    gamma_interval,
    linear_variance_estimate,
    saturation_interval,
    saturation_verdict,
    theorem3_n_to_exclude,
)
from common.resnet_sweep import CONFIG_KEYS as SWEEP_CONFIG_KEYS
from common.resnet_sweep import load_source, load_sweep_run, sweep_data_config

log = logging.getLogger(__name__)

EXPERIMENT = "ag_probe"
DEFAULT_BATCH_SIZE = 128  # analysis batch size (docs/decisions.md): AG_l ~ 1/sqrt(batch)
DEFAULT_N_BATCHES = 10  # B analysis batches per model
MINI_N_BATCHES = 7  # --preset mini: 7 x 128 of the mini sweep's 1,000 training images (docs/decisions.md)
SPLITS = ("train", "test")
HELD_OUT = "held-out"  # App. G's default sample: every image the model never trained on (held_out_pool)
SATURATION_SPLITS = (HELD_OUT, "test", "train")
SATURATION_PROTOCOL = "interval+asymptotic"  # Theorem 3's interval and the asymptotic one beside it
SAMPLES = "samples.json"  # the split indices of the analysis batches and of the App. G sample, per run
SATURATION_ALPHA = 0.05  # App. G: the interval's confidence is 1 - alpha (docs/decisions.md)
SATURATION_CAL_FRACTION = 0.25  # App. G: the calibration part's share of the independent sample (docs/decisions.md)


def probe_tag(split: str, batch_size: int, n_batches: int, exact: bool, bn_mode: str) -> str:
    """Readable name of the probe settings, e.g. ``train-b128x10-exact`` (run names, summary CSV)."""
    return (
        f"{split}-b{batch_size}x{n_batches}"
        + ("-exact" if exact else "")
        + ("" if bn_mode == "eval" else f"-bn{bn_mode}")
    )


def summary_stem(config: dict) -> str:
    """``summary-<dataset>-<probe tag>``: the summary file a probe run's row belongs in (every finished run with this
    stem is listed there, whatever call probed it)."""
    keys = [config.get(k) for k in ("split", "batch_size", "n_batches", "exact", "bn_mode")]
    return f"summary-{config.get('dataset')}-{probe_tag(*keys)}"


def probe_configs(
    sweep_dirs: Iterable,
    *,
    split: str = "train",
    batch_size: int = DEFAULT_BATCH_SIZE,
    n_batches: int = DEFAULT_N_BATCHES,
    exact: bool = False,
    bn_mode: str = "eval",
    seed: int = 0,
    saturation_delta: float | None = None,
    saturation_t: float | None = None,
    saturation_alpha: float = SATURATION_ALPHA,
    saturation_n: int | None = None,
    saturation_split: str = HELD_OUT,
    saturation_cal_fraction: float = SATURATION_CAL_FRACTION,
    device: str = "auto",
    data_root: str | None = None,
) -> list[dict]:
    """One ``ag_probe`` run config per finished sweep run (identity: the sweep run and every probe setting)."""
    if split not in SPLITS:
        raise UserError(f"--split {split}: use one of {', '.join(SPLITS)}")
    if saturation_split not in SATURATION_SPLITS:
        raise UserError(f"--saturation-split {saturation_split}: use one of {', '.join(SATURATION_SPLITS)}")
    if batch_size <= 0 or n_batches <= 0:
        raise UserError(f"--batch-size {batch_size} / --n-batches {n_batches}: both must be positive")
    if bn_mode not in BN_MODES:
        raise UserError(f"--bn-mode {bn_mode}: use one of {', '.join(BN_MODES)}")
    if saturation_delta is not None and saturation_delta < 0:
        raise UserError(
            f"--saturation-delta {saturation_delta}: must be >= 0 (or leave it out: no tolerance, no 'saturated' verdict)"
        )
    if saturation_t is not None and saturation_t <= 0:
        raise UserError(
            f"--saturation-t {saturation_t}: the half-width must be > 0 (or leave it out: set from --saturation-alpha)"
        )
    if not 0 < saturation_alpha < 1:
        raise UserError(f"--saturation-alpha {saturation_alpha}: must be strictly between 0 and 1")
    if not 0 < saturation_cal_fraction < 1:
        raise UserError(f"--saturation-cal-fraction {saturation_cal_fraction}: must be strictly between 0 and 1")
    if saturation_n is not None and saturation_n < 2:
        raise UserError(f"--saturation-n {saturation_n}: the traces need a sample covariance, so at least 2 examples")
    if saturation_n is not None and saturation_t is None:
        app_g_split(saturation_n, saturation_cal_fraction, 0)  # both parts big enough, before any run starts
    configs = []
    for directory in sweep_dirs:
        directory = Path(directory)
        sweep = runs.read_config(directory, SWEEP_CONFIG_KEYS)
        warn_unused_data_root(sweep["dataset"], data_root)
        check_sample_sizes(directory, split, batch_size, n_batches, saturation_split)
        tag = probe_tag(split, batch_size, n_batches, exact, bn_mode)
        configs.append(
            {
                "experiment": EXPERIMENT,
                "name": f"{sweep['dataset']}-resnet{sweep['depth_label']}-n{sweep['depth_n']}-seed{sweep['seed']}-{tag}",
                "dataset": sweep["dataset"],
                "depth_n": sweep["depth_n"],
                "depth_label": sweep["depth_label"],
                "seed": sweep["seed"],
                "sweep_run": directory.name,  # <name>-<hash8>: a retrained sweep run is a new probe run
                "split": split,
                "batch_size": batch_size,
                "n_batches": n_batches,
                "exact": bool(exact),
                "bn_mode": bn_mode,
                "probe_seed": seed,
                "loss": "cross_entropy_mean",
                "saturation": {
                    "statistic": SATURATION_STATISTIC,  # runs under an older statistic are not reused
                    "protocol": SATURATION_PROTOCOL,  # older runs (the interval alone, or the older test) differ
                    "delta": saturation_delta,  # None: no tolerance
                    "t": saturation_t,  # None: t_alpha from the calibration traces and n_test
                    "alpha": saturation_alpha if saturation_t is None else None,
                    "n": saturation_n,  # None: every example of the split outside the analysis batches
                    "split": saturation_split,
                    "cal_fraction": saturation_cal_fraction
                    if saturation_t is None
                    else None,  # no split with a given t
                },
                "runtime": {
                    "device": device,
                    "sweep_dir": str(directory.resolve()),
                    "data_root": str(Path(data_root).expanduser().resolve()) if data_root else None,
                },
            }
        )
    return configs


def check_sample_sizes(sweep_dir: Path, split: str, batch_size: int, n_batches: int, saturation_split: str) -> None:
    """Refuse analysis batches the split cannot fill, and an App. G sample of fewer than 2 examples (docs/decisions.md).

    The split sizes come from the sweep run's ``result.json`` (``train_size``, ``test_size``); a run without
    them is checked by the job itself. Probing fewer or smaller batches than asked would change ``AG_l``'s
    meaning (an average over B batches of size b) under a record named after the request.
    """
    result = runs.read_result(sweep_dir)
    size = result.get(f"{split}_size")
    if not isinstance(size, int):
        return
    if size < batch_size * n_batches:
        fit = f"at most --n-batches {size // batch_size}" if size >= batch_size else f"--batch-size {size} or less"
        raise UserError(
            f"--n-batches {n_batches} --batch-size {batch_size}: the {split} split of {sweep_dir.name} holds {size} examples, "
            f"fewer than {batch_size * n_batches}; use {fit} (or another --split)"
        )
    left = result.get(f"{saturation_split}_size")
    if saturation_split == split and isinstance(left, int) and left - batch_size * n_batches < 2:
        raise UserError(
            f"--saturation-split {saturation_split}: the analysis batches take {batch_size * n_batches} of its {left} examples, "
            "leaving fewer than 2 for the App. G sample; use --saturation-split test, or fewer --n-batches"
        )


def probe_sweep_run(spec) -> dict:
    """Job function of script 02: probe one trained sweep model.

    Writes ``samples.json`` (which examples of which split went into the analysis batches and into
    the App. G sample), ``candidates.csv`` (one row per candidate) and ``result.json``.
    """
    config = spec.config
    path = runs.prepare_run(spec.out, config)
    runtime = config.get("runtime", {})
    device = resolve_device(runtime.get("device") or "auto")
    model, data = load_sweep_run(runtime["sweep_dir"], data_root=runtime.get("data_root"), device=device)
    b, nb = config["batch_size"], config["n_batches"]
    sat = config["saturation"]
    pool = held_out_pool(runtime["sweep_dir"], runtime.get("data_root"), data) if sat["split"] == HELD_OUT else None

    def examples(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        if split == HELD_OUT:
            return pool.x, pool.y
        return (data.x_train, data.y_train) if split == "train" else (data.x_test, data.y_test)

    def seeded_order(split: str) -> torch.Tensor:
        """The split's examples in the probe seed's random order (analysis batches first, then the App. G sample)."""
        return torch.randperm(
            len(examples(split)[1]),
            generator=torch.Generator().manual_seed(_selection_seed(config["probe_seed"], split)),
        )

    def loader(split: str, idx: torch.Tensor, size: int) -> tuple[TensorLoader, dict]:
        """Un-augmented batches of ``size`` over the examples ``idx`` (the last one smaller), and their record."""
        images, labels = examples(split)
        out = TensorLoader(
            images[idx], labels[idx], size, train=False, drop_last=False, mean=data.mean, std=data.std, device=device
        )
        record = {"split": split, "batch_size": size, "n_batches": len(out), "n": len(idx), "indices": idx.tolist()}
        return out, record | ({"counts": pool.counts(idx)} if split == HELD_OUT else {})

    size, count = _fit_batches(len(examples(config["split"])[1]), b, nb, config["split"])
    analysis, used = loader(config["split"], seeded_order(config["split"])[: size * count], size)
    result = probe_activation_gradients(
        model, analysis, bn_mode=config["bn_mode"], exact=config["exact"], seed=config["probe_seed"]
    )
    if pool is None:
        order, start = seeded_order(sat["split"]), used["n"] if sat["split"] == config["split"] else 0
    else:  # the pool's test images that the analysis batches took (--split test) stay out
        taken = set(pool.positions(config["split"], used["indices"]))
        order, start = torch.tensor([i for i in seeded_order(HELD_OUT).tolist() if i not in taken]), 0
    sample = app_g_sample(order, start, sat["n"], sat["split"])
    if pool is None:
        shared = len(set(used["indices"]) & set(sample.tolist())) if sat["split"] == config["split"] else 0
    else:
        shared = len(set(pool.positions(config["split"], used["indices"])) & set(sample.tolist()))
    split_seed = app_g_split_seed(config["probe_seed"])
    if sat["t"] is None:  # calibration part for the traces, test part for C_hat_l
        cal, test = (sample[i] for i in app_g_split(len(sample), sat["cal_fraction"], split_seed))
    else:  # t given: no split, the whole sample for both
        cal, test = None, sample
    parts = {"saturation": loader(sat["split"], sample, b)[1]}
    if cal is not None:
        parts |= {"calibration": loader(sat["split"], cal, b)[1], "test": loader(sat["split"], test, b)[1]}
    pool_record = {} if pool is None else {"held_out_pool": pool.record()}
    runs.atomic_write_json(path / SAMPLES, {"analysis": used, **parts, **pool_record})

    def contributions(idx: torch.Tensor, directions=None) -> ProbeResult:
        """Per candidate ``C_hat_l``, ``tr(Sigma_hat_l)``, ``U_l``, ``tr(Sigma_l^2)`` over the examples ``idx`` (psi_l
        only, no Gram matrix), and with ``directions`` the variance of ``c_i(l)`` along them."""
        batches = loader(sat["split"], idx, b)[0]
        return probe_activation_gradients(
            model,
            batches,
            bn_mode=config["bn_mode"],
            seed=config["probe_seed"],
            contributions=True,
            contribution_directions=directions,
        )

    tested = contributions(test)  # first: its C_hat_l are the directions of the calibration part's variances
    test_scores = tested.scores
    trace_scores = test_scores if cal is None else contributions(cal, tested.cross_gradients).scores
    names = [s.name for s in test_scores]
    interval = saturation_interval(
        [s.cross_gradient_norm_pooled for s in test_scores],
        [s.contribution_cov_trace for s in trace_scores],
        n=len(test),
        alpha=sat["alpha"],
        t=sat["t"],
        delta=sat["delta"],
        names=names,
    )
    independent = config["bn_mode"] == "eval"
    if not independent:  # train-mode BatchNorm couples a batch: c_i(l) are not per-example gradients
        interval = dataclasses.replace(interval, lower=None, upper=None, verdict=NO_VERDICT)
    asymptotic, projected = None, {"n_test_to_exclude_zero": None, "n_test_to_exclude_delta": None}
    projected["n_test_to_exclude_delta_side"] = None
    if cal is not None and independent:
        asymptotic, projected = app_g_beside(test_scores, trace_scores, len(test), len(cal), sat, names)
    records = [
        {
            "depth_n": config["depth_n"],
            "depth_label": config["depth_label"],
            "seed": config["seed"],
            "split": used["split"],
            **r,
        }
        for r in result.records()
    ]
    runs.atomic_write_csv(path / "candidates.csv", records)
    out = {
        "dataset": config["dataset"],
        "depth_n": config["depth_n"],
        "depth_label": config["depth_label"],
        "seed": config["seed"],
        "sweep_run": config["sweep_run"],
        "split": used["split"],
        "probe_seed": config["probe_seed"],
        **result.summary(),
        "candidates": records,
        "saturation": {
            **interval.as_record(),
            "n_cal": 0 if cal is None else len(cal),
            "n_test": len(test),
            "split_seed": None if cal is None else split_seed,
            "statistic_source": "given t, whole sample" if cal is None else "calibration split",
            "test_covariance_traces": {
                s.name: s.contribution_cov_trace for s in test_scores
            },  # beside the calibration's
            "split": sat["split"],
            **source_counts(sat["split"], pool, sample, cal, test),
            **projected,
            "asymptotic": None if asymptotic is None else asymptotic.as_record(),
            "reused_training_data": sat["split"] == "train",
            "bn_mode": config["bn_mode"],
            "examples_independent": independent,  # train-mode BN couples the examples of a batch
            "shared_examples_with_analysis": shared,  # counted from the indices in samples.json
            "disjoint_from_analysis_batches": shared == 0,
            "statistic_note": (
                "max_l ||C_l||, C_l = mean_i c_i(l) the gradient of the mean loss over the n_test examples "
                "w.r.t. V_l at 0 (App. G, Theorem 3)"
            ),
        },
    }
    runs.write_result(path, out)
    return out


def app_g_beside(test_scores, cal_scores, n_test: int, n_cal: int, sat: dict, names: list[str]):
    """The asymptotic interval (None below 4 test examples: no ``tr(Sigma^2)``) and, for Theorem 3's interval,
    the projected ``n_test`` at which it would exclude 0 and delta (:func:`common.projection.theorem3_n_to_exclude`)."""
    u = [s.contribution_norm_sq for s in test_scores]
    test_traces = [s.contribution_cov_trace for s in test_scores]
    cal_traces = [s.contribution_cov_trace for s in cal_scores]
    delta = sat["delta"]
    side = None if delta is None else exclusion_side(u, delta)
    projected = {
        "n_test_to_exclude_zero": theorem3_n_to_exclude(
            u, test_traces, cal_traces, sat["alpha"], 0.0, LOWER_ABOVE_DELTA
        ),
        "n_test_to_exclude_delta": None
        if delta is None
        else theorem3_n_to_exclude(u, test_traces, cal_traces, sat["alpha"], delta, side),
        "n_test_to_exclude_delta_side": side,
    }
    v2 = [s.contribution_cov_sq_trace for s in test_scores]
    if any(v is None for v in v2):
        return None, projected
    v1 = [
        linear_variance_estimate(c.contribution_direction_variance, v, n_test)
        for c, v in zip(cal_scores, v2, strict=True)
    ]
    interval = asymptotic_interval(u, v1, v2, n=n_test, alpha=sat["alpha"], dof=n_cal - 1, delta=delta, names=names)
    return interval, projected


def source_counts(split: str, pool, sample: torch.Tensor, cal, test: torch.Tensor) -> dict:
    """How many images of each source the App. G sample and its two parts hold (``sources``, ``calibration_sources``,
    ``test_sources``): the held-out pool's ``train_unused`` and ``test``, or the one split named."""

    def counts(idx) -> dict[str, int]:
        if idx is None:
            return {}
        return pool.counts(idx) if split == HELD_OUT else {split: len(idx)}

    return {"sources": counts(sample), "calibration_sources": counts(cal), "test_sources": counts(test)}


@dataclasses.dataclass(frozen=True)
class HeldOutPool:
    """Every image a sweep model never trained on: the training images its subset left out (``unused``, indices
    into the whole training split, ascending), then the whole test split. Positions index ``x`` and ``y``."""

    x: torch.Tensor
    y: torch.Tensor
    unused: torch.Tensor  # whole-training-split indices of the pool's first len(unused) images
    subset: torch.Tensor | None  # whole-training-split indices of the images trained on (None: all of them)

    def counts(self, positions: torch.Tensor) -> dict[str, int]:
        train = int((positions < len(self.unused)).sum())
        return {"train_unused": train, "test": len(positions) - train}

    def positions(self, split: str, indices: list[int]) -> list[int]:
        """Pool positions of examples of ``split`` ("train": the trained-on split's indices; "test") that the pool holds."""
        if split == "test":
            return [len(self.unused) + i for i in indices]
        whole = indices if self.subset is None else self.subset[indices].tolist()
        where = {int(v): p for p, v in enumerate(self.unused.tolist())}
        return [where[i] for i in whole if i in where]  # none: the subset and the unused images are disjoint

    def record(self) -> dict:
        return {"train_unused": self.unused.tolist(), "test": len(self.y) - len(self.unused)}


def held_out_pool(sweep_dir, data_root, data) -> HeldOutPool:
    """App. G's default sample pool for one sweep run (:class:`HeldOutPool`): with a ``data.train_subset`` the
    training images it left out, from the whole dataset (:func:`common.resnet_sweep.load_source`), then ``data``'s
    test split; without one, the test split alone."""
    config = sweep_data_config(sweep_dir, data_root)
    subset = config.get("data", {}).get("train_subset")
    if not subset:
        return HeldOutPool(data.x_test, data.y_test, torch.zeros(0, dtype=torch.long), None)
    whole = load_source(config)
    keep = class_balanced_indices(whole.y_train, subset["k"], subset["seed"])
    mask = torch.ones(len(whole.y_train), dtype=torch.bool)
    mask[keep] = False
    unused = mask.nonzero().flatten()
    return HeldOutPool(
        torch.cat([whole.x_train[unused], data.x_test]), torch.cat([whole.y_train[unused], data.y_test]), unused, keep
    )


def summary_rows(results: Iterable[dict]) -> list[dict]:
    """One row per probed model (depth, seed) for the summary CSV of script 02."""
    rows = []
    for r in sorted(results, key=lambda r: (r["depth_n"], r["seed"])):
        row = {
            k: r[k]
            for k in (
                "depth_n",
                "depth_label",
                "ag_max",
                "ag_max_candidate",
                "ag_max_per_example",
                "ag_max_per_example_candidate",
                "ag_max_blocks",
                "ag_max_blocks_candidate",
                "batch_size",
                "n_batches",
                "split",
            )
        }
        if r.get("exact"):
            row["v_max"] = r["v_max"]
            row["v_max_candidate"] = r["v_max_candidate"]
        sat = r["saturation"]
        asym = sat.get("asymptotic") or {}
        row.update(
            seed=r["seed"],
            n_examples=r["n_examples"],
            bn_mode=r["bn_mode"],
            mean_loss=r["mean_loss"],
            saturation_verdict=sat["verdict"],
            saturation_statistic=sat["statistic"],
            saturation_gamma_hat=sat["gamma_hat"],
            saturation_argmax=sat["argmax"],
            saturation_lower=sat["lower"],
            saturation_upper=sat["upper"],
            saturation_delta=sat["delta"],
            saturation_t=sat["t"],
            saturation_alpha=sat["alpha"],
            saturation_alpha_source=sat["alpha_source"],
            saturation_n_candidates=sat["n_candidates"],
            saturation_n_cal=sat["n_cal"],
            saturation_n_test=sat["n_test"],
            saturation_split_seed=sat["split_seed"],
            saturation_split=sat["split"],
            saturation_reused_training_data=sat["reused_training_data"],
            saturation_sources=", ".join(f"{k}={v}" for k, v in (sat.get("sources") or {}).items()),
            saturation_n_test_to_exclude_zero=sat.get("n_test_to_exclude_zero"),
            saturation_asymptotic_lower=asym.get("lower"),
            saturation_asymptotic_upper=asym.get("upper"),
            saturation_asymptotic_verdict=asym.get("verdict"),
            saturation_asymptotic_n_test_to_exclude_zero=asym.get("n_test_to_exclude_zero"),
        )
        rows.append(row)
    return rows


def summary_table(rows: list[dict], low_signal: float) -> str:
    """Depth vs AGmax in both normalisations (each marked below the paper's low-signal line) and App. G."""
    exact = any("v_max" in r for r in rows)
    mark = "<" + format(low_signal, ".0e")
    header = (
        f"{'N':>4} {'model':<11} {'seed':>4} {'AGmax':>10} {'argmax':<10} {mark:>6} "
        f"{'AGmax/ex':>10} {'argmax':<10} {mark:>6}"
    )
    header += f" {'V_S,max':>10}" if exact else ""
    header += (
        f" {'max||C_l||':>10} {'Gamma interval':>21} {'t':>9} {'asymptotic interval':>21} {'cands':>5} App. G verdict"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        line = (
            f"{r['depth_n']:>4} {'ResNet-' + str(r['depth_label']):<11} {r['seed']:>4} "
            f"{r['ag_max']:>10.3e} {r['ag_max_candidate']:<10} {'*' if r['ag_max'] < low_signal else '':>6} "
            f"{r['ag_max_per_example']:>10.3e} {r['ag_max_per_example_candidate']:<10} "
            f"{'*' if r['ag_max_per_example'] < low_signal else '':>6}"
        )
        line += f" {r['v_max']:>10.3e}" if exact else ""
        interval = (
            "-" if r["saturation_lower"] is None else f"[{r['saturation_lower']:.3e}, {r['saturation_upper']:.3e}]"
        )
        asymptotic = (
            "-"
            if r["saturation_asymptotic_lower"] is None
            else f"[{r['saturation_asymptotic_lower']:.3e}, {r['saturation_asymptotic_upper']:.3e}]"
        )
        line += (
            f" {r['saturation_gamma_hat']:>10.3e} {interval:>21} {r['saturation_t']:>9.3e} {asymptotic:>21} "
            f"{r['saturation_n_candidates']:>5} {r['saturation_verdict']}"
        )
        lines.append(line)
    if rows:
        first, b = rows[0], rows[0]["batch_size"]
        delta = "none given" if first["saturation_delta"] is None else f"{first['saturation_delta']:g}"
        sources = []  # rows probed with a calibration split, and rows probed at a given t, each described once
        for split_rows in ([r for r in rows if r["saturation_n_cal"]], [r for r in rows if not r["saturation_n_cal"]]):
            if not split_rows:
                continue
            one = split_rows[0]
            if one["saturation_n_cal"]:
                sources.append(
                    f"t = sqrt(sum_l tr_l / (n_test alpha)), alpha = {one['saturation_alpha']:g}, tr_l from a "
                    f"calibration part of {one['saturation_n_cal']} examples, C_l from a test part of n_test = "
                    f"{one['saturation_n_test']} (split seed {one['saturation_split_seed']}); coverage is "
                    "conditional on the calibration traces"
                )
            else:
                sources.append(
                    f"t given, no split: C_l and tr_l from all n = {one['saturation_n_test']} examples; implied "
                    f"alpha = sum_l tr_l / (n t^2) = {one['saturation_alpha']:.3g} in the first such row"
                )
        source = "; for other rows, ".join(sources)
        lines += [
            f"* below {low_signal:g}, the paper's low-signal line (common.paper.LOW_SIGNAL_AG), in either reading: AGmax is "
            f"the norm of the batch-mean loss gradient at batch size {b} (x{first['n_batches']} batches, {first['split']} "
            f"split); AGmax/ex is the per-example RMS gradient norm (~ AGmax * sqrt({b})); the readings coincide at batch size 1.",
            f"App. G (Theorem 3): Gamma = max_l ||C_l||, C_l the gradient of the mean loss over independent "
            f"{first['saturation_split']} examples w.r.t. the zero block's V_l; Gamma in [max(0, max||C_l|| - t), max||C_l|| + t] "
            f"with probability >= 1 - alpha; {source}. t grows with the number of candidates (cands). Verdict against delta "
            f"({delta}): 'saturated within delta' when the upper end <= delta, 'not saturated' when the lower end > delta, "
            "else 'undecided'; never 'saturated' without a delta > 0.",
            "asymptotic interval (not Theorem 3's guarantee; not used for the verdict): per candidate a Bonferroni "
            "t interval on ||C_l||^2 from U_l = ||C_l||^2 - tr_l / n_test, with variance 4 C_l^T Sigma_l C_l / n_test + "
            "2 tr(Sigma_l^2) / n_test^2 estimated from the same parts, mapped to Gamma; '-' without a calibration part.",
        ]
    return "\n".join(lines)


def saturation_summary(sat: dict) -> dict:
    """App. G's numbers of one probe record, also from records written before the interval existed.

    New records carry them (``gamma_hat``, ``lower``, ``upper``, ``t``, ``n_candidates``, ``verdict``,
    ..., since issue 29 also ``split``, ``sources``, the projected ``n_test_to_exclude_*`` and the
    ``asymptotic`` interval's record; None where a record predates them). Older ones (``max_value``, ``t``, ``delta``, ``values``; t from the same sample it judged)
    get the interval ``[max(0, max_value - t), max_value + t]`` and its verdict against their delta,
    with ``statistic_source`` saying where t came from.
    """
    if "verdict" in sat:
        return {
            k: sat.get(k)
            for k in (
                "gamma_hat",
                "lower",
                "upper",
                "t",
                "alpha",
                "n_candidates",
                "delta",
                "verdict",
                "n_cal",
                "n_test",
                "split_seed",
                "statistic_source",
                "split",
                "sources",
                "n_test_to_exclude_zero",
                "n_test_to_exclude_delta",
                "n_test_to_exclude_delta_side",
                "asymptotic",
            )
        }
    lower, upper = gamma_interval(sat["max_value"], sat["t"])
    delta = sat.get("delta")  # 0 by default then: the same verdicts as no delta
    return {
        "gamma_hat": sat["max_value"],
        "lower": lower,
        "upper": upper,
        "t": sat["t"],
        "alpha": sat.get("error_bound"),
        "n_candidates": len(sat["values"]),
        "delta": delta,
        "verdict": saturation_verdict(lower, upper, delta),
        "n_cal": 0,
        "n_test": sat["n"],
        "split_seed": None,
        "statistic_source": "older record: t from the sample it judges",
        "split": sat.get("split"),
        "sources": None,
        "n_test_to_exclude_zero": None,
        "n_test_to_exclude_delta": None,
        "n_test_to_exclude_delta_side": None,
        "asymptotic": None,
    }


def app_g_sample(order: torch.Tensor, start: int, limit: int | None, split: str) -> torch.Tensor:
    """App. G's independent sample: the next ``limit`` examples of a split's seeded ``order`` past ``start``
    (the analysis batches' examples), every one left when ``limit`` is None."""
    idx = order[start:] if limit is None else order[start : start + limit]
    if len(idx) < 2:
        raise UserError(
            f"the {split} split has {len(idx)} examples left for the App. G sample; use another --saturation-split"
        )
    if limit is not None and len(idx) < limit:
        log.warning("the %s split has %d examples left for the App. G sample instead of %d", split, len(idx), limit)
    return idx


def app_g_split_seed(probe_seed: int) -> int:
    """The recorded seed of App. G's calibration/test split, derived from the probe seed (``--seed``)."""
    return int(hashlib.sha256(f"app-g-split:{probe_seed}".encode()).hexdigest()[:15], 16)


def app_g_split(n: int, cal_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions ``(calibration, test)`` in an App. G sample of ``n`` examples: a seeded random
    ``round(cal_fraction * n)`` of them (at least 2, for a sample covariance) calibrate the traces,
    the other ``n_test`` (at least 1) give ``C_hat_l``."""
    n_cal = round(cal_fraction * n)
    if n_cal < 2 or n - n_cal < 1:
        raise UserError(
            f"an App. G sample of {n} examples split at --saturation-cal-fraction {cal_fraction:g} leaves {n_cal} calibration "
            f"and {n - n_cal} test examples; at least 2 and 1 are needed: raise --saturation-n or change the fraction"
        )
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return order[:n_cal], order[n_cal:]


def _selection_seed(seed: int, split: str) -> int:
    return int(hashlib.sha256(f"probe-batches:{seed}:{split}".encode()).hexdigest()[:15], 16)


def _fit_batches(available: int, batch_size: int, n_batches: int, split: str) -> tuple[int, int]:
    """``(batch size, number of batches)`` when ``available`` examples hold them; else a :class:`UserError`
    (never fewer or smaller batches than the run's name says: docs/decisions.md)."""
    if available < batch_size * n_batches:
        raise UserError(
            f"--n-batches {n_batches} --batch-size {batch_size}: the {split} split holds {available} examples, fewer than "
            f"{batch_size * n_batches}; use fewer or smaller batches (or another --split)"
        )
    return batch_size, n_batches
