"""Hand-made run records in the formats of scripts 01-07 (and 04's contract), for the figures and claims tests.

Each writer puts ``config.json`` and ``result.json`` (and script 03's table) where the real job
modules put them, with only the keys :mod:`common.experiments.make_figures` reads. The numbers are
chosen by the caller, so a test can build one record set where a claim holds and one where it fails.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.experiments import (
    gpt2_ascend,
    growth_vs_scratch,
    growth_vs_scratch_tables,
    matched_insertion,
    probe_ag,
    pythia_cpt,
    weight_scaling,
)
from common.experiments.shared import resnet_sweep as sweep
from common.runs import atomic, run_store
from common.science.saturation import saturation_interval

ALL = ("sweep", "probe", "gpt2", "pythia", "growth", "matched", "scaling")


def write_run(out: Path, experiment: str, name: str, config: dict, result: dict) -> Path:
    """``<out>/<experiment>/<name>-<hash8>`` holding ``config`` and ``result``; the hash is the config's own, as the
    real jobs name their directories (common.runs.run_store.read_run refuses a config that does not hash to its directory)."""
    config = {"experiment": experiment, "name": name, **config}
    path = Path(out) / experiment / f"{name}-{run_store.config_hash(config)}"
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "result.json").write_text(json.dumps(result))
    return path


def ag_falling(n: int, seed: int = 0) -> float:
    """AGmax falling with depth N, crossing 5e-3 at N = 4, a little seed noise."""
    return 0.05 * 0.55**n * (1 + 0.01 * seed)


def app_g_shrinking(n: int, seed: int) -> dict:
    """App. G's record (new format) with Gamma_hat = 0.01 * 0.5^N, t = 0.005 and delta = 0.02: saturated from N = 2 on."""
    return {
        **saturation_interval([0.01 * 0.5**n], [1.0], n=1000, t=0.005, delta=0.02).as_record(),
        "n_cal": 250,
        "n_test": 1000,
        "split_seed": 1,
        "statistic_source": "calibration split",
    }


def sweep_and_probe(
    out: Path,
    *,
    preset: str = "smoke",
    dataset: str = "digits",
    depths=(0, 1, 2, 4, 6, 8),
    seeds=(0,),
    ag=ag_falling,
    train_loss=lambda n, s: 0.5 / (1 + n) + 0.001 * s,
    test_loss=lambda n, s: 0.6 + 0.001 * s,
    exact: bool = True,
    app_g=app_g_shrinking,
    sweep_config: dict | None = None,
    sweep_result: dict | None = None,
) -> None:
    """Script 01's runs and script 02's probes of them: AGmax ``ag(n, seed)``; candidates 0..4+N; App. G's
    ``saturation`` record ``app_g(n, seed)``; ``sweep_config`` / ``sweep_result``: more keys of each sweep run."""
    for seed in seeds:
        for n in depths:
            sweep_name = write_run(
                out,
                sweep.EXPERIMENT,
                f"{dataset}-resnet{8 + n}-n{n}-seed{seed}",
                {"preset": preset, "dataset": dataset, "depth_n": n, "seed": seed, **(sweep_config or {})},
                {
                    "train_loss": train_loss(n, seed),
                    "test_loss": test_loss(n, seed),
                    "test_acc": 0.9 - 0.1 * test_loss(n, seed),
                    "seed": seed,
                    **(sweep_result or {}),
                },
            ).name
            top = ag(n, seed)
            cands = [
                {
                    "index": i,
                    "name": f"c{i}",
                    "ag_norm": top * (0.5 + 0.5 * i / (3 + n)),
                    "per_example_rms": 8 * top * (0.5 + 0.5 * i / (3 + n)),
                    "growth_value": (0.9 * top * (0.5 + 0.5 * i / (3 + n))) if exact else None,
                }
                for i in range(4 + n)
            ]
            config = {
                "sweep_run": sweep_name,
                "dataset": dataset,
                "depth_n": n,
                "depth_label": 8 + n,
                "seed": seed,
                "split": "train",
                "batch_size": 128,
                "n_batches": 10,
                "bn_mode": "eval",
                "probe_seed": 0,
                "exact": exact,
            }
            result = {
                "ag_max": top,
                "ag_max_per_example": 8 * top,
                "ag_max_blocks": top * 0.9,
                "exact": exact,
                "candidates": cands,
                "saturation": app_g(n, seed),
            }
            write_run(out, probe_ag.EXPERIMENT, f"{sweep_name}-probe", config, result)


def gpt2(out: Path, *, preset: str = "smoke", depths=(1, 2, 4), ag=lambda L: 0.02 / L) -> None:
    for L in depths:
        cands = [
            {
                "index": i,
                "name": f"h{i}",
                "ag_norm": ag(L) * (i + 1) / (L + 1),
                "per_example_rms": 4 * ag(L),
                "growth_value": 0.8 * ag(L) * (i + 1) / (L + 1),
            }
            for i in range(L + 1)
        ]
        write_run(
            out,
            gpt2_ascend.EXPERIMENT,
            f"text-L{L}-seed0",
            {
                "preset": preset,
                "n_layer": L,
                "seed": 0,
                "model": {"n_embd": 32},
                "data": {"source": "text"},
                "probe": {"split": "val", "batch_size": 4, "n_batches": 2, "exact": True},
            },
            {
                "n_layer": L,
                "seed": 0,
                "val_loss": 5.0 - 0.2 * L,
                "ag_max": ag(L),
                "ag_max_per_example": 4 * ag(L),
                "ag_max_blocks": ag(L),
                "exact": True,
                "v_max": 0.8 * ag(L),
                "candidates": cands,
            },
        )


def pythia(
    out: Path, *, preset: str = "smoke", models=(("pythia-70m-deduped", 6, 512), ("pythia-160m-deduped", 12, 768))
) -> None:
    """04's contract: one run per model with ProbeResult.summary() keys and candidates with Block Influence."""
    for name, n_layer, d_model in models:
        ag = 0.03 / n_layer
        cands = [
            {
                "index": i,
                "name": f"layers.{i}" if i < n_layer else "final",
                "ag_norm": ag * (i + 1) / (n_layer + 1),
                "per_example_rms": 10 * ag,
                "block_input": i < n_layer,
                "block_influence": 0.1 + 0.01 * i if i < n_layer else None,
            }
            for i in range(n_layer + 1)
        ]
        write_run(
            out,
            pythia_cpt.EXPERIMENT,
            name,
            {"preset": preset, "model": f"EleutherAI/{name}", "revision": "step143000"},
            {
                "model": f"EleutherAI/{name}",
                "revision": "step143000",
                "commit_hash": "f" * 40,
                "weight_files": ["model.safetensors"],
                "n_layer": n_layer,
                "d_model": d_model,
                "val_loss_before": 3.5,
                "val_loss_after": 3.4,
                "cpt_tokens": 1000,
                "ag_max": ag,
                "ag_max_per_example": 10 * ag,
                "ag_max_blocks": ag * n_layer / (n_layer + 1),
                "exact": False,
                "candidates": cands,
            },
        )


def growth(
    out: Path,
    *,
    preset: str = "smoke",
    dataset: str = "digits",
    seeds=(0, 1),
    epochs: int = 6,
    test_gap=lambda n, s: 0.03,
    train_gap=lambda n, s: 0.001,
    ablation: bool = True,
) -> Path:
    """03's growth runs (for the preset) and its table at equal epochs, with FLOPs and slopes, and (``ablation``) its
    restart ablation at the deepest depth; growth's loss is scratch's minus the gaps. Returns the table's path."""
    records, restart = [], []
    for seed in seeds:
        for n in range(2, 6):
            write_run(
                out,
                growth_vs_scratch.EXPERIMENT,
                f"{dataset}-grown-resnet{8 + n}-n{n}-seed{seed}",
                {
                    "preset": preset,
                    "dataset": dataset,
                    "depth_n": n,
                    "growth": {"epochs": [1]},
                    "train": {"epochs": epochs},
                },
                {"epochs": epochs},
            )
            scratch = {"train_loss": 0.01 + 0.001 * seed, "test_loss": 0.3 + 0.005 * seed + 0.002 * n, "test_acc": 0.9}
            grown = {
                "train_loss": scratch["train_loss"] - train_gap(n, seed),
                "test_loss": scratch["test_loss"] - test_gap(n, seed),
                "test_acc": 0.91,
            }
            for method, metrics, flops in (("growth", grown, 8e11), ("scratch", scratch, 1e12)):
                extra = {
                    "total_epochs": epochs,
                    "train_flops": flops,
                    "train_loss_slope": -1e-5,
                    "train_loss_tail_fall": 0.001,
                }
                records.append({"method": method, "depth_n": n, "seed": seed, **extra, **metrics})
            if n == 5:
                worse = {**grown, "train_loss": grown["train_loss"] + 0.02, "test_loss": grown["test_loss"] + 0.01}
                restart += [{**r, **worse} if r["method"] == "growth" else r for r in records[-2:] if r["depth_n"] == 5]
    folder = Path(out) / growth_vs_scratch.EXPERIMENT
    tag = f"e{epochs}-at15-30-50-65-seeds{'-'.join(map(str, seeds))}"
    path = folder / f"table-{dataset}-{tag}.csv"
    atomic.atomic_write_csv(path, growth_vs_scratch_tables.growth_table(records))
    if ablation:
        rows = growth_vs_scratch_tables.ablation_table([r for r in records if r["depth_n"] == 5], restart)
        atomic.atomic_write_csv(folder / f"ablation-{dataset}-{tag}.csv", rows)
    return path


def matched(
    out: Path,
    *,
    preset: str = "smoke",
    dataset: str = "digits",
    drops=None,
    seeds=(0,),
    rule: str = "stage1-end",
    spread: float = 0.0,
) -> None:
    """06's runs: one per (depth, seed) of the sweep (written too, for the preset), measured change = -drop (plus
    ``spread`` times +-1 alternating over seeds), at the candidate ``rule`` gives (``next``: where the cyclic rule
    puts the next block, so ResNet-34's is the head's input)."""
    drops = drops or {8: 7e-4, 14: 4e-4, 20: 2e-4}
    for i, seed in enumerate(seeds):
        for d, drop in drops.items():
            sweep_name = write_run(
                out,
                sweep.EXPERIMENT,
                f"{dataset}-resnet{d}-n{d - 8}-seed{seed}-m",
                {"preset": preset, "dataset": dataset, "depth_n": d - 8, "seed": seed},
                {"train_loss": 0.1, "test_loss": 0.5, "test_acc": 0.8},
            ).name
            (candidate,) = matched_insertion.resolve_candidates(rule, d - 8)
            drop = drop + spread * (-1) ** i
            rows = [
                {
                    "depth_label": d,
                    "depth_n": d - 8,
                    "seed": seed,
                    "candidate": candidate,
                    "candidate_name": f"block{candidate}.in",
                    "alpha": alpha,
                    "measured_change": -drop * alpha / 1e-3,
                    "predicted_change": -drop * alpha / 1e-3 * 1.01,
                    "fit": "closed-form",
                    "train_loss_before": 0.1,
                    "train_loss_after": 0.1 - drop,
                    "ratio": 0.99,
                    "relative_residual": 0.5,
                    "predicted_change_pooled_targets": -drop,
                    "test_change": None,
                    "paper_change": None,
                    "predicted_change_exact_targets": -1.1 * drop * alpha / 1e-3,
                }
                for alpha in (1e-4, 1e-3)
            ]
            write_run(
                out,
                matched_insertion.EXPERIMENT,
                f"{sweep_name}-matched-{rule}",
                {"sweep_run": sweep_name, "dataset": dataset, "candidate_rule": rule, "fit": "closed-form"},
                {"rows": rows},
            )


def scaling(out: Path, *, preset: str = "smoke", beta: float = 0.3, alpha: float = 0.7, diffusive: float = 0.0) -> None:
    """07's FC runs: statistics following exact power laws in the depth L (beta from the max norm, alpha from delta);
    the cumulative sums grow like ``L^(1 - beta - diffusive)``, so Step 2 reads ``beta + diffusive`` (i.i.d. weights:
    ``diffusive = 1/2``)."""
    for family in ("fc-tanh", "fc-relu"):
        for L in (4, 8, 16, 32, 64):
            base = {
                "family": family,
                "dataset": "synthetic",
                "seed": 0,
                "run": f"{family}-L{L}",
                "stage": 0,
                "norm": "fro",
                "depth": L,
                "network_depth": L,
            }
            records = [
                {
                    **base,
                    "tensor": "A",
                    "max_norm": L**-beta,
                    "cumsum_norm": L ** (1 - beta - diffusive),
                    "root_sum_squares": L ** (0.5 - beta),
                    "max_increment": L ** (-beta - 1),
                },
                {**base, "tensor": "delta", "max_norm": L**-alpha, "cumsum_norm": L ** (1 - alpha)},
                {
                    **base,
                    "tensor": "delta_A",
                    "max_norm": L ** -(alpha + beta),
                    "cumsum_norm": L ** (1 - alpha - beta - diffusive),
                },
            ]
            write_run(
                out,
                weight_scaling.EXPERIMENT,
                f"{family}-L{L}",
                {"preset": preset, "family": family, "dataset": "synthetic"},
                {"records": [{k: r.get(k) for k in weight_scaling.RECORD_COLUMNS} for r in records]},
            )


def everything(out: Path, preset: str = "smoke", seeds=(0,)) -> Path:
    sweep_and_probe(out, preset=preset, seeds=seeds)
    gpt2(out, preset=preset)
    pythia(out, preset=preset)
    growth(out, preset=preset, seeds=(0,))  # one seed: the table has NaN spreads, as a one-seed run of 03 writes
    matched(out, preset=preset)
    scaling(out, preset=preset)
    return out
