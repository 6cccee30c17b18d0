"""benchmarks/gpu_throughput.py end to end at toy sizes on the CPU (``--device cpu --quick``): every part runs and
the JSON report holds its numbers. It checks the script, not a device (the GPU numbers: benchmarks/README.md)."""

import importlib
import json

import torch

throughput = importlib.import_module("benchmarks.gpu_throughput")


def test_quick_cpu_run_writes_every_part_of_the_report(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert throughput.main(["--device", "cpu", "--quick", "--out", str(tmp_path / "r.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    report = json.loads((tmp_path / "r.json").read_text())
    parts = report["parts"]
    assert set(parts) == {"epoch", "sharing", "probe", "gpt2", "compile"} and report["quick"] is True
    assert [(r["n"], r["mode"]) for r in parts["epoch"]["rows"]] == [
        (0, "eager"),
        (0, "compiled"),
        (1, "eager"),
        (1, "compiled"),
    ]
    assert all(r["epoch_s_50k"] > 0 for r in parts["epoch"]["rows"])
    assert [r["processes"] for r in parts["sharing"]["rows"]] == [1, 2] and parts["sharing"]["rows"][0][
        "speedup_vs_one"
    ] == 1
    assert [r["n"] for r in parts["compile"]["rows"]] == [0, 2]
    assert parts["probe"]["ag_over_train_step"] > 0 and parts["probe"]["exact_over_train_step"] > 0
    assert parts["gpt2"]["tokens_per_s"] > 0 and parts["gpt2"]["flops_per_token"] > 0
