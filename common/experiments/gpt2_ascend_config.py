"""A GPT-2 depth-sweep run's config of script 05, typed: what :func:`~common.experiments.gpt2_ascend.train_gpt_run`
reads.

:class:`GPTRun` holds the keys :func:`~common.experiments.gpt2_ascend.gpt_configs` writes: the model beside its depth
``n_layer`` (:class:`GPTModel`), the data (:class:`~common.data.text_sources.TextDataSpec`), the recipe
(:class:`~common.experiments.shared.decoder_runs_config.AdamWTrain`), the probe and ``runtime``
(:class:`GPTRuntime`). The job reads it once (:meth:`GPTRun.from_config`: an unknown or missing key is refused by
name); every setting's default is its preset's (:mod:`common.presets.gpt2_ascend`); docs/design.md, section "A job
reads its config once".
"""

from __future__ import annotations

from dataclasses import dataclass

from common.data.text_sources import TextDataSpec
from common.experiments.shared.decoder_runs_config import AdamWTrain, DecoderProbe, DecoderRuntime
from common.models.gpt import GPT, GPTConfig
from common.runs.typed_config import TypedConfig, to_mapping


@dataclass(frozen=True)
class GPTModel:
    """``model``: every :class:`~common.models.gpt.GPTConfig` field of the run but its depth."""

    n_embd: int
    n_head: int
    n_inner: int
    block_size: int
    vocab_size: int
    dropout: float
    bias: bool


@dataclass(frozen=True)
class GPTRuntime(DecoderRuntime):
    """``runtime``: the decoders' keys, ``compile`` ("auto": on CUDA only; "on", "off") and the datasheet peak
    (``peak_tflops``, None: the device's known one) of the MFU."""

    compile: str
    peak_tflops: float | None


@dataclass(frozen=True)
class GPTRun(TypedConfig):
    """One (L, seed) run of script 05, typed."""

    experiment: str
    name: str
    preset: str
    n_layer: int
    seed: int
    model: GPTModel
    data: TextDataSpec
    train: AdamWTrain
    probe: DecoderProbe
    runtime: GPTRuntime

    def gpt(self) -> GPT:
        """The untrained GPT-2 of this run (initialised from the current torch RNG)."""
        return GPT(GPTConfig(n_layer=self.n_layer, **to_mapping(self.model)))


__all__ = ["GPTModel", "GPTRun", "GPTRuntime"]
