"""Activation-gradient scores at every insertion candidate: one forward, one backward (DESIGN.md 2, B.1).

For analysis batch ``b`` with batch-mean loss ``L_b``, :func:`activation_gradients` captures
``z_l`` and ``G_l = dL_b/dz_l`` at every candidate ``l`` (the input of ``candidate.module``,
read by a forward pre-hook) in one forward and one backward pass (``torch.autograd.grad`` on
the captured states, no full-backward module hooks). Parameters are frozen for the pass: the
backward computes input gradients only, from the loss down to the first candidate (whose state
is made a leaf that requires grad), never a parameter gradient.

:func:`probe_activation_gradients` turns B batches into, per candidate,

- ``ag_norm``: ``AG_l``, the Frobenius norm of the whole ``dL_b/dz_l`` (flattened per batch),
  averaged over the B batches (B.1). Under the batch-mean loss it scales like
  ``1 / sqrt(batch size)``, so batch size and B are stored with every result;
- ``ag_norm_normalised``: ``AG~_l = AG_l / sqrt(d)``, ``d`` = coordinates of ``z_l`` per row
  unit (channels of a feature map, width of a token): descriptive only (App. A);
- ``per_example_rms``: ``sqrt(mean_i ||d loss_i / d z_l,i||^2)`` over all probed examples, with
  ``d loss_i / d z_l,i = b * (row i of dL_b/dz_l)``: exact when examples do not interact (eval-mode
  BatchNorm); in train mode it is the batch-gradient row rescaled;
- ``ag_norm_pooled``: ``||dL_S/dz_l||_F`` for ``S`` = all probed examples, ``L_S`` their mean loss
  (``= per_example_rms / sqrt(n)``), the normalisation of the pooled exact values below;

and with ``exact=True`` the tangent-space quantities of :mod:`common.projection` for the
protocol's standard zero-output block (:mod:`common.tangent`, ``U_l`` seeded by ``(seed, l)``):

- ``growth_value``: ``V_S,l`` on each analysis batch (``S`` = that batch, same normalisation as
  ``AG_l``, so ``growth_value <= ag_norm``), averaged over the batches; ``cross_gradient_norm``
  likewise ``||C_l||_F``;
- ``growth_value_pooled`` / ``cross_gradient_norm_pooled``: the same on the pooled sample ``S``
  (Gram statistics streamed over all batches), with ``growth_fraction_pooled =
  V_S,l / ||G_S||_F`` in ``[0, 1]`` (1 under realizability), ``tangent_dim`` k and ``tangent_rank``.

BatchNorm runs in eval mode (running statistics) unless ``bn_mode="train"``; train mode uses
batch statistics and the running buffers are restored afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from common import runs
from common.errors import UserError
from common.paper import LOW_SIGNAL_AG
from common.projection import GramAccumulator, saturation_test
from common.tangent import ZeroOutputBlock, default_family, get_family, make_zero_block

log = logging.getLogger(__name__)

BN_MODES = ("eval", "train")
CHUNK_ELEMENTS = 1 << 20  # float64 elements per chunk of tangent features or padded maps (8 MiB)

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# ----------------------------------------------------------------------------- one pass
@contextlib.contextmanager
def probe_mode(model: nn.Module, bn_mode: str = "eval") -> Iterator[nn.Module]:
    """Eval mode (or BatchNorm in train mode), frozen parameters; everything restored on exit.

    In ``bn_mode="train"`` the BatchNorm running statistics that the forward updates are put
    back afterwards, so probing never changes the model.
    """
    if bn_mode not in BN_MODES:
        raise ValueError(f"bn_mode must be one of {BN_MODES}, got {bn_mode!r}")
    modes = {m: m.training for m in model.modules()}
    grads = {p: p.requires_grad for p in model.parameters()}
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    buffers = {m: {k: b.clone() for k, b in m.named_buffers(recurse=False)} for m in norms} if bn_mode == "train" else {}
    try:
        model.eval()
        if bn_mode == "train":
            for m in norms:
                m.train()
        for p in grads:
            p.requires_grad_(False)
        yield model
    finally:
        for m, training in modes.items():
            m.training = training
        for p, flag in grads.items():
            p.requires_grad_(flag)
        if bn_mode == "train":
            with torch.no_grad():
                for m, saved in buffers.items():
                    for k, b in m.named_buffers(recurse=False):
                        if k in saved:
                            b.copy_(saved[k])


def activation_gradients(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn = F.cross_entropy,
    candidates: list | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """``(L_b, [z_l], [dL_b/dz_l])`` for every candidate, from one forward and one backward pass.

    A forward pre-hook on each candidate's module reads ``z_l``; a state that does not require
    grad (the first one, with frozen parameters) is replaced by a detached leaf view that does,
    so the backward stops there. Call under :func:`probe_mode` (frozen parameters) to compute nothing
    but input gradients.
    """
    candidates = candidates if candidates is not None else model.candidates()
    states: list[torch.Tensor | None] = [None] * len(candidates)

    def pre_hook(i: int):
        def hook(module: nn.Module, args: tuple):
            if states[i] is not None:
                raise RuntimeError(f"candidate {candidates[i].name} was entered twice in one forward pass")
            z, *rest = args
            if not z.requires_grad:
                z = z.detach().requires_grad_(True)
            states[i] = z
            return (z, *rest)

        return hook

    handles = [c.module.register_forward_pre_hook(pre_hook(i)) for i, c in enumerate(candidates)]
    try:
        with torch.enable_grad():
            loss = loss_fn(model(x), y)
    finally:
        for h in handles:
            h.remove()
    missing = [c.name for c, z in zip(candidates, states, strict=True) if z is None]
    if missing:
        raise RuntimeError(f"the forward pass never entered candidates {missing}")
    grads = torch.autograd.grad(loss, states)
    return loss.detach(), [z.detach() for z in states], list(grads)


# ----------------------------------------------------------------------------- scores
@dataclass
class CandidateScore:
    """Scores of candidate ``index`` (``name``) over the probed batches (see the module docstring)."""

    index: int
    name: str
    family: str
    width: int  # d: coordinates of z_l per row unit
    rows_per_example: int
    ag_norm: float  # AG_l
    ag_norm_normalised: float  # AG~_l
    per_example_rms: float
    ag_norm_pooled: float
    growth_value: float | None = None  # V_S,l per batch, averaged
    cross_gradient_norm: float | None = None  # ||C_l||_F per batch, averaged
    growth_value_pooled: float | None = None
    cross_gradient_norm_pooled: float | None = None
    growth_fraction_pooled: float | None = None
    tangent_dim: int | None = None
    tangent_rank: int | None = None
    rows_pooled: int | None = None


@dataclass
class ProbeResult:
    """Per-candidate scores of one model over B analysis batches, and how they were measured."""

    scores: list[CandidateScore]
    batch_size: int
    n_batches: int
    n_examples: int
    bn_mode: str
    exact: bool
    mean_loss: float
    seed: int

    @property
    def ag_max(self) -> float:
        """``AGmax = max_l AG_l``."""
        return max(s.ag_norm for s in self.scores)

    @property
    def ag_max_score(self) -> CandidateScore:
        return max(self.scores, key=lambda s: s.ag_norm)

    @property
    def v_max(self) -> float | None:
        """``V_S,max = max_l V_S,l`` (per-batch normalisation, comparable with ``AGmax``)."""
        return max(s.growth_value for s in self.scores) if self.exact else None

    def summary(self) -> dict:
        best = self.ag_max_score
        out = {
            "ag_max": self.ag_max,
            "ag_max_candidate": best.name,
            "ag_max_index": best.index,
            "batch_size": self.batch_size,
            "n_batches": self.n_batches,
            "n_examples": self.n_examples,
            "bn_mode": self.bn_mode,
            "exact": self.exact,
            "mean_loss": self.mean_loss,
        }
        if self.exact:
            vbest = max(self.scores, key=lambda s: s.growth_value)
            out.update(v_max=self.v_max, v_max_candidate=vbest.name,
                       v_max_pooled=max(s.growth_value_pooled for s in self.scores))
        return out

    def records(self) -> list[dict]:
        """One plain dict per candidate, with how it was measured (batch size, B, BN mode)."""
        common = {"batch_size": self.batch_size, "n_batches": self.n_batches, "bn_mode": self.bn_mode, "exact": self.exact}
        return [{**asdict(s), **common} for s in self.scores]


class _Running:
    """Per-candidate running sums over batches."""

    def __init__(self) -> None:
        self.ag = 0.0
        self.example_sq = 0.0
        self.v = 0.0
        self.c = 0.0
        self.pooled: GramAccumulator | None = None


def probe_activation_gradients(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    loss_fn: LossFn = F.cross_entropy,
    bn_mode: str = "eval",
    exact: bool = False,
    family: str | None = None,
    seed: int = 0,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> ProbeResult:
    """``AG_l``, ``AG~_l``, per-example RMS (and with ``exact`` ``V_S,l``, ``C_l``) for every candidate.

    ``batches`` yields ``(x, y)`` analysis batches, each used for one forward and one backward
    pass. ``family`` (default: by the state's layout, :func:`common.tangent.default_family`) and
    ``seed`` define the standard zero-output block whose tangent space the exact values use;
    they are the ones :func:`common.growth.insert_zero_block` inserts.
    """
    candidates = model.candidates()
    running = [_Running() for _ in candidates]
    blocks: list[ZeroOutputBlock | None] = [None] * len(candidates)
    shapes: list[tuple[str, int, int]] = []
    sizes, losses = [], []
    with probe_mode(model, bn_mode):
        for x, y in batches:
            loss, states, grads = activation_gradients(model, x, y, loss_fn, candidates)
            b = int(x.shape[0])
            sizes.append(b)
            losses.append(float(loss))
            for i, (z, g) in enumerate(zip(states, grads, strict=True)):
                fam = get_family(family or default_family(z))
                if len(shapes) <= i:
                    shapes.append((fam.name, fam.width(z), fam.rows_per_example(z)))
                run = running[i]
                # Per-example norms in g's dtype (cascade-summed; ~1e-7 relative in float32), then float64.
                row_sq = torch.linalg.vector_norm(g.reshape(b, -1), dim=1).double().square()
                total_sq = float(row_sq.sum())
                run.ag += math.sqrt(total_sq)  # ||dL_b/dz_l||_F
                run.example_sq += total_sq * b * b  # sum_i ||d loss_i/dz_l,i||^2
                if exact:
                    if blocks[i] is None:
                        blocks[i] = make_zero_block(fam.name, fam.width(z), seed, candidates[i].index, like=z)
                        blocks[i].train(bn_mode == "train")
                    acc = _tangent_gram(blocks[i], fam, z, g, chunk_elements)
                    run.v += acc.growth_value()
                    run.c += acc.cross_gradient_norm()
                    # Rows of dL_S/dz are (b / n) dL_b/dz: scale by b now, by 1/n at the end.
                    if run.pooled is None:
                        run.pooled = acc.scaled(b)  # keeps the eigendecomposition: free with one batch
                    else:
                        run.pooled.merge(acc, grad_scale=b)
    if not sizes:
        raise ValueError("probe_activation_gradients got no batches")
    n, nb = sum(sizes), len(sizes)
    scores = []
    for c, run, (fam_name, width, rows_per_example) in zip(candidates, running, shapes, strict=True):
        ag = run.ag / nb
        rms = math.sqrt(run.example_sq / n)
        score = CandidateScore(
            index=c.index, name=c.name, family=fam_name, width=width, rows_per_example=rows_per_example,
            ag_norm=ag, ag_norm_normalised=ag / math.sqrt(width), per_example_rms=rms, ag_norm_pooled=rms / math.sqrt(n),
        )
        if exact:
            pooled = run.pooled.scaled(1.0 / n)
            vp, gp = pooled.growth_value(), pooled.grad_norm()
            score.growth_value = run.v / nb
            score.cross_gradient_norm = run.c / nb
            score.growth_value_pooled = vp
            score.cross_gradient_norm_pooled = pooled.cross_gradient_norm()
            score.growth_fraction_pooled = vp / gp if gp > 0 else 0.0
            score.tangent_dim = pooled.k
            score.tangent_rank = pooled.rank()
            score.rows_pooled = pooled.rows
        scores.append(score)
    return ProbeResult(
        scores=scores, batch_size=sizes[0], n_batches=nb, n_examples=n, bn_mode=bn_mode, exact=exact,
        mean_loss=sum(losses) / nb, seed=seed,
    )


@torch.no_grad()
def _tangent_gram(block: ZeroOutputBlock, fam, z: torch.Tensor, g: torch.Tensor, chunk_elements: int) -> GramAccumulator:
    """``P = Psi^T Psi`` and ``X = Psi^T G`` of one batch, streamed over example chunks (float64)."""
    psi = block.psi(z)  # whole batch: train-mode BN inside psi sees the batch's statistics
    d, k = fam.width(z), fam.feature_dim(fam.width(z))
    acc = GramAccumulator(k, d, device=z.device)
    if fam.gram is not None and fam.gram_supported(psi):  # structured route, chunked inside
        P, X = fam.gram(psi, g, chunk_elements=chunk_elements)
        acc.update_statistics(P, X, float(torch.linalg.vector_norm(g, dtype=torch.float64)) ** 2, g.numel() // d)
        return acc
    per_chunk = max(1, chunk_elements // max(1, fam.rows_per_example(z) * k))  # rows x k float64 features
    for start in range(0, z.shape[0], per_chunk):
        sl = slice(start, start + per_chunk)
        acc.update(fam.feature_rows(psi[sl]), fam.state_rows(g[sl]))
    return acc


# ----------------------------------------------------------------------------- job of 02_probe_ag.py
EXPERIMENT = "ag_probe"
DEFAULT_BATCH_SIZE = 128  # analysis batch size (README, reproduction decisions): AG_l ~ 1/sqrt(batch)
DEFAULT_N_BATCHES = 10  # B analysis batches per model
SPLITS = ("train", "test")


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
    saturation_delta: float = LOW_SIGNAL_AG,
    saturation_t: float = 0.0,
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
    if saturation_delta < 0 or saturation_t < 0:
        raise UserError("--saturation-delta and --saturation-t must be >= 0")
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
                "saturation": {"delta": saturation_delta, "t": saturation_t, "split": saturation_split},
                "runtime": {
                    "device": device,
                    "sweep_dir": str(directory.resolve()),
                    "data_root": str(Path(data_root).expanduser().resolve()) if data_root else None,
                },
            }
        )
    return configs


def probe_sweep_run(spec) -> dict:
    """Job function of script 02: probe one trained sweep model; writes ``candidates.csv`` and ``result.json``."""
    from common.data.vision import TensorLoader
    from common.device import resolve_device
    from common.sweep import load_sweep_data, load_trained_resnet  # imported here: data and training stack

    config = spec.config
    path = runs.prepare_run(spec.out, config)
    runtime = config.get("runtime", {})
    device = resolve_device(runtime.get("device") or "auto")
    sweep_dir = Path(runtime["sweep_dir"])
    sweep_config = runs.read_json(sweep_dir / runs.CONFIG)
    if runtime.get("data_root"):
        sweep_config = {**sweep_config, "runtime": {**sweep_config.get("runtime", {}), "data_root": runtime["data_root"]}}
    data = load_sweep_data(sweep_config)
    model = load_trained_resnet(sweep_dir, map_location=device)
    b, nb = config["batch_size"], config["n_batches"]

    def batches(split: str, start: int) -> tuple[TensorLoader, dict]:
        images, labels = (data.x_train, data.y_train) if split == "train" else (data.x_test, data.y_test)
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(_selection_seed(config["probe_seed"], split)))
        size, count = _fit_batches(len(labels) - start, b, nb, split)
        idx = order[start : start + size * count]
        loader = TensorLoader(images[idx], labels[idx], size, train=False, drop_last=True, mean=data.mean, std=data.std, device=device)
        return loader, {"split": split, "batch_size": size, "n_batches": count, "n": size * count, "start": start}

    analysis, used = batches(config["split"], 0)
    result = probe_activation_gradients(model, analysis, bn_mode=config["bn_mode"], exact=config["exact"], seed=config["probe_seed"])
    sat = config["saturation"]
    same = sat["split"] == config["split"]
    sat_loader, sat_used = batches(sat["split"], used["n"] if same else 0)  # disjoint from the analysis batches
    sat_probe = probe_activation_gradients(model, sat_loader, bn_mode=config["bn_mode"])
    decision = saturation_test(
        [s.ag_norm for s in sat_probe.scores], delta=sat["delta"], t=sat["t"], n=sat_used["n"], split=sat["split"],
        reused_training_data=sat["split"] == "train", names=[s.name for s in sat_probe.scores],
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
            "batch_size": sat_used["batch_size"],
            "n_batches": sat_used["n_batches"],
            "disjoint_from_analysis_batches": True,
            "statistic_note": "AG_l at this batch size on the independent sample (App. G, DESIGN.md 2)",
        },
    }
    runs.write_result(path, out)
    return out


def summary_rows(results: Iterable[dict]) -> list[dict]:
    """One row per probed model (depth, seed) for the summary CSV of script 02."""
    rows = []
    for r in sorted(results, key=lambda r: (r["depth_n"], r["seed"])):
        row = {k: r[k] for k in ("depth_n", "depth_label", "ag_max", "ag_max_candidate", "batch_size", "n_batches", "split")}
        if r.get("exact"):
            row["v_max"] = r["v_max"]
            row["v_max_candidate"] = r["v_max_candidate"]
        sat = r["saturation"]
        row.update(
            seed=r["seed"], n_examples=r["n_examples"], bn_mode=r["bn_mode"], mean_loss=r["mean_loss"],
            saturated=sat["saturated"], saturation_max_ag=sat["max_value"], saturation_threshold=sat["threshold"],
            saturation_n=sat["n"], saturation_split=sat["split"],
        )
        rows.append(row)
    return rows


def summary_table(rows: list[dict], low_signal: float) -> str:
    """Depth vs AGmax, each row marked when AGmax is below the paper's low-signal line."""
    exact = any("v_max" in r for r in rows)
    header = f"{'N':>4} {'model':<11} {'seed':>4} {'AGmax':>10} {'argmax':<10} {'<' + format(low_signal, '.0e'):>7}"
    header += f" {'V_S,max':>10}" if exact else ""
    header += f" {'App.G':>7}"
    lines = [header, "-" * len(header)]
    for r in rows:
        line = (f"{r['depth_n']:>4} {'ResNet-' + str(r['depth_label']):<11} {r['seed']:>4} {r['ag_max']:>10.3e} "
                f"{r['ag_max_candidate']:<10} {'*' if r['ag_max'] < low_signal else '':>7}")
        line += f" {r['v_max']:>10.3e}" if exact else ""
        line += f" {'sat' if r['saturated'] else 'not':>7}"
        lines.append(line)
    first = rows[0] if rows else {"batch_size": "?", "n_batches": "?", "split": "?"}
    lines.append(
        f"* AGmax < {low_signal:g}: the paper's low-signal regime (common.paper.LOW_SIGNAL_AG). AG_l is the norm of "
        f"the batch-mean loss gradient at batch size {first['batch_size']} (x{first['n_batches']} batches, "
        f"{first['split']} split) and scales like 1/sqrt(batch size)."
    )
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
