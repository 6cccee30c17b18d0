"""Job module of ``02_probe_ag.py``: probe every trained sweep model (paper B.1, App. G).

Holds the probe's run configs (:func:`probe_configs`, identity: the sweep run and every probe
setting, the App. G statistic's name included), the job function (:func:`probe_sweep_run`: the
analysis batches through :func:`common.probe.probe_activation_gradients`, then the separated
saturation test of App. G on an independent sample) and the summary rows and table the script
prints and writes.

App. G (README, reproduction decisions): the statistic is ``max_l ||C_l||``, ``C_l`` the
cross-gradient of the mean loss pooled over the whole independent sample (every example of
``--saturation-split`` not in the analysis batches unless ``--saturation-n``); ``delta``
defaults to 0 (Theorem 1's own boundary, the only value that does not depend on ``V_l``'s
coordinates) and ``t`` to the margin at which the error bound ``sum_l tr(Sigma_hat_l) / (n t^2)``
equals ``alpha`` (0.05), unless given.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path

import torch

from common import runs
from common.data.vision import TensorLoader
from common.device import resolve_device
from common.errors import UserError
from common.experiments.train_resnet_sweep import load_sweep_run
from common.probe import BN_MODES, probe_activation_gradients
from common.projection import SATURATION_STATISTIC, saturation_test, separation_margin

log = logging.getLogger(__name__)

EXPERIMENT = "ag_probe"
DEFAULT_BATCH_SIZE = 128  # analysis batch size (README, reproduction decisions): AG_l ~ 1/sqrt(batch)
DEFAULT_N_BATCHES = 10  # B analysis batches per model
MINI_N_BATCHES = 7  # --preset mini: 7 x 128 of the mini sweep's 1,000 training images (README, mini sizes)
SPLITS = ("train", "test")
SAMPLES = "samples.json"  # the split indices of the analysis batches and of the App. G sample, per run
SATURATION_DELTA = 0.0  # App. G delta for ||C_l|| (README: the coordinate-free boundary of Theorem 1)
SATURATION_ALPHA = 0.05  # default t: the margin at which the error bound is this (README)


def probe_tag(split: str, batch_size: int, n_batches: int, exact: bool, bn_mode: str) -> str:
    """Readable name of the probe settings, e.g. ``train-b128x10-exact`` (run names, summary CSV)."""
    return f"{split}-b{batch_size}x{n_batches}" + ("-exact" if exact else "") + ("" if bn_mode == "eval" else f"-bn{bn_mode}")


def probe_configs(
    sweep_dirs: Iterable,
    *,
    split: str = "train",
    batch_size: int = DEFAULT_BATCH_SIZE,
    n_batches: int = DEFAULT_N_BATCHES,
    exact: bool = False,
    bn_mode: str = "eval",
    seed: int = 0,
    saturation_delta: float = SATURATION_DELTA,
    saturation_t: float | None = None,
    saturation_alpha: float = SATURATION_ALPHA,
    saturation_n: int | None = None,
    saturation_split: str = "test",
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
    if saturation_delta < 0:
        raise UserError(f"--saturation-delta {saturation_delta}: must be >= 0")
    if saturation_t is not None and saturation_t <= 0:
        raise UserError(f"--saturation-t {saturation_t}: the separation margin must be > 0 (or leave it out: set from --saturation-alpha)")
    if not 0 < saturation_alpha < 1:
        raise UserError(f"--saturation-alpha {saturation_alpha}: must be strictly between 0 and 1")
    if saturation_n is not None and saturation_n < 2:
        raise UserError(f"--saturation-n {saturation_n}: the error bound needs a sample covariance, so at least 2 examples")
    configs = []
    for directory in sweep_dirs:
        directory = Path(directory)
        sweep = runs.read_json(directory / runs.CONFIG)
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
                    "delta": saturation_delta,
                    "t": saturation_t,  # None: separation_margin(traces, n, alpha)
                    "alpha": saturation_alpha if saturation_t is None else None,
                    "n": saturation_n,  # None: every example of the split outside the analysis batches
                    "split": saturation_split,
                },
                "runtime": {
                    "device": device,
                    "sweep_dir": str(directory.resolve()),
                    "data_root": str(Path(data_root).expanduser().resolve()) if data_root else None,
                },
            }
        )
    return configs


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

    def batches(split: str, start: int, count: int | None, limit: int | None = None) -> tuple[TensorLoader, dict]:
        """``count`` batches of ``b`` past the first ``start`` examples of the split's seeded order
        (``count=None``: the next ``limit`` examples, all that are left when None, the last batch smaller)."""
        images, labels = (data.x_train, data.y_train) if split == "train" else (data.x_test, data.y_test)
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(_selection_seed(config["probe_seed"], split)))
        size = b
        if count is None:
            idx = order[start:] if limit is None else order[start : start + limit]
            if len(idx) < 2:
                raise UserError(f"the {split} split has {len(idx)} examples left for the App. G sample; use another --saturation-split")
            if limit is not None and len(idx) < limit:
                log.warning("the %s split has %d examples left for the App. G sample instead of %d", split, len(idx), limit)
        else:
            size, count = _fit_batches(len(labels) - start, size, count, split)
            idx = order[start : start + size * count]
        loader = TensorLoader(images[idx], labels[idx], size, train=False, drop_last=False, mean=data.mean, std=data.std, device=device)
        return loader, {"split": split, "batch_size": size, "n_batches": len(loader), "n": len(idx), "indices": idx.tolist()}

    analysis, used = batches(config["split"], 0, nb)
    result = probe_activation_gradients(model, analysis, bn_mode=config["bn_mode"], exact=config["exact"], seed=config["probe_seed"])
    sat = config["saturation"]
    same = sat["split"] == config["split"]
    start = used["n"] if same else 0  # past the analysis batches' examples
    sat_loader, sat_used = batches(sat["split"], start, None, sat["n"])
    shared = len(set(used["indices"]) & set(sat_used["indices"])) if same else 0
    runs.atomic_write_json(path / SAMPLES, {"analysis": used, "saturation": sat_used})
    # C_l pooled over the whole sample and the per-example contributions: psi_l, no Gram matrix.
    sat_probe = probe_activation_gradients(model, sat_loader, bn_mode=config["bn_mode"], seed=config["probe_seed"], contributions=True)
    traces = [s.contribution_cov_trace for s in sat_probe.scores]
    t = sat["t"] if sat["t"] is not None else separation_margin(traces, sat_used["n"], sat["alpha"])
    decision = saturation_test(
        [s.cross_gradient_norm_pooled for s in sat_probe.scores], traces, delta=sat["delta"], t=t, n=sat_used["n"],
        split=sat["split"], reused_training_data=sat["split"] == "train", names=[s.name for s in sat_probe.scores],
    )
    records = [{"depth_n": config["depth_n"], "depth_label": config["depth_label"], "seed": config["seed"], "split": used["split"], **r}
               for r in result.records()]
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
            **decision.as_record(),
            "alpha": sat["alpha"],
            "t_rule": "given" if sat["t"] is not None else f"error bound = alpha = {sat['alpha']:g}",
            "batch_size": sat_used["batch_size"],
            "n_batches": sat_used["n_batches"],
            "bn_mode": config["bn_mode"],
            "examples_independent": config["bn_mode"] == "eval",  # train-mode BN couples the examples of a batch
            "shared_examples_with_analysis": shared,  # counted from the indices in samples.json
            "disjoint_from_analysis_batches": shared == 0,
            "statistic_note": ("max_l ||C_l||, C_l = mean_i c_i(l) the gradient of the mean loss over all n examples "
                               "w.r.t. V_l at 0 (App. G, Theorem 3; DESIGN.md 2)"),
        },
    }
    runs.write_result(path, out)
    return out


def summary_rows(results: Iterable[dict]) -> list[dict]:
    """One row per probed model (depth, seed) for the summary CSV of script 02."""
    rows = []
    for r in sorted(results, key=lambda r: (r["depth_n"], r["seed"])):
        row = {k: r[k] for k in ("depth_n", "depth_label", "ag_max", "ag_max_candidate", "ag_max_per_example",
                                 "ag_max_per_example_candidate", "ag_max_blocks", "ag_max_blocks_candidate",
                                 "batch_size", "n_batches", "split")}
        if r.get("exact"):
            row["v_max"] = r["v_max"]
            row["v_max_candidate"] = r["v_max_candidate"]
        sat = r["saturation"]
        row.update(
            seed=r["seed"], n_examples=r["n_examples"], bn_mode=r["bn_mode"], mean_loss=r["mean_loss"],
            saturated=sat["saturated"], saturation_statistic=sat["statistic"], saturation_max_c=sat["max_value"],
            saturation_argmax=sat["argmax"], saturation_delta=sat["delta"], saturation_t=sat["t"],
            saturation_threshold=sat["threshold"], saturation_error_bound=sat["error_bound"],
            saturation_bound_informative=sat["bound_informative"], saturation_n=sat["n"], saturation_split=sat["split"],
            saturation_reused_training_data=sat["reused_training_data"],
        )
        rows.append(row)
    return rows


def summary_table(rows: list[dict], low_signal: float) -> str:
    """Depth vs AGmax in both normalisations (each marked below the paper's low-signal line) and App. G."""
    exact = any("v_max" in r for r in rows)
    mark = "<" + format(low_signal, ".0e")
    header = (f"{'N':>4} {'model':<11} {'seed':>4} {'AGmax':>10} {'argmax':<10} {mark:>6} "
              f"{'AGmax/ex':>10} {'argmax':<10} {mark:>6}")
    header += f" {'V_S,max':>10}" if exact else ""
    header += f" {'max||C_l||':>10} {'delta+t':>10} {'App.G':>5} {'bound':>7}"
    lines = [header, "-" * len(header)]
    for r in rows:
        line = (f"{r['depth_n']:>4} {'ResNet-' + str(r['depth_label']):<11} {r['seed']:>4} "
                f"{r['ag_max']:>10.3e} {r['ag_max_candidate']:<10} {'*' if r['ag_max'] < low_signal else '':>6} "
                f"{r['ag_max_per_example']:>10.3e} {r['ag_max_per_example_candidate']:<10} "
                f"{'*' if r['ag_max_per_example'] < low_signal else '':>6}")
        line += f" {r['v_max']:>10.3e}" if exact else ""
        bound = f"{r['saturation_error_bound']:.3g}" if r["saturation_bound_informative"] else "uninf."
        line += (f" {r['saturation_max_c']:>10.3e} {r['saturation_threshold']:>10.3e} "
                 f"{'sat' if r['saturated'] else 'not':>5} {bound:>7}")
        lines.append(line)
    if rows:
        first, b = rows[0], rows[0]["batch_size"]
        lines += [
            f"* below {low_signal:g}, the paper's low-signal line (common.paper.LOW_SIGNAL_AG), in either reading: AGmax is "
            f"the norm of the batch-mean loss gradient at batch size {b} (x{first['n_batches']} batches, {first['split']} "
            f"split); AGmax/ex is the per-example RMS gradient norm (~ AGmax * sqrt({b})); the readings coincide at batch size 1.",
            f"App. G (Theorem 3): max_l ||C_l||, the gradient of the mean loss over n = {first['saturation_n']} independent "
            f"{first['saturation_split']} examples w.r.t. the zero block's V_l; 'sat' when below delta + t (delta = "
            f"{first['saturation_delta']:g}; t = {first['saturation_t']:.3g} in the first row); bound = sum_l tr(Sigma_hat_l) "
            "/ (n t^2) on a wrong verdict under either hypothesis, 'uninf.' when >= 1.",
        ]
    return "\n".join(lines)


def _selection_seed(seed: int, split: str) -> int:
    return int(hashlib.sha256(f"probe-batches:{seed}:{split}".encode()).hexdigest()[:15], 16)


def _fit_batches(available: int, batch_size: int, n_batches: int, split: str) -> tuple[int, int]:
    """``(batch size, number of batches)`` that fit in ``available`` examples (fewer or smaller when short)."""
    if available <= 0:
        raise UserError(
            f"the {split} split has no examples left to probe (the analysis batches took them); use a smaller "
            "--batch-size or --n-batches, or another --split / --saturation-split"
        )
    if available >= batch_size * n_batches:
        return batch_size, n_batches
    size = min(batch_size, available)
    count = max(1, min(n_batches, available // size))
    log.warning(
        "the %s split has %d examples left: probing %d batches of %d instead of %d of %d",
        split, available, count, size, n_batches, batch_size,
    )
    return size, count
