"""Where 09's stop constants come from: the criterion's run on CIFAR-10 images that no mini record uses.

The mini preset's stop rule (``max V_S,l / max V_b`` below ``ratio_below`` on ``in_a_row`` probes in a row), its
probe period, growth phase and cap were fixed from this run, before any mini record of 09 (docs/decisions.md,
section "Growth by the criterion (09_grow_by_criterion.py)"). It trains script 09's ``criterion`` arm with the mini
preset's settings but ``ratio_below = 0`` (the rule never fires, so the whole ratio trajectory up to the cap or the
end of the growth phase is seen) on 1,000 class-balanced training images drawn from those that are neither in the
mini training subset nor in any of 09's held-apart samples of the seeds asked (:func:`calibration_images`), and
writes the run and a summary of its probes under ``<out>/grow_calibration/`` (apart from 09's runs;
``calibration-npz-seed<s>.json``: per probe the epoch, depth, ``v_max``, ``v_ref``,
the ratio and the clean training loss there).

    python -m common.experiments.grow_by_criterion_calibration --data-root data/cifar10-jpeg-10k.npz --out results/mini
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import torch

from common.data.vision import VisionData, class_balanced_indices
from common.experiments.grow_by_criterion import grow_plan, grow_run
from common.experiments.grow_by_criterion_config import CriterionRun
from common.experiments.grow_by_criterion_controller import held_apart_indices
from common.experiments.shared.resnet_sweep import load_source
from common.runs import atomic, run_store
from common.runs.run_store import RunSpec

CALIBRATION = "grow_calibration"  # its folder under --out, apart from 09's runs
CALIBRATION_IMAGES = 1000  # as many as the mini training subset
CALIBRATION_DATA_SEED = 7919  # the class-balanced draw among the images left (a data seed, not a run's)


def calibration_images(run: CriterionRun, whole: VisionData, seeds: list[int]) -> torch.Tensor:
    """Indices of :data:`CALIBRATION_IMAGES` class-balanced training images of ``whole`` outside ``run``'s
    training subset and outside the held-apart sample of every seed in ``seeds``."""
    subset = run.data.train_subset
    used = torch.zeros(len(whole.y_train), dtype=torch.bool)
    used[class_balanced_indices(whole.y_train, subset.k, subset.seed)] = True
    for seed in seeds:
        used[held_apart_indices(whole, subset, run.probe.held_out, seed)] = True
    free = (~used).nonzero().flatten()
    pick = class_balanced_indices(whole.y_train[free], CALIBRATION_IMAGES, CALIBRATION_DATA_SEED)
    return free[pick]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m common.experiments.grow_by_criterion_calibration", description=__doc__
    )
    parser.add_argument("--data-root", required=True, help="the CIFAR-10 npz (or folder) of the mini preset")
    parser.add_argument("--out", default="results/mini")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--avoid-seeds", type=int, default=3, help="09's seeds whose held-apart images are avoided")
    args = parser.parse_args(argv)
    plan = grow_plan(
        preset="mini",
        overrides={"policies": "criterion", "ratio_below": 0.0},
        dataset="npz",
        data_root=args.data_root,
        seeds=[args.seed],
    )
    config = plan.configs[("criterion", args.seed)]
    config = {**config, "name": config["name"].replace("-criterion-", "-calibration-")}
    run = CriterionRun.from_config(config)
    whole = load_source(run)
    keep = calibration_images(run, whole, list(range(args.avoid_seeds)))
    data = replace(whole, x_train=whole.x_train[keep], y_train=whole.y_train[keep])
    out = Path(args.out) / CALIBRATION
    spec = RunSpec(config={**config, "calibration": {"images": len(keep), "data_seed": CALIBRATION_DATA_SEED}},
                   out=str(out))  # fmt: skip
    run_store.prepare_run(spec.out, spec.config)
    result = run_store.read_result(spec.dir) if run_store.is_done(spec.dir) else grow_run(spec, data=data)
    clean = {r["epoch"]: r.get("clean_loss") for r in run_store.read_metrics(spec.dir)}
    probes = [
        {k: p.get(k) for k in ("probe", "epoch", "fraction", "depth_n", "v_max", "v_ref", "ratio", "chosen_candidate",
                               "stopped")} | {"clean_loss_before": clean.get(p["epoch"])}
        for p in result["probes"]
    ]  # fmt: skip
    summary = {
        "images": len(keep),
        "run_dir": str(spec.dir),
        "settings": config["growth"],
        "train_loss": result["train_loss"],
        "depth_n": result["depth_n"],
        "probes": probes,
    }
    path = out / f"calibration-npz-seed{args.seed}.json"
    atomic.atomic_write_bytes(path, (json.dumps(summary, indent=1, sort_keys=True) + "\n").encode())
    for p in probes:
        print(p)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
