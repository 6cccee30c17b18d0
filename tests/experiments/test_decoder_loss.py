"""The decoders' training loss: the chunked cross-entropy of bf16 logits against today's ``F.cross_entropy(logits.float())``.

Under bf16 autocast ``common.training.epoch.classification_loss`` takes :func:`common.training.losses.chunked_cross_entropy`; float32
and float64 logits, and label smoothing, stay on ``F.cross_entropy`` bit for bit (so no CPU record moves). On the
CPU, under CPU bf16 autocast, a GPT batch and a GPT-NeoX batch give the loss of today's path to float32 rounding
and the gradient of the logits to bf16 rounding of float32 values equal to float32 rounding.

Tolerances. Each row's loss is ``-log_softmax(x)[y]`` of the same exactly upcast row in both paths; only the order
of the float32 reductions differs, so the two means agree to a few float32 ulps of the loss: ``8 eps32 |loss|``
(measured: under 2 ulps). Against the float64 loss of the same logits each is within a log-sum-exp's float32
error over ``C`` classes, ``(log2 C + 8) eps32 |loss|``. The logits' gradient ``g (softmax - onehot) / N`` is computed
in float32 by both to a few float32 ulps, then rounded to bf16: an element differs only where the two float32
values straddle a bf16 rounding boundary, by one bf16 ulp (at most ``2^-7`` of its size), and such elements are
rare (each needs a float32 difference of a few ulps to cross a boundary that is ``2^16`` float32 ulps wide).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from common.models.gpt import GPT, GPTConfig
from common.models.hf_decoder import HFDecoder
from common.training import losses
from common.training.epoch import classification_loss
from common.training.losses import chunk_rows, chunked_cross_entropy
from tests.helpers import hf_tiny

EPS32 = torch.finfo(torch.float32).eps
BF16_ULP = 2.0**-7  # bf16's spacing relative to a value's size is at most 2^-7 (7 stored mantissa bits)


def today(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The loss before the chunked path: ``F.cross_entropy`` of the whole batch's float32 upcast."""
    return F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten())


def loss_and_logit_grad(loss_fn, logits: torch.Tensor, targets: torch.Tensor, scale: float = 1.0):
    """``loss_fn``'s value and the gradient of ``scale * loss`` with respect to ``logits`` (a leaf)."""
    leaf = logits.detach().requires_grad_()
    loss = loss_fn(leaf, targets)
    (grad,) = torch.autograd.grad(scale * loss, [leaf])
    return loss.detach(), grad


def assert_same_loss_and_grad(logits: torch.Tensor, targets: torch.Tensor) -> None:
    """``classification_loss`` against :func:`today` on the same (bf16) logits, scaled as gradient accumulation does."""
    assert logits.dtype == torch.bfloat16  # the chunked path is the one under test
    new, g_new = loss_and_logit_grad(classification_loss, logits, targets, scale=0.25)
    old, g_old = loss_and_logit_grad(today, logits, targets, scale=0.25)
    exact = F.cross_entropy(logits.flatten(0, -2).double(), targets.flatten())
    assert new.dtype == old.dtype == torch.float32 and g_new.dtype == g_old.dtype == torch.bfloat16
    assert abs(new.item() - old.item()) <= 8 * EPS32 * abs(old.item())
    bound = (math.log2(logits.shape[-1]) + 8) * EPS32 * exact.item()
    assert abs(new.item() - exact.item()) <= bound and abs(old.item() - exact.item()) <= bound
    differ = g_new != g_old
    assert differ.float().mean().item() <= 0.01  # rounding-boundary flips only
    diff = (g_new.float() - g_old.float()).abs()
    assert (diff <= BF16_ULP * g_old.float().abs()).all()


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 7 rows (every test batch spans several, the last one short)."""

    def set_for(classes: int) -> None:
        monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 7 * classes)
        assert chunk_rows(classes) == 7

    return set_for


def test_a_gpt_batch_under_bf16_autocast_gives_todays_loss_and_gradient(small_chunks):
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_embd=32, n_head=2, block_size=16, vocab_size=257))
    x, y = torch.randint(0, 257, (4, 16)), torch.randint(0, 257, (4, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
    small_chunks(logits.shape[-1])
    assert_same_loss_and_grad(logits, y)


def test_a_hugging_face_batch_under_bf16_autocast_gives_todays_loss_and_gradient(small_chunks):
    decoder = HFDecoder(hf_tiny.build("gpt_neox")).train()
    g = torch.Generator().manual_seed(1)
    x, y = (torch.randint(0, hf_tiny.VOCAB, (3, 20), generator=g) for _ in range(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = decoder(x)
    small_chunks(logits.shape[-1])
    assert_same_loss_and_grad(logits, y)


def test_the_parameters_gradient_through_a_gpt_matches_todays(small_chunks):
    """The whole backward under autocast: the weights' gradients of the two losses agree to the rounding of a few
    bf16 logit gradients that the bf16 matmuls carry on (relative Frobenius distance well under one bf16 ulp)."""
    torch.manual_seed(2)
    model = GPT(GPTConfig(n_layer=1, n_embd=32, n_head=2, block_size=16, vocab_size=257))
    x, y = torch.randint(0, 257, (4, 16)), torch.randint(0, 257, (4, 16))
    small_chunks(model.config.padded_vocab_size)
    grads = []
    for loss_fn in (classification_loss, today):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)
        grads.append(torch.autograd.grad(loss_fn(logits, y), list(model.parameters())))
    for new, old in zip(*grads, strict=True):
        assert torch.linalg.vector_norm(new - old) <= BF16_ULP * torch.linalg.vector_norm(old)


def test_float32_logits_in_chunks_give_f_cross_entropy_to_float32_rounding():
    """The chunked function on float32 logits (no bf16 rounding at all): the loss to a few float32 ulps, every
    element of the gradient to float32 rounding of the largest (``softmax - onehot`` is at most 1 over ``N``)."""
    g = torch.Generator().manual_seed(3)
    logits = 4 * torch.randn(50, 300, generator=g, dtype=torch.float32)
    y = torch.randint(0, 300, (50,), generator=g)
    new, g_new = loss_and_logit_grad(lambda z, t: chunked_cross_entropy(z, t, rows=8), logits, y, scale=3.0)
    old, g_old = loss_and_logit_grad(F.cross_entropy, logits, y, scale=3.0)
    assert abs(new.item() - old.item()) <= 8 * EPS32 * abs(old.item())
    assert (g_new - g_old).abs().max().item() <= 8 * EPS32 * g_old.abs().max().item()
    assert g_new.dtype == torch.float32


def test_float32_float64_and_label_smoothing_stay_on_todays_path_bit_for_bit():
    g = torch.Generator().manual_seed(4)
    logits, y = torch.randn(2, 5, 40, generator=g), torch.randint(0, 40, (2, 5), generator=g)
    assert torch.equal(classification_loss(logits, y), F.cross_entropy(logits.flatten(0, 1), y.flatten()))
    as64 = classification_loss(logits.double(), y)
    assert as64.dtype == torch.float64 and torch.equal(
        as64, F.cross_entropy(logits.flatten(0, 1).double(), y.flatten())
    )
    half = logits.bfloat16()
    smoothed = F.cross_entropy(half.flatten(0, 1).float(), y.flatten(), label_smoothing=0.1)
    assert torch.equal(classification_loss(half, y, label_smoothing=0.1), smoothed)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"logits \(N, C\)"):
        chunked_cross_entropy(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long))
