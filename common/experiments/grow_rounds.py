"""One round of script 09's trajectories: measure a model, choose a candidate, insert, train (docs/09_grow_by_criterion.md).

Below :mod:`common.experiments.grow_by_criterion` (the job module, which plans the trajectories and runs them round by
round). Every round measures its model the same way (:func:`measure`):

- on ``probe_batches`` analysis batches of *training* images (the same images for every policy and round of a seed),
  ``AG_l`` and the exact growth value ``V_S,l`` at every candidate (:func:`common.probe.probe_activation_gradients`,
  eval-mode BatchNorm, the ``conv3x3`` family's zero-output block with ``U_l`` seeded by the round's probe seed);
- on ``held_out`` images held apart from training (the training images the sweep's subset left out, then the test
  split; the same for every policy), App. G's interval (Theorem 3, :func:`common.saturation.saturation_interval`, on
  a seeded calibration / test split) and the validation loss (:func:`common.probe.mean_loss`).

:func:`choose` reads a policy's candidate off the parent's measurement; :func:`insert_chosen` inserts the zero-output
block the probe measured there (:func:`common.growth.insert_zero_block`, the same probe seed, so ``V_S,l`` is exactly
that block's first-order value) and checks the outputs bit for bit in float64, both BatchNorm modes
(:func:`common.growth.check_function_preserved`); :func:`train_round` trains with the sweep's recipe, resuming.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from common.data.loader import TensorLoader
from common.data.vision import VisionData, class_balanced_indices
from common.errors import UserError
from common.growth import check_function_preserved, insert_zero_block
from common.models.resnet import extra_block_position
from common.presets.probe import app_g_sizes
from common.probe import mean_loss, probe_activation_gradients
from common.recipes import SGDRecipe, TrainSettings
from common.resnet_sweep import build_resnet, load_source
from common.saturation import asymptotic_interval, linear_variance_estimate, saturation_interval
from common.train import load_weights, train

CHECK_BATCH = 8  # training images in the run-time function-preservation check (as 03's)


def _seed(*parts) -> int:
    return int(hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:15], 16)


def probe_seed(seed: int, round_: int) -> int:
    """The seed of ``U_l`` of the probe at round ``round_`` of run seed ``seed`` (and of the block inserted next)."""
    return _seed("grow-probe", seed, round_)


def random_pick_seed(seed: int, round_: int) -> int:
    """The seed of the ``random`` policy's draw at round ``round_`` of run seed ``seed``."""
    return _seed("grow-random", seed, round_)


# ----------------------------------------------------------------------------- examples
@dataclass(frozen=True)
class RoundExamples:
    """The fixed images of one seed's measurements: analysis batches (training images) and the held-apart sample."""

    analysis: TensorLoader
    held_x: torch.Tensor
    held_y: torch.Tensor
    held_counts: dict
    mean: tuple
    std: tuple
    device: torch.device

    def held(self, idx: torch.Tensor | None = None, size: int = 256) -> TensorLoader:
        x, y = (self.held_x, self.held_y) if idx is None else (self.held_x[idx], self.held_y[idx])
        return TensorLoader(x, y, size, train=False, drop_last=False, mean=self.mean, std=self.std, device=self.device)


def round_examples(config: dict, data: VisionData, device: torch.device) -> RoundExamples:
    """The analysis batches and the held-apart sample of ``config`` (a round config: ``probe`` and ``seed``)."""
    p, seed = config["probe"], config["seed"]
    need = p["batch_size"] * p["n_batches"]
    if need > len(data.y_train):
        raise UserError(
            f"{p['n_batches']} analysis batches of {p['batch_size']} need {need} training images; the data has "
            f"{len(data.y_train)}: lower the preset's probe_batches"
        )
    order = torch.randperm(len(data.y_train), generator=torch.Generator().manual_seed(_seed("grow-analysis", seed)))
    idx = order[:need]
    analysis = TensorLoader(
        data.x_train[idx], data.y_train[idx], p["batch_size"], train=False, drop_last=False,
        mean=data.mean, std=data.std, device=device,
    )  # fmt: skip
    x, y, counts = held_apart(config, data, p["held_out"], seed)
    return RoundExamples(analysis, x, y, counts, data.mean, data.std, device)


def held_apart(config: dict, data: VisionData, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """``n`` images no round trains on: the training images the sweep's subset left out first (seeded order), then
    the test split's (seeded order) when those run short (smoke trains on every training image: all test images)."""
    subset = config.get("data", {}).get("train_subset")
    xs, ys = [], []
    if subset:
        whole = load_source(config)
        mask = torch.ones(len(whole.y_train), dtype=torch.bool)
        mask[class_balanced_indices(whole.y_train, subset["k"], subset["seed"])] = False
        unused = mask.nonzero().flatten()
        unused = unused[torch.randperm(len(unused), generator=torch.Generator().manual_seed(_seed("held", seed)))]
        xs.append(whole.x_train[unused[:n]])
        ys.append(whole.y_train[unused[:n]])
    taken = sum(len(y) for y in ys)
    if taken < n:
        test = torch.randperm(len(data.y_test), generator=torch.Generator().manual_seed(_seed("held-test", seed)))
        xs.append(data.x_test[test[: n - taken]])
        ys.append(data.y_test[test[: n - taken]])
    x, y = torch.cat(xs), torch.cat(ys)
    if len(y) < n:
        raise UserError(f"only {len(y)} images are held apart from training, the preset asks {n}")
    return x, y, {"train_unused": taken, "test": len(y) - taken}


# ----------------------------------------------------------------------------- measure
def measure(model: torch.nn.Module, config: dict, examples: RoundExamples) -> dict:
    """``candidates`` (each ``{candidate, index, v_s, ag}``), ``v_max``, ``ag_max``, App. G's interval and verdict,
    ``val_loss`` of one model; its train/eval mode is left as it was."""
    p, u_seed = config["probe"], probe_seed(config["seed"], config["round"])
    probe = probe_activation_gradients(model, examples.analysis, exact=True, seed=u_seed)
    candidates = [
        {"candidate": s.name, "index": s.index, "v_s": float(s.growth_value), "ag": float(s.ag_norm)}
        for s in probe.scores
    ]
    n_cal, _ = app_g_sizes(len(examples.held_y), p["cal_fraction"])
    split = torch.randperm(len(examples.held_y), generator=torch.Generator().manual_seed(_seed("app-g", u_seed)))
    cal, test = split[:n_cal], split[n_cal:]
    moments = {"seed": u_seed, "contributions": True}
    tested = probe_activation_gradients(model, examples.held(test, p["batch_size"]), **moments)
    traced = probe_activation_gradients(
        model, examples.held(cal, p["batch_size"]), contribution_directions=tested.cross_gradients, **moments
    )
    interval = saturation_interval(
        [s.cross_gradient_norm_pooled for s in tested.scores],
        [s.contribution_cov_trace for s in traced.scores],
        n=len(test),
        alpha=p["alpha"],
        delta=p["delta"],
        names=[s.name for s in tested.scores],
    )
    asymptotic = asymptotic_beside(tested.scores, traced.scores, len(test), len(cal), p)
    return {
        "candidates": candidates,
        "v_max": max(c["v_s"] for c in candidates),
        "ag_max": max(c["ag"] for c in candidates),
        "probe_seed": u_seed,
        "app_g_verdict": interval.verdict,
        "app_g_lower": interval.lower,
        "app_g_upper": interval.upper,
        "app_g": {**interval.as_record(), "n_cal": len(cal), "n_test": len(test), "sources": examples.held_counts},
        "app_g_asymptotic": asymptotic,
        **{f"app_g_asymptotic_{k}": (asymptotic or {}).get(k) for k in ("lower", "upper", "verdict")},
        "val_loss": mean_loss(model, examples.held(None, p["batch_size"])),
    }


def asymptotic_beside(test_scores, cal_scores, n_test: int, n_cal: int, p: dict) -> dict | None:
    """App. G's asymptotic interval beside Theorem 3's (:func:`common.saturation.asymptotic_interval`: ``U_l``,
    ``tr(Sigma_l^2)`` of the test part, the variance along the test part's ``C_hat_l`` from the calibration part,
    a Student quantile with ``n_cal - 1`` degrees of freedom); None below 4 test examples (no ``tr(Sigma^2)``)."""
    v2 = [s.contribution_cov_sq_trace for s in test_scores]
    if any(v is None for v in v2):
        return None
    v1 = [
        linear_variance_estimate(c.contribution_direction_variance, v, n_test)
        for c, v in zip(cal_scores, v2, strict=True)
    ]
    u = [s.contribution_norm_sq for s in test_scores]
    names = [s.name for s in test_scores]
    interval = asymptotic_interval(u, v1, v2, n=n_test, alpha=p["alpha"], dof=n_cal - 1, delta=p["delta"], names=names)
    return interval.as_record()


# ----------------------------------------------------------------------------- choose and insert
def _ranks(candidates: list[dict], key: str) -> dict[int, int]:
    """1-based rank of each candidate index by ``key``, largest first (ties: the lower index first)."""
    order = sorted(candidates, key=lambda c: (-c[key], c["index"]))
    return {c["index"]: r + 1 for r, c in enumerate(order)}


def choose(policy: str, candidates: list[dict], seed: int, round_: int) -> dict:
    """The candidate ``policy`` inserts at in round ``round_`` (>= 1), from the parent's ``candidates``, with its
    ``V_S,l``, ``AG_l`` and ranks: criterion = argmax ``V_S,l``, ag = argmax ``AG_l``, cyclic = where the sweep's
    ResNet-(8+N) has its N-th extra block (03's schedule), random = uniform, seeded by (seed, round)."""
    by_index = {c["index"]: c for c in candidates}
    if policy == "criterion":
        index = min(candidates, key=lambda c: (-c["v_s"], c["index"]))["index"]
    elif policy == "ag":
        index = min(candidates, key=lambda c: (-c["ag"], c["index"]))["index"]
    elif policy == "cyclic":
        index = extra_block_position(round_ - 1)[1]
    elif policy == "random":
        generator = torch.Generator().manual_seed(random_pick_seed(seed, round_))
        index = sorted(by_index)[int(torch.randint(len(by_index), (1,), generator=generator))]
    else:
        raise ValueError(f"unknown policy {policy!r}")
    chosen = by_index[index]
    return {
        "chosen_candidate": chosen["candidate"],
        "chosen_index": index,
        "chosen_v_s": chosen["v_s"],
        "chosen_ag": chosen["ag"],
        "chosen_rank_v": _ranks(candidates, "v_s")[index],
        "chosen_rank_ag": _ranks(candidates, "ag")[index],
    }


def rebuild(config: dict, chain: list[dict], num_classes: int) -> torch.nn.Module:
    """The untrained architecture of a round: the sweep's ResNet-8 with the chain's blocks inserted in order."""
    model = build_resnet({**config, "depth_n": 0}, num_classes)
    for link in chain:
        insert_zero_block(model, link["index"], seed=link["u_seed"])
    return model


def load_round_model(run_dir: str | Path, config: dict, chain: list[dict], num_classes: int) -> torch.nn.Module:
    """The trained model of a finished round (eval mode): its architecture rebuilt from ``chain``, then its weights."""
    model = rebuild(config, chain, num_classes)
    model.load_state_dict(load_weights(run_dir))
    return model.eval()


def insert_chosen(parent: torch.nn.Module, index: int, u_seed: int, data: VisionData, what: str) -> tuple:
    """The parent grown at candidate ``index`` (a copy), and the float64 check's differences (train and eval mode)."""
    model = copy.deepcopy(parent)
    insert_zero_block(model, index, seed=u_seed)
    n = CHECK_BATCH
    x, _ = next(iter(TensorLoader(data.x_train[:n], data.y_train[:n], n, train=False, mean=data.mean, std=data.std)))
    diff = check_function_preserved(parent, model, x, what=what)
    return model.train(), {"dtype": "float64", "batch": n, "max_abs_diff": diff}


# ----------------------------------------------------------------------------- train
def train_round(model: torch.nn.Module, config: dict, data: VisionData, path: Path, device: torch.device) -> dict:
    """Train one round's model with the sweep's recipe for its epochs (fresh optimiser, schedule restarted), resuming
    from the run's checkpoint; the summary of :func:`common.train.train` (clean ``train_loss``, ``test_loss``, ...)."""
    hp, runtime = config["train"], config.get("runtime", {})
    keys = {"mean": data.mean, "std": data.std, "device": device, "channels_last": True}
    x_train, y_train = data.x_train.to(device), data.y_train.to(device)
    loader = TensorLoader(
        x_train, y_train, hp["batch_size"], train=True, seed=config["seed"], crop_pad=hp["crop_pad"], flip=hp["flip"],
        **keys,
    )  # fmt: skip
    eval_bs = runtime.get("eval_batch_size", 500)
    test = TensorLoader(data.x_test, data.y_test, eval_bs, train=False, **keys)
    clean = TensorLoader(x_train, y_train, eval_bs, train=False, **keys)
    use_compile = {"on": True, "off": False}.get(runtime.get("compile", "auto"), device.type == "cuda")
    settings = TrainSettings(recipe=SGDRecipe.from_config(hp), compile=use_compile, channels_last=True)
    return train(
        model, loader, {}, final_eval_loaders={"train": clean, "test": test}, run_dir=path, settings=settings,
        device=device, desc=config["name"],
    )  # fmt: skip


__all__ = [
    "RoundExamples",
    "choose",
    "held_apart",
    "insert_chosen",
    "load_round_model",
    "measure",
    "probe_seed",
    "random_pick_seed",
    "rebuild",
    "round_examples",
    "train_round",
]
