"""Script 05's runs as models: the GPT of a run's config, the trained model of a finished run, its Hugging Face export.

Below 05's job module (:mod:`common.experiments.gpt2_ascend`) and script 10's
(:mod:`common.experiments.expand_decoder`), which both read 05's runs. :func:`export_run` writes a finished run as a
Hugging Face GPT-2 folder with the byte tokenizer (:func:`common.models.gpt_export.save_hf_gpt2`).
"""

from __future__ import annotations

import os
from pathlib import Path

from common.data.tokenizers import ByteTokenizer
from common.errors import UserError
from common.models.gpt import GPT, GPTConfig
from common.models.gpt_export import save_hf_gpt2
from common.runs import run_store
from common.training.checkpoints import WEIGHTS, load_weights

EXPERIMENT = "gpt2_ascend"
SCRIPT = "05_gpt2_ascend.py"


def build_gpt(config: dict) -> GPT:
    """The untrained GPT-2 of a config (initialised from the current torch RNG)."""
    return GPT(GPTConfig(n_layer=config["n_layer"], **config["model"]))


def _unfinished(run_dir: Path, why: str) -> UserError:
    return UserError(
        f"{run_dir} {why}; run {SCRIPT} with the flags that planned this run first (it trains it, or resumes it, and "
        f"saves {WEIGHTS}), then export it"
    )


def load_run_model(run_dir: str | os.PathLike) -> GPT:
    """The trained GPT of a finished run of script 05 (eval mode, float32, on the CPU).

    The architecture is rebuilt from ``config.json`` (:func:`build_gpt`), the
    weights are the run's ``model.pt`` (:func:`common.training.checkpoints.load_weights`), or its twin's when the run reused a
    finished training (``trained_in`` in ``result.json``). A run that is not finished (no ``result.json``: not
    started, or training, or killed before its end) is a one-line :class:`UserError` naming script 05.
    """
    run_dir = Path(run_dir)
    if not run_store.is_done(run_dir):
        why = (
            "is not a run directory"
            if not (run_dir / run_store.CONFIG).is_file()
            else "has not finished (no result.json)"
        )
        raise _unfinished(run_dir, why)
    run = run_store.read_run(run_dir)
    if run.config.get("experiment") != EXPERIMENT:
        raise UserError(
            f"{run_dir} is a run of {run.config.get('experiment')!r}, not of {SCRIPT} ({EXPERIMENT}); give a run "
            f"directory under <out>/{EXPERIMENT}/"
        )
    source = run_dir.parent / run.result["trained_in"] if "trained_in" in run.result else run_dir
    if not (source / WEIGHTS).is_file() and source != run_dir:
        raise UserError(
            f"{run_dir} reused the training of {source}, which has no {WEIGHTS}; delete {run_dir} and rerun {SCRIPT} "
            "with the flags that planned it (it trains that run again)"
        )
    model = build_gpt(run.config)
    model.load_state_dict(load_weights(source))
    return model.eval()


def export_run(run_dir: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """A finished run's model and the byte tokenizer as one Hugging Face GPT-2 folder
    (:func:`common.models.gpt_export.save_hf_gpt2`); a run trained with another tokenizer than the byte one is one
    line (tiktoken's ``gpt2`` has no offline Hugging Face twin here)."""
    model = load_run_model(run_dir)
    tokenizer_name = run_store.read_run(Path(run_dir)).config["data"]["tokenizer"]
    if tokenizer_name != ByteTokenizer.name:
        raise UserError(
            f"{run_dir} was trained with the {tokenizer_name!r} tokenizer; export_run writes only the byte tokenizer "
            f"({SCRIPT} --tokenizer byte, the smoke and mini presets)"
        )
    return save_hf_gpt2(model, folder)
