"""The claims report's rows about expanding a trained decoder by the criterion (script 10), beyond the paper.

Script 10 expands a trained decoder by K copied zero-output layers placed by a policy (``criterion``: where the
copied layer's exact growth value ``V_S,l`` is largest; ``even``: LLaMA Pro's even spacing; ``bi``: beside the
blocks ShortGPT's Block Influence rates most important; ``ag``: where ``AG_l`` is largest), trains the new layers
alone for S steps, as many for every policy, and records the held-out loss. One run per (K, seed) holds every
policy; its records are ``<out>/expand_decoder/<name>-<hash8>/config.json`` (``preset``, ``text``, ``blocks``,
``seed``, ``policies``) and ``result.json`` (``train_steps``, ``base_held_out_loss``, ``ranking`` and, per policy, ``places``,
``sources``, ``held_out_loss``: null without training, S = 0, and ``training``).

One row per arm the criterion is compared with (:data:`COMPARED`: the other policies and the ``none`` control, the
unexpanded model with as many of its own layers trained the same steps on the same batches), its rule
:func:`common.report.rules.expand_decoder.expansion_lower_held_out_loss`, paired over the runs (K, seed) of the report's
preset at the largest S they hold: the number of paired runs, both mean held-out losses, the mean difference with
its interval and the verdict. Without records of the preset every row is "not run", naming the command; with
records but no training steps, "not run (no training steps)".
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from common.experiments.expand_decoder import EXPERIMENT
from common.presets.expand_decoder import CONTROLS
from common.presets.make_figures import report_preset
from common.report.left_out import reading
from common.report.records import EXPAND, Records, collect
from common.report.rules import expand_decoder, verdicts
from common.report.rules.cases import case_named
from common.report.rules.grow_by_criterion import paired_differences
from common.report.verdict_row import BASE_DESIGN, claim_row, describe

SCRIPT = "10_expand_decoder.py"
CRITERION = "criterion"
COMPARED = {  # policy -> the placement in words (the row's claim)
    "even": "LLaMA Pro's even spacing",
    "bi": "beside the blocks ShortGPT's Block Influence rates most important",
    "ag": "where AG_l is largest",
    "none": "none, the control: the unexpanded model, as many of its own layers trained the same steps on the same batches",
}
CASE = "expansion_lower_held_out_loss (paired over runs)"
BEYOND = "- (beyond the paper: it never places new layers by V_S,l)"
NO_TRAINING = f"{verdicts.NOT_RUN} (no training steps)"


def expand_command(preset: str, out: str | Path) -> str:
    """The command that makes 10's records of ``preset`` (a "not run" row names it)."""
    return f"python {SCRIPT}{report_preset(preset).preset_flag(preset)} --out {out}"


def claim_text(other: str) -> str:
    than = "not expanding it" if other in CONTROLS else f"{other} placement"
    return (
        "beyond the paper: expanding a trained decoder by K copied zero-output layers placed where V_S,l is largest "
        f"reaches a lower held-out loss than {than} ({COMPARED[other]}), at equal training steps"
    )


def expand_runs(rec: Records) -> pd.DataFrame:
    """10's usable finished runs of the report's preset under ``rec.out`` (config and result columns, one row per run;
    empty without): those :func:`common.report.records.load_records` read, else read now (the malformed ones, which
    :mod:`common.report.record_scan` names, left out)."""
    frame = rec.expand if rec.expand is not None else collect(Path(rec.out), EXPAND, [])
    if frame.empty or "preset" not in frame:
        return pd.DataFrame()
    return frame[frame["preset"] == rec.preset].reset_index(drop=True)


def held_out(run: dict, policy: str) -> float | None:
    """The held-out loss ``policy`` reached in ``run`` after its S steps (None: not trained, not in the run)."""
    entry = (run.get("policies") or {}).get(policy)
    value = entry.get("held_out_loss") if isinstance(entry, dict) else None
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def places(run: dict, policy: str) -> list | None:
    entry = (run.get("policies") or {}).get(policy)
    return entry.get("places") if isinstance(entry, dict) else None


def losses(used: pd.DataFrame, policy: str) -> dict[tuple[int, int], float]:
    """Run (K, seed) -> ``policy``'s held-out loss, over the runs where it has one."""
    out = {}
    for run in used.to_dict("records"):
        value = held_out(run, policy)
        if value is not None:
            out[(int(run["blocks"]), int(run["seed"]))] = value
    return out


def trained_runs(frame: pd.DataFrame) -> tuple[pd.DataFrame, int, int]:
    """The runs the rows compare: those at the largest S > 0 (each (K, seed) once, the first by directory); S, and
    how many runs of S > 0 were left out (another S, or a second run of one (K, seed))."""
    steps = frame["train_steps"].astype(int)
    trained = frame[steps > 0]
    if trained.empty:
        return trained, 0, 0
    top = int(steps.max())
    used = trained[trained["train_steps"].astype(int) == top].sort_values("run_dir")
    used = used.drop_duplicates(["blocks", "seed"]).reset_index(drop=True)
    return used, top, len(trained) - len(used)


def expand_claims(rec: Records) -> list[dict]:
    """The rows about expanding a decoder by the criterion: the criterion against each of :data:`COMPARED`
    (module docstring)."""
    fn = expand_decoder.expansion_lower_held_out_loss
    command = expand_command(rec.preset, rec.out)
    frame = expand_runs(rec)
    if frame.empty:
        rows = [claim_row(claim_text(o), BEYOND, fn, None, f"none: {command}", rec.preset) for o in COMPARED]
        return [reading(r, EXPAND) for r in rows]
    used, steps, dropped = trained_runs(frame)
    if used.empty:
        what = f"{len(frame)} runs, all with train_steps = 0 (no held-out loss after training): {command} "
        what += "--train-steps S"
        rows = [claim_row(claim_text(o), BEYOND, fn, None, what, rec.preset) for o in COMPARED]
        return [reading({**r, "verdict": NO_TRAINING}, EXPAND) for r in rows]
    mine = losses(used, CRITERION)
    rows = []
    for other in COMPARED:
        theirs = losses(used, other)
        paired = paired_differences(mine, theirs)
        if not paired:
            what = f"no run of S = {steps} steps holds both {CRITERION} and {other}: {command}"
            rows.append(reading(claim_row(claim_text(other), BEYOND, fn, None, what, rec.preset), EXPAND))
            continue
        outcome = fn(mine, theirs, other, steps)
        pairs = used[[(int(b), int(s)) in paired for b, s in zip(used["blocks"], used["seed"], strict=True)]]
        outcome = verdicts.Outcome(outcome.verdict, verdicts.clauses(outcome.value, *context(pairs, other)))
        blocks = ",".join(map(str, sorted({int(b) for b in pairs["blocks"]})))
        extra = f"policies {CRITERION}, {other}, K = {blocks}, S = {steps} steps"
        extra += f" ({dropped} runs at another S or a repeated (K, seed) left out)" if dropped else ""
        records = describe(rec.preset, text_label(pairs), pairs["seed"], len(pairs), extra)
        design = (case_named(CASE), replace(BASE_DESIGN, expand_runs=len(paired)))
        row = claim_row(claim_text(other), BEYOND, fn, outcome, records, rec.preset, design=design)
        rows.append(reading(row, EXPAND))  # a run holds every policy: one left out is missing from both arms
    return rows


def text_label(runs_: pd.DataFrame) -> str:
    """The text the runs were probed and trained on, as their configs name it (``text``: its file's name, else its
    source)."""
    names = set()
    for text in runs_.get("text", []):
        if isinstance(text, dict):
            names.add(str(text.get("text_name") or text.get("source")))
    return "/".join(sorted(names)) or "?"


def context(pairs: pd.DataFrame, other: str) -> list[str]:
    """What the rule's value does not say: the base model's held-out loss before expansion, and at how many runs the
    two policies placed the same layers (there they train the same model: a difference of exactly 0)."""
    runs_ = pairs.to_dict("records")
    base = [r.get("base_held_out_loss") for r in runs_]
    base = [float(b) for b in base if isinstance(b, int | float) and math.isfinite(b)]
    same = sum(1 for r in runs_ if places(r, CRITERION) is not None and places(r, CRITERION) == places(r, other))
    return [
        f"base model before expansion {sum(base) / len(base):.4f}" if base else "",
        f"{other} placed the same layers as the criterion at {same} of {len(runs_)} runs" if same else "",
    ]


__all__ = [
    "COMPARED",
    "CRITERION",
    "EXPERIMENT",
    "NO_TRAINING",
    "expand_claims",
    "expand_command",
    "expand_runs",
    "trained_runs",
]
