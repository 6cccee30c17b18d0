"""08_make_figures.py on the records the real jobs of scripts 01-07 write, not hand-made ones (tests/helpers/figure_records.py).

One module fixture runs every script's ``main`` (``--preset smoke``, inline, CPU) at a tiny size on inputs the test
makes: a synthetic 4-class ``.npz`` of 16x16 images (64 training, 48 test) for the ResNet sweep at N = 0, 1, 2 with
seeds 0 and 1, its probe (02), growth to ResNet-10 (03), the matched insertion (06) and the weight scaling of the
sweep and of the FC families at L = 4, 8, 16 (07); a repeated text for the GPT-2 sweep at L = 1, 2 (05) and for two
tiny GPT-NeoX checkpoints probed by 04 (``--model-path``, offline). Then 08 reads them all. A record key or an
experiment name that a job writes differently from what 08 reads turns a claim into "not run", drops a figure, or
puts another number in a claim row: each test below fails on one of these.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from common.data.vision import make_synthetic
from common.experiments import (
    gpt2_ascend,
    growth_vs_scratch,
    make_figures,
    matched_insertion,
    probe_ag,
    pythia_cpt,
    weight_scaling,
)
from common.experiments.shared import resnet_sweep
from common.models.resnet import depth_label
from common.presets import paper
from common.presets.make_figures import SMOKE_NOTE
from common.report import claims_report, verdict_row
from common.report.rows import expand_decoder as expand_decoder_rows
from common.report.rules import verdicts

pytestmark = pytest.mark.slow  # the fixture trains and probes every experiment once: about half a minute

DEPTHS, SEEDS, FC_DEPTHS = (0, 1, 2), (0, 1), (4, 8, 16)
DEEPEST = depth_label(max(DEPTHS))  # ResNet-10: App. G's row and 03's grown architecture
LM = ["--block-size", "32", "--batch-tokens", "256", "--micro-batch-size", "4", "--steps", "4", "--n-evals", "1"]
LM += ["--val-tokens", "512", "--probe-batch-size", "4", "--probe-batches", "1", "--warmup-steps", "1"]
FIGURES = (
    "fig1_ag_vs_depth-npz",
    "fig2_ag_heatmap-npz",
    "fig3_gpt2_depth",
    "fig4_pythia",
    "fig5_growth_vs_scratch-npz",
    "fig6_matched_insertion-npz",
    "fig7_weight_scaling",
    "fig8_growth_value_vs_ag",
    "fig9_ag_vs_train_loss",
    "fig12_sweep_equal_flops-npz",
)
CLAIMS_OF = {  # script(s) -> a fragment of the claim text of every row its records feed
    "01 and 02: AGmax across the ResNet sweep": "(ResNet sweep, npz, ",
    "02: App. G": "(App. G) (npz)",
    "02 and 05 exact: V_S,l <= AG_l": "exact growth value never exceeds AG_l",
    "05: the GPT-2 sweep": "(GPT-2 sweep, over L, ",
    "04: the Pythia models": "(Pythia models, across models, ",
    "03: growth vs scratch": "below scratch's",
    "06: matched insertion": "matched",
    "07: FC weight scaling": "fc-",
    "07: the sweep's weights": "ResNet sweep (U's BatchNorm folded, V raw)",
}


@dataclass
class Pipeline:
    out: Path
    figures: Path
    printed: str  # 08's standard output
    claims: dict[str, dict]  # claim -> its row of tables/claims.csv, as 08 wrote it


def run_script(script: str, *args: str) -> str:
    """``script``'s ``main`` on ``args``: asserts exit 0, returns what it printed."""
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = importlib.import_module(script).main(list(args))
    assert code == 0, f"{script} exited {code}"
    return printed.getvalue()


def write_tiny_images(path: Path) -> Path:
    data = make_synthetic(num_train=64, num_test=48, num_classes=4, image_size=16, seed=0)
    nhwc = {k: getattr(data, k).permute(0, 2, 3, 1).numpy() for k in ("x_train", "x_test")}
    np.savez(path, **nhwc, y_train=data.y_train.numpy(), y_test=data.y_test.numpy())
    return path


def write_tiny_text(path: Path) -> Path:
    sentences = ["the cat sat on the mat. ", "a dog ran in the park. ", "we add one more block. "]
    path.write_text("".join(np.random.default_rng(0).choice(sentences, 400)))
    return path


def save_tiny_neox(folder: Path, n_layer: int) -> Path:
    torch.manual_seed(n_layer)
    GPTNeoXForCausalLM(
        GPTNeoXConfig(
            vocab_size=257,
            hidden_size=16,
            num_hidden_layers=n_layer,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        )
    ).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Pipeline:
    """Scripts 01-07 at a tiny size, then 08 on their records (about half a minute on 2 idle CPU cores)."""
    root = tmp_path_factory.mktemp("real-records")
    out = root / "runs"
    shared = ["--preset", "smoke", "--out", str(out)]
    images = ["--dataset", "npz", "--data-root", str(write_tiny_images(root / "tiny.npz"))]
    text = [*LM, "--text-file", str(write_tiny_text(root / "text.txt")), "--data-root", str(root / "tokens")]
    cpu = [*shared, "--device", "cpu"]
    seeds, depths, fc_depths = (",".join(map(str, x)) for x in (SEEDS, DEPTHS, FC_DEPTHS))
    probe = ["--batch-size", "32", "--n-batches", "2", "--saturation-delta", "1"]
    run_script("01_train_resnet_sweep", *cpu, *images, "--depths", depths, "--seeds", seeds)
    run_script("02_probe_ag", *cpu, "--dataset", "npz", *probe)
    run_script("03_growth_vs_scratch", *cpu, *images, "--depths", str(max(DEPTHS)), "--seeds", seeds)
    run_script("05_gpt2_ascend", *cpu, *text, "--n-embd", "16", "--n-head", "2", "--depths", "1,2")
    for n_layer in (1, 2):  # a local checkpoint and a byte tokenizer: nothing is downloaded
        checkpoint = save_tiny_neox(root / f"neox{n_layer}", n_layer)
        run_script("04_pythia_cpt", *cpu, *text, "--tokenizer", "byte", "--model-path", str(checkpoint))
    run_script("06_matched_insertion", *cpu, "--dataset", "npz")
    run_script("07_weight_scaling", *cpu, "--dataset", "npz", "--depths", fc_depths, "--epochs", "2")
    printed = run_script("08_make_figures", *shared)
    figures = out / make_figures.FIGURES
    claims_csv = figures / make_figures.TABLES / "claims.csv"
    rows = pd.read_csv(claims_csv, dtype=str, keep_default_na=False).to_dict("records")
    return Pipeline(out, figures, printed, {r["claim"]: r for r in rows})


def records(out: Path, experiment: str) -> list[dict]:
    """Config and result of every finished run of ``experiment``, merged (result keys win)."""
    found = []
    for result in sorted((out / experiment).glob("*/result.json")):
        found.append({**json.loads((result.parent / "config.json").read_text()), **json.loads(result.read_text())})
    return found


def claim(pipeline: Pipeline, start: str, end: str = "") -> dict:
    """The one claim row whose text starts with ``start`` and ends with ``end``."""
    (row,) = [r for text, r in pipeline.claims.items() if text.startswith(start) and text.endswith(end)]
    return row


def reading_row(pipeline: Pipeline, start: str, reading: str) -> dict:
    """The row of ``start`` for one reading of AGmax: its own row, or the one row both readings share when they order
    the runs identically (its claim names both)."""
    (row,) = [r for text, r in pipeline.claims.items() if text.startswith(start) and reading in text]
    return row


def mean(values) -> float:
    return float(np.mean(list(values)))


# ----------------------------------------------------------------------------- every experiment that ran is run
GROW_ROWS = ("beyond the paper: within one run's FLOPs", "beyond the paper: the controller's stop rule")  # 09's rows
EXPAND_ROWS = ("beyond the paper: expanding a trained decoder",)  # 10's rows
REGIME_ROWS = ("the regime of 09's design",)  # 09's regime row (issue 57): not a claim, not counted
UNRUN_ROWS = GROW_ROWS + EXPAND_ROWS + REGIME_ROWS  # 09 and 10 do not run here: their 6 + 1 + 4 rows are not run


def test_every_experiment_that_ran_has_its_claim_rows_run_and_nothing_is_skipped(pipeline):
    for experiment, fragment in CLAIMS_OF.items():
        rows = [r for text, r in pipeline.claims.items() if fragment in text]
        assert rows, f"{experiment}: no claim row"
        not_run = [r["claim"] for r in rows if r["verdict"] == verdicts.NOT_RUN]
        assert not not_run, f"{experiment}: reported not run: {not_run}"
    # 09 does not run here (its real records: tests/experiments/test_grow_by_criterion.py; its rows and figures 10 and
    # 11 from 09-format records: tests/report/test_grow_by_criterion_report.py): its six rows and one figure group are not run;
    # nor does 10 (its rows from 10-format records: tests/report/test_expand_decoder_report.py): its four rows are not run
    grow = [r for text, r in pipeline.claims.items() if text.startswith(GROW_ROWS)]
    assert len(grow) == 6 and all(r["verdict"] == verdicts.NOT_RUN for r in grow)
    [regime] = [r for text, r in pipeline.claims.items() if text.startswith(REGIME_ROWS)]
    assert regime["verdict"] == verdicts.NOT_RUN and regime["kind"] == verdict_row.REGIME_ROW
    expand = [r for text, r in pipeline.claims.items() if text.startswith(EXPAND_ROWS)]
    assert len(expand) == len(expand_decoder_rows.COMPARED) == 4 and all(
        r["verdict"] == verdicts.NOT_RUN for r in expand
    )
    assert all(
        r["verdict"] != verdicts.NOT_RUN for text, r in pipeline.claims.items() if not text.startswith(UNRUN_ROWS)
    )
    assert f"{len(FIGURES)} figures" in pipeline.printed and ", 1 skipped" in pipeline.printed
    assert f"{verdicts.NOT_RUN}: {len(grow) + len(expand)};" in pipeline.printed
    assert "0 finished runs left out" in pipeline.printed  # the one reader accepts every record the real jobs write


def test_each_claim_row_counts_the_runs_and_seeds_the_jobs_wrote(pipeline):
    sweep_runs = f"seeds {','.join(map(str, SEEDS))}, {len(DEPTHS) * len(SEEDS)} runs"
    assert sweep_runs in reading_row(pipeline, "AGmax falls with depth (ResNet sweep", "batch-mean AG_l")["records"]
    assert sweep_runs in claim(pipeline, "the matched-insertion drop does not increase")["records"]
    assert sweep_runs in claim(pipeline, "ResNet sweep (U's BatchNorm folded, V raw): max norm")["records"]
    growth_runs = f"seeds {','.join(map(str, SEEDS))}, {2 * len(SEEDS)} runs, ResNet-{DEEPEST};"
    assert growth_runs in claim(pipeline, "growth's mean test loss")["records"]
    assert f"seeds 0, {len(FC_DEPTHS)} runs, depths {list(FC_DEPTHS)}" in claim(pipeline, "fc-tanh: alpha")["records"]
    assert ", 2 runs" in reading_row(pipeline, "AGmax falls with depth (GPT-2 sweep", "batch-mean AG_l")["records"]
    assert ", 2 runs" in reading_row(pipeline, "AGmax falls with depth (Pythia models", "batch-mean AG_l")["records"]


# ----------------------------------------------------------------------------- the claim rows hold the records' numbers
@pytest.mark.parametrize("column, reading", [("ag_max", "batch-mean AG_l"), ("ag_max_per_example", "per-example RMS")])
def test_the_depth_trend_is_spearmans_rho_of_the_probe_records(pipeline, column, reading):
    probes = records(pipeline.out, probe_ag.EXPERIMENT)
    rho = stats.spearmanr([p["depth_n"] for p in probes], [p[column] for p in probes]).statistic
    value = reading_row(pipeline, "AGmax falls with depth (ResNet sweep", reading)["reproduced"]
    assert value.startswith(f"rho = {rho:+.2f}, p = ") and f"over {len(probes)} runs" in value


def test_the_app_g_row_shows_each_seeds_interval_at_the_deepest_depth_probed(pipeline):
    value = claim(pipeline, "the deepest models probed are first-order saturated")["reproduced"]
    deepest = [p for p in records(pipeline.out, probe_ag.EXPERIMENT) if p["depth_label"] == DEEPEST]
    assert sorted(p["seed"] for p in deepest) == list(SEEDS)
    for p in deepest:
        s, fmt = p["saturation"], verdicts.fmt
        interval = f"Gamma in [{fmt(s['lower'])}, {fmt(s['upper'])}], t = {fmt(s['t'])}, {s['n_candidates']} candidates"
        assert f"ResNet-{DEEPEST} seed {p['seed']}: {interval}" in value


def test_the_projection_check_covers_every_exact_candidate_of_02_and_05_and_holds(pipeline):
    candidates = {
        "ResNet npz": [c for p in records(pipeline.out, probe_ag.EXPERIMENT) for c in p["candidates"]],
        "GPT-2": [c for p in records(pipeline.out, gpt2_ascend.EXPERIMENT) for c in p["candidates"]],
    }
    every = [c for found in candidates.values() for c in found]
    assert every and all(c["growth_value"] is not None for c in every)  # smoke probes are exact
    ratio = max(c["growth_value"] / c["ag_norm"] for c in every)
    row = claim(pipeline, "the exact growth value never exceeds AG_l")
    assert row["kind"] == verdict_row.IDENTITY
    assert row["reproduced"] == f"max V_S,l / AG_l = {ratio:.4f} over {len(every)} candidates; 0 above"
    assert row["verdict"].startswith(verdicts.HOLDS)
    for source, found in candidates.items():
        assert f"{source} ({len(found)} candidates)" in row["records"]


@pytest.mark.parametrize("metric, text", [("train_loss", "training"), ("test_loss", "test")])
def test_growths_mean_rows_compare_03s_growth_run_with_the_sweeps_run_of_the_same_epochs(pipeline, metric, text):
    ours = [r for r in records(pipeline.out, growth_vs_scratch.EXPERIMENT) if r["depth_label"] == DEEPEST]
    grown = [r for r in ours if not r["name"].endswith("-restart")]
    restarted = [r for r in ours if r["name"].endswith("-restart")]  # the smoke preset's ablation, at the deepest
    scratch = [r for r in records(pipeline.out, resnet_sweep.EXPERIMENT) if r["depth_label"] == DEEPEST]
    assert len(grown) == len(restarted) == len(scratch) == len(SEEDS)  # scratch: the sweep's own runs, reused
    epochs = scratch[0]["epochs"]
    assert {r["epochs"] for r in grown} == {epochs} and all(r["train_flops"] > 0 for r in grown)
    g, s = (mean(r[metric] for r in runs_) for runs_ in (grown, scratch))
    value = claim(pipeline, f"growth's mean {text} loss is below scratch's")["reproduced"]
    assert value.startswith(f"at equal epochs ({epochs}, one schedule): growth {g:.4f} vs scratch {s:.4f}; ")
    assert "training FLOPs growth " in value and "running training loss over the last 10% of epochs" in value
    assert (pipeline.figures / "tables" / "growth_restart_ablation-npz.md").is_file()


def test_the_matched_insertion_rows_show_06s_measured_change_per_depth(pipeline):
    changes = {}
    for run in records(pipeline.out, matched_insertion.EXPERIMENT):
        (row,) = run["rows"]  # one candidate (the end of stage 1) at one alpha (the paper's)
        assert (
            row["candidate"] == matched_insertion.stage_end_candidate(run["depth_n"])
            and row["alpha"] == paper.MATCHED_INSERTION_ALPHA
        )
        changes.setdefault(run["depth_label"], []).append(row["measured_change"])
    assert sorted(changes) == [depth_label(n) for n in DEPTHS] and all(len(c) == len(SEEDS) for c in changes.values())
    everywhere = claim(pipeline, "matched insertion lowers the training loss at every depth")
    assert everywhere["reproduced"] == ", ".join(f"ResNet-{d}: {mean(c):+.1e}" for d, c in sorted(changes.items()))
    # the claims pool log drops: each depth's geometric mean over seeds
    drops = ", ".join(f"ResNet-{d}: {math.exp(mean(np.log(-np.array(c)))):.1e}" for d, c in sorted(changes.items()))
    value = claim(pipeline, "the matched-insertion drop does not increase")["reproduced"]
    assert value.startswith(drops + " (geometric means); "), value


@pytest.mark.parametrize(
    "family, start, tensor, exponent",
    [
        ("fc-tanh", "fc-tanh: alpha", "delta", "alpha"),
        ("fc-tanh", "fc-tanh: beta", "A", "max_norm_exponent"),
        ("fc-relu", "fc-relu: alpha + beta", "delta_A", "alpha_plus_beta_max_norm"),
    ],
)
def test_the_weight_scaling_rows_show_07s_own_fit(pipeline, family, start, tensor, exponent):
    fits = pd.read_csv(pipeline.out / weight_scaling.EXPERIMENT / f"exponents-{family}.csv")
    (fit,) = fits[(fits["tensor"] == tensor) & (fits["norm"] == "fro") & (fits["exponent"] == exponent)].itertuples()
    value = claim(pipeline, start)["reproduced"]
    assert value.split(";")[0] == f"{fit.estimate:.3f} [{fit.ci_low:.3f}, {fit.ci_high:.3f}]"


# ----------------------------------------------------------------------------- figures and tables
def test_every_figure_is_written_as_png_and_pdf(pipeline):
    for stem in FIGURES:
        png, pdf = (pipeline.figures / f"{stem}.{ext}" for ext in ("png", "pdf"))
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000, png.name
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 1000, pdf.name


def test_the_summary_tables_parse_and_hold_the_records_numbers(pipeline):
    tables = pipeline.figures / make_figures.TABLES
    generic = ("ag_vs_depth-npz", "gpt2_depth", "pythia", "growth_vs_scratch-npz", "matched_insertion-npz")
    for stem in (*generic, "weight_scaling_exponents"):
        csv = pd.read_csv(tables / f"{stem}.csv")
        md = claims_report.claims_cells((tables / f"{stem}.md").read_text())  # every row as many cells as the header
        assert len(csv) and md, stem
        if stem in generic:
            assert len(md) == len(csv), stem
    depth = pd.read_csv(tables / "ag_vs_depth-npz.csv")
    assert depth["N"].tolist() == list(DEPTHS) and (depth["seeds"] == len(SEEDS)).all()
    probes = pd.DataFrame(records(pipeline.out, probe_ag.EXPERIMENT)).groupby("depth_n")["ag_max"].mean()
    np.testing.assert_allclose(depth["ag_max"], probes.loc[list(DEPTHS)], rtol=1e-12)
    pythia = pd.read_csv(tables / "pythia.csv")
    assert pythia["n_layer"].tolist() == [1, 2]
    probed = sorted(records(pipeline.out, pythia_cpt.EXPERIMENT), key=lambda r: r["n_layer"])
    np.testing.assert_allclose(pythia["ag_max"], [r["ag_max"] for r in probed], rtol=1e-12)
    assert pd.read_csv(tables / "gpt2_depth.csv")["n_layer"].tolist() == [1, 2]
    assert {"fc-tanh", "fc-relu", "sweep"} <= set(pd.read_csv(tables / "weight_scaling_exponents.csv")["family"])


def test_the_claims_report_and_its_csv_hold_the_same_rows(pipeline):
    report = (pipeline.figures / make_figures.CLAIMS).read_text()
    claims_part, checks_part = report.split("## Identity checks")
    shown = claims_report.claims_cells(claims_part) + claims_report.claims_cells(checks_part)
    written = list(pipeline.claims.values())

    def keys(rows):
        return sorted((int(r["id"]), r["claim"], r["verdict"]) for r in rows)

    assert keys(shown) == keys(written)
    ran = [r for r in written if r["verdict"] != verdicts.NOT_RUN]  # 09's (and its regime row) and 10's: not run here
    assert len(ran) == len(written) - 6 - 1 - len(expand_decoder_rows.COMPARED) and all(
        r["verdict"].endswith(f"({SMOKE_NOTE})") for r in ran
    )  # smoke records
