"""Post-hoc stopping rules for growth by the criterion (script 09), and the fixed sweep's N* (01).

These rules are read *after* a run, off its probe records (:func:`common.experiments.grow_by_criterion.probe_frame`);
the rule that acts online is the controller's own (:mod:`common.experiments.grow_by_criterion_controller`). Functions of record
frames only, fixed before any trajectory record existed (docs/decisions.md, section "Stopping rules for growth by the
criterion (09)"). A *trajectory* is one ``(policy, seed)``: one row per probe (its ``round``: the probe's index; round
0 is the first probe, of the ResNet-8 after the first probe period), with the columns of :data:`TRAJECTORY_COLUMNS`.
A probe's record holds what was measured on the network then, before that probe's insertion: ``AGmax``, the largest
exact growth value ``V_S,l`` (``v_max``), App. G's interval for ``Gamma = max_l ||C_l||`` and its verdict where
measured, the validation loss, and the clean training loss at that epoch.

A rule *stops at round r* when it fires on probe r's measurements: the network kept is the one of probe r (depth
``depth_n``, no roll-back), and the compute spent is its ``flops_cum``. The four rules:

- (a) :func:`ag_below_line`: ``AGmax < 5e-3`` (the paper's low-signal line, :data:`common.presets.paper.LOW_SIGNAL_AG`) on
  the records' ``ag_max``, the batch-mean ``AG_l`` at the probe's batch size, as 08 draws and tabulates the line;
- (b) :func:`app_g_saturated`: App. G's interval says "saturated within delta", upper end ``<= APP_G_DELTA``
  (never fires where the interval was not measured: "no verdict");
- (c) :func:`v_max_fallen`: ``max_l V_S,l < V_FRACTION x`` its round-0 value;
- (d) :func:`val_loss_stalled`: the validation loss has not improved by ``IMPROVEMENT_MARGIN`` (relative) for
  ``PATIENCE`` rounds (the constructive-learning baseline);
- (r) :func:`ratio_stopped`: the rule the runs used online, read back off the same records, beside (a)-(d):
  ``max_l V_S,l / max_b V_b`` below the preset's ``ratio_below`` on ``in_a_row`` probes in a row.

The stop rule examined (issue 57, not tuned): :func:`ratio_probes` puts, per probe, the controller's ratio beside the
numbers of candidates and branches, and takes it apart with the same-place statistic ``s_b = V_b / V_S,p(b)``, a
trained branch's terminal value over a fresh zero block's at the place it writes to (candidate ``b + 1``: the
candidates are the block inputs in order, then the head's): with ``b*`` the branch of largest ``V_b``,
``ratio = (max_l V_S,l / V_S,p(b*)) / s_b*``, the first factor at least 1 (a maximum over every place, ``p(b*)``
among them), so the ratio can fall below 1 only where the best trained branch beats a fresh block at its own place by
more than the spread of ``V_S`` over the places. :func:`ratio_rows` is 08's ``grow_stop_ratio`` table of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from common.presets import paper
from common.science import saturation

TRAJECTORY_COLUMNS = (
    "policy", "seed", "round", "depth_n", "chosen_candidate", "v_max", "ag_max", "app_g_verdict", "app_g_lower",
    "app_g_upper", "val_loss", "ratio", "train_loss", "test_loss", "flops_cum",
)  # fmt: skip
AT_STOP = ("round", "depth_n", "train_loss", "test_loss", "flops_cum")  # what a stop reports, read off its round
# Optional columns: the asymptotic interval beside Theorem 3's (read beside rule (b), never its verdict).
ASYMPTOTIC_COLUMNS = ("app_g_asymptotic_lower", "app_g_asymptotic_upper")

# ----------------------------------------------------------------------------- the constants, fixed in advance
AG_LINE = paper.LOW_SIGNAL_AG
"""Rule (a)'s line: the paper's 5e-3, read against ``ag_max`` (batch-mean ``AG_l`` at the probe batch size), the
reading 08's figure 1 and its table compare with the line. The paper gives no batch size, so the line's
normalisation is unknown (08's line rows say "not comparable"); the rule reads it as 08 does, as written."""

APP_G_DELTA = 1e-2
"""Rule (b)'s tolerance on ``Gamma = max_l ||C_l||``, in ``V_l``'s coordinates. A gradient step of size ``eta`` on
the new block's ``V_l`` lowers the pooled loss by ``eta ||C_l||^2`` to first order (App. D), so ``Gamma^2`` is the
first-order loss drop per unit learning rate: ``Gamma <= 1e-2`` means at most 1e-4 nats per unit of learning rate,
at the presets' peak rates (0.05-0.2) at most 2e-5 per step. No delta carries over from the paper (App. G:
thresholds depend on the parameterisation); this one is a convention, fixed before any record. Theorem 3's
``t`` grows with the number of candidates (one more each round), so a fixed delta tends to fire at once or never."""

V_FRACTION = 0.1
"""Rule (c): the largest ``V_S,l`` below a tenth of its round-0 value. ``V_S,l^2`` is the first-order loss drop of
the steepest step in the block's tangent space, so a tenth of ``V`` is a hundredth of the first block's first-order
gain; a ratio of the same probe's values cancels the batch-size normalisation that makes (a)'s line ambiguous."""

IMPROVEMENT_MARGIN = 0.01
"""Rule (d) and the sweep's plateau: a loss *improves* when it falls below ``(1 - 0.01) x`` the best so far (a
relative margin, so the same value serves digits, CIFAR-10, training and validation losses; 1% is the low end of
the thresholds of Prechelt's early-stopping criteria, 1998, which are stated in percent). Ties never improve."""

PATIENCE = 2
"""Rule (d): stop after ``P = 2`` rounds in a row without an improvement. One round without one can be a single
round's noise; two is the least that is not, and it leaves the rule room to fire within the mini preset's five
rounds (at round 2 at the earliest)."""


@dataclass(frozen=True)
class Stop:
    """Where a rule stops a trajectory: the round it fires at and what was recorded there (None when it did not)."""

    rule: str
    fired: bool
    round: int | None
    depth_n: int | None
    train_loss: float | None
    test_loss: float | None
    flops_cum: float | None
    text: str

    def as_record(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- trajectories
def one_trajectory(trajectory: pd.DataFrame, needs: tuple[str, ...] = ()) -> pd.DataFrame:
    """The rows of one ``(policy, seed)`` sorted by round, checked: not empty, one policy and seed, rounds unique,
    the columns of :data:`AT_STOP` and ``needs`` present."""
    missing = [c for c in (*AT_STOP, *needs) if c not in trajectory]
    if missing:
        raise ValueError(f"the trajectory lacks the columns {missing}")
    if trajectory.empty:
        raise ValueError("the trajectory has no rounds")
    for key in ("policy", "seed"):
        if key in trajectory and trajectory[key].nunique(dropna=False) > 1:
            raise ValueError(f"a trajectory is one (policy, seed); these rows have {trajectory[key].nunique()} {key}s")
    if trajectory["round"].duplicated().any():
        raise ValueError(f"rounds recorded twice: {sorted(set(trajectory['round'][trajectory['round'].duplicated()]))}")
    return trajectory.sort_values("round").reset_index(drop=True)


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def fmt(value) -> str:
    """Four significant digits, ``-`` for a missing value."""
    return "-" if value is None or pd.isna(value) else f"{float(value):.4g}"


def stop_at(rule: str, rows: pd.DataFrame, index: int, why: str) -> Stop:
    """The rule fired at row ``index`` (a sorted trajectory's): what was recorded there."""
    row = rows.iloc[index]
    depth = _number(row["depth_n"])
    return Stop(
        rule=rule,
        fired=True,
        round=int(row["round"]),
        depth_n=None if depth is None else int(depth),
        train_loss=_number(row["train_loss"]),
        test_loss=_number(row["test_loss"]),
        flops_cum=_number(row["flops_cum"]),
        text=f"stopped at round {int(row['round'])} (N = {fmt(depth)}): {why}",
    )


def no_stop(rule: str, rows: pd.DataFrame, why: str) -> Stop:
    """The rule did not fire: 'did not stop within K rounds', K the last round recorded."""
    last = rows.iloc[-1]
    k = int(last["round"])
    where = f"last round N = {fmt(last['depth_n'])}, flops {fmt(last['flops_cum'])}"
    return Stop(rule, False, None, None, None, None, None, f"did not stop within {k} rounds ({where}): {why}")


def first_true(mask) -> int | None:
    """The first position where ``mask`` holds (NaN comparisons are False), None when none does."""
    hits = np.flatnonzero(np.asarray(mask, dtype=bool))
    return int(hits[0]) if len(hits) else None


# ----------------------------------------------------------------------------- the rules
def ag_below_line(trajectory: pd.DataFrame, line: float = AG_LINE) -> Stop:
    """Rule (a): the first round whose ``AGmax`` (batch-mean ``AG_l`` at the probe batch size) is below ``line``.

    Strictly below (a tie does not fire); a round without a probe (NaN) never fires."""
    rule = "a: AGmax below the paper's line"
    rows = one_trajectory(trajectory, ("ag_max",))
    ag = rows["ag_max"].to_numpy(dtype=float)
    at = first_true(ag < line)
    if at is None:
        low = np.nanmin(ag) if np.isfinite(ag).any() else math.nan
        return no_stop(rule, rows, f"AGmax never below {line:g} (lowest {fmt(low)})")
    return stop_at(rule, rows, at, f"AGmax {fmt(ag[at])} < {line:g}")


def app_g_saturated(trajectory: pd.DataFrame, delta: float = APP_G_DELTA) -> Stop:
    """Rule (b): the first round at which App. G's interval says "saturated within delta" (upper end ``<= delta``).

    The verdict is recomputed from the recorded interval at ``delta`` (:func:`common.science.saturation.saturation_verdict`),
    so the rule does not depend on the delta the run was probed with; a round recorded "no verdict" (BatchNorm in
    train mode) or without an interval never fires. The asymptotic interval, where recorded
    (:data:`ASYMPTOTIC_COLUMNS`), is read beside it in the text and never fires the rule."""
    rule = "b: App. G saturated within delta"
    rows = one_trajectory(trajectory, ("app_g_verdict", "app_g_lower", "app_g_upper"))
    lower, upper = rows["app_g_lower"].to_numpy(dtype=float), rows["app_g_upper"].to_numpy(dtype=float)
    judged = (rows["app_g_verdict"] != saturation.NO_VERDICT).to_numpy() & np.isfinite(lower) & np.isfinite(upper)
    verdicts = np.where(judged, saturation.saturation_verdict(np.nan_to_num(lower), np.nan_to_num(upper), delta), "")
    at = first_true(verdicts == saturation.SATURATED)
    beside = asymptotic_note(rows, delta)
    if at is None:
        shown = f"last interval [{fmt(lower[-1])}, {fmt(upper[-1])}]" if judged[-1] else "no verdict at the last round"
        return no_stop(rule, rows, f"never saturated within delta = {delta:g} ({shown}); {beside}")
    why = f"Gamma in [{fmt(lower[at])}, {fmt(upper[at])}], upper end <= delta = {delta:g}; {beside}"
    return stop_at(rule, rows, at, why)


def asymptotic_note(rows: pd.DataFrame, delta: float) -> str:
    """Where the asymptotic interval beside Theorem 3's would say "saturated within delta" (not the verdict)."""
    if not all(c in rows for c in ASYMPTOTIC_COLUMNS):
        return "no asymptotic interval recorded"
    lower, upper = (rows[c].to_numpy(dtype=float) for c in ASYMPTOTIC_COLUMNS)
    known = np.isfinite(lower) & np.isfinite(upper)
    verdicts = np.where(known, saturation.saturation_verdict(np.nan_to_num(lower), np.nan_to_num(upper), delta), "")
    at = first_true(verdicts == saturation.SATURATED)
    if at is None:
        return f"the asymptotic interval beside it (not the verdict) is never saturated within {delta:g}"
    return (
        f"the asymptotic interval beside it (not the verdict) is first saturated within {delta:g} at round "
        f"{int(rows['round'].iloc[at])}, [{fmt(lower[at])}, {fmt(upper[at])}]"
    )


def v_max_fallen(trajectory: pd.DataFrame, fraction: float = V_FRACTION) -> Stop:
    """Rule (c): the first round after round 0 whose largest ``V_S,l`` is below ``fraction`` x round 0's.

    Strictly below; needs a round 0 with a finite, positive ``v_max`` (else it cannot fire, and says why)."""
    rule = "c: largest V_S,l below a fraction of round 0's"
    rows = one_trajectory(trajectory, ("v_max",))
    v = rows["v_max"].to_numpy(dtype=float)
    if int(rows["round"].iloc[0]) != 0:
        return no_stop(rule, rows, "no round 0 recorded")
    if not (np.isfinite(v[0]) and v[0] > 0):
        return no_stop(rule, rows, f"round 0's largest V_S,l is {fmt(v[0])}: no reference to fall from")
    threshold = fraction * v[0]
    later = np.arange(len(v)) > 0
    at = first_true(later & (v < threshold))
    if at is None:
        low = np.nanmin(v[1:]) if np.isfinite(v[1:]).any() else math.nan
        why = f"V_S,max never below {fraction:g} x {fmt(v[0])} = {fmt(threshold)} (lowest after round 0: {fmt(low)})"
        return no_stop(rule, rows, why)
    return stop_at(rule, rows, at, f"V_S,max {fmt(v[at])} < {fraction:g} x round 0's {fmt(v[0])}")


def improvements(losses, margin: float = IMPROVEMENT_MARGIN) -> np.ndarray:
    """Per position, whether the loss improves on the best before it: below ``(1 - margin) x best``.

    The first finite value improves (it sets the best); NaN never improves (a NaN loss is a diverged or unmeasured
    network) and leaves the best as it was; a tie never improves."""
    out, best = [], math.inf
    for value in np.asarray(losses, dtype=float):
        better = bool(np.isfinite(value) and (math.isinf(best) or value < best - margin * abs(best)))
        best = value if better else best
        out.append(better)
    return np.asarray(out, dtype=bool)


def val_loss_stalled(trajectory: pd.DataFrame, margin: float = IMPROVEMENT_MARGIN, patience: int = PATIENCE) -> Stop:
    """Rule (d), the constructive-learning baseline: the first round ``r`` such that rounds ``r - P + 1 .. r`` none
    improved the validation loss by ``margin`` (:func:`improvements`) on a best set at round ``r - P`` or earlier.

    NaN rounds count as rounds without an improvement; a trajectory with no finite validation loss never fires."""
    rule = f"d: validation loss not improved by {margin:g} (relative) for {patience} rounds"
    rows = one_trajectory(trajectory, ("val_loss",))
    improved = improvements(rows["val_loss"], margin)
    if not improved.any():
        return no_stop(rule, rows, "no finite validation loss")
    last_improvement = -1
    for i, better in enumerate(improved):
        last_improvement = i if better else last_improvement
        if last_improvement >= 0 and i - last_improvement >= patience:
            best = rows["val_loss"].iloc[last_improvement]
            why = f"best validation loss {fmt(best)} at round {int(rows['round'].iloc[last_improvement])}"
            return stop_at(rule, rows, i, f"{why}, not improved by {margin:g} in the {patience} rounds since")
    return no_stop(rule, rows, f"last improvement at round {int(rows['round'].iloc[last_improvement])}")


RATIO_BELOW, IN_A_ROW = 1.0, 2
"""Rule (r)'s constants: the controller's, every preset's ``ratio_below`` and ``in_a_row``
(``common/presets/grow_by_criterion.py``; a test holds them equal), written here so that these rules keep reading
only the science's saturation and the paper's numbers."""


def ratio_stopped(trajectory: pd.DataFrame, below: float = RATIO_BELOW, in_a_row: int = IN_A_ROW) -> Stop:
    """Rule (r), the controller's own (:mod:`common.experiments.grow_by_criterion_controller`), read post hoc: the
    first round that ends ``in_a_row`` rounds in a row whose ``ratio`` (``max_l V_S,l / max_b V_b``) is below
    ``below``. Strictly below; a round without a ratio breaks the streak."""
    rule = f"r: max V_S,l / max V_b below {below:g} on {in_a_row} probes in a row (the runs' own rule)"
    rows = one_trajectory(trajectory, ("ratio",))
    ratio = rows["ratio"].to_numpy(dtype=float)
    streak = 0
    for i, value in enumerate(ratio):
        streak = streak + 1 if value < below else 0  # NaN compares False: it breaks the streak
        if streak >= in_a_row:
            return stop_at(rule, rows, i, f"ratio {fmt(value)} < {below:g}, {streak} probes in a row")
    low = np.nanmin(ratio) if np.isfinite(ratio).any() else math.nan
    return no_stop(rule, rows, f"ratio never below {below:g} on {in_a_row} probes in a row (lowest {fmt(low)})")


RULES: Mapping[str, Callable[[pd.DataFrame], Stop]] = {
    "a": ag_below_line,
    "b": app_g_saturated,
    "c": v_max_fallen,
    "d": val_loss_stalled,
    "r": ratio_stopped,
}


def stop_table(frame: pd.DataFrame, rules: Mapping[str, Callable[[pd.DataFrame], Stop]] = RULES) -> pd.DataFrame:
    """Every rule applied to every ``(policy, seed)`` trajectory of ``frame``: one row per (rule, policy, seed), with
    the :class:`Stop`'s fields (``rule_name`` its long name; ``<NA>`` and NaN where the rule did not fire) and
    ``rounds``, the last round recorded."""
    if frame.empty:
        raise ValueError("no trajectories")
    rows = []
    for (policy, seed), trajectory in frame.groupby(["policy", "seed"], sort=True):
        for key, rule in rules.items():
            record = rule(trajectory).as_record()
            record["rule_name"] = record.pop("rule")
            rows.append(
                {"rule": key, "policy": policy, "seed": seed, "rounds": int(trajectory["round"].max()), **record}
            )
    table = pd.DataFrame(rows).astype({"round": "Int64", "depth_n": "Int64"})  # <NA> (and NaN losses): no stop
    return table.sort_values(["rule", "policy", "seed"]).reset_index(drop=True)


# ----------------------------------------------------------------------------- against the fixed sweep
SWEEP_COLUMNS = ("depth_n", "seed", "train_loss", "test_loss")  # and "flops" per run when recorded


def sweep_means(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per depth ``N`` of the sweep, sorted: the mean over seeds of the training and test loss (and of ``flops``
    when recorded), and the number of seeds."""
    missing = [c for c in SWEEP_COLUMNS if c not in sweep]
    if missing:
        raise ValueError(f"the sweep lacks the columns {missing}")
    numbers = ["train_loss", "test_loss", *(["flops"] if "flops" in sweep else [])]
    means = sweep.groupby("depth_n")[numbers].mean()
    means["seeds"] = sweep.groupby("depth_n")["seed"].nunique()
    return means.sort_index().reset_index()


@dataclass(frozen=True)
class SweepPlateau:
    """Where the sweep's training loss stops improving (:func:`sweep_plateau`); ``depth_n`` None when it does not
    within the grid (or the grid has one depth)."""

    depth_n: int | None
    train_loss: float | None
    text: str


def sweep_plateau(sweep: pd.DataFrame, margin: float = IMPROVEMENT_MARGIN) -> SweepPlateau:
    """``N*``, the smallest depth after which the mean training loss over seeds never improves by ``margin``: no
    deeper depth's mean is below ``(1 - margin) x`` its mean (the same notion of improvement as rule (d)).

    The deepest depth satisfies that for want of deeper ones: when it is the first that does, the sweep was still
    improving at the end of its grid and there is no ``N*`` (None, and the text says so)."""
    means = sweep_means(sweep).dropna(subset=["train_loss"])
    if len(means) < 2:
        return SweepPlateau(None, None, f"{len(means)} depth(s) with a training loss: no plateau to find")
    loss, depths = means["train_loss"].to_numpy(dtype=float), means["depth_n"].to_numpy()
    for i in range(len(loss) - 1):
        if not (loss[i + 1 :] < loss[i] - margin * abs(loss[i])).any():
            why = f"no deeper depth's mean training loss is below (1 - {margin:g}) x {fmt(loss[i])}"
            return SweepPlateau(int(depths[i]), float(loss[i]), f"the sweep stops improving at N = {depths[i]}: {why}")
    last = f"N = {depths[-1]} (mean training loss {fmt(loss[-1])})"
    return SweepPlateau(None, None, f"the sweep's training loss still improves at its deepest depth, {last}")


def stops_against_sweep(stops: pd.DataFrame, sweep: pd.DataFrame, margin: float = IMPROVEMENT_MARGIN) -> pd.DataFrame:
    """:func:`stop_table`'s rows with the sweep's ``N*`` beside each stop: ``plateau_depth_n``, ``depths_from_plateau``
    (the stop's depth - ``N*``; None when the rule did not fire or the sweep has no ``N*``) and ``against``, a
    sentence."""
    plateau = sweep_plateau(sweep, margin)
    out = stops.copy()
    out["plateau_depth_n"] = plateau.depth_n
    gap, against = [], []
    for _, row in stops.iterrows():
        if not row["fired"]:
            gap.append(None)
            against.append(f"did not stop within {int(row['rounds'])} rounds; {plateau.text}")
        elif plateau.depth_n is None:
            gap.append(None)
            against.append(f"stopped at N = {int(row['depth_n'])}; {plateau.text}")
        else:
            gap.append(int(row["depth_n"]) - plateau.depth_n)
            where = f"{abs(gap[-1])} {'deeper' if gap[-1] > 0 else 'shallower'} than" if gap[-1] else "at"
            against.append(f"stopped at N = {int(row['depth_n'])}, {where} the sweep's N* = {plateau.depth_n}")
    out["depths_from_plateau"] = pd.array(gap, dtype="Int64")
    out["against"] = against
    return out


# ----------------------------------------------------------------------------- the runs' ratio, examined (issue 57)
def ratio_parts(probe: Mapping) -> dict | None:
    """One probe's ratio taken apart (module docstring), None without the branch of largest ``V_b`` and a positive
    ``V_S`` at its place: ``s_star``, that branch's ``s_b = V_b / V_S,p(b)``; ``spread``, ``max_l V_S,l`` over
    ``V_S`` at that place (at least 1: a maximum over every place); the ratio is ``spread / s_star`` exactly. Beside
    them the same-place statistic of every branch (``s_max``, ``s_median``)."""
    v_s = {int(c["index"]): float(c["v_s"]) for c in probe.get("candidates") or []}
    same = {}
    for branch in probe.get("branches") or []:
        there = v_s.get(int(branch["index"]) + 1, math.nan)
        if math.isfinite(there) and there > 0:
            same[int(branch["index"])] = (float(branch["v_b"]), there)
    if not same or not v_s:
        return None
    star = max(same, key=lambda b: same[b][0])
    v_b, there = same[star]
    s = [vb / vs for vb, vs in same.values()]
    return {
        "s_star": v_b / there,
        "spread": max(v_s.values()) / there,
        "s_max": max(s),
        "s_median": float(np.median(s)),
    }


def ratio_probes(runs: pd.DataFrame, source: str) -> pd.DataFrame:
    """One row per measured probe of every policy run of ``runs`` (09's result rows, with ``probes``): ``source``
    (which records), ``policy``, ``seed``, ``round``, ``depth_n``, ``candidates``, ``branches``, ``ratio`` and its
    parts (:func:`ratio_parts`)."""
    rows = []
    for run in runs.to_dict("records"):
        for probe in run.get("probes") or []:
            parts = ratio_parts(probe) if probe.get("ratio") is not None else None
            if parts is None:
                continue  # a record of why growth stopped: nothing measured
            rows.append({
                "source": source, "policy": run["policy"], "seed": int(run["seed"]), "round": int(probe["probe"]),
                "depth_n": int(probe["depth_n"]), "candidates": len(probe["candidates"]),
                "branches": len(probe["branches"]), "ratio": float(probe["ratio"]), **parts,
            })  # fmt: skip
    return pd.DataFrame(rows)


def ratio_rows(probes: pd.DataFrame) -> list[dict]:
    """08's ``grow_stop_ratio`` table: per (records, policy, number of candidates and branches), over the seeds, the
    controller's ratio (least, median, largest) and how many probes had it below 1; its two factors (medians): the
    spread of ``V_S`` over the places and ``s_b`` of the branch of largest ``V_b``; and the same-place statistic of
    every branch (the largest, and the median of the probes' medians)."""
    if probes.empty:
        return []
    out = []
    keys = ["source", "policy", "candidates", "branches"]
    for (source, policy, cands, branches), group in probes.groupby(keys, sort=True):
        r = group["ratio"]
        out.append({
            "records": source, "policy": policy, "candidates": int(cands), "branches": int(branches),
            "probes (seeds)": f"{len(group)} ({','.join(str(s) for s in sorted(group['seed'].unique()))})",
            "ratio min": f"{r.min():.3g}", "ratio median": f"{r.median():.3g}", "ratio max": f"{r.max():.3g}",
            "below 1": int((r < 1).sum()), "max_l V_S,l / V_S at b*'s place": f"{group['spread'].median():.3g}",
            "s_b* = V_b* / V_S there": f"{group['s_star'].median():.3g}",
            "s_b, largest": f"{group['s_max'].max():.3g}", "s_b, median": f"{group['s_median'].median():.3g}",
        })  # fmt: skip
    return out
