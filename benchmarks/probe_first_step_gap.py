"""How far the probe's ``V_S,l`` is from the same quantity at an inserted block's first training step.

The probe (02, 06, 09's controller) measures ``V_S,l`` in eval mode: every BatchNorm of the network reads its running
statistics, and the candidate block's own fresh BatchNorm (running mean 0, variance 1) makes
``psi = relu(conv_U(z) / sqrt(1 + eps))``. The block a growth run inserts at that place (the same layers, ``U`` from
the same seed) takes its first step in train mode: every BatchNorm, the block's own included, normalises with the
batch's statistics, so both the tangent features ``Psi`` and the gradient ``G`` differ from the probe's. This script
measures, on finished sweep runs of ``--out`` and one random batch (seeded by ``--seed``) of their clean training
images, per candidate:

- ``probe``: the probe's ``V_S,l`` (:func:`common.science.probe.probe_activation_gradients`, eval mode, that batch);
- ``first_step``: after inserting the block there (:func:`common.science.growth.insert_zero_block`, same seed), in
  train mode on the same batch, ``sqrt(tr(grad_V^T (Psi^T Psi)^+ grad_V))`` with ``grad_V`` the gradient of the
  batch-mean loss w.r.t. the inserted ``V`` and ``Psi`` the block's train-mode tangent features (the probe's
  quantity, read off the block the first step trains);
- their relative gap ``|first_step - probe| / probe``.

A measurement, not a timing; it reads weights (``model.pt``), so it runs where 01's runs were trained:

    .venv/bin/python benchmarks/probe_first_step_gap.py --out results/mini --data-root data/cifar10-jpeg-10k.npz
        [--batch 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.data.loader import TensorLoader
from common.experiments.shared.resnet_sweep_records import finished_sweep_runs, load_sweep_run
from common.science.growth import insert_zero_block
from common.science.probe import probe_activation_gradients


def first_step_value(model: torch.nn.Module, place: int, seed: int, x: torch.Tensor, y: torch.Tensor) -> float:
    """``V`` of the block inserted at ``place`` as its first (train-mode) step sees it on ``(x, y)``."""
    grown = copy.deepcopy(model).double().train()
    block = insert_zero_block(grown, place, seed=seed)
    inputs: dict[str, torch.Tensor] = {}
    handle = block.register_forward_pre_hook(lambda m, a: inputs.__setitem__("z", a[0]))
    loss = F.cross_entropy(grown(x), y)
    handle.remove()
    (grad,) = torch.autograd.grad(loss, [block.terminal.weight])
    grad = grad.reshape(grad.shape[0], -1).T  # (k, d), Psi's column order
    with torch.no_grad():
        psi = block.tangent_features(inputs["z"])  # train mode: the batch's statistics
    gram = psi.T @ psi
    return float(torch.trace(grad.T @ torch.linalg.pinv(gram, hermitian=True) @ grad).clamp_min(0).sqrt())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the folder holding resnet_sweep/ (01's runs, with weights)")
    parser.add_argument("--dataset", default="npz")
    parser.add_argument("--data-root", help="where the runs' data is now (committed records keep no machine path)")
    parser.add_argument("--batch", type=int, default=100, help="clean training images in the one batch")
    parser.add_argument("--seed", type=int, default=0, help="the protocol seed of the candidates' U")
    parser.add_argument("--runs", default="", help="comma-separated N to read (default: every finished run, seed 0)")
    args = parser.parse_args(argv)
    wanted = {int(n) for n in args.runs.split(",") if n}
    gaps = []
    print("run | place | probe V_S,l | first step | gap")
    for run_dir in finished_sweep_runs(args.out, args.dataset, seed=0):
        model, data = load_sweep_run(run_dir, data_root=args.data_root)
        if wanted and model.config.extra_blocks not in wanted:
            continue
        model = model.double().eval()
        # a random batch (seeded), not the first: the training split may be sorted by class, and a one-class batch
        # gives BatchNorm statistics no training batch had
        pick = torch.randperm(len(data.y_train), generator=torch.Generator().manual_seed(args.seed))[: args.batch]
        x, y = next(iter(TensorLoader(data.x_train[pick], data.y_train[pick], args.batch, train=False, mean=data.mean,
                                      std=data.std)))  # fmt: skip
        x = x.double()
        probe = probe_activation_gradients(model, [(x, y)], exact=True, seed=args.seed)
        for score in probe.scores:
            first = first_step_value(model, score.index, args.seed, x, y)
            gap = abs(first - score.growth_value) / score.growth_value
            gaps.append(gap)
            print(f"{run_dir.name} | {score.name} | {score.growth_value:.4e} | {first:.4e} | {100 * gap:.1f}%")
    if gaps:
        ordered = sorted(gaps)
        print(f"{len(gaps)} places: gap median {100 * ordered[len(gaps) // 2]:.1f}%, "
              f"range {100 * ordered[0]:.1f}-{100 * ordered[-1]:.1f}%")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
