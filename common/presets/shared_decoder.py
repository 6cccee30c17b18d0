"""What a preset of either decoder experiment (scripts 04 and 05) fixes: :class:`DecoderPreset`, and
:func:`preset_table`, which reads a table of presets written one row per field, one column per preset.

Each preset dataclass checks its own values once, when it is made (from the table, or with the flags' values
by :func:`dataclasses.replace`): a bad value is a :class:`common.errors.ParamError` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeVar

from common.data.text_sources import RemoteText
from common.errors import ParamError

PRESET_NAMES = ("paper", "smoke", "mini")  # the columns of a decoder preset table, in this order


@dataclass(frozen=True, kw_only=True)
class DecoderPreset:
    """What a preset of either decoder experiment fixes about data, token batch, AdamW schedule and probe.

    The peak learning rate is each experiment's own field (script 04: one per model unless given).
    """

    # the fields that must be > 0 where set (not None); a subclass adds its own
    POSITIVE: ClassVar[tuple[str, ...]] = (
        "block_size",
        "val_tokens",
        "batch_tokens",
        "micro_batch_size",
        "n_evals",
        "probe_batch_size",
        "probe_batches",
        "eval_batch_size",
        "lr",
        "grad_clip",
    )

    source: str
    tokenizer: str
    block_size: int  # context length T of the training and probe windows
    val_tokens: int  # held-out validation shard (the first documents of the stream)
    train_tokens: int | None  # the training token budget (None: all the source has)
    batch_tokens: int  # tokens per optimizer step (gradient accumulation reaches it)
    micro_batch_size: int  # sequences per forward and backward on one device (runtime)
    steps: int | None  # optimizer steps; None: train_tokens // batch_tokens (one pass over the budget)
    n_evals: int  # evaluation rounds (and checkpoints) over the run; steps is rounded down to a multiple
    warmup_steps: int
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    probe_batch_size: int = 8  # sequences per analysis batch
    probe_batches: int = 10  # B
    exact: bool = False
    eval_batch_size: int = 16
    text: RemoteText | None = None  # a text source without --text-file: this file, downloaded into data/

    def __post_init__(self) -> None:
        """Sizes, ``lr`` and ``grad_clip`` > 0, ``warmup_steps`` >= 0, and a step of whole windows."""
        for name in self.POSITIVE:
            value = getattr(self, name, None)
            if value is not None and not value > 0:
                raise ParamError(name, value, "must be positive")
        if self.warmup_steps < 0:
            raise ParamError("warmup_steps", self.warmup_steps, "must be >= 0")
        if self.batch_tokens % self.block_size:
            raise ParamError("batch_tokens", self.batch_tokens, f"is not a multiple of block_size {self.block_size}")


P = TypeVar("P", bound=DecoderPreset)


def preset_table(cls: type[P], rows: dict[str, tuple]) -> dict[str, P]:
    """The presets of ``rows`` (a field -> its value under each of :data:`PRESET_NAMES`), by name; a field that no
    row names keeps the dataclass's default in every preset."""
    for name, values in rows.items():
        if len(values) != len(PRESET_NAMES):
            raise ValueError(f"{cls.__name__} table: {name} has {len(values)} values for {len(PRESET_NAMES)} presets")
    return {preset: cls(**{name: values[i] for name, values in rows.items()}) for i, preset in enumerate(PRESET_NAMES)}
