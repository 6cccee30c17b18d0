"""The models of script 04's runs (:mod:`common.experiments.pythia_cpt`): which model a run loads, and how.

A user's model (:func:`user_model`: a Hub id at a revision or a ``save_pretrained`` folder, with the Pythia table's
learning rate where it is one of the six), the data's tokenizer identity (:func:`tokenizer_name`) and the
tokenizer itself (:func:`config_tokenizer`); the mini preset's Hub check (:func:`mini_hub_check`); fetching a Hub
model before a run (:func:`fetch_model`, or once per node under torchrun: :func:`fetch_on_each_node`) and loading
the run's causal LM (:func:`load_run_model`; the smoke preset's tiny GPT-NeoX built and saved first,
:func:`save_tiny_model`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

import torch
from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM

from common.data.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer
from common.errors import ParamError
from common.experiments.pythia_cpt_config import CPTModel, CPTRun
from common.models.hf_decoder import (
    HubUnavailable,
    check_weight_files,
    is_local,
    load_causal_lm,
    resolve_snapshot,
)
from common.presets.pythia_cpt import DEFAULT_LR, MINI, PYTHIA_MODELS, ModelEntry
from common.runs.typed_config import from_mapping
from common.training.distributed import DistInfo, env_info, wait_for_all

BASE_DIR = "base_model"  # smoke: where a run saves its tiny model with save_pretrained


def mini_hub_check(revision: str | None = None) -> str | None:
    """Fetch the mini preset's Pythia models into the Hub cache; None when done, else why not (one line).

    Under ``--preset mini`` a missing Hub is not a user mistake: script 04 prints the reason and exits 0,
    and the claims report says the Pythia rows were not run. No other model ever stands in for them.
    """
    for e in MINI.models:
        try:
            resolve_snapshot(e.model, revision or e.revision)
        except HubUnavailable as exc:
            return f"--preset mini: the Pythia models cannot be fetched, so they are not probed ({exc})"
    return None


def user_model(model: str, revision: str | None, *, local: str | None = None) -> ModelEntry:
    """A ``models`` / ``model_paths`` entry: the Pythia table's lr when it is one of the six, else :data:`DEFAULT_LR`.

    ``local`` (``model_paths``): always a local folder; else a local folder when one exists there, or a Hub id.
    """
    known = {e.model: e for e in PYTHIA_MODELS}
    if local or is_local(model):
        folder = Path(model).expanduser().resolve()
        if not (folder / "config.json").is_file():
            other = "" if local else "a Hub id (owner/name) or "
            raise ParamError(
                local or "models", model, f"no save_pretrained folder there (no config.json); give {other}such a folder"
            )
        return ModelEntry(folder.name, str(folder), revision, DEFAULT_LR)  # revision: recorded as the user declares it
    lr = known[model].lr if model in known else DEFAULT_LR
    return ModelEntry(model.rpartition("/")[2], model, revision, lr)


def tokenizer_name(entry: ModelEntry, tokenizer: str) -> str:
    """The data identity's tokenizer: ``byte``, or ``hf:<id>@<revision>`` (``hf:<dir>-<sha8 of its tokenizer files>``)."""
    if tokenizer == "byte":
        return "byte"
    if entry.tiny is not None:
        raise ParamError("tokenizer", tokenizer, "the tiny smoke models have no tokenizer of their own; use byte")
    if entry.model and is_local(entry.model):
        folder = Path(entry.model)
        digest = hashlib.sha256()
        for f in sorted(folder.glob("*")):
            if f.is_file() and re.search(r"tokenizer|vocab|merges|special_tokens", f.name):
                digest.update(f.name.encode() + b"\0" + f.read_bytes())
        return f"hf:{folder.name}-{digest.hexdigest()[:8]}"
    return f"hf:{entry.model}@{entry.revision or 'main'}"


def config_tokenizer(run: CPTRun) -> Tokenizer:
    """The tokenizer of the run's data: bytes, or the model's own (``AutoTokenizer`` from the same folder / revision)."""
    name = run.data.tokenizer
    if name == "byte":
        return ByteTokenizer()
    m = run.model
    folder = Path(m.model) if is_local(m.model) else resolve_snapshot(m.model, m.revision)
    try:
        return HFTokenizer(AutoTokenizer.from_pretrained(folder), name=name)
    except (OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0][:160]
        raise ParamError(
            "tokenizer", "model", f"no tokenizer could be loaded from {m.model} ({reason}); use byte"
        ) from None


def fetch_model(run: CPTRun | Mapping) -> None:
    """Make sure a Hub model of the run is in the local cache (downloaded when online; offline: one line), and that
    its weight files (or a local folder's) are readable, before any run directory exists.

    Under torchrun (several processes, no process group yet) only a local folder is checked here: the
    job downloads a Hub model on each node's first process while the others wait (:func:`fetch_on_each_node`).
    ``run``: typed, or the planned config dict the script checks (its ``model`` section read).
    """
    m = from_mapping(CPTModel, run["model"], "model.") if isinstance(run, Mapping) else run.model
    if m.tiny is None and (is_local(m.model) or env_info().world_size <= 1):
        _fetch(m)


def fetch_on_each_node(run: CPTRun, info: DistInfo) -> None:
    """The run's Hub model downloaded by each node's first process (``LOCAL_RANK`` 0) while the others wait.

    The waiting is :func:`common.training.distributed.wait_for_all` (no collective watchdog runs out during a
    download); afterwards every process loads the model from its node's cache (``local_only``). A
    single process has nothing to wait for (it fetched before the job, :func:`fetch_model`).
    """
    if info.world_size > 1 and info.local_rank == 0:
        _fetch(run.model)
    wait_for_all()


def _fetch(m: CPTModel) -> None:
    if m.tiny is None:
        check_weight_files(m.model if is_local(m.model) else resolve_snapshot(m.model, m.revision))


def save_tiny_model(keys: dict, seed: int, folder: Path) -> Path:
    """Build the tiny GPT-NeoX of ``keys`` (seeded init) and ``save_pretrained`` it to ``folder`` (once)."""
    if not (folder / "config.json").is_file():
        torch.manual_seed(seed)
        GPTNeoXForCausalLM(GPTNeoXConfig(**keys)).save_pretrained(folder)
    return folder


def load_run_model(run: CPTRun, run_dir: Path, *, hash_weights: bool = True, local_only: bool = False):
    """The run's :class:`~common.models.hf_decoder.LoadedLM` (a tiny model: built, saved, then loaded back from disk).

    ``local_only``: a Hub model from the local cache only (after :func:`fetch_on_each_node`).
    """
    m = run.model
    if m.tiny is not None:
        return load_causal_lm(
            str(save_tiny_model(m.tiny, run.seed, run_dir / BASE_DIR)),
            tokenizer=False,
            hash_weights=hash_weights,
        )
    return load_causal_lm(
        m.model, revision=m.revision, tokenizer=False, hash_weights=hash_weights, local_only=local_only
    )


__all__ = [
    "BASE_DIR",
    "config_tokenizer",
    "fetch_model",
    "fetch_on_each_node",
    "load_run_model",
    "mini_hub_check",
    "save_tiny_model",
    "tokenizer_name",
    "user_model",
]
