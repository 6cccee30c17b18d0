"""The committed records of ``make mini`` (results/mini/) stay current: identities, the report, the README.

Each test skips while results/mini/ is not committed. They catch a change of code that changes a
run's identity (its config, so its hash), the report's rules or wording, or a README that no
longer shows the committed claims. A change that alters only the *numbers* a run would produce
(a fix inside a training loop, a probe's arithmetic) is not detected here: rerun ``make mini``
whenever the code a result depends on changes (README, section "Results").
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
from pathlib import Path

import pytest

from common.data import text_sources
from common.experiments import grow_by_criterion, make_figures
from common.report import claims_report
from common.runs import record_io, run_store

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path("results") / "mini"  # relative to the repository root, as make mini writes it
CLAIMS = RESULTS / "figures" / make_figures.CLAIMS
PLANNERS = (
    "01_train_resnet_sweep",
    "02_probe_ag",
    "03_growth_vs_scratch",
    "04_pythia_cpt",
    "05_gpt2_ascend",
    "06_matched_insertion",
    "07_weight_scaling",
    "09_grow_by_criterion",
    "10_expand_decoder",
)
DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?(?:\s?UTC)?)?")

pytestmark = pytest.mark.skipif(
    not (ROOT / RESULTS).is_dir(), reason="results/mini/ is not committed yet (make mini, then commit it)"
)


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def committed_configs() -> dict[str, dict]:
    """``<experiment>/<run directory>`` -> config of every committed run."""
    return {
        p.parent.relative_to(RESULTS).as_posix(): record_io.read_json(p)
        for p in sorted(RESULTS.glob(f"*/*/{run_store.CONFIG}"))
    }


def data_flags(configs: dict[str, dict], monkeypatch) -> tuple[list[str], list[str]]:
    """IMAGES and TEXT as make mini was given them, from the data identity the committed configs store.

    Nothing is read: the npz file is named, not opened, and a text file's fingerprint is the one stored
    (``common.data.text_sources`` is told the file's name and sha256 instead of reading it).
    """
    sweep = [c for c in configs.values() if c.get("experiment") == "resnet_sweep"]
    datasets = {c["dataset"] for c in sweep}
    assert len(datasets) == 1, f"results/mini holds sweeps of {sorted(datasets)}: one dataset expected"
    [dataset] = datasets
    images = ["--dataset", dataset]
    files = {c["data"].get("file") for c in sweep}
    if dataset == "npz":
        images += ["--data-root", files.pop()]
    texts = {
        (c["data"]["text_name"], c["data"]["text_sha256"])
        for c in configs.values()
        if isinstance(c.get("data"), dict) and c["data"].get("source") == "text"
    }
    if not texts:
        return images, []
    assert len(texts) == 1, f"results/mini holds runs on several texts: {sorted(texts)}"
    [(name, sha)] = texts
    monkeypatch.setattr(text_sources, "text_files", lambda path: [Path(path)])
    monkeypatch.setattr(text_sources, "_fingerprint", lambda files, root: sha)
    return images, ["--text-file", name]


def _scratch_source(config: dict) -> list[dict]:
    """The criterion run a 09 scratch run reads its architecture from (none for any other config)."""
    if config.get("experiment") != grow_by_criterion.EXPERIMENT or config.get("policy") != "scratch":
        return []
    return [grow_by_criterion.criterion_config(config)]


def planned_runs(monkeypatch, images: list[str], texts: list[str]) -> set[str]:
    """Every run (``<experiment>/<name>-<hash>``) that ``--preset mini`` plans, each script called as make mini calls it."""
    planned: set[str] = set()

    def record(fn, specs, args, **kwargs):
        for spec in specs:
            for config in [*_scratch_source(spec.config), spec.config]:  # a scratch run's criterion run
                planned.add(run_store.run_dir("", config).as_posix())
        return None

    for name in PLANNERS:
        script = importlib.import_module(name)
        monkeypatch.setattr(script, "launch_from_args", record)
        if hasattr(script, "mini_hub_check"):
            monkeypatch.setattr(
                script, "mini_hub_check", lambda revision=None: None
            )  # plan Pythia as if the Hub answered
        flags = texts if name in ("04_pythia_cpt", "05_gpt2_ascend", "10_expand_decoder") else images
        if name == "07_weight_scaling":
            flags = flags[:2]  # make mini gives 07 no --data-root (it reads weights only)
        assert script.main(["--preset", "mini", "--out", str(RESULTS), "--dry-run", *flags]) == 0, name
    return planned


def test_every_committed_run_has_the_identity_that_preset_mini_plans(at_root, monkeypatch, capsys):
    configs = committed_configs()
    assert configs, "results/mini holds no run directories"
    images, texts = data_flags(configs, monkeypatch)
    planned = planned_runs(monkeypatch, images, texts)
    capsys.readouterr()
    stale = sorted(set(configs) - planned)
    pythia_run = any(k.startswith("pythia_cpt/") for k in configs)  # offline, 04 under mini runs nothing: "not run"
    missing = sorted(r for r in planned - set(configs) if pythia_run or not r.startswith("pythia_cpt/"))
    assert not stale, (
        f"committed runs whose config (hash) --preset mini no longer plans: {stale}; rerun make mini and commit"
    )
    assert not missing, f"runs --preset mini plans that results/mini lacks: {missing}; rerun make mini and commit"


def test_rebuilding_the_report_from_the_committed_records_gives_the_committed_claims(at_root, tmp_path):
    report = make_figures.build(RESULTS, tmp_path / "figures", "mini")
    rebuilt, committed = report.claims_path.read_text(), CLAIMS.read_text()
    assert DATE.sub("<date>", rebuilt) == DATE.sub("<date>", committed), (
        "python 08_make_figures.py --preset mini --out results/mini "
        "--figures-dir results/mini/figures gives another claims.md: commit the rebuilt one"
    )


def test_the_readme_results_table_is_the_committed_claims_table():
    block = claims_report.readme_block((ROOT / "README.md").read_text())
    assert block is not None, f"README.md lacks its Results block ({claims_report.README_START})"
    assert block == claims_report.results_block((ROOT / CLAIMS).read_text()), (
        "README's Results table is stale: run make mini-readme"
    )


def test_committed_records_hold_no_weights_and_no_machine_paths(at_root):
    listed = subprocess.run(["git", "ls-files", str(RESULTS)], capture_output=True, text=True)
    if listed.returncode:
        pytest.skip("not a git checkout")
    heavy = [
        f for f in listed.stdout.split() if f.endswith((".pt", ".pth", ".bin", ".safetensors")) or "checkpoint" in f
    ]
    assert not heavy, f"weights or checkpoints committed under results/mini: {heavy}"

    def absolute(value) -> list[str]:
        if isinstance(value, dict):
            return [p for v in value.values() for p in absolute(v)]
        if isinstance(value, list):
            return [p for v in value for p in absolute(v)]
        return [value] if isinstance(value, str) and os.path.isabs(value) else []

    paths = {run: absolute(c.get(run_store.RUNTIME_KEY, {})) for run, c in committed_configs().items()}
    assert not {r: p for r, p in paths.items() if p}, (
        "machine paths in runtime: run make mini's portable step (common.runs.run_store.make_portable)"
    )
