"""Peer check of script 07's fc-tanh exponents: Cohen et al.'s own model and training loop, at 07's mini settings.

Re-states, in this repository's code, the fully connected ResNet and training loop of the authors' published
repository (github.com/instadeepai/scaling-resnets: ``scaling_model.FinalResNet``,
``scaling_experiments.train_final_net``; ``regression.py`` reads their exponents as log-log slopes over depth), and runs
them at 07's mini settings: tanh, one shared ``|delta|`` (initialised 1/L), "xavier-depth" init with s = 0.01,
the neural-ODE data (d = 10, 1,024 / 256 examples; ``common.data.neural_ode``, the data 07 trains on), Adam at
lr 1e-3, batch 50, at most 100 epochs, their stopping rule (stop once the epoch's mean batch loss is below 1e-3,
or after 5 epochs without a 1% improvement), L = 4 .. 1,024 (07's mini grid), seeds 0-2. Only the model and the
loop differ from 07: the statistics and fits are 07's (:func:`common.experiments.weight_scaling_weights.fc_statistics`
and :func:`~common.experiments.weight_scaling_fits.exponent_rows`), and 07's committed mini records are fitted
again beside them.

Their loop has two defects at these settings:

(a) it reshapes the training tensor once into ``(n / batch, batch, 2d)``, so the number of examples must be a
    multiple of the batch: 1,024 examples at batch 50 cannot run;
(b) it "shuffles" the batches with ``np.random.shuffle`` on a torch tensor. numpy (2.4.6 here, checked at start-up)
    treats a tensor as a generic mutable sequence and swaps ``x[i], x[j] = x[j], x[i]``; a tensor's rows are views, so the swap
    copies row j into row i and leaves row j as it was: each epoch, for i = n-1 .. 1 with j uniform in [0, i],
    ``x[i] <- x[j]`` (:func:`duplicating_shuffle`, checked against numpy at start-up by
    :func:`check_duplicating_shuffle`). Batches are duplicated and others lost, in place, epoch after epoch;
    the tensor is a view of the data set, which the authors' ``run_experiment`` shares across depths, so the
    lost batches stay lost from one depth to the next (depths trained in increasing order, as theirs are).

Two variants run: ``corrected`` (all 1,024 examples, a fresh permutation every epoch cut into their
``int(n / batch)`` = 20 batches of 50, the other 24 left out of that epoch) and ``published`` (their loop as
written, made to run by truncating to 1,000 examples: fixed batches, the duplicating shuffle carried over
epochs and depths). Prints the exponents side by side with their 95% intervals and writes them to
``<out>/weight_scaling/peer_check-fc-tanh-<preset>.json`` (read by the claims report,
``common/report/rows/weight_scaling.py``); never weights.

    .venv/bin/python benchmarks/peer_cohen_fc.py [--seeds 0,1,2] [--depths 4,8,...] [--variants corrected,published]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.data.neural_ode import make_neural_ode_data
from common.experiments import weight_scaling, weight_scaling_fits, weight_scaling_weights
from common.models.fc_resnet import FCResNet, FCResNetConfig
from common.presets.weight_scaling import COHEN_STOPPING, fc_preset
from common.runs import atomic

FAMILY = "fc-tanh"
VARIANTS = ("corrected", "published")
PUBLISHED_EXAMPLES = 1000  # the largest multiple of batch 50 within 1,024: what their reshape can run
EXPONENTS = {  # record key -> (tensor, exponent of exponent_rows): the claims rows' exponents, Frobenius norm
    "beta_max_norm": ("A", "max_norm_exponent"),
    "beta_step2": ("A", "beta"),
    "alpha": ("delta", "alpha"),
}


# ----------------------------------------------------------------------------- their model
class PeerResNet(nn.Module):
    """``scaling_model.FinalResNet`` with ``delta_type="shared"``: ``x <- x + |delta| * sigma(x A_l + b_l)``.

    One parameter per layer and matrix (their lists of ``A`` and ``b``), row vectors multiplied on the right
    (their ``torch.mm(x, A[l])``: their ``A_l`` is 07's ``A_k`` transposed, which no norm sees)."""

    def __init__(self, depth: int, dim: int, init_scale: float) -> None:
        super().__init__()
        self.A = nn.ParameterList(nn.Parameter(torch.empty(dim, dim)) for _ in range(depth))
        self.b = nn.ParameterList(nn.Parameter(torch.empty(dim)) for _ in range(depth))
        self.delta = nn.Parameter(torch.empty(1))
        self.depth, self.dim, self.init_scale = depth, dim, init_scale

    def init_xavier_depth(self) -> None:
        """Their ``init_values("xavier-depth")``: ``A ~ N(0, (s / (L d))^2)``, ``b ~ N(0, (s / (L sqrt d))^2)``, delta = 1/L."""
        L, d, s = self.depth, self.dim, self.init_scale
        with torch.no_grad():
            self.delta.fill_(1.0 / L)
            for a, b in zip(self.A, self.b, strict=True):
                a.normal_(0.0, s / (L * d))
                b.normal_(0.0, s / (L * np.sqrt(d)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for a, b in zip(self.A, self.b, strict=True):
            x = x + self.delta.abs() * torch.tanh(torch.mm(x, a) + b)
        return x

    def as_fc_resnet(self) -> FCResNet:
        """The same weights as 07's :class:`FCResNet` (``A_k = A_l^T``), so 07's statistics read them unchanged."""
        model = FCResNet(FCResNetConfig(depth=self.depth, dim=self.dim, init_scale=self.init_scale))
        with torch.no_grad():
            model.A.copy_(torch.stack([a.detach().T for a in self.A]))
            model.b.copy_(torch.stack([b.detach() for b in self.b]))
            model.delta.copy_(self.delta.detach())
        return model


# ----------------------------------------------------------------------------- their shuffle, and a correct one
def duplicating_shuffle(batches: torch.Tensor, rng: np.random.RandomState) -> None:
    """What ``rng.shuffle(batches)`` does to a torch tensor under numpy 2.x (module docstring, defect b), in numpy 2.4.6, in place."""
    for i in reversed(range(1, len(batches))):
        j = int(rng.randint(0, i + 1))
        batches[i] = batches[j].clone()


def check_duplicating_shuffle(trials: int = 20, rows: int = 20) -> float:
    """Check :func:`duplicating_shuffle` against numpy's own shuffle of a tensor; returns the mean share of rows
    still distinct after one shuffle. Raises one line if this numpy behaves otherwise."""
    distinct = []
    for seed in range(trials):
        theirs = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3)
        ours = theirs.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # numpy warns that shuffling a Tensor may duplicate rows
            np.random.RandomState(seed).shuffle(theirs)
        duplicating_shuffle(ours, np.random.RandomState(seed))
        if not torch.equal(theirs, ours):
            raise SystemExit(
                f"numpy {np.__version__} shuffles a torch tensor otherwise than duplicating_shuffle; re-check defect (b)"
            )
        distinct.append(len(set(theirs[:, 0].tolist())) / rows)
    return float(np.mean(distinct))


def corrected_epoch(x: torch.Tensor, y: torch.Tensor, batch: int, rng: np.random.RandomState):
    """A fresh permutation of every example, cut into their ``int(n / batch)`` batches (the rest left to later epochs)."""
    order = torch.from_numpy(rng.permutation(len(x)))
    for i in range(len(x) // batch):
        idx = order[i * batch : (i + 1) * batch]
        yield x[idx], y[idx]


def published_epoch(batches: torch.Tensor, dim: int, rng: np.random.RandomState):
    """Their epoch: the duplicating shuffle of the fixed batches, in place, then each batch split into (x, y)."""
    duplicating_shuffle(batches, rng)
    for data in batches:
        yield data[:, :dim], data[:, dim:]


# ----------------------------------------------------------------------------- their loop
def train_final_net(model: PeerResNet, epoch_batches, *, epochs: int, lr: float) -> dict:
    """``scaling_experiments.train_final_net``: Adam, mean batch MSE per epoch, their stopping rule
    (:data:`COHEN_STOPPING`: below 1e-3 stops; 5 epochs without a 1% improvement stop)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    best, bad, epoch, mean = np.inf, 0, 0, np.nan
    while epoch < epochs and bad < COHEN_STOPPING.patience:
        losses = []
        for x, y in epoch_batches():
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        mean = float(np.mean(losses))
        if mean < (1 - COHEN_STOPPING.min_improvement) * best:
            best, bad = mean, 0
        else:
            bad += 1
        epoch += 1
        if mean < COHEN_STOPPING.below:
            return {"epochs": epoch, "stopped": "converged", "train_loss": mean}
    return {"epochs": epoch, "stopped": "patience" if bad >= COHEN_STOPPING.patience else "epochs", "train_loss": mean}


def run_seed(variant: str, seed: int, depths, settings) -> tuple[list[dict], list[dict]]:
    """One seed of one variant at every depth, in increasing depth (the published variant's data carries over)."""
    data = make_neural_ode_data(dim=settings.dim, num_train=settings.num_train, num_test=settings.num_test, seed=seed)
    rng = np.random.RandomState(seed)  # their global np.random stream, seeded
    train_set = torch.cat([data.x_train, data.y_train], dim=1)
    batch = settings.batch_size
    shared = train_set[:PUBLISHED_EXAMPLES].reshape(PUBLISHED_EXAMPLES // batch, batch, -1)  # a view, as theirs
    records, trained = [], []
    for depth in sorted(depths):
        torch.manual_seed(seed)
        model = PeerResNet(depth, settings.dim, settings.init_scale)
        model.init_xavier_depth()
        if variant == "corrected":
            batches = lambda: corrected_epoch(data.x_train, data.y_train, batch, rng)  # noqa: E731
        else:
            batches = lambda: published_epoch(shared, settings.dim, rng)  # noqa: E731
        start = time.perf_counter()
        summary = train_final_net(model, batches, epochs=settings.recipe.epochs, lr=settings.recipe.lr)
        distinct = len(torch.unique(shared.reshape(len(shared), -1), dim=0)) if variant == "published" else None
        trained.append(
            {
                "variant": variant,
                "seed": seed,
                "depth": depth,
                **summary,
                "distinct_batches": distinct,
                "wall_s": round(time.perf_counter() - start, 2),
            }
        )
        base = {
            "family": FAMILY,
            "dataset": weight_scaling.FC_DATASET,
            "seed": seed,
            "run": f"{variant}-L{depth}-seed{seed}",
            "stage": 0,
            "network_depth": depth,
            "depth_n": None,
            "input_size": None,
            "train_loss": summary["train_loss"],
            "test_loss": None,
        }
        stats, _ = weight_scaling_weights.fc_statistics(model.as_fc_resnet(), base)
        records.extend({**r, "variant": variant} for r in stats)
        print(
            f"  {variant:<9} seed {seed} L {depth:>4}: {summary['epochs']:>3} epochs, {summary['stopped']}, "
            f"train MSE {summary['train_loss']:.5f}"
            + (f", {distinct}/{len(shared)} distinct batches" if distinct else ""),
            flush=True,
        )
    return records, trained


# ----------------------------------------------------------------------------- exponents
def exponents(records) -> dict:
    """The claims rows' exponents of ``records`` (07's :func:`exponent_rows`, seeds pooled): key -> [estimate, low, high]."""
    rows = weight_scaling_fits.exponent_rows(records)
    found = {(r["tensor"], r["exponent"]): r for r in rows if r["norm"] == "fro" and r["status"] == "ok"}
    return {
        k: [round(float(found[t][c]), 4) for c in ("estimate", "ci_low", "ci_high")]
        for k, t in EXPONENTS.items()
        if t in found
    }


def ours(out: Path) -> tuple[dict, list[int], list[int]]:
    """07's committed records of fc-tanh (``records-fc-tanh.csv``), fitted again: exponents, seeds, depths."""
    path = out / weight_scaling.EXPERIMENT / f"records-{FAMILY}.csv"
    if not path.is_file():
        raise SystemExit(f"{path} is missing; run 07_weight_scaling.py at this preset first")
    frame = pd.read_csv(path)
    return (
        exponents(frame.to_dict("records")),
        sorted(frame["seed"].unique().tolist()),
        sorted(frame["depth"].unique().tolist()),
    )


def table(found: dict[str, dict]) -> str:
    """The exponents side by side, one line per estimate."""
    lines = [f"{'':<16}" + "".join(f"{name:>28}" for name in found)]
    for key in EXPONENTS:
        cells = [f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]" if (v := found[name].get(key)) else "-" for name in found]
        lines.append(f"{key:<16}" + "".join(f"{c:>28}" for c in cells))
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--preset", default="mini", help="07's preset whose settings and records are used")
    parser.add_argument("--out", default=None, help="results folder of 07's records (default: results/<preset>)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--depths", default=None, help="comma-separated L (default: the preset's grid)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument(
        "--no-record", action="store_true", help="print only (for subsets: the record is the full run's)"
    )
    return parser.parse_args()


def run_variants(
    variants: list[str], seeds: list[int], depths: list[int], settings, label: str
) -> tuple[dict, list, dict]:
    """Every variant's runs: its exponents over the seeds (by ``<variant> (seeds <label>)``, ``label`` the
    ``--seeds`` given), the runs trained, and each seed's exponents alone (by ``<variant>, seed <s>``)."""
    found, trained, by_seed = {}, [], {}
    for variant in variants:
        records = []
        for seed in seeds:
            got, runs_done = run_seed(variant, seed, depths, settings)
            records += got
            trained += runs_done
            by_seed[f"{variant}, seed {seed}"] = exponents(got)
        found[f"{variant} (seeds {label})"] = exponents(records)
    return found, trained, by_seed


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)  # d x d = 10 x 10 products: threads cannot help (common.experiments.weight_scaling)
    settings = fc_preset(args.preset)
    out = Path(args.out or f"results/{args.preset}")
    seeds = [int(s) for s in args.seeds.split(",")]
    depths = [int(d) for d in args.depths.split(",")] if args.depths else list(settings.depths)
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--variants {','.join(unknown)}: use {','.join(VARIANTS)}")
    share = check_duplicating_shuffle()
    print(
        f"numpy {np.__version__}: np.random.shuffle of a torch tensor copies row j into row i (checked); "
        f"one shuffle of 20 rows keeps {share:.0%} of them distinct on average"
    )
    start = time.perf_counter()
    mine, our_seeds, our_depths = ours(out)
    peer, trained, by_seed = run_variants(variants, seeds, depths, settings, args.seeds)
    found = {f"07 (seeds {','.join(map(str, our_seeds))})": mine, **peer}
    wall = time.perf_counter() - start
    print(table(found))
    print(table(by_seed))
    print(f"whole run {wall:.0f} s")
    if args.no_record:
        return
    record = {
        "what": "Cohen et al.'s FinalResNet and train_final_net re-stated (benchmarks/peer_cohen_fc.py) beside 07's records",
        "command": f".venv/bin/python benchmarks/peer_cohen_fc.py --preset {args.preset} --seeds {args.seeds}",
        "preset": args.preset,
        "family": FAMILY,
        "settings": {
            "depths": depths,
            "seeds": seeds,
            "batch_size": settings.batch_size,
            "lr": settings.recipe.lr,
            "max_epochs": settings.recipe.epochs,
            "num_train": settings.num_train,
            "init_scale": settings.init_scale,
            "published_examples": PUBLISHED_EXAMPLES,
        },
        "versions": {"numpy": np.__version__, "torch": torch.__version__},
        "ours": {"seeds": our_seeds, "depths": our_depths, "exponents": mine},
        "peer": {
            v: {
                "exponents": peer[f"{v} (seeds {args.seeds})"],
                "by_seed": {str(s): by_seed[f"{v}, seed {s}"] for s in seeds},
            }
            for v in variants
        },
        "runs": trained,
        "wall_s": round(wall, 1),
    }
    path = out / weight_scaling.EXPERIMENT / f"peer_check-{FAMILY}-{args.preset}.json"
    atomic.atomic_write_json(path, record)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
