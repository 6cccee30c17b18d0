"""Does depth pay at equal training FLOPs here? ResNet-8 against a deeper ResNet-(8+N), each on its own schedule.

The regime 09's controller is judged in (claims report, the regime row; docs/decisions.md, section "Growth by the
criterion (09_grow_by_criterion.py)"): extra depth can only pay where a shallow network trained for the same FLOPs
ends worse. This trains the sweep's ResNet-(8+N) for ``--deep-epochs`` epochs and the sweep's ResNet-8 for as many
epochs as spend the same training FLOPs (rounded to a whole epoch; the gap is printed), each with the sweep's recipe
stretched to its own length (warm-up, cosine), on ``--images`` class-balanced training images, with the code script
01 runs (:func:`common.experiments.shared.resnet_sweep.train_resnet_run`: the mini preset's recipe, loader and
final float32 evaluation). It prints both clean training losses, both test losses and accuracies, and the ratio
ResNet-8 / deeper of the clean training loss: above 1, depth pays at equal FLOPs on this design.

The runs are ordinary sweep run folders under ``--out`` (resumable: a run that finished is read back, not
retrained); the summary is ``--out``/depth_regime-<dataset>-<images>-n<N>-seed<seed>.json. Not part of
``make mini``.

    .venv/bin/python benchmarks/bench_depth_regime.py --data-root data/cifar10-jpeg-10k.npz [--images 1000]
        [--deep-n 5] [--deep-epochs 100] [--seed 0] [--threads 1] [--out runs/depth_regime]

``--images all`` trains on every training image of the file (10,000 for ``cifar10-jpeg-10k.npz``).
``--dataset synthetic`` (random images, no file; the smoke preset's settings) is the toy size the test suite runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.errors import UserError
from common.experiments.shared.resnet_sweep import sweep_configs, sweep_run_cost, train_resnet_run
from common.models.resnet import depth_label
from common.runs import run_store
from common.runs.atomic import atomic_write_json
from common.training.device import cpu_threads

PROG = "bench_depth_regime.py"
KEYS = ("train_loss", "test_loss", "test_acc", "epochs", "steps", "wall_s")


def images_arg(text: str) -> int | None:
    """``--images``: a whole number >= 10 (one per class at least), or ``all`` (None: every training image)."""
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or 'all'") from None
    if not 10 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{value} is outside [10, 1000000]; give a count of training images or 'all'")
    return value


def bounded(low: int, high: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside [{low}, {high}]")
        return value

    return parse


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--dataset", choices=("npz", "synthetic"), default="npz")
    parser.add_argument("--data-root", help="the CIFAR-10 .npz (x_train, y_train, x_test, y_test); with --dataset npz")
    parser.add_argument("--images", type=images_arg, default=1000, help="training images, or 'all' (default 1000)")
    parser.add_argument("--deep-n", type=bounded(1, 100), default=5, help="N of the deeper ResNet-(8+N) (default 5)")
    parser.add_argument("--deep-epochs", type=bounded(1, 10_000), default=100, help="the deeper run's epochs")
    parser.add_argument("--seed", type=bounded(0, 2**31 - 1), default=0)
    parser.add_argument("--threads", type=bounded(1, 512), default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    parser.add_argument("--out", default="runs/depth_regime", help="the runs' folder and the summary's")
    args = parser.parse_args(argv)
    if args.dataset == "npz" and not args.data_root:
        parser.error("--dataset npz needs --data-root, the path of a CIFAR-10 .npz file")
    if args.dataset == "synthetic" and args.data_root:
        parser.error("--data-root is read only with --dataset npz; drop it")
    return args


def regime_configs(args: argparse.Namespace) -> tuple[dict, dict]:
    """The deeper run's sweep config and ResNet-8's, whose epochs spend the deeper run's training FLOPs."""

    def config(n: int, epochs: int) -> dict:
        synthetic = {"num_train": args.images or 512, "num_test": 256} if args.dataset == "synthetic" else None
        run = sweep_configs(
            preset="mini" if args.dataset == "npz" else "smoke",  # smoke: the synthetic source sets its own size
            overrides={
                "depths": (n,),
                "epochs": epochs,
                "train_subset": args.images if args.dataset == "npz" else None,
            },
            dataset=args.dataset,
            seeds=(args.seed,),
            data_root=args.data_root,
            device=args.device,
            compile="off",
            synthetic=synthetic,
        )[0]
        if args.images is None:  # every image: no subset (an override of None would mean the preset's 1,000)
            run["data"].pop("train_subset", None)
        return run

    deep = config(args.deep_n, args.deep_epochs)
    per_epoch = sweep_run_cost(config(0, 1))
    shallow_epochs = max(1, round(sweep_run_cost(deep) / per_epoch))
    return deep, config(0, shallow_epochs)


def run_or_read(config: dict, out: str) -> dict:
    """The finished result of one sweep run: read back when it finished before, else trained now (resumable)."""
    spec = run_store.RunSpec(config=config, out=out)
    if run_store.is_done(spec.dir):
        return run_store.read_result(spec.dir, KEYS)
    return train_resnet_run(spec)


def main(argv=None) -> int:
    args = parse_args(argv)
    # the thread count only for this call: a caller's process (the test suite's) keeps its own
    with cpu_threads(args.threads or torch.get_num_threads()):
        return compare(args)


def compare(args: argparse.Namespace) -> int:
    """Train (or read back) both runs, print them and write the summary."""
    try:
        deep, shallow = regime_configs(args)
        cost = {"deep": sweep_run_cost(deep), "shallow": sweep_run_cost(shallow)}
        print(
            f"{PROG}: ResNet-{depth_label(args.deep_n)} for {deep['train']['epochs']} epochs against ResNet-8 for "
            f"{shallow['train']['epochs']} epochs (training FLOPs ResNet-8 / deeper {cost['shallow'] / cost['deep']:.4f}), "
            f"{args.images or 'all'} images, seed {args.seed}, {torch.get_num_threads()} threads",
            flush=True,
        )
        results = {}
        for side, config in (("deep", deep), ("shallow", shallow)):
            start = time.perf_counter()
            results[side] = run_or_read(config, args.out)
            print(f"{PROG}: {config['name']} done in {time.perf_counter() - start:.0f} s", flush=True)
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    ratio = results["shallow"]["train_loss"] / results["deep"]["train_loss"]
    summary = {
        "dataset": args.dataset,
        "data_file": deep["data"].get("file"),
        "images": args.images or "all",
        "seed": args.seed,
        "threads": torch.get_num_threads(),
        "flops_ratio_shallow_over_deep": cost["shallow"] / cost["deep"],
        "deep": {"depth_n": args.deep_n, **{k: results["deep"][k] for k in KEYS}},
        "shallow": {"depth_n": 0, **{k: results["shallow"][k] for k in KEYS}},
        "train_loss_ratio_shallow_over_deep": ratio,
        "depth_pays": ratio > 1.0,
    }
    name = f"depth_regime-{args.dataset}-{args.images or 'all'}-n{args.deep_n}-seed{args.seed}.json"
    atomic_write_json(Path(args.out) / name, summary)
    for side in ("shallow", "deep"):
        r = summary[side]
        print(
            f"ResNet-{depth_label(r['depth_n']):<4} {r['epochs']:>5} epochs: clean train loss {r['train_loss']:.4f}, "
            f"test loss {r['test_loss']:.4f}, test acc {r['test_acc']:.4f} ({r['wall_s']:.0f} s)"
        )
    print(
        f"clean train loss ResNet-8 / ResNet-{depth_label(args.deep_n)} at equal FLOPs: {ratio:.3f} "
        f"({'depth pays' if ratio > 1 else 'depth does not pay'} on this design); summary {Path(args.out) / name}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
