"""Job module of ``02_probe_ag.py``: probe every trained sweep model (paper B.1, App. G).

Holds the probe's run configs (:func:`probe_configs`: a preset of :mod:`common.presets.probe_ag` and the
fields set otherwise; identity: the sweep run and every probe setting, the App. G statistic's name
included) and the job function (:func:`probe_sweep_run`: the analysis batches through
:func:`common.science.probe.probe_activation_gradients`, then the separated saturation test of App. G on an
independent sample, :func:`app_g_sample_of`, recorded by :func:`saturation_record`). The summary rows
and table the script prints and writes are in :mod:`common.experiments.probe_ag_summary`; the sample-size checks
made before any run starts in :mod:`common.experiments.probe_ag_checks`.

App. G (docs/decisions.md): the independent sample (every example of
``--saturation-split`` not in the analysis batches unless ``--saturation-n``; the default,
``held-out``, is every image the model never trained on: the training images a subset left out and
the test split, :func:`held_out_pool`) is split with a recorded seed into a calibration part (:data:`SATURATION_CAL_FRACTION` of it by default), whose
per-example contributions estimate the traces ``tr Sigma_l``, and a test part of ``n_test``
examples, whose pooled cross-gradients ``C_hat_l`` give ``Gamma_hat = max_l ||C_hat_l||``. The
interval ``[max(0, Gamma_hat - t), Gamma_hat + t]`` uses ``t = sqrt(sum_l tr_l^cal / (n_test alpha))``
(:func:`common.science.projection.saturation_interval`); its verdict is taken against ``delta`` when one is
given. Beside it, labelled and not used for the verdict, the asymptotic interval
(:func:`common.science.projection.asymptotic_interval`): a Bonferroni-normal interval on each ``||C_l||^2``
from the test part's ``U_l = ||C_hat_l||^2 - tr_l / n_test`` and ``tr(Sigma_l^2)``, and the variance of
the calibration part's contributions along the test part's ``C_hat_l`` (so each part is streamed once);
for both intervals the ``n_test`` at which each would exclude 0 (and delta) at the current estimates.
With ``--saturation-t`` there is no split: the whole sample gives ``C_hat_l`` and the
traces, the record carries the implied ``alpha``, and there is no asymptotic interval. With
``--bn-mode train`` the contributions are not per-example gradients: no interval, no verdict.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path

import torch

from common.data.loader import TensorLoader
from common.data.vision import VisionData, class_balanced_indices, warn_unused_data_root
from common.errors import ParamError
from common.experiments.probe_ag_checks import check_batches_fit, check_sample_sizes
from common.experiments.probe_ag_config import ProbeRun, Saturation
from common.experiments.shared.resnet_sweep import CONFIG_KEYS as SWEEP_CONFIG_KEYS
from common.experiments.shared.resnet_sweep import load_source
from common.experiments.shared.resnet_sweep_config import data_source
from common.experiments.shared.resnet_sweep_records import load_sweep_run, sweep_data_config
from common.presets.choose import choose_preset
from common.presets.probe_ag import HELD_OUT, PRESETS, ProbePreset, app_g_sizes
from common.runs import atomic, run_store
from common.science.probe import probe_activation_gradients
from common.science.saturation import (
    LOWER_ABOVE_DELTA,
    NO_VERDICT,
    SATURATION_STATISTIC,
    asymptotic_interval,
    exclusion_side,
    linear_variance_estimate,
    saturation_interval,
    theorem3_n_to_exclude,
)
from common.training.device import resolve_device

log = logging.getLogger(__name__)

EXPERIMENT = "ag_probe"
SATURATION_PROTOCOL = "interval+asymptotic"  # Theorem 3's interval and the asymptotic one beside it
SAMPLES = "samples.json"  # the split indices of the analysis batches and of the App. G sample, per run


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
    preset: str = "paper",
    overrides: dict | None = None,
    *,
    seed: int = 0,
    device: str = "auto",
    data_root: str | None = None,
) -> list[dict]:
    """One ``ag_probe`` run config per finished sweep run (identity: the sweep run and every probe setting).

    ``preset``: a preset of :data:`common.presets.probe_ag.PRESETS`; ``overrides``: its fields set otherwise (None: the
    preset's value). ``seed`` seeds the analysis batches' selection, App. G's split and the blocks' ``U_l``."""
    p = choose_preset(PRESETS, preset, overrides)
    sweeps = {Path(d): run_store.read_config(Path(d), SWEEP_CONFIG_KEYS) for d in sweep_dirs}
    deepest = {}  # dataset -> the largest depth_n among the sweep runs probed (App. G's "deepest")
    for sweep in sweeps.values():
        deepest[sweep["dataset"]] = max(deepest.get(sweep["dataset"], 0), sweep["depth_n"])
    configs = []
    for directory, sweep in sweeps.items():
        warn_unused_data_root(sweep["dataset"], data_root)
        app_g = p.saturation_depths == "all" or sweep["depth_n"] == deepest[sweep["dataset"]]
        check_sample_sizes(directory, p.split, p.batch_size, p.n_batches, p.saturation_split if app_g else None)
        config = probe_config(directory, sweep, p, seed=seed, device=device, data_root=data_root, app_g=app_g)
        configs.append(config)
    return configs


def probe_config(
    directory: Path, sweep: dict, p: ProbePreset, *, seed: int, device: str, data_root, app_g: bool = True
) -> dict:
    """The run config that probes the sweep run in ``directory`` (its config ``sweep``) with the settings ``p``;
    ``app_g`` False: no App. G test (``saturation`` None; ``--saturation-depths deepest`` at a shallower depth)."""
    tag = probe_tag(p.split, p.batch_size, p.n_batches, p.exact, p.bn_mode)
    given_t = p.saturation_t is not None  # no calibration split with a given t
    saturation = {
        "statistic": SATURATION_STATISTIC,  # runs under an older statistic are not reused
        "protocol": SATURATION_PROTOCOL,  # older runs (the interval alone, or the older test) differ
        "delta": p.saturation_delta,  # None: no tolerance
        "t": p.saturation_t,  # None: t_alpha from the calibration traces and n_test
        "alpha": None if given_t else p.saturation_alpha,
        "n": p.saturation_n,  # None: every example of the split outside the analysis batches
        "split": p.saturation_split,
        "cal_fraction": None if given_t else p.saturation_cal_fraction,
    }
    return {
        "experiment": EXPERIMENT,
        "name": f"{sweep['dataset']}-resnet{sweep['depth_label']}-n{sweep['depth_n']}-seed{sweep['seed']}-{tag}",
        "dataset": sweep["dataset"],
        "depth_n": sweep["depth_n"],
        "depth_label": sweep["depth_label"],
        "seed": sweep["seed"],
        "sweep_run": directory.name,  # <name>-<hash8>: a retrained sweep run is a new probe run
        "split": p.split,
        "batch_size": p.batch_size,
        "n_batches": p.n_batches,
        "exact": bool(p.exact),
        "bn_mode": p.bn_mode,
        "probe_seed": seed,
        "loss": "cross_entropy_mean",
        "saturation": saturation if app_g else None,
        "runtime": {
            "device": device,
            "sweep_dir": str(directory.resolve()),
            "data_root": str(Path(data_root).expanduser().resolve()) if data_root else None,
        },
    }


@dataclasses.dataclass(frozen=True)
class SweepExamples:
    """The examples one probe run reads from its sweep run: the splits of ``data`` and App. G's held-out ``pool``
    (None unless the App. G sample is held-out), each in the probe seed's order, as un-augmented batches."""

    data: VisionData
    pool: HeldOutPool | None
    device: torch.device
    probe_seed: int

    def of(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        if split == HELD_OUT:
            return self.pool.x, self.pool.y
        return (self.data.x_train, self.data.y_train) if split == "train" else (self.data.x_test, self.data.y_test)

    def seeded_order(self, split: str) -> torch.Tensor:
        """The split's examples in the probe seed's random order (analysis batches first, then the App. G sample)."""
        generator = torch.Generator().manual_seed(_selection_seed(self.probe_seed, split))
        return torch.randperm(len(self.of(split)[1]), generator=generator)

    def loader(self, split: str, idx: torch.Tensor, size: int) -> tuple[TensorLoader, dict]:
        """Un-augmented batches of ``size`` over the examples ``idx`` (the last one smaller), and their record."""
        images, labels = self.of(split)
        data = self.data
        out = TensorLoader(
            images[idx],
            labels[idx],
            size,
            train=False,
            drop_last=False,
            mean=data.mean,
            std=data.std,
            device=self.device,
        )
        record = {"split": split, "batch_size": size, "n_batches": len(out), "n": len(idx), "indices": idx.tolist()}
        return out, record | ({"counts": self.counts(split, idx)} if split == HELD_OUT else {})

    def counts(self, split: str, idx: torch.Tensor | None) -> dict[str, int]:
        """How many of the examples ``idx`` of ``split`` come from each source: the held-out pool's ``train_unused``
        and ``test``, or the one split named (nothing for no examples)."""
        if idx is None:
            return {}
        return self.pool.counts(idx) if split == HELD_OUT else {split: len(idx)}


@dataclasses.dataclass(frozen=True)
class AppGSample:
    """App. G's independent sample (positions in its split) and its calibration and test parts (``cal`` None with a
    given t: the whole sample is the test part), with the split's recorded seed and the examples it shares with the
    analysis batches (``shared``: 0 by construction, counted from the recorded indices)."""

    sample: torch.Tensor
    cal: torch.Tensor | None
    test: torch.Tensor
    split_seed: int
    shared: int


def app_g_sample_of(examples: SweepExamples, run: ProbeRun, used: dict) -> AppGSample:
    """App. G's sample of one probe run past the analysis batches ``used`` (their record), split into a calibration and
    a test part unless t is given (:func:`app_g_split`, seeded by :func:`app_g_split_seed`)."""
    sat, pool = run.saturation, examples.pool
    if pool is None:
        order, start = examples.seeded_order(sat.split), used["n"] if sat.split == run.split else 0
    else:  # the pool's test images that the analysis batches took (--split test) stay out
        taken = set(pool.positions(run.split, used["indices"]))
        order, start = torch.tensor([i for i in examples.seeded_order(HELD_OUT).tolist() if i not in taken]), 0
    sample = app_g_sample(order, start, sat.n, sat.split)
    if pool is None:
        shared = len(set(used["indices"]) & set(sample.tolist())) if sat.split == run.split else 0
    else:
        shared = len(set(pool.positions(run.split, used["indices"])) & set(sample.tolist()))
    split_seed = app_g_split_seed(run.probe_seed)
    if sat.t is not None:  # t given: no split, the whole sample for both
        return AppGSample(sample, None, sample, split_seed, shared)
    cal, test = (sample[i] for i in app_g_split(len(sample), sat.cal_fraction, split_seed))
    return AppGSample(sample, cal, test, split_seed, shared)


def samples_record(
    examples: SweepExamples, split: str | None, used: dict, g: AppGSample | None, batch_size: int
) -> dict:
    """``samples.json``: which examples of which split went into the analysis batches and into App. G's parts (``g``
    None: no App. G test, the analysis batches alone)."""
    if g is None:
        return {"analysis": used}
    parts = {"saturation": examples.loader(split, g.sample, batch_size)[1]}
    if g.cal is not None:
        parts |= {
            "calibration": examples.loader(split, g.cal, batch_size)[1],
            "test": examples.loader(split, g.test, batch_size)[1],
        }
    pool = {} if examples.pool is None else {"held_out_pool": examples.pool.record()}
    return {"analysis": used, **parts, **pool}


def probe_sweep_run(spec) -> dict:
    """Job function of script 02: probe one trained sweep model.

    Writes ``samples.json`` (which examples of which split went into the analysis batches and into
    the App. G sample), ``candidates.csv`` (one row per candidate) and ``result.json``.
    """
    run = ProbeRun.from_config(spec.config)
    path = run_store.prepare_run(spec.out, spec.config)
    runtime = run.runtime
    device = resolve_device(runtime.device or "auto")
    model, data = load_sweep_run(runtime.sweep_dir, data_root=runtime.data_root, device=device)
    b, nb, split, sat = run.batch_size, run.n_batches, run.split, run.saturation
    app_g = sat is not None  # None: no App. G test at this depth (saturation_depths "deepest")
    pool = held_out_pool(runtime.sweep_dir, runtime.data_root, data) if app_g and sat.split == HELD_OUT else None
    examples = SweepExamples(data, pool, device, run.probe_seed)
    check_batches_fit(len(examples.of(split)[1]), b, nb, f"the {split} split")
    analysis, used = examples.loader(split, examples.seeded_order(split)[: b * nb], b)
    result = probe_activation_gradients(model, analysis, bn_mode=run.bn_mode, exact=run.exact, seed=run.probe_seed)
    g = app_g_sample_of(examples, run, used) if app_g else None
    atomic.atomic_write_json(path / SAMPLES, samples_record(examples, sat.split if app_g else None, used, g, b))
    saturation = app_g_test(model, run, examples, g) if app_g else None
    records = [
        {"depth_n": run.depth_n, "depth_label": run.depth_label, "seed": run.seed, "split": split, **r}
        for r in result.records()
    ]
    atomic.atomic_write_csv(path / "candidates.csv", records)
    out = {
        **{k: getattr(run, k) for k in ("dataset", "depth_n", "depth_label", "seed", "sweep_run")},
        "split": used["split"],
        "probe_seed": run.probe_seed,
        **result.summary(),
        "candidates": records,
        "saturation": saturation,
    }
    run_store.write_result(path, out)
    return out


def app_g_test(model, run: ProbeRun, examples: SweepExamples, g: AppGSample) -> dict:
    """App. G's separated test of one probe run on its sample ``g`` (:func:`app_g_sample_of`): the ``saturation``
    record (:func:`saturation_record`).

    Per candidate C_hat_l, tr(Sigma_hat_l), U_l, tr(Sigma_l^2) over a part (psi_l only, no Gram matrix); the test
    part first: its C_hat_l are the directions of the calibration part's variances."""
    sat, b = run.saturation, run.batch_size
    moments = functools.partial(
        probe_activation_gradients, model, bn_mode=run.bn_mode, seed=run.probe_seed, contributions=True
    )
    tested = moments(examples.loader(sat.split, g.test, b)[0])
    traced = tested
    if g.cal is not None:
        traced = moments(examples.loader(sat.split, g.cal, b)[0], contribution_directions=tested.cross_gradients)
    return saturation_record(run, examples, g, tested.scores, traced.scores)


def saturation_record(run: ProbeRun, examples: SweepExamples, g: AppGSample, test_scores, trace_scores) -> dict:
    """The ``saturation`` record of a probe run: Theorem 3's interval on the test part's ``C_hat_l`` with the traces
    of ``trace_scores`` (the calibration part's; the test part's with a given t), its verdict, and beside it the
    asymptotic interval and the projected ``n_test`` (:func:`app_g_beside`); no interval in train-mode BatchNorm."""
    sat = run.saturation
    names = [s.name for s in test_scores]
    interval = saturation_interval(
        [s.cross_gradient_norm_pooled for s in test_scores],
        [s.contribution_cov_trace for s in trace_scores],
        n=len(g.test),
        alpha=sat.alpha,
        t=sat.t,
        delta=sat.delta,
        names=names,
    )
    independent = run.bn_mode == "eval"
    if not independent:  # train-mode BatchNorm couples a batch: c_i(l) are not per-example gradients
        interval = dataclasses.replace(interval, lower=None, upper=None, verdict=NO_VERDICT)
    asymptotic, projected = None, dict.fromkeys(NO_PROJECTION)
    if g.cal is not None and independent:
        asymptotic, projected = app_g_beside(test_scores, trace_scores, len(g.test), len(g.cal), sat, names)
    return {
        **interval.as_record(),
        "n_cal": 0 if g.cal is None else len(g.cal),
        "n_test": len(g.test),
        "split_seed": None if g.cal is None else g.split_seed,
        "statistic_source": "given t, whole sample" if g.cal is None else "calibration split",
        "test_covariance_traces": {s.name: s.contribution_cov_trace for s in test_scores},  # beside the calibration's
        "split": sat.split,
        "sources": examples.counts(sat.split, g.sample),
        "calibration_sources": examples.counts(sat.split, g.cal),
        "test_sources": examples.counts(sat.split, g.test),
        **projected,
        "asymptotic": None if asymptotic is None else asymptotic.as_record(),
        "reused_training_data": sat.split == "train",
        "bn_mode": run.bn_mode,
        "examples_independent": independent,  # train-mode BN couples the examples of a batch
        "shared_examples_with_analysis": g.shared,  # counted from the indices in samples.json
        "disjoint_from_analysis_batches": g.shared == 0,
        "statistic_note": (
            "max_l ||C_l||, C_l = mean_i c_i(l) the gradient of the mean loss over the n_test examples "
            "w.r.t. V_l at 0 (App. G, Theorem 3)"
        ),
    }


NO_PROJECTION = ("n_test_to_exclude_zero", "n_test_to_exclude_delta", "n_test_to_exclude_delta_side")


def app_g_beside(test_scores, cal_scores, n_test: int, n_cal: int, sat: Saturation, names: list[str]):
    """The asymptotic interval (None below 4 test examples: no ``tr(Sigma^2)``) and, for Theorem 3's interval,
    the projected ``n_test`` at which it would exclude 0 and delta (:func:`common.science.projection.theorem3_n_to_exclude`)."""
    u = [s.contribution_norm_sq for s in test_scores]
    test_traces = [s.contribution_cov_trace for s in test_scores]
    cal_traces = [s.contribution_cov_trace for s in cal_scores]
    delta = sat.delta
    side = None if delta is None else exclusion_side(u, delta)
    projected = {
        "n_test_to_exclude_zero": theorem3_n_to_exclude(u, test_traces, cal_traces, sat.alpha, 0.0, LOWER_ABOVE_DELTA),
        "n_test_to_exclude_delta": None
        if delta is None
        else theorem3_n_to_exclude(u, test_traces, cal_traces, sat.alpha, delta, side),
        "n_test_to_exclude_delta_side": side,
    }
    v2 = [s.contribution_cov_sq_trace for s in test_scores]
    if any(v is None for v in v2):
        return None, projected
    v1 = [
        linear_variance_estimate(c.contribution_direction_variance, v, n_test)
        for c, v in zip(cal_scores, v2, strict=True)
    ]
    interval = asymptotic_interval(u, v1, v2, n=n_test, alpha=sat.alpha, dof=n_cal - 1, delta=delta, names=names)
    return interval, projected


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
    training images it left out, from the whole dataset (:func:`common.experiments.shared.resnet_sweep.load_source`), then ``data``'s
    test split; without one, the test split alone."""
    config = sweep_data_config(sweep_dir, data_root)  # the sweep run's record
    subset = data_source(config)[1].train_subset
    if not subset:
        return HeldOutPool(data.x_test, data.y_test, torch.zeros(0, dtype=torch.long), None)
    whole = load_source(config)
    keep = class_balanced_indices(whole.y_train, subset.k, subset.seed)
    mask = torch.ones(len(whole.y_train), dtype=torch.bool)
    mask[keep] = False
    unused = mask.nonzero().flatten()
    return HeldOutPool(
        torch.cat([whole.x_train[unused], data.x_test]), torch.cat([whole.y_train[unused], data.y_test]), unused, keep
    )


def app_g_sample(order: torch.Tensor, start: int, limit: int | None, split: str) -> torch.Tensor:
    """App. G's independent sample: the next ``limit`` examples of a split's seeded ``order`` past ``start``
    (the analysis batches' examples), every one left when ``limit`` is None."""
    idx = order[start:] if limit is None else order[start : start + limit]
    if len(idx) < 2:
        raise ParamError("saturation_split", split, f"{len(idx)} examples are left for the App. G sample; use another")
    if limit is not None and len(idx) < limit:
        log.warning("the %s split has %d examples left for the App. G sample instead of %d", split, len(idx), limit)
    return idx


def app_g_split_seed(probe_seed: int) -> int:
    """The recorded seed of App. G's calibration/test split, derived from the probe seed (``--seed``)."""
    return int(hashlib.sha256(f"app-g-split:{probe_seed}".encode()).hexdigest()[:15], 16)


def app_g_split(n: int, cal_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions ``(calibration, test)`` in an App. G sample of ``n`` examples: a seeded random
    ``round(cal_fraction * n)`` of them (at least 2, for a sample covariance) calibrate the traces,
    the other ``n_test`` (at least 1) give ``C_hat_l`` (:func:`common.presets.probe_ag.app_g_sizes`)."""
    n_cal, _ = app_g_sizes(n, cal_fraction)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return order[:n_cal], order[n_cal:]


def _selection_seed(seed: int, split: str) -> int:
    return int(hashlib.sha256(f"probe-batches:{seed}:{split}".encode()).hexdigest()[:15], 16)
