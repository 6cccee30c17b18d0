"""Script 10's text windows and its continued training of only the new layers (LLaMA-Pro's recipe, at equal steps).

The text's tokens are split once (:func:`split_tokens`): the first ``held_out_tokens`` are held out (the held-out
loss only); the rest is the training text, whose first ``sequences`` windows are the probe sample and from which
the training batches are drawn. A window is ``seq_len + 1`` tokens (inputs and next-token targets).

:func:`train_new_layers` trains the inserted layers alone (every other parameter frozen), with AdamW (betas
0.9 / 0.95, no weight decay: the copies start from their source's weights and zero projections), 10% linear
warm-up then a constant learning rate, the gradient's global norm clipped to 1, in eval mode (no dropout: the
models 10 expands train without it, and every policy then sees the same function of its batches). The batches'
order comes from the run's seed alone, so every policy of a run trains on the same batches in the same order: the
policies differ only in where their copies sit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from common.data.text_sources import require_tokens
from common.models.hf_decoder import HFDecoder
from common.science.activations import mean_loss
from common.training.epoch import classification_loss
from common.training.long_run import TIMED_STEPS, StepClock

BETAS = (0.9, 0.95)
WARMUP_FRACTION = 0.1
GRAD_CLIP = 1.0


@dataclass(frozen=True)
class TextSplit:
    """The held-out windows, the probe windows and the training tokens of one text (module docstring)."""

    held_out: list[tuple[torch.Tensor, torch.Tensor]]
    probe: list[tuple[torch.Tensor, torch.Tensor]]
    train_tokens: torch.Tensor  # 1-D
    seq_len: int


def windows(tokens: torch.Tensor, seq_len: int, count: int | None = None) -> torch.Tensor:
    """Consecutive non-overlapping windows of ``seq_len + 1`` tokens from the start (``count`` of them, or all)."""
    n = (len(tokens) - 1) // seq_len
    n = n if count is None else min(n, count)
    starts = torch.arange(n) * seq_len
    return (
        torch.stack([tokens[s : s + seq_len + 1] for s in starts.tolist()]) if n else tokens.new_zeros(0, seq_len + 1)
    )


def batches_of(w: torch.Tensor, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(b[:, :-1], b[:, 1:]) for b in w.split(batch_size)]


def split_tokens(
    tokens: torch.Tensor, *, held_out_tokens: int, seq_len: int, sequences: int, batch_size: int, what: str
) -> TextSplit:
    """The split of the module docstring; too short a text is one line naming the flags
    (:func:`common.data.text_sources.require_tokens`, the check 04 and 05 make too)."""
    split = f"--held-out-tokens {held_out_tokens:,} and --sequences {sequences} of --seq-len {seq_len}"
    need = held_out_tokens + sequences * seq_len + 1 + seq_len
    require_tokens(len(tokens), need, what, split, "give a longer --text-file or smaller values")
    held, rest = tokens[:held_out_tokens], tokens[held_out_tokens:]
    probe = windows(rest, seq_len, sequences)
    return TextSplit(batches_of(windows(held, seq_len), batch_size), batches_of(probe, batch_size), rest, seq_len)


def held_out_loss(decoder: HFDecoder, split: TextSplit) -> float:
    """The mean token loss (float64) over the held-out windows."""
    return mean_loss(decoder, split.held_out, classification_loss)


def eval_steps(steps: int, n_evals: int) -> list[int]:
    """``n_evals`` evaluation points from step 0 to ``steps`` (both included when ``n_evals`` >= 2)."""
    if n_evals <= 1:
        return [steps]
    return sorted({round(i * steps / (n_evals - 1)) for i in range(n_evals)})


def _batch(tokens: torch.Tensor, seq_len: int, batch_size: int, generator: torch.Generator):
    starts = torch.randint(0, len(tokens) - seq_len - 1, (batch_size,), generator=generator)
    w = torch.stack([tokens[s : s + seq_len + 1] for s in starts.tolist()])
    return w[:, :-1], w[:, 1:]


def train_new_layers(
    decoder: HFDecoder,
    new_layers: Sequence[int],
    split: TextSplit,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    n_evals: int,
    seed: int,
) -> list[dict]:
    """Train ``decoder.blocks[i]`` for ``i`` in ``new_layers`` alone for ``steps`` steps; the curve
    ``[{step, train_loss, held_out_loss}]`` (``train_loss``: the mean over the steps since the last evaluation)."""
    device = next(decoder.parameters()).device
    for p in decoder.parameters():
        p.requires_grad_(False)
    params = [p for i in new_layers for p in decoder.blocks[i].parameters()]
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=lr, betas=BETAS, weight_decay=0.0)
    warmup = max(1, round(WARMUP_FRACTION * steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    generator = torch.Generator().manual_seed(seed)
    evals = set(eval_steps(steps, n_evals))
    curve, losses = [], []
    decoder.eval()
    fix = "interrupt and pass fewer, or let it run: a killed run resumes at its policy"
    clock = StepClock(steps, f"--train-steps {steps}", fix, min_steps=TIMED_STEPS)  # held-out evaluations included
    clock.start(0)
    for step in range(steps + 1):
        clock.tick(step)
        if step in evals:
            train = sum(losses) / len(losses) if losses else None
            curve.append({"step": step, "train_loss": train, "held_out_loss": held_out_loss(decoder, split)})
            losses = []
        if step == steps:
            break
        x, y = _batch(split.train_tokens, split.seq_len, batch_size, generator)
        loss = classification_loss(decoder(x.to(device)), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    for p in decoder.parameters():
        p.requires_grad_(False)
    return curve
