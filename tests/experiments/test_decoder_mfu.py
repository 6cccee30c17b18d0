"""Script 05's MFU against the datasheet peak and against a bf16 matmul rate measured at the start of the run.

On the CPU no bf16 rate is measured (None, and so no measured MFU); given a rate, the record's measured MFU is
``tokens_per_s x flops_per_token / rate`` exactly as the record's own numbers give it (the same float64 operations).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from common.experiments.shared import decoder_runs
from common.runs import run_store

script = importlib.import_module("05_gpt2_ascend")
TINY = [
    "--preset",
    "smoke",
    "--n-embd",
    "16",
    "--n-head",
    "2",
    "--block-size",
    "16",
    "--batch-tokens",
    "64",
    "--micro-batch-size",
    "4",
    "--steps",
    "4",
    "--n-evals",
    "2",
    "--val-tokens",
    "256",
    "--probe-batch-size",
    "2",
    "--probe-batches",
    "1",
    "--no-exact",
    "--warmup-steps",
    "1",
    "--device",
    "cpu",
    "--depths",
    "1",
]


def test_the_cpu_measures_no_bf16_matmul_rate():
    assert decoder_runs.matmul_rate(torch.device("cpu")) is None


def test_mfu_is_throughput_times_flops_over_the_devices_rate():
    # 1,000 tokens/s x 6e9 FLOPs a token = 6e12 FLOP/s on 2 devices of 1e13: 30% of their rate.
    assert decoder_runs.mfu(1000.0, 6e9, 1e13, world=2) == pytest.approx(0.3, rel=1e-15)
    assert decoder_runs.mfu(1000.0, 6e9, 1e13) == pytest.approx(0.6, rel=1e-15)
    assert decoder_runs.mfu(1000.0, 6e9, None) is None and decoder_runs.mfu(None, 6e9, 1e13) is None


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("the cat sat on the mat. a dog ran in the park. " * 60)
    return path


@pytest.mark.parametrize("rate", [None, 2.5e11])
def test_a_run_records_both_mfus(rate, corpus, tmp_path, monkeypatch):
    """A CPU run: the measured rate (None there, or a rate a device would have measured) and both MFUs from it."""
    if rate is not None:
        monkeypatch.setattr(decoder_runs, "matmul_rate", lambda device: rate)
    args = [*TINY, "--text-file", str(corpus), "--data-root", str(tmp_path / "tok"), "--out", str(tmp_path / "runs")]
    assert script.main([*args, "--peak-tflops", "0.5"]) == 0
    [run] = (tmp_path / "runs" / "gpt2_ascend").glob("*-L1-*")
    r = run_store.read_result(run)
    assert r["tokens_per_s"] > 0 and r["peak_flops_per_device"] == 0.5e12 and r["world_size"] == 1
    assert r["mfu"] == r["tokens_per_s"] * r["flops_per_token"] / (0.5e12 * 1)
    assert r["matmul_bf16_flops_per_device"] == rate
    if rate is None:
        assert r["mfu_measured"] is None
    else:
        np.testing.assert_equal(r["mfu_measured"], r["tokens_per_s"] * r["flops_per_token"] / (rate * 1))
