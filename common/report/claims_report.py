"""The claims report's text (script 08): its banner, its verdict counts and its Markdown (:func:`claims_markdown`),
and the README's Results block copied from it (``make mini-readme``). Its rows are
:func:`common.report.claim_rows.claim_rows`; what differs between presets (a scale note, a banner) is
:mod:`common.presets.make_figures`'s."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from common.presets.make_figures import MINI_NOTE, report_preset
from common.report.records import Records
from common.report.rules import margins, verdicts
from common.report.verdict_row import CLAIM, IDENTITY, POWER_NOT_COMPUTED, REGIME_ROW, SCALE_NOTES, regime, unfit_note
from common.runs import atomic, tables

MINI_DATA_TITLES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "npz": "CIFAR-10", "imagenet100": "ImageNet-100"}
REPORT_COLUMNS = ("id", "claim", "paper", "reproduced", "records", "verdict", "power", "rule")
VERDICT_COUNTS = "Verdicts: "  # the start of the report's line of verdict counts (:func:`verdict_counts`)


# ----------------------------------------------------------------------------- the banner
def dropped_banner(rec: Records) -> str | None:
    """The claims report's paragraph naming the runs left out
    (:func:`common.report.records.dropped_line`), or None."""
    if not rec.dropped:
        return None
    names = ", ".join(f"`{d.label}`" for d in rec.dropped)
    n = len(rec.dropped)
    return (
        f"**Runs left out.** {n} finished run{'s' if n != 1 else ''} could not be read and {'are' if n != 1 else 'is'} "
        f"not in this report: {names}. 08_make_figures.py printed why for each, and every claims row they would have "
        "entered names them and is not decidable (`--strict` makes this an error)."
    )


def report_banner(rec: Records, preset: str) -> str | None:
    """The banner passed to :func:`claims_markdown`: the preset's (:func:`mini_banner` where the preset's banner is
    written from the records, else its fixed one, :mod:`common.presets.make_figures`), and beside it, as its own
    paragraph, the runs left out (:func:`dropped_banner`)."""
    fields = report_preset(preset)
    scale = mini_banner(rec) if fields.records_banner else None
    left_out = dropped_banner(rec)
    if left_out is None:
        return scale
    scale = scale or fields.banner
    return f"{scale}\n>\n> {left_out}" if scale else left_out


def mini_banner(rec: Records) -> str:
    """The banner of a ``--preset mini`` report: how many real training images, how many seeds, which copy of them.

    ``--dataset npz`` is how ``make mini`` is given CIFAR-10 (README, section "Results"); a copy such as the
    committed records' JPEG-decoded one differs slightly from the official files, and the banner says so.
    """
    sweep = rec.sweep
    if sweep.empty:
        return f"**Mini scale.** {MINI_NOTE}: no ResNet sweep records; evidence at reduced scale, not the paper's."
    sizes = sweep.get("train_size", pd.Series(dtype=float)).dropna()
    images = " / ".join(f"{int(n):,}" for n in sorted(set(sizes))) or "?"
    title = " and ".join(sorted({MINI_DATA_TITLES.get(d, d) for d in sweep["dataset"]}))
    sources = []
    for dataset, group in sweep.groupby("dataset"):
        if dataset == "npz":
            files = (
                ", ".join(sorted({f"`{d.get('file')}`" for d in group.get("data", []) if isinstance(d, dict)}))
                or "an `.npz` file"
            )
            sources.append(
                f"The images are a class-balanced subset of {files} (`--dataset npz`), a copy of CIFAR-10: the "
                "committed `results/mini` used one decoded from a JPEG re-encoding, which differs slightly from the "
                "official files, so runs on the official files give slightly different numbers."
            )
        else:
            sources.append(
                f"The images are a class-balanced subset of the official {MINI_DATA_TITLES.get(dataset, dataset)} files."
            )
    seeds = sweep["seed"].nunique()
    regimes = []
    for dataset, group in sweep.groupby("dataset"):
        said, unfit = regime(group), unfit_note(group)
        where = f" ({dataset})" if sweep["dataset"].nunique() > 1 else ""
        if said:
            regimes.append(f"Regime of the sweep{where}: {said}; every row about test performance is read in it.")
        if unfit:
            regimes.append(f"Depths that{where} {unfit}: the rows about AGmax and figure 1 mark them.")
    return (
        f"**Mini scale.** {MINI_NOTE}: {images} real {title} training images, {seeds} seed{'s' if seeds != 1 else ''}; "
        f"evidence at reduced scale, not the paper's. {' '.join(sources + regimes)}"
    )


# ----------------------------------------------------------------------------- the report
def verdict_counts(rows: Sequence[dict]) -> str:
    """``holds: 3, does not hold: 1, ...`` over the report's claims, one count per verdict kind (identity checks are
    not counted; a row is one test: readings with identical ranks share one row). The two kinds of "not decidable"
    are counted apart; the plain kind says how many of its rows had no power computed for their design."""
    counted = [r for r in rows if r.get("kind", CLAIM) == CLAIM]
    kinds = [verdicts.verdict_kind(r["verdict"]) for r in counted]
    parts = []
    for v in verdicts.VERDICTS:
        part = f"{v}: {kinds.count(v)}"
        if v == verdicts.UNDECIDABLE:
            unknown = sum(
                1
                for r, k in zip(counted, kinds, strict=True)
                if k == v and str(r.get("power", "")).startswith(POWER_NOT_COMPUTED)
            )
            part += f" ({unknown} with {POWER_NOT_COMPUTED})" if unknown else ""
        parts.append(part)
    return ", ".join(parts)


def claims_markdown(rows: Sequence[dict], preset: str, out: Path, banner: str | None = None) -> str:
    """The claims report: a banner (``banner``, else the preset's fixed one, :mod:`common.presets.make_figures`), the claims with their
    verdict counts (the regime rows among them, not counted), then the identity checks apart (never counted among
    reproduced claims)."""
    lines = ["# Claims: the paper against this reproduction", ""]
    if banner:
        lines += [f"> {banner}", ""]
    elif report_preset(preset).banner:
        lines += [f"> {report_preset(preset).banner}", ""]
    checks = [r for r in rows if r.get("kind") == IDENTITY]
    lines += [
        f"Records: `{out}`, preset `{preset}`. Paper values come from `common/presets/paper.py` only; each verdict comes from "
        "the rule in its row (`common/report/rules/`), whose error rates are measured by simulation in "
        '`docs/claim-rules.md`. "holds" needs the records to show the claim at the 5% level, "does not hold" '
        'its negation; failing to show either is "not decidable", or "not decidable at this design" where the rule '
        "could not reach a power of "
        f"{margins.POWER_TARGET:g} with these records (it says how many runs, seeds or test examples it would need). "
        '"not comparable": the paper\'s value cannot be compared as it stands. The power column is P(holds | claim '
        "true) at the records' own design (their depths, seeds and sample sizes), simulated in the claim's own world at "
        "noise 0.5x the effect (`common/report/claim_power.csv`); a decided verdict stands beside it. Readings "
        "that order the runs identically are one test and one row. A claim that does not reproduce is reported as "
        "such; nothing is tuned to make a claim hold. A row about the regime of a design (its verdict yes or no) says "
        "whether the claims beside it can be judged there at all; it is not a claim and is not counted.",
        "",
        "## Claims",
        "",
        VERDICT_COUNTS + verdict_counts(rows),
        "",
        tables.markdown_table([r for r in rows if r.get("kind", CLAIM) in (CLAIM, REGIME_ROW)], REPORT_COLUMNS),
        "",
        "## Identity checks",
        "",
        "True by construction (a theorem, or a first-order identity at small alpha): a check of the code, not a "
        "reproduced claim, so not counted above.",
        "",
        tables.markdown_table(checks, REPORT_COLUMNS) if checks else "(none)",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the README's Results block
README_START = "<!-- mini-results: start (make mini-readme writes this block from results/mini/figures/claims.md) -->"
README_END = "<!-- mini-results: end -->"
RESULTS_COLUMNS = ("id", "claim", "verdict")  # the README's short table; every number stays in claims.md


def claims_cells(claims_text: str) -> list[dict[str, str]]:
    """The rows of a claims report's table (:func:`claims_markdown`), each cell's text (``\\|`` read back as ``|``)."""
    rows, header = [], None
    for line in claims_text.splitlines():
        if not line.startswith("|"):
            if header is not None:
                break  # the report's one table has ended
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if header is None:
            header = cells
        elif not all(set(c) <= {"-"} for c in cells):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def results_block(claims_text: str) -> str:
    """The README's Results block: the claims report's verdict counts, then one row per claim in
    :data:`RESULTS_COLUMNS`, its verdict cut to its kind (:func:`common.report.rules.verdicts.verdict_kind`; the
    report's reasons, numbers and scale note stay in claims.md, the scale note moving to the counts line).
    A text that is not a claims report (no counts line or no claims) is a ``ValueError``."""
    cells = claims_cells(claims_text)
    counts = [line for line in claims_text.splitlines() if line.startswith(VERDICT_COUNTS)]
    if not cells or len(counts) != 1:
        raise ValueError(f"not a claims report: expected one {VERDICT_COUNTS!r} line and a table of claims")
    notes = sorted({n for n in SCALE_NOTES.values() for r in cells if r["verdict"].endswith(f" ({n})")})
    scale = f" ({'; '.join(notes)})" if notes else ""
    rows = [{**r, "verdict": _short_verdict(r["verdict"])} for r in cells]
    head = f"{VERDICT_COUNTS.rstrip(': ')}{scale}: {counts[0].removeprefix(VERDICT_COUNTS)}"
    return f"{head}\n\n{tables.markdown_table(rows, RESULTS_COLUMNS)}"


def _short_verdict(verdict: str) -> str:
    """A claim's verdict cut to its kind; a regime row's answer ("no: depth does not pay ...", not a claim's verdict)
    as it stands, less its scale note."""
    try:
        return verdicts.verdict_kind(verdict)
    except ValueError:
        for note in SCALE_NOTES.values():
            verdict = verdict.removesuffix(f" ({note})")
        return verdict


def readme_block(readme_text: str) -> str | None:
    """The text between the README's Results markers (None when they are missing)."""
    start, end = readme_text.find(README_START), readme_text.find(README_END)
    if start < 0 or end < start:
        return None
    return readme_text[start + len(README_START) : end].strip("\n")


def update_readme(readme: str | Path, claims_path: str | Path) -> None:
    """Rewrite the README's Results block from a claims report (``make mini-readme``)."""
    text = Path(readme).read_text()
    if readme_block(text) is None:
        raise ValueError(f"{readme} has no {README_START} ... {README_END} block")
    head, rest = text.split(README_START, 1)
    tail = rest.split(README_END, 1)[1]
    block = results_block(Path(claims_path).read_text())
    atomic.atomic_write_bytes(readme, f"{head}{README_START}\n{block}\n{README_END}{tail}".encode())


__all__ = [
    "README_END",
    "README_START",
    "claims_cells",
    "claims_markdown",
    "mini_banner",
    "readme_block",
    "report_banner",
    "results_block",
    "update_readme",
    "verdict_counts",
]
