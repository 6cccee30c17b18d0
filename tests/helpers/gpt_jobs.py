"""A tiny decoder trained through common.training.loop on prepared token shards, for the training and DDP tests.

In an importable module with few imports: ``torch.multiprocessing.spawn`` imports it again in
every worker process.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
from pathlib import Path

import torch

from common.data.text_sources import text_data_spec
from common.data.token_preparation import prepare_tokens
from common.data.token_shards import TokenData, TokenLoader, TokenWindows
from common.models.gpt import GPT, GPTConfig
from common.training.loop import train
from common.training.recipes import AdamWRecipe, TrainSettings

RECIPE = AdamWRecipe(steps=6, lr=0.01, eval_interval=2, warmup_steps=2, grad_clip=0.5)


def tiny_data(root: Path, corpus: Path) -> TokenData:
    spec = text_data_spec("text", "byte", val_tokens=512, train_tokens=None, text_path=corpus)
    return TokenData.open(prepare_tokens(spec, root, text_path=corpus, progress=False))


def tiny_train(run_dir: Path, data: TokenData, *, model_seed=0, micro=2, rank=0, world=1, on_epoch_end=None) -> dict:
    """Six AdamW steps of 4 sequences of 16 tokens (micro-batches of ``micro`` on each of ``world`` processes)."""
    windows = TokenWindows(data.train, 16)
    loader = TokenLoader(
        windows,
        global_batch=4,
        micro_batch=micro,
        steps_per_epoch=RECIPE.eval_interval,
        seed=5,
        rank=rank,
        world_size=world,
    )
    torch.manual_seed(model_seed)
    model = GPT(GPTConfig(n_layer=2, n_embd=16, n_head=2, block_size=16, vocab_size=257))
    settings = TrainSettings(RECIPE, accum_steps=loader.accum)
    return train(
        model, loader, {}, run_dir=run_dir, settings=settings, device=torch.device("cpu"), on_epoch_end=on_epoch_end
    )


def torchrun_script_worker(rank: int, port: int, argv: list[str], out: str, script: str = "05_gpt2_ascend") -> None:
    """A numbered script (``05_gpt2_ascend.py``) in one of two processes with torchrun's variables; records its exit code and stdout."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = importlib.import_module(script).main(argv)
    Path(out, f"rank{rank}.json").write_text(json.dumps({"code": code, "stdout": printed.getvalue()}))
