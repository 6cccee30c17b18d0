"""What script 11 prints and draws: the ranking of the places, App. G's verdict with both intervals, where a block
would help most, and one figure (``AG_l`` and ``V_S,l`` per place, PNG and PDF, written atomically)."""

from __future__ import annotations

import io
import math
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from common.models.probe_network_rails import best_place
from common.runs import atomic

FIGURE = "places"  # places.png and places.pdf in the run directory


def _num(value) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4g}"


def ranking_table(records: list[dict], normalisation: str) -> str:
    """The places, where a block would help most first: AG_l (per batch mean and pooled), V_S,l pooled, family, rows
    against tangent features (and their rank), the flags."""
    lines = [
        f"{'rank':>4}  {'place':<28} {'family':<8} {'AG_l':>10} {'AG_l pooled':>11} {'V_S,l':>10} {'V/AG':>6}  rows vs features (rank)",
    ]
    for i, r in enumerate(records, 1):
        rank = "" if r["tangent_rank"] is None else f" ({r['tangent_rank']})"
        lines.append(
            f"{i:>4}  {r['place']:<28} {r['family']:<8} {_num(r['ag_norm']):>10} {_num(r['ag_norm_pooled']):>11} "
            f"{_num(r['growth_value_pooled']):>10} {_num(r['growth_fraction_pooled']):>6}  {r['rows']} vs {r['tangent_dim']}{rank}"
        )
        if r["flags"]:
            lines.append(f"{'':>6}! {r['flags']}")
    lines.append(f"normalisation: {normalisation}")
    return "\n".join(lines)


def best_line(records: list[dict], exact: bool) -> str:
    """Where a block would help most: the first place of the ranking that no guard rail flags
    (:func:`common.models.probe_network_rails.best_place`, the record's ``best_place``), or why there is none."""
    place, why = best_place(records, exact)
    if place is None:
        return f"no best place: {why}"
    best = next(r for r in records if r["place"] == place)
    if not exact:
        return (
            f"largest AG_l at {place} (AG_l pooled {_num(best['ag_norm_pooled'])}; {why}); run with --exact for V_S,l"
        )
    return (
        f"a block would help most at {place}: V_S,l = {_num(best['growth_value_pooled'])} of AG_l "
        f"{_num(best['ag_norm_pooled'])} (pooled; {why})"
    )


def app_g_lines(app_g: dict | None) -> str:
    """App. G's verdict with Theorem 3's interval and the asymptotic one beside it."""
    if app_g is None:
        return "App. G: not run (--app-g-n 0)"
    th, asym = app_g["theorem3"], app_g["asymptotic"]
    delta = "none" if th["delta"] is None else f"{th['delta']:g}"
    lines = [
        f"App. G (n_cal = {app_g['n_cal']}, n_test = {app_g['n_test']}, {th['n_candidates']} places, delta = {delta}): "
        f"{th['verdict']}",
        f"  Theorem 3: Gamma in [{_num(th['lower'])}, {_num(th['upper'])}], Gamma_hat = {_num(th['gamma_hat'])} at "
        f"{th['argmax']}, t = {_num(th['t'])}, alpha = {th['alpha']:g}",
    ]
    if asym is None:
        lines.append("  asymptotic: not available (fewer than 4 test examples)")
    else:
        lines.append(
            f"  asymptotic (normal, Bonferroni; not used for the verdict): [{_num(asym['lower'])}, {_num(asym['upper'])}]: "
            f"{asym['verdict']}"
        )
    return "\n".join(lines)


def write_figure(folder: Path, records: list[dict], title: str) -> list[Path]:
    """``places.png`` and ``places.pdf``: AG_l pooled and V_S,l pooled per place, in the model's order."""
    rows = sorted(records, key=lambda r: r["index"])
    figure = Figure(figsize=(max(4.0, 0.5 * len(rows) + 2), 3.2))
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    xs = range(len(rows))
    ax.plot(xs, [r["ag_norm_pooled"] for r in rows], "o-", label="AG_l (pooled)")
    if any(r["growth_value_pooled"] is not None for r in rows):
        ax.plot(xs, [r["growth_value_pooled"] for r in rows], "s--", label="V_S,l (pooled)")
    ax.set_xticks(list(xs), [r["place"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("gradient norm")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    figure.tight_layout()
    paths = []
    for suffix in ("png", "pdf"):
        buffer = io.BytesIO()
        figure.savefig(buffer, format=suffix, dpi=120, metadata={"CreationDate": None} if suffix == "pdf" else None)
        atomic.atomic_write_bytes(folder / f"{FIGURE}.{suffix}", buffer.getvalue())
        paths.append(folder / f"{FIGURE}.{suffix}")
    return paths
