"""Gradient checkpointing by a memory estimate (common/training/memory.py): its arithmetic on the issue's numbers,
the choice per model and device, the flag winning, and what script 04 plans and records.

Every number is an integer count of bytes, so the arithmetic is checked exactly. Device memories are what
``torch.cuda.get_device_properties(...).total_memory`` reports: an H100 SXM 80 GB 85,520,809,984 bytes (79.6 GiB),
an H200 150,754,820,096 bytes (140.4 GiB).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from common.experiments import pythia_cpt
from common.experiments.pythia_cpt import cpt_configs
from common.models.hf_decoder import HFDecoder
from common.runs import run_store
from common.training import memory as memory_training
from common.training.losses import CHUNK_ELEMENTS
from common.training.memory import (
    FIT_FRACTION,
    DecoderShape,
    choose_checkpointing,
    device_memory,
    hf_shape,
    needs_checkpointing,
    training_memory,
)
from tests.helpers import hf_tiny

H100 = 85_520_809_984
H200 = 150_754_820_096
# The six deduplicated Pythia models: (parameters, layers, width); feed-forward 4 d, vocabulary 50,304 rows.
PYTHIA = {
    "70m": (70_426_624, 6, 512),
    "160m": (162_322_944, 12, 768),
    "410m": (405_334_016, 24, 1024),
    "1b": (1_011_781_632, 16, 2048),
    "1.4b": (1_414_647_808, 24, 2048),
    "2.8b": (2_775_208_960, 32, 2560),
}


def pythia(size: str) -> DecoderShape:
    params, layers, width = PYTHIA[size]
    return DecoderShape(params=params, n_layer=layers, d_model=width, ffn=4 * width, vocab=50304)


def test_the_issues_numbers_for_pythia_2_8b_at_4_x_2048_tokens():
    e = training_memory(pythia("2.8b"), micro_batch=4, block_size=2048)
    p, n = 2_775_208_960, 4 * 2048
    assert e.state == 16 * p == 44_403_343_360  # float32 weights + gradients + AdamW's two moments: "~45 GB"
    assert e.weight_copies == 2 * p
    assert e.activations == 2 * n * 32 * (8 * 2560 + 2 * 10240) == 21_474_836_480  # "~20+ GB"
    assert e.activations_checkpointed == 2 * n * 2560 * 32 + 2 * n * (8 * 2560 + 2 * 10240)
    assert e.logits == 2 * 2 * n * 50304 + 4 * CHUNK_ELEMENTS
    assert e.total(False) == e.state + e.weight_copies + e.activations + e.logits == 73_211_176_960
    assert e.record()["total_checkpointed"] == e.total(True) < e.total(False)
    # Fits an H200 with room to spare; past FIT_FRACTION of an 80 GB H100 (marginal: 86% of it), so on there.
    assert not needs_checkpointing(e, H200) and needs_checkpointing(e, H100)
    assert 0.85 < e.total(False) / H100 < 0.87 and FIT_FRACTION == 0.8


@pytest.mark.parametrize("size", ["70m", "160m", "410m", "1b", "1.4b"])
def test_the_five_smaller_pythia_models_train_without_checkpointing_on_an_h100(size):
    assert not needs_checkpointing(training_memory(pythia(size), micro_batch=4, block_size=2048), H100)


def test_float32_activations_a_gated_mlp_and_fsdp_shards():
    shape = DecoderShape(params=1000, n_layer=2, d_model=4, ffn=8, vocab=10, gated=True)
    e = training_memory(shape, micro_batch=3, block_size=5, amp=False, shards=3)
    assert e.weight_copies == 0  # no autocast
    assert e.activations == 4 * 15 * 2 * (8 * 4 + 4 * 8)  # 4-byte values, the gated MLP's four f-wide tensors
    assert e.state == -(-16_000 // 3) == 5334  # each of 3 processes holds its shard (rounded up)
    assert e.logits == 2 * 4 * 15 * 10 + 4 * 15 * 10  # the whole float32 "chunk" is the batch's 150 logits


def test_the_flag_wins_and_an_unknown_memory_keeps_checkpointing_on():
    e = training_memory(pythia("2.8b"), micro_batch=4, block_size=2048)
    assert choose_checkpointing(True, e, H200) == (True, "asked")
    assert choose_checkpointing(False, e, H100) == (False, "asked")
    assert choose_checkpointing("auto", e, H200) == (False, "memory estimate")
    assert choose_checkpointing(None, e, H100) == (True, "memory estimate")
    assert choose_checkpointing("auto", e, None) == (True, "memory estimate")
    with pytest.raises(ValueError, match="true, false or auto"):
        choose_checkpointing("sometimes", e, H200)


def test_the_shape_of_hugging_face_decoders():
    neox = HFDecoder(hf_tiny.build("gpt_neox"))
    shape = hf_shape(neox.lm, neox.n_layer, neox.d_model)
    assert shape == DecoderShape(
        params=sum(p.numel() for p in neox.lm.parameters()), n_layer=3, d_model=16, ffn=32, vocab=hf_tiny.VOCAB
    )
    llama = HFDecoder(hf_tiny.build("llama"))
    assert hf_shape(llama.lm, llama.n_layer, llama.d_model).gated
    gpt2 = HFDecoder(hf_tiny.build("gpt2"))  # n_inner None: 4 d; the tied head counted once
    g = hf_shape(gpt2.lm, gpt2.n_layer, gpt2.d_model)
    assert g.ffn == 64 and not g.gated and g.params == sum(p.numel() for p in gpt2.lm.parameters())


def test_the_cpu_reports_the_hosts_memory():
    memory = device_memory(torch.device("cpu"))
    assert isinstance(memory, int) and memory > 2**28


def test_the_paper_preset_plans_auto_and_the_flags_fix_it():
    runtime = [c["runtime"]["gradient_checkpointing"] for c in cpt_configs(preset="paper")]
    assert runtime == ["auto"] * 6
    assert cpt_configs(preset="smoke")[0]["runtime"]["gradient_checkpointing"] is True
    [off] = {c["runtime"]["gradient_checkpointing"] for c in cpt_configs(overrides={"gradient_checkpointing": False})}
    assert off is False
    paper = cpt_configs(preset="paper")[0]
    assert run_store.config_hash(paper) == run_store.config_hash(
        {**paper, "runtime": {**paper["runtime"], "gradient_checkpointing": True}}
    )  # runtime, not identity: the run's hash is the one it had when the preset said True


@pytest.mark.parametrize(("asked", "capacity", "chosen", "by"), [
    ("auto", 10**6, True, "memory estimate"),
    ("auto", 10**15, False, "memory estimate"),
    (False, 10**6, False, "asked"),
])  # fmt: skip
def test_a_run_chooses_and_records(asked, capacity, chosen, by, monkeypatch, caplog):
    """:func:`pythia_cpt._memory_choice` on a tiny GPT-NeoX: the estimate at the loader's micro-batch against the
    device's memory (here a stated one), or the flag."""
    monkeypatch.setattr(memory_training, "device_memory", lambda device: capacity)
    decoder = HFDecoder(hf_tiny.build("gpt_neox"))
    settings = SimpleNamespace(amp=True, fsdp=False)
    with caplog.at_level(logging.INFO, logger=pythia_cpt.__name__):
        choice = pythia_cpt._memory_choice(
            decoder,
            SimpleNamespace(gradient_checkpointing=asked),
            settings,
            SimpleNamespace(micro_batch=4),
            32,
            torch.device("cpu"),
            SimpleNamespace(world_size=1),
        )
    expected = training_memory(
        hf_shape(decoder.lm, 3, 16), micro_batch=4, block_size=32, amp=False
    )  # no bf16 autocast on the CPU
    assert choice["gradient_checkpointing"] is chosen and choice["by"] == by
    assert choice["estimate"] == {**expected.record(), "device_memory": capacity, "fit_fraction": FIT_FRACTION}
    assert ("gradient checkpointing" in caplog.text) == (by == "memory estimate")
