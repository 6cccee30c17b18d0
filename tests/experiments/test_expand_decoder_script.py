"""10_expand_decoder.py end to end: a tiny local GPT-NeoX and Llama expanded by K = 2 under every policy, saved, loaded
back with from_pretrained, the same logits and greedy tokens; the smoke preset; a rerun that resumes."""

from __future__ import annotations

import importlib
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from common.models.hf_decoder import HFDecoder
from common.models.hf_expand import FUNCTION_ATOL, POLICIES, greedy_tokens
from common.presets.expand_decoder import ARMS
from common.runs import run_store
from common.training import long_run
from tests.helpers import hf_tiny

main = importlib.import_module("10_expand_decoder").main
FLAGS = ["--device", "cpu", "--seq-len", "16", "--sequences", "8", "--batch-size", "4", "--held-out-tokens", "512"]


@pytest.mark.parametrize("layout", ["gpt_neox", "llama"])
def test_every_policy_saves_an_expansion_that_loads_and_computes_the_same_function(layout, tmp_path, capsys):
    model = hf_tiny.save(layout, tmp_path / "model")
    text = hf_tiny.text(tmp_path)
    save, out = tmp_path / "expanded", tmp_path / "runs"
    argv = [
        "--model-path",
        str(model),
        "--text-file",
        str(text),
        "--blocks",
        "2",
        "--save",
        str(save),
        "--out",
        str(out),
    ]
    assert main([*argv, *FLAGS, "--train-steps", "2", "--n-evals", "2"]) == 0
    printed = capsys.readouterr().out
    assert "| place | copy of | V_S,l |" in printed and "held-out loss" in printed
    [run] = run_store.run_dirs(out / "expand_decoder")
    result = run_store.read_result(run)
    assert set(result["policies"]) == set(ARMS) and len(result["ranking"]) == 4
    original = AutoModelForCausalLM.from_pretrained(model).eval()
    tokenizer = AutoTokenizer.from_pretrained(model)
    x = torch.tensor([tokenizer(text.read_text()[:200])["input_ids"][:24]])
    for policy in POLICIES:
        folder = save / f"{policy}-K2"
        report = json.loads((folder / "expansion_report.json").read_text())
        assert report["places"] == result["policies"][policy]["places"] and report["reloaded_check"]["passed"]
        expanded = AutoModelForCausalLM.from_pretrained(folder).eval()
        assert expanded.config.num_hidden_layers == 5 and AutoTokenizer.from_pretrained(folder)("a")["input_ids"] == [
            97
        ]
        with torch.no_grad():
            diff = (expanded(x).logits - original(x).logits).abs().max()
        assert diff <= FUNCTION_ATOL
        assert greedy_tokens(expanded, x[:, :6]) == greedy_tokens(original, x[:, :6])
        curve = result["policies"][policy]["training"]
        assert [c["step"] for c in curve] == [0, 2] and result["policies"][policy]["held_out_loss"] == curve[-1][
            "held_out_loss"
        ]
    assert len(HFDecoder(original).blocks) == 3  # the source folder untouched
    before = {p: p.stat().st_mtime_ns for p in run.iterdir()}
    (save / ".criterion-K2.a1b2c3").mkdir()  # a save killed mid-write leaves its folder beside: not "other content"
    assert main([*argv, *FLAGS, "--train-steps", "2", "--n-evals", "2"]) == 0  # finished: nothing redone
    assert {p: p.stat().st_mtime_ns for p in run.iterdir()} == before
    none = result["policies"]["none"]  # the control: no layer added, as many of its own trained the same steps
    assert none["places"] == [] and len(none["trained_layers"]) == 2 and none["held_out_loss"] is not None
    assert not (save / "none-K2").exists()
    elsewhere = tmp_path / "elsewhere"  # the finished run wrote its checkpoints into --save's first folder
    capsys.readouterr()
    assert (
        main([*argv[:-4], "--save", str(elsewhere), "--out", str(out), *FLAGS, "--train-steps", "2", "--n-evals", "2"])
        == 2
    )
    err = capsys.readouterr().err
    assert f"run {run.name} is finished and its expansions" in err and "--save" in err and not elsewhere.exists()


def test_smoke_preset_runs_and_a_killed_run_resumes_at_its_policy(tmp_path, capsys, monkeypatch, caplog):
    out = tmp_path / "runs"
    monkeypatch.setattr(long_run, "LONG_S", 0.0)  # every training is "long": each policy's estimate is announced
    with caplog.at_level("WARNING", logger=long_run.__name__):
        assert main(["--preset", "smoke", "--device", "cpu", "--out", str(out)]) == 0
    announced = [r.getMessage() for r in caplog.records if r.name == long_run.__name__]
    assert len(announced) == len(ARMS)  # once per arm: each trains its layers (the control its own)
    assert all(x.startswith("--train-steps ") and "a killed run resumes at its policy" in x for x in announced)
    [run] = run_store.run_dirs(out / "expand_decoder")
    first = run_store.read_result(run)
    assert first["model"]["model_class"] == "LlamaForCausalLM" and first["blocks"] == 2
    lines = run_store.read_metrics(run)
    (run / run_store.RESULT).unlink()  # killed after two policies: their lines stay, the rest is redone
    (run / run_store.METRICS).write_text("".join(json.dumps(line) + "\n" for line in lines[:2]))
    assert main(["--preset", "smoke", "--device", "cpu", "--out", str(out)]) == 0
    again = run_store.read_result(run)
    assert again["policies"] == first["policies"] and len(run_store.read_metrics(run)) == len(ARMS)
