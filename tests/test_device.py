"""common/device.py: device resolution, autocast dtype, RNG state round trip."""

import random

import numpy as np
import pytest
import torch

from common import device, runs
from common.errors import UserError


def test_cpu_and_auto_resolve():
    assert device.resolve_device("cpu").type == "cpu"
    assert device.resolve_device("auto").type in {"cpu", "cuda", "npu", "mps"}
    assert device.autocast_dtype(torch.device("cpu")) is None


def test_unavailable_device_is_a_user_error():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    with pytest.raises(UserError, match="--device cuda"):
        device.resolve_device("cuda")


def test_rng_state_survives_weights_only_checkpoint(tmp_path):
    device.seed_everything(3)
    runs.save_checkpoint(tmp_path / "c.pt", {"rng": device.rng_state()})
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    device.seed_everything(99)
    device.set_rng_state(runs.load_checkpoint(tmp_path / "c.pt")["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
