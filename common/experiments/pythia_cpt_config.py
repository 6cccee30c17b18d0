"""A Pythia run's config of script 04, typed: what :func:`~common.experiments.pythia_cpt.pythia_cpt_run` reads.

:class:`CPTRun` holds the keys :func:`~common.experiments.pythia_cpt.cpt_configs` writes: the model (:class:`CPTModel`:
a Hub id or folder at a revision, or a tiny GPT-NeoX's keys), the data (:class:`~common.data.text_sources.TextDataSpec`),
the continued pretraining (:class:`CPTTrain`), the probe and ``runtime`` (:class:`CPTRuntime`). The job reads it
once (:meth:`CPTRun.from_config`: an unknown or missing key is refused by name); every setting's default is its
preset's (:mod:`common.presets.pythia_cpt`); docs/design.md, section "A job reads its config once".
"""

from __future__ import annotations

from dataclasses import dataclass

from common.data.text_sources import TextDataSpec
from common.experiments.shared.decoder_runs_config import DecoderProbe, DecoderRuntime
from common.runs.typed_config import TypedConfig, optional, to_mapping
from common.training.recipes import AdamWRecipe


@dataclass(frozen=True)
class CPTModel:
    """``model``: a Hub id or local folder (``model``) at ``revision``, or (smoke) ``tiny``, the keys of a GPT-NeoX
    built and saved in the run (``model`` and ``revision`` then None)."""

    model: str | None
    revision: str | None
    tiny: dict | None


@dataclass(frozen=True)
class CPTTrain:
    """``train``: ``steps`` of continued pretraining (0: the loaded model is probed as it is, and the recipe's other
    fields are absent), :class:`~common.training.recipes.AdamWRecipe`'s fields, the tokens of a step and the window."""

    steps: int
    batch_tokens: int
    block_size: int
    # The recipe's fields but its steps: absent with steps 0 (mini), present otherwise.
    lr: float | None = optional()
    eval_interval: int | None = optional()
    warmup_steps: int | None = optional()
    min_lr_ratio: float | None = optional()
    weight_decay: float | None = optional()
    beta1: float | None = optional()
    beta2: float | None = optional()
    eps: float | None = optional()
    grad_clip: float | None = optional()
    label_smoothing: float | None = optional()

    @property
    def recipe(self) -> AdamWRecipe:
        """The optimiser and schedule these keys store (:meth:`AdamWRecipe.from_config`; steps > 0 only)."""
        return AdamWRecipe.from_config(to_mapping(self))


@dataclass(frozen=True)
class CPTRuntime(DecoderRuntime):
    """``runtime``: the decoders' keys, FSDP2 (``fsdp``; ``fsdp_bf16_params``: bf16 unsharded parameters, written only
    when asked for), gradient checkpointing (True, False or "auto": by the memory estimate), the CPU's intra-op
    threads (None: torch's) and the probe's sub-batch (None: whole batches)."""

    fsdp: bool
    gradient_checkpointing: bool | str
    cpu_threads: int | None
    probe_sub_batch: int | None
    fsdp_bf16_params: bool = optional(False)


@dataclass(frozen=True)
class CPTRun(TypedConfig):
    """One (model, seed) run of script 04, typed."""

    experiment: str
    name: str
    preset: str
    seed: int
    model: CPTModel
    data: TextDataSpec
    train: CPTTrain
    probe: DecoderProbe
    runtime: CPTRuntime


__all__ = ["CPTModel", "CPTRun", "CPTRuntime", "CPTTrain"]
