"""A run's config of script 10, typed: what :func:`~common.experiments.expand_decoder.expand_run` reads.

:class:`ExpandRun` holds the keys :func:`~common.experiments.expand_decoder.expand_configs` writes, the text's identity
as :class:`ExpandText` and ``runtime`` as :class:`ExpandRuntime`. The model's identity stays the mapping it is: its
keys depend on its ``kind`` (``tiny``: a Llama's keys; ``gpt2_ascend``: the 05 run; ``folder``: a name and weight
hashes; ``hub``: an id and revision; :func:`~common.experiments.expand_decoder.model_source`). The job reads the
config once (:meth:`ExpandRun.from_config`: an unknown or missing key is refused by name); every setting's default
is its preset's (:mod:`common.presets.expand_decoder`); docs/design.md, section "A job reads its config once".
"""

from __future__ import annotations

from dataclasses import dataclass

from common.runs.typed_config import TypedConfig, optional


@dataclass(frozen=True)
class ExpandText:
    """``text``: its ``source``; a ``--text-file``'s name and fingerprint (absent for the smoke source)."""

    source: str
    text_name: str | None = optional()
    text_sha256: str | None = optional()


@dataclass(frozen=True)
class ExpandRuntime:
    """``runtime``: the device; where the model is (a 05 run's directory, a folder) and the text file, each only
    where the run has one; ``--save``'s folder, only where asked for."""

    device: str
    from_run: str | None = optional()
    model_path: str | None = optional()
    text_path: str | None = optional()
    save: str | None = optional()


@dataclass(frozen=True)
class ExpandRun(TypedConfig):
    """One (K, seed) run of script 10, typed: the model, the text and its split (``held_out_tokens``, ``seq_len``,
    ``sequences`` of ``batch_size``), the ``blocks`` K each of the ``policies`` inserts, and the new layers'
    training (``train_steps`` of ``train_batch_size`` at ``train_lr``, ``n_evals`` evaluations)."""

    experiment: str
    name: str
    preset: str
    model: dict
    text: ExpandText
    blocks: int
    seed: int
    policies: tuple[str, ...]
    seq_len: int
    sequences: int
    batch_size: int
    held_out_tokens: int
    train_steps: int
    train_batch_size: int
    train_lr: float
    n_evals: int
    runtime: ExpandRuntime


__all__ = ["ExpandRun", "ExpandRuntime", "ExpandText"]
