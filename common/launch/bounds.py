"""Every number a script takes has a range and every list a size: one table, checked while the flags are parsed.

:data:`BOUNDS` holds, per flag (its argparse ``dest``), the lowest and highest value and, for a list flag, the most
values it may hold; :data:`SCRIPT_BOUNDS` the few flags whose meaning, and so whose range, differs by script (07's
``--depths`` are network depths L up to thousands, 01's are extra blocks N). The bounds are wide: the paper's preset
fits inside each with room to spare (the paper's widest grid is 01's N = 0..100 and 07's L up to 1,024), and a plan
beyond one is a typo or a plan no machine finishes, so :func:`check_bounds` refuses it with its size and the bound
before any folder, allocation or process exists (docs/runs.md, section "Bounds", is :func:`bounds_markdown`). The table
is the only limit: a preset or a planner checks what a value must be to mean something (an epoch count >= 1), never a
second, different upper limit (issue 59; ``tests/launch/test_bounds.py`` tries each preset at each row's highest).
A list of names (``--policy``, 04's ``--model``) has a size only.

A list flag's type (:func:`common.launch.cli.comma_ints`) never builds more than :data:`MAX_LIST_VALUES` values: a
range is measured before it is made. Every check here is linear in the number of values.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass

MAX_LIST_VALUES = 10_000  # the most values any list flag's type builds; each flag's own size below is smaller
SEED_MAX = 2**31 - 1  # seeds are offset by run indices and passed to torch, numpy and Python: 31 bits fit all


@dataclass(frozen=True)
class Bound:
    """``low <= value <= high``; a list flag holds at most ``size`` values (a list of names, ``--policy``: a size
    only, ``low`` and ``high`` None)."""

    low: float | None
    high: float | None
    size: int | None = None
    what: str = ""

    def problem(self, value) -> str | None:
        """Why ``value`` (a number, or a list of numbers or names) is outside this bound; None when it is inside."""
        values = list(value) if isinstance(value, list | tuple) else [value]
        if self.size is not None and len(values) > self.size:
            return f"{len(values):,} values, more than the {self.size:,} this flag takes"
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if numbers and self.low is not None and (lo := min(numbers)) < self.low:
            return f"{lo:,} is below the lowest value, {self.low:,}"
        if numbers and self.high is not None and (hi := max(numbers)) > self.high:
            return f"{hi:,} is above the highest value, {self.high:,}"
        return None


_COUNT, _SIZE, _TOKENS, _STEPS = 1_000_000, 1_000_000, 10**12, 10**8
BOUNDS: dict[str, Bound] = {
    # what a run is made of
    "seed": Bound(0, SEED_MAX, what="base seed"),
    "seeds": Bound(0, SEED_MAX, 1_000, "seeds, one run each"),
    "depths": Bound(0, 1_000, 1_000, "extra blocks N over ResNet-8 (01, 03, 06)"),
    "ablation_depths": Bound(0, 1_000, 1_000, "extra blocks N (03)"),
    "blocks": Bound(1, 1_000, 100, "layers K added to the decoder (10)"),
    "alphas": Bound(0, 10**6, 1_000, "step sizes alpha (06)"),
    "insert_at": Bound(None, None, 1_000, "fractions of the run in (0, 1), increasing, one per inserted block (03)"),
    "models": Bound(None, None, 100, "models, one run each per seed (04)"),
    "model_paths": Bound(None, None, 100, "local model folders, one run each per seed (04)"),
    "budget_depth_n": Bound(0, 1_000, what="N of the budget's sweep run (09)"),
    "cap": Bound(1, 1_000, what="blocks a run may add (09)"),
    "ratio_below": Bound(0, 10**6, what="the stop rule's constant on max V_S,l / max V_b (09; 0: never stops)"),
    # how long
    "epochs": Bound(1, 100_000, what="epochs"),
    "steps": Bound(0, _STEPS, what="optimizer steps (04 mini: 0, probe only)"),
    "train_steps": Bound(0, _STEPS, what="steps of the new layers (10)"),
    "gd_steps": Bound(1, _STEPS, what="steps of the gradient-descent fit (06)"),
    "warmup_steps": Bound(0, _STEPS, what="warm-up steps"),
    "every": Bound(1, 100_000, what="epochs between probes (09)"),
    "in_a_row": Bound(1, 1_000, what="probes in a row (09)"),
    "eval_every": Bound(1, 100_000, what="epochs between evaluations"),
    "checkpoint_every": Bound(1, 100_000, what="epochs between checkpoints"),
    "n_evals": Bound(1, 100_000, what="evaluations"),
    # sizes
    "batch_size": Bound(1, _SIZE, what="examples (windows) per batch"),
    "micro_batch_size": Bound(1, _SIZE, what="sequences per micro-batch"),
    "train_batch_size": Bound(1, _SIZE, what="windows per training batch (10)"),
    "probe_batch_size": Bound(1, _SIZE, what="sequences per probe batch"),
    "probe_sub_batch": Bound(1, _SIZE, what="sequences per probe sub-batch"),
    "probe_batches": Bound(1, _COUNT, what="probe batches"),
    "n_batches": Bound(1, _COUNT, what="analysis batches (02)"),
    "saturation_n": Bound(1, 10**9, what="examples of App. G's sample (02)"),
    "train_subset": Bound(1, 10**8, what="training images kept"),
    "image_size": Bound(1, 4_096, what="image side, pixels"),
    "input_size": Bound(1, 10**6, what="input features (07)"),
    "block_size": Bound(1, 10**6, what="tokens per window"),
    "seq_len": Bound(1, 10**6, what="tokens per window (10)"),
    "sequences": Bound(1, 10**7, what="probe windows (10)"),
    "n_embd": Bound(1, 65_536, what="model width"),
    "n_head": Bound(1, 1_024, what="attention heads"),
    "batch_tokens": Bound(1, 10**9, what="tokens per optimizer step"),
    "train_tokens": Bound(1, _TOKENS, what="training tokens"),
    "val_tokens": Bound(1, _TOKENS, what="validation tokens"),
    "held_out_tokens": Bound(1, _TOKENS, what="held-out tokens (10)"),
    # where it runs
    "runs_per_device": Bound(1, 64, what="runs sharing one GPU (CPU core)"),
    "time_min": Bound(1, 60 * 24 * 366, what="minutes per job"),
    "gpus_per_node": Bound(0, 64, what="GPUs per job"),
    "cpus_per_task": Bound(1, 4_096, what="CPUs per task"),
    "mem_gb": Bound(0, 100_000, what="GB per job"),
    "array_parallelism": Bound(1, 100_000, what="jobs of an array at once"),
}
SCRIPT_BOUNDS: dict[tuple[str, str], Bound] = {  # (script number, dest): where a flag means something else
    ("05", "depths"): Bound(1, 1_000, 1_000, "decoder depths L (05)"),
    ("07", "depths"): Bound(1, 100_000, 1_000, "network depths L (07)"),
    ("09", "policies"): Bound(None, None, 6, "arms, one run each per seed: each of the 6 once (09)"),
    ("10", "policies"): Bound(None, None, 5, "arms, one expansion each: each of the 5 once (10)"),
    # script 11 (probe_network)
    ("11", "batch_size"): Bound(1, 4_096, what="examples per analysis batch, held at once with their activations (11)"),
    ("11", "n_batches"): Bound(1, 10_000, what="analysis batches, every example held in memory (11)"),
    ("11", "app_g_n"): Bound(0, 1_000_000, what="examples of App. G's sample, held in memory (11)"),
}


def bound_of(prog: str, dest: str) -> Bound | None:
    """The bound of flag ``dest`` in script ``prog`` (``07_weight_scaling.py``); None: the flag takes no number."""
    return SCRIPT_BOUNDS.get((prog[:2], dest), BOUNDS.get(dest))


def check_bounds(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``parser.error`` (one line, exit 2) at the first flag given a value outside its bound, naming the flag, what
    was given and the bound; flags left at None (the preset's value) are the preset's, checked where it is built."""
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        bound = bound_of(parser.prog or "", action.dest) if action.option_strings else None
        if bound is None or value is None:
            continue
        if (problem := bound.problem(value)) is not None:
            flag = max(action.option_strings, key=len)
            parser.error(f'{flag}: {problem} (docs/runs.md, section "Bounds"); give a smaller plan')


def bounds_markdown(rows: Iterable[tuple[str, Bound]] | None = None) -> str:
    """The table of docs/runs.md, section "Bounds": one row per flag (a test compares the two)."""
    rows = rows if rows is not None else [*BOUNDS.items(), *((f"{n}: {d}", b) for (n, d), b in SCRIPT_BOUNDS.items())]
    lines = ["| flag (dest) | lowest | highest | most values | what |", "|---|---|---|---|---|"]
    for dest, b in rows:
        low, high, size = (f"{v:,}" if v is not None else "" for v in (b.low, b.high, b.size))
        lines.append(f"| `{dest}` | {low} | {high} | {size} | {b.what} |")
    return "\n".join(lines)
