"""The presets of script 05 (``05_gpt2_ascend.py``, :mod:`common.experiments.gpt2_ascend`): depths, model
dimensions, data and schedule of ``--preset paper``, ``smoke`` and ``mini``.

``paper`` has the paper's dimensions (B.4: d = 768, feed-forward 3072, 12 heads) and a FineWeb-Edu budget of
310,000,347 tokens; the depth grid, context length, vocabulary padding, token batch and every optimiser value are
this reproduction's decisions (docs/decisions.md, section "GPT-2 depth sweep"). ``smoke`` runs the same code paths
on CPython's bundled help texts with the byte tokenizer in minutes on a CPU; ``mini`` (docs/decisions.md, section
"Mini preset") trains a small decoder at five depths on Tiny Shakespeare with the byte tokenizer, one seed.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.data.text_sources import TINY_SHAKESPEARE
from common.errors import ParamError
from common.presets.paper import FINEWEB_EDU_TOKENS, GPT2_HEADS, GPT2_WIDTH
from common.presets.shared_decoder import DecoderPreset, preset_table

PAPER_DEPTHS = (1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, 24)  # L; 12 is GPT-2 Small (B.4's baseline)


@dataclass(frozen=True, kw_only=True)
class GPTPreset(DecoderPreset):
    """What one preset fixes: depths and model dimensions, beside the data, token batch, optimiser and probe of
    :class:`~common.presets.shared_decoder.DecoderPreset`."""

    POSITIVE = (*DecoderPreset.POSITIVE, "n_embd", "n_head")

    depths: tuple[int, ...]
    n_embd: int
    n_head: int
    lr: float  # peak AdamW learning rate
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if not self.depths or min(self.depths) < 1:
            raise ParamError("depths", list(self.depths), "give decoder depths L >= 1, e.g. 1,2,4 or 1:24")
        super().__post_init__()
        if self.n_embd % self.n_head:
            raise ParamError(
                "n_head", self.n_head, f"must divide the width n_embd {self.n_embd} (each head gets n_embd / n_head)"
            )


# fmt: off
PRESETS = preset_table(GPTPreset, {
    #                        paper                smoke            mini
    "depths":               (PAPER_DEPTHS,        (1, 2, 4),       (1, 2, 3, 4, 6)),
    "n_embd":               (GPT2_WIDTH,          64,              64),
    "n_head":               (GPT2_HEADS,          4,               4),
    "block_size":           (1024,                128,             128),
    "source":               ("fineweb-edu",       "python-docs",   "text"),
    "text":                 (None,                None,            TINY_SHAKESPEARE),
    "tokenizer":            ("gpt2",              "byte",          "byte"),
    "val_tokens":           (1 << 21,             1 << 14,         1 << 15),
    "train_tokens":         (FINEWEB_EDU_TOKENS,  None,            None),
    "batch_tokens":         (1 << 17,             16 * 128,        16 * 128),
    "micro_batch_size":     (16,                  8,               16),
    "steps":                (None,                60,              300),
    "n_evals":              (10,                  3,               4),
    "lr":                   (6e-4,                3e-3,            3e-3),
    "warmup_steps":         (100,                 6,               30),
    "probe_batch_size":     (8,                   8,               8),
    "probe_batches":        (10,                  4,               4),
    "exact":                (False,               True,            True),
    "eval_batch_size":      (16,                  32,              32),
})
# fmt: on
PAPER, SMOKE, MINI = (PRESETS[name] for name in ("paper", "smoke", "mini"))
