"""Script 10's presets: expanding a decoder by copied zero-output layers (docs/decisions.md, section "Expanding a
Hugging Face decoder (10_expand_decoder.py)").

Each field is a flag of script 10 of the same name (``--blocks``, ``--policy``, ``--seq-len``, ``--train-steps``,
...). The probe sample is ``sequences`` windows of ``seq_len`` tokens of the text (after its first
``held_out_tokens``, which only the held-out loss reads); ``train_*`` set the optional continued training of the
new layers. A field's value is checked here, once, naming the field (:class:`common.errors.ParamError`).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import ParamError
from common.presets.choose import names_of

POLICIES = ("criterion", "even", "bi", "ag")  # where the copies go (common.models.hf_expand.choose_places)
# The control arm: the unexpanded model, as many of its own layers as the policies add (those LLaMA Pro's even
# spacing would copy) trained the same steps on the same batches (docs/decisions.md); with no training steps it
# only records the base model's held-out loss.
CONTROLS = ("none",)
ARMS = (*POLICIES, *CONTROLS)


def policies_of(text: str) -> tuple[str, ...]:
    """``--policy``'s type: comma-separated names of :data:`ARMS`, once each."""
    return names_of(text, ARMS, "policies")


@dataclass(frozen=True)
class ExpandPreset:
    """The expansion settings of one preset."""

    blocks: tuple[int, ...] = (1,)  # K: copies inserted; one run per K (and seed)
    policies: tuple[str, ...] = ARMS
    seeds: int = 1  # runs per K (seeds --seed, --seed + 1, ...): they differ in the training batches' order only
    seq_len: int = 128  # tokens per probe and training window
    sequences: int = 32  # probe windows (n = sequences x seq_len tokens)
    batch_size: int = 8  # probe windows per forward/backward
    held_out_tokens: int = 32_768  # the text's first tokens: the held-out loss only
    train_steps: int = 0  # continued training of only the new layers; 0: none
    train_batch_size: int = 16
    train_lr: float = 1e-3  # AdamW peak, 10% linear warm-up, then constant
    n_evals: int = 3  # held-out evaluations over the training (the first at step 0, the last at the end)
    ascend_depth: int | None = None  # the 05 run (this depth L) the preset expands when no model is given
    tiny: bool = False  # no model given: build a tiny Llama locally (smoke)

    def __post_init__(self) -> None:
        if not self.blocks or any(k <= 0 for k in self.blocks):
            raise ParamError("blocks", ",".join(map(str, self.blocks)), "give positive numbers of layers to insert")
        if not self.policies or any(p not in ARMS for p in self.policies):
            raise ParamError("policies", ",".join(self.policies), f"use one or more of {', '.join(ARMS)}")
        for name in ("seeds", "seq_len", "sequences", "batch_size", "held_out_tokens", "train_batch_size", "n_evals"):
            if getattr(self, name) <= 0:
                raise ParamError(name, getattr(self, name), "must be positive")
        if self.train_steps < 0:
            raise ParamError("train_steps", self.train_steps, "must be 0 (no training) or positive")
        if not self.train_lr > 0:
            raise ParamError("train_lr", self.train_lr, "must be positive")


PRESETS = {
    # a tiny Llama built and saved locally, CPython's help texts, K = 2, 4 training steps (seconds)
    "smoke": ExpandPreset(
        blocks=(2,),
        seq_len=32,
        sequences=8,
        batch_size=4,
        held_out_tokens=2048,
        train_steps=4,
        train_batch_size=4,
        n_evals=2,
        tiny=True,
    ),
    # 05's mini decoder at L = 6 on Tiny Shakespeare: K = 1 and 2, 3 seeds, 150 steps of the new layers only
    # (docs/decisions.md, section "Expanding a Hugging Face decoder (10_expand_decoder.py)")
    "mini": ExpandPreset(
        blocks=(1, 2),
        seeds=3,
        seq_len=128,
        sequences=32,
        batch_size=8,
        held_out_tokens=32_768,
        train_steps=150,
        train_batch_size=16,
        train_lr=3e-3,
        n_evals=3,
        ascend_depth=6,
    ),
    # a user's model (--model/--model-path): rank and expand by K = 1, no training unless --train-steps
    "paper": ExpandPreset(blocks=(1,), sequences=64, seq_len=512, batch_size=4, held_out_tokens=131_072),
}


__all__ = ["ARMS", "CONTROLS", "POLICIES", "PRESETS", "ExpandPreset", "policies_of"]
