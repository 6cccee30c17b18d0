"""The presets of script 04 (``04_pythia_cpt.py``, :mod:`common.experiments.pythia_cpt`): models, data and the
continued pretraining's schedule of ``--preset paper``, ``smoke`` and ``mini``.

``paper`` is the six smallest deduplicated Pythia models at revision ``step143000`` (our reading of B.5, which
does not name them) on FineWeb-Edu; token budget, learning rates, warm-up and schedule are this reproduction's
decisions (docs/decisions.md, section "Pythia continued pretraining"). ``smoke`` builds two tiny GPT-NeoX models,
saves each with ``save_pretrained`` and loads it back from disk by path, then runs the same code on CPython's help
texts with the byte tokenizer. ``mini`` probes the two smallest Pythia models frozen (steps 0: no continued
pretraining) on 32 sequences of 256 tokens of Tiny Shakespeare with each model's own tokenizer; offline, 04 says
so and stops (``offline_not_run``). ``paper`` leaves gradient checkpointing to the memory estimate of
:mod:`common.training.memory` (per model and device); ``smoke`` keeps it on, so that the recompute path runs on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.data.text_sources import TINY_SHAKESPEARE
from common.data.tokenizers import ByteTokenizer
from common.errors import ParamError
from common.presets.paper import PYTHIA_REVISION
from common.presets.shared_decoder import DecoderPreset, preset_table

DEFAULT_LR = 1e-4  # a model outside the Pythia table, without --lr
TOKENIZERS = ("model", "byte")  # each model's own, or bytes


@dataclass(frozen=True)
class ModelEntry:
    """One model of a preset: a Hub id (or local path) and revision, or a tiny GPT-NeoX built here (``tiny``)."""

    name: str
    model: str | None  # Hub id or local directory; None for a tiny model
    revision: str | None
    lr: float  # peak CPT learning rate of this size
    tiny: dict | None = None  # GPTNeoXConfig keys of a model built, saved and reloaded by the job


def pythia(size: str, pythia_max_lr: float) -> ModelEntry:
    """A deduplicated Pythia model at step143000; CPT peak lr = 0.1 x its pretraining peak (where its cosine ended)."""
    return ModelEntry(
        f"pythia-{size}-deduped", f"EleutherAI/pythia-{size}-deduped", PYTHIA_REVISION, round(0.1 * pythia_max_lr, 10)
    )


# The six smallest deduplicated Pythia models (B.5 says "six"; layers x d_model in docs/04_pythia_cpt.md),
# with Pythia's own peak learning rates (Biderman et al. 2023, Table 1 / their configs).
PYTHIA_MODELS = (
    pythia("70m", 1e-3),  # 6 x 512
    pythia("160m", 6e-4),  # 12 x 768
    pythia("410m", 3e-4),  # 24 x 1024
    pythia("1b", 3e-4),  # 16 x 2048
    pythia("1.4b", 2e-4),  # 24 x 2048
    pythia("2.8b", 1.6e-4),  # 32 x 2560
)


def tiny_gpt_neox(
    n_layer: int, d_model: int, n_head: int = 4, vocab_size: int = ByteTokenizer.vocab_size, context: int = 128
) -> dict:
    """GPTNeoXConfig keys of a tiny Pythia-like model (parallel residual, partial rotary as Pythia)."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": d_model,
        "num_hidden_layers": n_layer,
        "num_attention_heads": n_head,
        "intermediate_size": 4 * d_model,
        "max_position_embeddings": context,
        "use_parallel_residual": True,
        "tie_word_embeddings": False,
    }


TINY_MODELS = (
    ModelEntry("tiny-neox-L2-d32", None, None, 3e-3, tiny_gpt_neox(2, 32)),
    ModelEntry("tiny-neox-L4-d64", None, None, 3e-3, tiny_gpt_neox(4, 64)),
)


@dataclass(frozen=True, kw_only=True)
class CPTPreset(DecoderPreset):
    """What one preset fixes: the models and their continued pretraining's runtime, beside the data, token batch,
    optimiser and probe of :class:`~common.presets.shared_decoder.DecoderPreset`.

    ``tokenizer`` is ``model`` (each model's own) or ``byte`` (smoke).
    """

    POSITIVE = (*DecoderPreset.POSITIVE, "probe_sub_batch", "cpu_threads")

    models: tuple[ModelEntry, ...]
    lr: float | None = None  # peak AdamW learning rate of every model; None: each model's own (ModelEntry.lr)
    eval_batch_size: int = 8
    probe_sub_batch: int | None = (
        1  # sequences per probe pass (None: the whole batch); runtime, scores do not depend on it
    )
    # True / False: asked for; None: chosen per model and device by common.training.memory's estimate (runtime)
    gradient_checkpointing: bool | None = None
    cpu_threads: int | None = None  # intra-op threads of a CPU run (None: torch's default); runtime, not identity
    # where the Hub cannot be reached, the preset's own models are "not run" (04 says so and exits 0), not an error
    offline_not_run: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tokenizer not in TOKENIZERS:
            raise ParamError("tokenizer", self.tokenizer, "use model (each model's own) or byte")


# fmt: off
PRESETS = preset_table(CPTPreset, {
    #                        paper            smoke             mini
    "models":               (PYTHIA_MODELS,   TINY_MODELS,      PYTHIA_MODELS[:2]),
    "source":               ("fineweb-edu",   "python-docs",    "text"),
    "text":                 (None,            None,             TINY_SHAKESPEARE),
    "tokenizer":            ("model",         "byte",           "model"),
    "block_size":           (2048,            64,               256),
    "val_tokens":           (1 << 21,         1 << 13,          32 * 256 + 1),
    "train_tokens":         (1 << 27,         None,             1 << 13),
    "batch_tokens":         (1 << 19,         16 * 64,          256),
    "micro_batch_size":     (4,               8,                1),
    "steps":                (None,            16,               0),  # mini: the frozen model is probed as loaded
    "n_evals":              (4,               2,                1),
    "warmup_steps":         (25,              2,                0),
    "probe_batch_size":     (8,               4,                8),
    "probe_batches":        (10,              2,                4),
    "exact":                (False,           True,             False),
    "eval_batch_size":      (8,               32,               8),
    "gradient_checkpointing": (None,          True,             False),  # paper: by the memory estimate
    "cpu_threads":          (None,            1,                None),
    "offline_not_run":      (False,           False,            True),
})
# fmt: on
PAPER, SMOKE, MINI = (PRESETS[name] for name in ("paper", "smoke", "mini"))
