"""--preset mini: the class-balanced training subset, the Tiny Shakespeare route, 04 offline, 08's labels, make mini."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import subprocess
from pathlib import Path

import huggingface_hub
import pytest
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from common.data import text_sources
from common.data.vision import class_balanced_indices, load_vision, with_train_subset
from common.errors import UserError
from common.experiments import gpt2_ascend, growth_vs_scratch, make_figures, matched_insertion
from common.experiments.probe_ag import probe_configs
from common.experiments.shared import resnet_sweep, resnet_sweep_records
from common.experiments.shared.resnet_sweep import load_sweep_data, sweep_configs
from common.experiments.shared.resnet_sweep_records import load_sweep_run
from common.launch.cli import PRESETS
from common.presets import gpt2_ascend as gpt2_presets
from common.presets import growth_vs_scratch as growth_presets
from common.presets import pythia_cpt as pythia_presets
from common.presets import train_resnet_sweep as sweep_presets
from common.presets import weight_scaling as weight_scaling_presets
from common.report import claims_report
from common.runs import atomic, record_io, run_store
from tests.helpers import figure_records

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in ROOT.glob("[0-9][0-9]_*.py"))


# ----------------------------------------------------------------------------- every script knows mini
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_numbered_script_accepts_preset_mini(script):
    parser = importlib.import_module(script).build_parser()
    assert "mini" in PRESETS and parser.parse_args(["--preset", "mini"]).preset == "mini"


def test_each_job_module_has_a_mini_table():
    assert sweep_presets.sweep_preset("mini", "cifar10").train_subset
    assert (
        "mini" in gpt2_presets.PRESETS
        and "mini" in pythia_presets.PRESETS
        and "mini" in weight_scaling_presets.FC_PRESETS
    )
    assert growth_vs_scratch.growth_plan(preset="mini", dataset="npz", data_root="x.npz").depths == (2, 3, 4, 5)


# ----------------------------------------------------------------------------- the training subset
def test_the_subset_has_k_over_c_images_per_class_from_the_data_seed_alone():
    labels = torch.arange(10).repeat_interleave(30)[torch.randperm(300, generator=torch.Generator().manual_seed(1))]
    chosen = class_balanced_indices(labels, 50, seed=3)
    assert torch.equal(torch.bincount(labels[chosen], minlength=10), torch.full((10,), 5))
    assert torch.equal(chosen, chosen.sort().values) and len(set(chosen.tolist())) == 50
    torch.manual_seed(123)  # the global RNG (a run's seed) plays no part
    assert torch.equal(class_balanced_indices(labels, 50, seed=3), chosen)
    assert not torch.equal(class_balanced_indices(labels, 50, seed=4), chosen)
    for bad in (55, 0, 400):
        with pytest.raises(UserError, match="--train-subset"):
            class_balanced_indices(labels, bad, seed=3)


def test_the_subset_keeps_the_test_split_and_the_whole_sets_normalisation():
    data = load_vision("digits", None)
    cut = with_train_subset(data, 100, seed=0)
    assert len(cut.y_train) == 100 and torch.equal(cut.x_test, data.x_test)
    assert (cut.mean, cut.std) == (data.mean, data.std)


def test_train_subset_enters_the_identity_only_when_given():
    [plain] = sweep_configs(preset="paper", dataset="cifar10", overrides={"depths": [3]})
    [cut] = sweep_configs(preset="paper", dataset="cifar10", overrides={"depths": [3], "train_subset": 1000})
    assert "train_subset" not in plain["data"]
    assert cut["data"]["train_subset"] == {"k": 1000, "seed": sweep_presets.MINI.subset_seed}
    assert run_store.config_hash(plain) != run_store.config_hash(cut)
    [mini] = sweep_configs(
        preset="mini", dataset="npz", data_root="/somewhere/c10.npz", seeds=[5], overrides={"depths": [3]}
    )
    assert mini["data"] == {"file": "c10.npz", "train_subset": {"k": sweep_presets.MINI.train_subset, "seed": 0}}


def test_probe_growth_and_scratch_see_exactly_the_sweeps_training_images(tmp_path):
    [config] = sweep_configs(preset="mini", dataset="digits", overrides={"depths": [0], "train_subset": 200})
    data = load_sweep_data(config)
    assert len(data.y_train) == 200
    run = run_store.run_dir(tmp_path, config)
    run.mkdir(parents=True)
    atomic.atomic_write_json(run / run_store.CONFIG, config)
    torch.save({"model": resnet_sweep.build_resnet(config, 10).state_dict()}, run / "model.pt")
    run_store.write_result(run, {"train_loss": 0.1, "test_loss": 0.2})  # what every reader of a sweep run needs
    _, probed = load_sweep_run(run)  # what 02 and 06 load
    assert torch.equal(probed.x_train, data.x_train) and torch.equal(probed.y_train, data.y_train)
    [probe] = probe_configs([run])
    assert probe["sweep_run"] == run.name
    plan = growth_vs_scratch.growth_plan(preset="mini", dataset="digits", seeds=[0, 1], overrides={"train_subset": 200})
    linked = [*plan.growth.values(), *plan.ablation.values(), *plan.scratch.values()]
    assert {json.dumps(c["data"], sort_keys=True) for c in linked} == {json.dumps(config["data"], sort_keys=True)}
    # and every growth run trains on the sweep's recipe: its epochs, its one schedule
    assert all(c["train"] == config["train"] for c in linked) and plan.ablation


def test_mini_trains_on_the_subset_and_evaluates_the_test_set_once_at_the_end(tmp_path):
    script = importlib.import_module("01_train_resnet_sweep")
    args = [
        "--preset",
        "mini",
        "--dataset",
        "digits",
        "--train-subset",
        "100",
        "--depths",
        "0",
        "--seeds",
        "0",
        "--epochs",
        "2",
        "--batch-size",
        "50",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
    ]
    assert script.main(args) == 0
    [run] = resnet_sweep_records.finished_sweep_runs(tmp_path, "digits")
    metrics = run_store.read_metrics(run)
    assert len(metrics) == 2 and not any("test_loss" in m for m in metrics)
    result = run_store.read_result(run)
    assert (result["train_size"], result["test_size"], result["steps"]) == (100, 360, 4)
    assert result["test_loss"] > 0 and 0 <= result["test_acc"] <= 1


def test_mini_03_reads_only_sweep_runs_that_01_trains_without_seeds():
    """Mini's 03 runs the sweep's two seeds (MINI_SEEDS) and its scratch runs are 01's own mini runs, so ``make mini``
    trains every scratch run once, in 01, and 03 trains only its growth runs: no seed or depth of its own."""
    assert resnet_sweep.preset_seeds("mini", 3) == [3, 4] and resnet_sweep.preset_seeds("paper", 3) == [3]
    assert growth_presets.growth_preset("mini").seeds == sweep_presets.MINI_SEEDS == 2
    assert growth_vs_scratch.default_seeds("mini", 0) == [0, 1] and growth_vs_scratch.default_seeds("mini", 3) == [3, 4]
    assert growth_vs_scratch.default_seeds("paper", 3) == [3]
    where = {"dataset": "npz", "data_root": "c10.npz"}
    trained = sweep_configs(preset="mini", seeds=resnet_sweep.preset_seeds("mini", 0), **where)  # 01 without --seeds
    plan = growth_vs_scratch.growth_plan(preset="mini", seeds=growth_vs_scratch.default_seeds("mini", 0), **where)
    by_dir = {run_store.run_dir("o", c): c for c in trained}
    scratch = {run_store.run_dir("o", c): c for c in plan.scratch.values()}
    assert len(scratch) == 4 * 2 and set(scratch) <= set(by_dir)
    assert all(scratch[d] == by_dir[d] for d in scratch)  # the same configs, not only the same directories
    todo = [c for c in plan.jobs() if run_store.run_dir("o", c) not in by_dir]
    assert all(c["experiment"] == growth_vs_scratch.EXPERIMENT for c in todo) and len(todo) == 4 * 2 + 2


def test_the_mini_growth_preset_inserts_a_block_every_tenth_of_the_sweeps_100_epochs():
    """Mini (docs/decisions.md, section "Mini preset"): ResNet-10..13, the k-th block before epoch 10k of the sweep's
    100 (growth done halfway), the restart ablation at ResNet-13 only, for both seeds."""
    mini = growth_presets.growth_preset("mini")
    assert mini.depths == (2, 3, 4, 5) and mini.insert_at == (0.1, 0.2, 0.3, 0.4, 0.5)
    assert mini.ablation_depths == (5,)
    plan = growth_vs_scratch.growth_plan(preset="mini", dataset="npz", data_root="c10.npz", seeds=[0, 1])
    assert plan.epochs == sweep_presets.MINI.recipe.epochs == 100
    assert mini.insert_epochs(plan.epochs, 5) == (10, 20, 30, 40, 50)
    assert {n: plan.growth[(0, n)]["growth"]["epochs"] for n in plan.depths} == {
        2: [10, 20],
        3: [10, 20, 30],
        4: [10, 20, 30, 40],
        5: [10, 20, 30, 40, 50],
    }
    assert sorted(plan.ablation) == [(0, 5), (1, 5)]
    assert all(plan.ablation[k]["growth"]["epochs"] == plan.growth[k]["growth"]["epochs"] for k in plan.ablation)
    # the names of the committed mini tables (results/mini/growth_vs_scratch/)
    assert growth_vs_scratch.table_stem("npz", plan, "ablation") == "ablation-npz-e100-at10-20-30-40-50-seeds0-1"
    assert resnet_sweep.fits(0.05, "mini", "npz") and not resnet_sweep.fits(0.051, "mini", "npz")
    assert resnet_sweep.fits(3.0, "paper", "cifar10") is None  # no target at the paper's scale


def test_02_06_and_07_read_the_seeds_every_depth_has(tmp_path):
    """A seed trained at a few depths only (``03 --seeds 0,1,2`` under mini trains seed 2's scratch runs, sweep
    runs, at ResNet-10..13 only) stays out of the depth designs of 02, 06 and 07 (balanced)."""
    made = []
    for depths, seeds in (([0, 5, 9], [0, 1]), ([5], [2])):
        for config in sweep_configs(
            preset="mini", dataset="digits", seeds=seeds, overrides={"depths": depths, "train_subset": 100}
        ):
            run = run_store.run_dir(tmp_path, config)
            run.mkdir(parents=True)
            atomic.atomic_write_json(run / run_store.CONFIG, config)
            run_store.write_result(run, {"train_loss": 0.1, "test_loss": 1.0})
            made.append((config["depth_n"], config["seed"]))
    assert (5, 2) in made and (9, 2) not in made
    found = resnet_sweep_records.require_sweep_runs(tmp_path, "digits", preset="mini")
    assert (
        sorted({run_store.read_config(d, resnet_sweep.CONFIG_KEYS)["seed"] for d in found}) == [0, 1]
        and len(found) == 6
    )
    assert (
        len(resnet_sweep_records.require_sweep_runs(tmp_path, "digits", preset="mini", seeds=[2])) == 1
    )  # asked for: given
    configs = matched_insertion.matched_configs(out=tmp_path, preset="mini", dataset="digits")
    assert sorted({(c["depth_n"], c["seed"]) for c in configs}) == [(n, s) for n in (0, 5, 9) for s in (0, 1)]


# ----------------------------------------------------------------------------- Tiny Shakespeare
@pytest.fixture
def fake_shakespeare(tmp_path, monkeypatch):
    """The download route with a monkeypatched fetch (no network): its bytes and the sha256 expected of them."""
    payload = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\n" * 800).encode()
    remote = text_sources.RemoteText(
        "tinyshakespeare.txt", "https://example.invalid/input.txt", hashlib.sha256(payload).hexdigest(), len(payload)
    )
    fetched = []
    monkeypatch.setattr(text_sources, "fetch_url", lambda url: fetched.append(url) or payload)
    monkeypatch.setitem(gpt2_presets.PRESETS, "mini", dataclasses.replace(gpt2_presets.MINI, text=remote))
    monkeypatch.chdir(tmp_path)
    return payload, remote, fetched


def test_the_download_route_and_text_file_give_the_same_run_hashes(fake_shakespeare, tmp_path):
    payload, remote, fetched = fake_shakespeare
    downloaded = gpt2_ascend.gpt_configs(preset="mini")
    saved = tmp_path / "data" / "tinyshakespeare.txt"
    assert saved.read_bytes() == payload and fetched == [remote.url]
    given = gpt2_ascend.gpt_configs(preset="mini", text_path="data/tinyshakespeare.txt")
    assert [run_store.run_dir("o", c) for c in downloaded] == [run_store.run_dir("o", c) for c in given]
    assert len(downloaded) == len(gpt2_presets.PRESETS["mini"].depths) and downloaded[0]["data"]["tokenizer"] == "byte"
    gpt2_ascend.gpt_configs(preset="mini")
    assert fetched == [remote.url]  # once saved, never fetched again


def test_a_download_with_the_wrong_sha256_saves_nothing(fake_shakespeare, tmp_path, monkeypatch):
    monkeypatch.setattr(text_sources, "fetch_url", lambda url: b"not shakespeare")
    with pytest.raises(UserError, match="sha256.*--text-file"):
        gpt2_ascend.gpt_configs(preset="mini")
    assert not (tmp_path / "data" / "tinyshakespeare.txt").exists()


def test_a_failed_download_is_one_line_naming_the_offline_fix(fake_shakespeare, monkeypatch, capsys):
    def unreachable(url):
        raise OSError("Name or service not known")

    monkeypatch.setattr(text_sources, "fetch_url", unreachable)
    assert importlib.import_module("05_gpt2_ascend").main(["--preset", "mini", "--dry-run"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "--text-file" in err[0] and "the download failed" in err[0]


# ----------------------------------------------------------------------------- 04 under mini
def test_04_mini_offline_says_so_in_one_line_and_exits_0(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert importlib.import_module("04_pythia_cpt").main(["--preset", "mini", "--out", str(tmp_path / "runs")]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and "pythia-70m-deduped" in printed[0] and "not probed" in printed[0]
    assert not (tmp_path / "runs" / "pythia_cpt").exists()


def test_04_mini_probes_the_frozen_model_on_32_sequences_of_256_tokens(tmp_path, capsys):
    torch.manual_seed(0)
    model = tmp_path / "tiny"
    GPTNeoXForCausalLM(
        GPTNeoXConfig(
            vocab_size=257,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=256,
        )
    ).save_pretrained(model)
    corpus = tmp_path / "plays.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 500)
    args = [
        "--preset",
        "mini",
        "--model-path",
        str(model),
        "--tokenizer",
        "byte",
        "--text-file",
        str(corpus),
        "--data-root",
        str(tmp_path / "tok"),
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "runs"),
    ]
    assert importlib.import_module("04_pythia_cpt").main(args) == 0
    [run] = (tmp_path / "runs" / "pythia_cpt").glob("tiny-*")
    result = run_store.read_result(run)
    assert (result["steps"], result["cpt_tokens"]) == (0, 0) and result["val_loss_after"] == result["val_loss_before"]
    samples = record_io.read_json(run / "samples.json")
    assert (samples["block_size"], len(samples["windows"])) == (256, 32)
    assert not (run / "checkpoint.pt").exists() and result["ag_max"] > 0


# ----------------------------------------------------------------------------- 08 under mini
def test_08_mini_labels_every_verdict_and_names_the_scale_and_the_data(tmp_path):
    out = tmp_path / "runs"
    figure_records.sweep_and_probe(
        out,
        preset="mini",
        dataset="npz",
        seeds=(0, 1),
        sweep_config={"data": {"file": "c10-jpeg.npz", "train_subset": {"k": 1000, "seed": 0}}},
        sweep_result={"train_size": 1000},
    )
    report = make_figures.build(out, tmp_path / "figs", "mini")
    decided = [r for r in report.claims if r["verdict"] != "not run"]
    assert decided and all(r["verdict"].endswith("(mini scale)") for r in decided)
    text_ = report.claims_path.read_text()
    banner = [line for line in text_.splitlines() if line.startswith("> ")]
    assert len(banner) == 1 and "mini scale: 1,000 real CIFAR-10 training images" in banner[0]
    assert (
        "2 seeds" in banner[0]
        and "`c10-jpeg.npz`" in banner[0]
        and "differs slightly from the official files" in banner[0]
    )
    assert "not the paper's" in banner[0]
    not_run = [r for r in report.claims if r["verdict"] == "not run"]
    assert not_run and all("--preset mini" in r["records"] for r in not_run)


def test_the_readme_block_holds_the_verdict_counts_and_every_claims_verdict(tmp_path):
    rows = [
        {
            "id": 1,
            "claim": "a | b",
            "paper": "0.5",
            "reproduced": "0.4",
            "records": "r",
            "verdict": "holds (mini scale)",
            "rule": "x",
        },
        {
            "id": 2,
            "claim": "c",
            "paper": "1e-3",
            "reproduced": "-",
            "records": "none",
            "verdict": "not run",
            "rule": "y",
        },
    ]
    report = claims_report.claims_markdown(rows, "mini", Path("results/mini"), banner="**Mini scale.** b")
    block = claims_report.results_block(report)
    assert block.splitlines() == [
        "Verdicts (mini scale): holds: 1, does not hold: 0, not decidable: 0, not decidable at this design: 0, "
        "not comparable: 0, not run: 1",
        "",
        "| id | claim | verdict |",
        "|---|---|---|",
        "| 1 | a \\| b | holds |",
        "| 2 | c | not run |",
    ]
    with pytest.raises(ValueError, match="not a claims report"):
        claims_report.results_block("# notes\n\n| id | claim |\n|---|---|\n| 1 | a |\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{claims_report.README_START}\nold\n{claims_report.README_END}\n\nafter\n")
    (tmp_path / "claims.md").write_text(report)
    claims_report.update_readme(readme, tmp_path / "claims.md")
    assert claims_report.readme_block(readme.read_text()) == block and readme.read_text().endswith("\n\nafter\n")


# ----------------------------------------------------------------------------- committing records
def test_portable_runtime_relativises_paths_in_the_repository_and_strips_the_others(tmp_path):
    root = tmp_path / "repo"
    config = {
        "experiment": "x",
        "data": {"file": "/elsewhere/c10.npz"},
        "runtime": {
            "device": "cpu",
            "data_root": "/elsewhere/c10.npz",
            "sweep_dir": str(root / "results/mini/resnet_sweep/a-1"),
            "linked": [{"name": "p", "runtime": {"data_root": str(root / "data"), "compile": "auto"}}],  # nested
        },
    }
    portable = run_store.portable_runtime(config, root)
    assert portable["runtime"] == {
        "device": "cpu",
        "data_root": None,
        "sweep_dir": "results/mini/resnet_sweep/a-1",
        "linked": [{"name": "p", "runtime": {"data_root": "data", "compile": "auto"}}],
    }
    assert portable["data"] == config["data"] and run_store.config_hash(portable) == run_store.config_hash(config)
    run = run_store.run_dir(root / "results/mini", config)
    run.mkdir(parents=True)
    atomic.atomic_write_json(run / run_store.CONFIG, config)
    assert run_store.make_portable(root / "results/mini", root) == [run / run_store.CONFIG]
    assert (
        record_io.read_json(run / run_store.CONFIG) == portable
        and run_store.make_portable(root / "results/mini", root) == []
    )
    run_store.prepare_run(
        root / "results/mini", config
    )  # the stored config still matches: the run is not started again


def test_make_mini_hands_images_text_and_the_launcher_to_the_right_scripts():
    dry = subprocess.run(
        ["make", "-n", "mini", "IMAGES=--dataset npz --data-root X.npz", "TEXT=--text-file Y.txt"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    local = "--launcher local"  # two runs at a time, one thread each (MINI_LAUNCH)
    for script in ("01_train_resnet_sweep.py", "02_probe_ag.py", "03_growth_vs_scratch.py", "06_matched_insertion.py"):
        assert f"step {script} --dataset npz --data-root X.npz {local};" in dry, script
    for script in ("04_pythia_cpt.py", "05_gpt2_ascend.py", "10_expand_decoder.py"):
        assert f"step {script} --text-file Y.txt {local};" in dry, script
    assert f"step 07_weight_scaling.py $images07 {local};" in dry and "--preset mini --out results/mini" in dry
    assert "make_portable" in dry and "step 08_make_figures.py --figures-dir results/mini/figures;" in dry


def test_results_keep_no_weights_checkpoints_or_job_folders():
    if subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True).returncode:
        pytest.skip("not a git checkout: .gitignore is not in force")
    ignored = subprocess.run(
        [
            "git",
            "check-ignore",
            "--no-index",
            "results/mini/resnet_sweep/r/model.pt",
            "results/mini/resnet_sweep/r/checkpoint.pt",
            "results/mini/pythia_cpt/r/base_model/model.safetensors",
            "results/mini/submitit/4212/4212_0_result.pkl",  # make mini's --launcher local job folders
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split()
    kept = subprocess.run(
        ["git", "check-ignore", "--no-index", "results/mini/resnet_sweep/r/result.json"], cwd=ROOT, capture_output=True
    )
    assert len(ignored) == 4 and kept.returncode == 1
