"""The sections both decoder experiments' run configs share, typed (scripts 04 and 05: ``pythia_cpt_config.py``,
``gpt2_ascend_config.py`` beside their job modules build on them).

:class:`DecoderProbe` is the ``probe`` section (:func:`~common.experiments.shared.decoder_runs.probe_config`),
:class:`DecoderRuntime` the ``runtime`` keys both write (:func:`~common.experiments.shared.decoder_runs.runtime_config`),
:class:`AdamWTrain` the ``train`` section of a run that trains (the :class:`~common.training.recipes.AdamWRecipe`'s
fields and the step's tokens); the ``data`` section is :class:`~common.data.text_sources.TextDataSpec` itself.
docs/design.md, section "A job reads its config once".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.data.text_sources import TextDataSpec
from common.runs.typed_config import from_mapping, to_mapping
from common.training.recipes import AdamWRecipe


@dataclass(frozen=True)
class DecoderProbe:
    """``probe``: ``n_batches`` batches of ``batch_size`` windows of ``split``, drawn with ``seed``; ``exact``: ``V_S,l``
    beside ``AG_l``; ``loss`` says which loss, as text."""

    split: str
    batch_size: int
    n_batches: int
    exact: bool
    seed: int
    loss: str


@dataclass(frozen=True)
class DecoderRuntime:
    """``runtime`` keys of both decoder experiments: device, autocast, micro-batch and evaluation batch, the text read
    (None: the source's own) and the token data root."""

    device: str
    amp: bool
    micro_batch_size: int
    eval_batch_size: int
    text_path: str | None
    data_root: str | None  # None: a record made portable whose root lay outside the repository


@dataclass(frozen=True)
class AdamWTrain:
    """``train`` of a decoder run that trains: its :class:`~common.training.recipes.AdamWRecipe` (the fields) and the
    tokens of one optimizer step."""

    steps: int
    lr: float
    eval_interval: int
    warmup_steps: int
    min_lr_ratio: float
    weight_decay: float
    beta1: float
    beta2: float
    eps: float
    grad_clip: float | None
    label_smoothing: float
    batch_tokens: int

    @property
    def recipe(self) -> AdamWRecipe:
        """The optimiser and schedule these keys store (:meth:`AdamWRecipe.from_config`)."""
        return AdamWRecipe.from_config(to_mapping(self))


def text_source(run: Any) -> tuple[TextDataSpec, str | None, str | None, str]:
    """The data identity, data root, text path and run name of a typed decoder run (``data``, ``runtime``, ``name``),
    or read from a planned config dict's (what the scripts prepare before any job)."""
    if isinstance(run, Mapping):
        spec = from_mapping(TextDataSpec, run["data"], "data.")
        return spec, run["runtime"]["data_root"], run["runtime"]["text_path"], run["name"]
    return run.data, run.runtime.data_root, run.runtime.text_path, run.name


__all__ = ["AdamWTrain", "DecoderProbe", "DecoderRuntime", "text_source"]
