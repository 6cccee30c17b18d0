"""Script 09's controller: probe the growing model, choose where its next block goes, stop growing when told.

Below :mod:`common.experiments.grow_by_criterion` (the job module). :class:`Controller` is the ``decide`` of the
growth engine (:class:`common.training.growing.RunGrowth`): before every ``every``-th round, while growth is allowed, it

- measures the model (:func:`measure`): on a fixed sample of *training* images (:func:`probe_examples`: the same
  images at every probe of a seed, for every policy), ``AG_l`` and the exact growth value ``V_S,l`` of the ``conv3x3``
  zero-output block at every candidate (``U_l`` seeded by the probe's seed), and the terminal value ``V_b`` of every
  existing branch (:mod:`common.science.terminal_value`: the same quantity for the last layer each block already has); on
  held-apart images the validation loss (and, where the preset asks, App. G's interval), which only the post-hoc
  stop table reads;
- applies the stop rule: ``ratio = max_l V_S,l / max_b V_b`` below ``ratio_below`` on ``in_a_row`` probes in a row
  stops growth for the rest of the run; so do the depth cap and the end of the growth phase (``grow_until`` of the
  budget spent);
- otherwise inserts one block where its policy says (:func:`choose`): criterion = argmax ``V_S,l``, ag = argmax
  ``AG_l``, cyclic = where the sweep's ResNet-(8+N+1) has its next block (03's schedule), random = uniform, seeded.
  The block is exactly the one probed (same ``U_l``), so ``V_S,l`` is its first-order value.

BatchNorm mode of the probe: eval (running statistics). Every existing block, the one inserted at the previous probe
included, has trained ``every`` epochs since it went in, so its running statistics are trained ones; each example's
gradient then does not depend on the other images of its batch; and probing changes nothing of the model (train mode
would read the batch statistics of the candidate's fresh BatchNorm and move the running buffers).

Each probe's record (``GrowthState.probes``: in every checkpoint and in the run's result) holds the epoch, the
fraction of the budget spent, the depth, every candidate's ``V_S,l`` and ``AG_l``, every branch's ``V_b``, the ratio,
the choice and why, and whether growth stopped. The FLOPs of a probe are estimated from its passes and Gram products
(:func:`probe_flops`; ``torch.utils.flop_counter`` cannot follow ``autograd.grad`` on a leaf) and kept apart from
the training FLOPs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from common.data.loader import TensorLoader
from common.data.vision import VisionData, class_balanced_indices
from common.errors import UserError
from common.experiments.grow_by_criterion_config import CriterionProbe, CriterionRun
from common.experiments.shared.resnet_sweep import load_source
from common.experiments.shared.resnet_sweep_config import TrainSubset
from common.models.resnet import extra_block_position
from common.presets.probe_ag import app_g_sizes
from common.science.activations import mean_loss
from common.science.probe import probe_activation_gradients
from common.science.saturation import asymptotic_interval, linear_variance_estimate, saturation_interval
from common.science.terminal_value import terminal_values
from common.training.growing import GrowthState, Insertion, eager_copy

EIGH_FLOPS = 9  # an eigendecomposition of a k x k Gram counted as 9 k^3 FLOPs (an estimate)


def _seed(*parts) -> int:
    return int(hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:15], 16)


def probe_seed(seed: int, probe: int) -> int:
    """The seed of ``U_l`` of probe ``probe`` (0-based) of run seed ``seed`` (and of the block inserted after it)."""
    return _seed("grow-probe", seed, probe)


def random_pick_seed(seed: int, probe: int) -> int:
    """The seed of the ``random`` policy's draw at probe ``probe`` of run seed ``seed``."""
    return _seed("grow-random", seed, probe)


# ----------------------------------------------------------------------------- examples
@dataclass(frozen=True)
class ProbeExamples:
    """The fixed images of one seed's probes: analysis batches (training images) and the held-apart sample."""

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


def probe_examples(run: CriterionRun, data: VisionData, device: torch.device) -> ProbeExamples:
    """The analysis batches and the held-apart sample of ``run`` (its ``probe`` and ``seed``)."""
    p, seed = run.probe, run.seed
    need = p.batch_size * p.n_batches
    if need > len(data.y_train):
        raise UserError(
            f"{p.n_batches} analysis batches of {p.batch_size} need {need} training images; the data has "
            f"{len(data.y_train)}: lower the preset's probe_batches"
        )
    order = torch.randperm(len(data.y_train), generator=torch.Generator().manual_seed(_seed("grow-analysis", seed)))
    idx = order[:need]
    analysis = TensorLoader(
        data.x_train[idx], data.y_train[idx], p.batch_size, train=False, drop_last=False,
        mean=data.mean, std=data.std, device=device,
    )  # fmt: skip
    x, y, counts = held_apart(run, data, p.held_out, seed)
    return ProbeExamples(analysis, x, y, counts, data.mean, data.std, device)


def held_apart(run: CriterionRun, data: VisionData, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """``n`` images no run trains on: the training images the sweep's subset left out first (seeded order), then
    the test split's (seeded order) when those run short (smoke trains on every training image: all test images)."""
    subset = run.data.train_subset
    xs, ys = [], []
    if subset:
        whole = load_source(run)
        unused = held_apart_indices(whole, subset, n, seed)
        xs.append(whole.x_train[unused])
        ys.append(whole.y_train[unused])
    taken = sum(len(y) for y in ys)
    if taken < n:
        test = torch.randperm(len(data.y_test), generator=torch.Generator().manual_seed(_seed("held-test", seed)))
        xs.append(data.x_test[test[: n - taken]])
        ys.append(data.y_test[test[: n - taken]])
    x, y = torch.cat(xs), torch.cat(ys)
    if len(y) < n:
        raise UserError(f"only {len(y)} images are held apart from training, the preset asks {n}")
    return x, y, {"train_unused": taken, "test": len(y) - taken}


def held_apart_indices(whole: VisionData, subset: TrainSubset, n: int, seed: int) -> torch.Tensor:
    """Up to ``n`` indices of ``whole``'s training images outside the class-balanced ``subset`` (``k``, ``seed``), in
    the order seeded by ``seed``: the training images of a seed's held-apart sample."""
    mask = torch.ones(len(whole.y_train), dtype=torch.bool)
    mask[class_balanced_indices(whole.y_train, subset.k, subset.seed)] = False
    unused = mask.nonzero().flatten()
    unused = unused[torch.randperm(len(unused), generator=torch.Generator().manual_seed(_seed("held", seed)))]
    return unused[:n]


# ----------------------------------------------------------------------------- measure
def measure(model: torch.nn.Module, run: CriterionRun, examples: ProbeExamples, u_seed: int) -> dict:
    """One probe's measurements of ``model`` (module docstring): ``candidates`` (each ``{candidate, index, v_s,
    ag}``), ``branches`` (each ``{index, kind, v_b}``), ``v_max``, ``ag_max``, ``v_ref`` (the largest ``V_b``),
    ``ratio``, ``val_loss``, and with ``probe.app_g`` App. G's interval; the model is left as it was."""
    p = run.probe
    model = eager_copy(model)  # the training model may carry compiled forwards (common.training.compile); never touched
    probe = probe_activation_gradients(model, examples.analysis, exact=True, seed=u_seed)
    candidates = [
        {"candidate": s.name, "index": s.index, "v_s": float(s.growth_value), "ag": float(s.ag_norm)}
        for s in probe.scores
    ]
    terminal = terminal_values(model, examples.analysis)
    branches = [{"index": t.index, "kind": t.kind, "v_b": t.value} for t in terminal]
    v_max = max(c["v_s"] for c in candidates)
    v_ref = max((b["v_b"] for b in branches), default=0.0)
    measured = {
        "candidates": candidates,
        "branches": branches,
        "v_max": v_max,
        "ag_max": max(c["ag"] for c in candidates),
        "v_ref": v_ref,
        "ratio": v_max / v_ref if v_ref > 0 else None,  # None: no existing branch has a value to compare with
        "probe_seed": u_seed,
        "val_loss": mean_loss(model, examples.held(None, p.batch_size)),
        "grams": [  # (rows a batch, k, d) of every projection: what its Gram products cost (probe_flops)
            *((s.rows_per_example * probe.batch_size, s.tangent_dim, s.width) for s in probe.scores),
            *((t.rows, t.k, t.d) for t in terminal),
        ],
    }
    if p.app_g:
        measured.update(app_g_measure(model, p, examples, u_seed))
    return measured


def app_g_measure(model: torch.nn.Module, p: CriterionProbe, examples: ProbeExamples, u_seed: int) -> dict:
    """App. G's interval (Theorem 3, :func:`common.science.saturation.saturation_interval`) on a seeded calibration / test
    split of the held-apart images, with the asymptotic interval beside it."""
    n_cal, _ = app_g_sizes(len(examples.held_y), p.cal_fraction)
    split = torch.randperm(len(examples.held_y), generator=torch.Generator().manual_seed(_seed("app-g", u_seed)))
    cal, test = split[:n_cal], split[n_cal:]
    moments = {"seed": u_seed, "contributions": True}
    tested = probe_activation_gradients(model, examples.held(test, p.batch_size), **moments)
    traced = probe_activation_gradients(
        model, examples.held(cal, p.batch_size), contribution_directions=tested.cross_gradients, **moments
    )
    interval = saturation_interval(
        [s.cross_gradient_norm_pooled for s in tested.scores],
        [s.contribution_cov_trace for s in traced.scores],
        n=len(test),
        alpha=p.alpha,
        delta=p.delta,
        names=[s.name for s in tested.scores],
    )
    asymptotic = asymptotic_beside(tested.scores, traced.scores, len(test), len(cal), p)
    return {
        "app_g_verdict": interval.verdict,
        "app_g_lower": interval.lower,
        "app_g_upper": interval.upper,
        **{f"app_g_asymptotic_{k}": (asymptotic or {}).get(k) for k in ("lower", "upper", "verdict")},
    }


def asymptotic_beside(test_scores, cal_scores, n_test: int, n_cal: int, p: CriterionProbe) -> dict | None:
    """App. G's asymptotic interval beside Theorem 3's (:func:`common.science.saturation.asymptotic_interval`: ``U_l``,
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
    interval = asymptotic_interval(u, v1, v2, n=n_test, alpha=p.alpha, dof=n_cal - 1, delta=p.delta, names=names)
    return interval.as_record()


# ----------------------------------------------------------------------------- choose and insert
def _ranks(candidates: list[dict], key: str) -> dict[int, int]:
    """1-based rank of each candidate index by ``key``, largest first (ties: the lower index first)."""
    order = sorted(candidates, key=lambda c: (-c[key], c["index"]))
    return {c["index"]: r + 1 for r, c in enumerate(order)}


def choose(policy: str, candidates: list[dict], seed: int, probe: int, depth_n: int) -> dict:
    """The candidate ``policy`` inserts at after probe ``probe`` of a model with ``depth_n`` blocks added, from the
    probe's ``candidates``, with its ``V_S,l``, ``AG_l``, ranks and why: criterion = argmax ``V_S,l``, ag = argmax
    ``AG_l``, cyclic = where the sweep's ResNet-(8+N+1) has its (N+1)-th extra block (03's schedule), random =
    uniform, seeded by (seed, probe)."""
    by_index = {c["index"]: c for c in candidates}
    if policy == "criterion":
        index = min(candidates, key=lambda c: (-c["v_s"], c["index"]))["index"]
    elif policy == "ag":
        index = min(candidates, key=lambda c: (-c["ag"], c["index"]))["index"]
    elif policy == "cyclic":
        index = extra_block_position(depth_n)[1]
    elif policy == "random":
        generator = torch.Generator().manual_seed(random_pick_seed(seed, probe))
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
        "why": WHY[policy],
    }


WHY = {
    "criterion": "largest V_S,l",
    "ag": "largest AG_l",
    "cyclic": "03's cyclic schedule (the sweep's next extra block)",
    "random": "uniform draw, seeded by (seed, probe)",
}


# ----------------------------------------------------------------------------- the controller
STOP_RULE = "stop rule"
STOP_CAP = "depth cap"
STOP_PHASE = "growth phase over"


@dataclass
class Controller:
    """The ``decide`` of one growing run (module docstring): probes every ``every`` rounds while growth is allowed.

    ``examples``: the run's fixed probe images; ``run``: its typed config (``probe``, ``seed``, ``policy``,
    ``growth``: ``every``, ``grow_until``, ``cap``, ``ratio_below``, ``in_a_row``); ``budget``: B in training FLOPs."""

    run: CriterionRun
    examples: ProbeExamples
    budget: int  # B, training FLOPs

    def __call__(self, model: torch.nn.Module, epoch: int, state: GrowthState) -> Insertion | None:
        g = self.run.growth
        if epoch % g.every or stopped(state.probes):
            return None
        fraction = state.flops / self.budget
        depth = len(state.inserted)
        base = {"probe": len(state.probes), "epoch": epoch, "fraction": fraction, "depth_n": depth,
                "train_flops": state.flops}  # fmt: skip
        if fraction >= g.grow_until:
            state.probes.append({**base, "stopped": STOP_PHASE, "why": f"{fraction:.3f} of the budget spent"})
            return None
        if depth >= g.cap:
            state.probes.append({**base, "stopped": STOP_CAP, "why": f"{depth} blocks added, the cap"})
            return None
        u_seed = probe_seed(self.run.seed, base["probe"])
        measured = measure(model, self.run, self.examples, u_seed)
        state.probe_flops += probe_flops(self.run.probe, measured.pop("grams"), state.per_example)
        low = measured["ratio"] is not None and measured["ratio"] < g.ratio_below
        streak = (low_streak(state.probes) + 1) if low else 0
        record = {**base, **measured, "low_streak": streak, "probe_flops": state.probe_flops}
        if streak >= g.in_a_row:
            why = f"max V_S,l / max V_b = {measured['ratio']:.3g} < {g.ratio_below:g} on {streak} probes in a row"
            state.probes.append({**record, "stopped": STOP_RULE, "why": why})
            return None
        chosen = choose(self.run.policy, measured["candidates"], self.run.seed, base["probe"], depth)
        state.probes.append({**record, "stopped": None, **chosen})
        return Insertion(epoch, u_seed, chosen["chosen_index"])


def probe_flops(p: CriterionProbe, grams: list[tuple[int, int, int]], per_example: int) -> int:
    """FLOPs of one probe, an estimate: two forward and backward passes over the probe sample (``V_S,l`` and ``AG_l``;
    the branches' ``V_b``) at a training step's cost per example, a forward pass over the held-apart images (a third
    of it), App. G's two passes where measured; per analysis batch and projection the Gram products (``2 rows k (k +
    d)``) and an eigendecomposition (:data:`EIGH_FLOPS` ``k^3``), once more for the pooled ``V_S,l``."""
    n = p.batch_size * p.n_batches
    passes = 2 * n * per_example + p.held_out * per_example // 3 + (p.held_out * per_example if p.app_g else 0)
    gram = sum(2 * rows * k * (k + d) + EIGH_FLOPS * k**3 for rows, k, d in grams)
    return int(passes + p.n_batches * gram + EIGH_FLOPS * sum(k**3 for _, k, _ in grams))


def stopped(probes: list[dict]) -> str | None:
    """Why growth stopped (the last probe's ``stopped``), None while it goes on."""
    return probes[-1].get("stopped") if probes else None


def low_streak(probes: list[dict]) -> int:
    """Probes in a row, up to the last, whose ratio was below the rule's constant (the last probe's count)."""
    measured = [p for p in probes if "low_streak" in p]
    return int(measured[-1]["low_streak"]) if measured else 0


__all__ = [
    "Controller",
    "ProbeExamples",
    "STOP_CAP",
    "STOP_PHASE",
    "STOP_RULE",
    "choose",
    "held_apart",
    "held_apart_indices",
    "low_streak",
    "measure",
    "probe_examples",
    "probe_seed",
    "random_pick_seed",
    "stopped",
]
