"""Job module of ``02_probe_ag.py``: probe every trained sweep model (paper B.1, App. G).

Holds the probe's run configs (:func:`probe_configs`, identity: the sweep run and every probe
setting, the App. G statistic's name included), the job function (:func:`probe_sweep_run`: the
analysis batches through :func:`common.probe.probe_activation_gradients`, then the separated
saturation test of App. G on an independent sample) and the summary rows and table the script
prints and writes.

App. G (docs/decisions.md): the independent sample (every example of
``--saturation-split`` not in the analysis batches unless ``--saturation-n``) is split with a
recorded seed into a calibration part (:data:`SATURATION_CAL_FRACTION` of it by default), whose
per-example contributions estimate the traces ``tr Sigma_l``, and a test part of ``n_test``
examples, whose pooled cross-gradients ``C_hat_l`` give ``Gamma_hat = max_l ||C_hat_l||``. The
interval ``[max(0, Gamma_hat - t), Gamma_hat + t]`` uses ``t = sqrt(sum_l tr_l^cal / (n_test alpha))``
(:func:`common.projection.saturation_interval`); its verdict is taken against ``delta`` when one is
given. With ``--saturation-t`` there is no split: the whole sample gives ``C_hat_l`` and the
traces, and the record carries the implied ``alpha``. With ``--bn-mode train`` the contributions
are not per-example gradients: no interval, no verdict.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path

import torch

from common import runs
from common.data.vision import TensorLoader, warn_unused_data_root
from common.device import resolve_device
from common.errors import UserError
from common.probe import BN_MODES, probe_activation_gradients
from common.projection import NO_VERDICT, SATURATION_STATISTIC, gamma_interval, saturation_interval, saturation_verdict
from common.resnet_sweep import CONFIG_KEYS as SWEEP_CONFIG_KEYS
from common.resnet_sweep import load_sweep_run

log = logging.getLogger(__name__)

EXPERIMENT = "ag_probe"
DEFAULT_BATCH_SIZE = 128  # analysis batch size (docs/decisions.md): AG_l ~ 1/sqrt(batch)
DEFAULT_N_BATCHES = 10  # B analysis batches per model
MINI_N_BATCHES = 7  # --preset mini: 7 x 128 of the mini sweep's 1,000 training images (docs/decisions.md)
SPLITS = ("train", "test")
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
    saturation_split: str = "test",
    saturation_cal_fraction: float = SATURATION_CAL_FRACTION,
    device: str = "auto",
    data_root: str | None = None,
) -> list[dict]:
    """One ``ag_probe`` run config per finished sweep run (identity: the sweep run and every probe setting)."""
    if split not in SPLITS or saturation_split not in SPLITS:
        raise UserError(f"--split / --saturation-split must be one of {', '.join(SPLITS)}")
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
                    "protocol": "interval",  # App. G's interval with a calibration split (runs of the older test differ)
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

    def examples(split: str) -> tuple[torch.Tensor, torch.Tensor]:
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
        return out, {"split": split, "batch_size": size, "n_batches": len(out), "n": len(idx), "indices": idx.tolist()}

    size, count = _fit_batches(len(examples(config["split"])[1]), b, nb, config["split"])
    analysis, used = loader(config["split"], seeded_order(config["split"])[: size * count], size)
    result = probe_activation_gradients(
        model, analysis, bn_mode=config["bn_mode"], exact=config["exact"], seed=config["probe_seed"]
    )
    sat = config["saturation"]
    sample = app_g_sample(
        seeded_order(sat["split"]), used["n"] if sat["split"] == config["split"] else 0, sat["n"], sat["split"]
    )
    shared = len(set(used["indices"]) & set(sample.tolist())) if sat["split"] == config["split"] else 0
    split_seed = app_g_split_seed(config["probe_seed"])
    if sat["t"] is None:  # calibration part for the traces, test part for C_hat_l
        cal, test = (sample[i] for i in app_g_split(len(sample), sat["cal_fraction"], split_seed))
    else:  # t given: no split, the whole sample for both
        cal, test = None, sample
    parts = {"saturation": loader(sat["split"], sample, b)[1]}
    if cal is not None:
        parts |= {"calibration": loader(sat["split"], cal, b)[1], "test": loader(sat["split"], test, b)[1]}
    runs.atomic_write_json(path / SAMPLES, {"analysis": used, **parts})

    def contributions(idx: torch.Tensor):
        """Per candidate ``C_hat_l`` and ``tr(Sigma_hat_l)`` over the examples ``idx`` (psi_l only, no Gram matrix)."""
        batches = loader(sat["split"], idx, b)[0]
        return probe_activation_gradients(
            model, batches, bn_mode=config["bn_mode"], seed=config["probe_seed"], contributions=True
        ).scores

    test_scores = contributions(test)
    trace_scores = test_scores if cal is None else contributions(cal)
    interval = saturation_interval(
        [s.cross_gradient_norm_pooled for s in test_scores],
        [s.contribution_cov_trace for s in trace_scores],
        n=len(test),
        alpha=sat["alpha"],
        t=sat["t"],
        delta=sat["delta"],
        names=[s.name for s in test_scores],
    )
    if config["bn_mode"] != "eval":  # train-mode BatchNorm couples a batch: c_i(l) are not per-example gradients
        interval = dataclasses.replace(interval, lower=None, upper=None, verdict=NO_VERDICT)
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
            "reused_training_data": sat["split"] == "train",
            "bn_mode": config["bn_mode"],
            "examples_independent": config["bn_mode"] == "eval",  # train-mode BN couples the examples of a batch
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
    header += f" {'max||C_l||':>10} {'Gamma interval':>21} {'t':>9} {'cands':>5} App. G verdict"
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
        line += (
            f" {r['saturation_gamma_hat']:>10.3e} {interval:>21} {r['saturation_t']:>9.3e} "
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
        ]
    return "\n".join(lines)


def saturation_summary(sat: dict) -> dict:
    """App. G's numbers of one probe record, also from records written before the interval existed.

    New records carry them (``gamma_hat``, ``lower``, ``upper``, ``t``, ``n_candidates``, ``verdict``,
    ...). Older ones (``max_value``, ``t``, ``delta``, ``values``; t from the same sample it judged)
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
