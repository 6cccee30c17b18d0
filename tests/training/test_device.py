"""common/training/device.py: device resolution, autocast dtype, RNG state round trip."""

import random

import numpy as np
import pytest
import torch

from common.errors import UserError
from common.runs import run_store
from common.training import device


@pytest.mark.parametrize(
    "visible, expected", [((), "cpu"), (("mps",), "mps"), (("cuda", "mps"), "cuda"), (("cuda",), "cuda")]
)
def test_auto_picks_cuda_before_mps_before_cpu_among_the_visible(monkeypatch, visible, expected):
    # Availability mocked: what this machine has must not decide the test. No NPU (torch.device("npu") exists
    # only once torch_npu is imported).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: "cuda" in visible)
    monkeypatch.setattr(device, "npu_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: "mps" in visible)
    assert device.resolve_device("auto") == torch.device(expected)
    assert device.resolve_device("cpu") == torch.device("cpu")  # always there, whatever else is visible
    assert device.autocast_dtype(torch.device("cpu")) is None  # no bf16 autocast on the CPU


def test_unavailable_device_is_a_user_error():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    with pytest.raises(UserError, match="--device cuda"):
        device.resolve_device("cuda")


def test_rng_state_survives_weights_only_checkpoint(tmp_path):
    device.seed_everything(3)
    run_store.save_checkpoint(tmp_path / "c.pt", {"rng": device.rng_state()})
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    device.seed_everything(99)
    device.set_rng_state(run_store.load_checkpoint(tmp_path / "c.pt")["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
