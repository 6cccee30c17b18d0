"""Tiny Hugging Face decoders the tests build and save themselves, and the peak-memory check of fresh processes.

``python -m tests.helpers.hf_jobs MODEL_DIR``: imports torch and transformers once (no tensor work), then
forks two fresh child processes: one loads the saved model and probes one batch (AG at every
candidate and Block Influence), the other loads it and takes one AdamW training step on the same
batch. Each reports its own peak resident memory (``ru_maxrss``: a forked child's high-water
mark starts at the parent's resident size, the same for both); printed as JSON.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

from common.models.hf_decoder import BlockInfluence, HFDecoder, load_causal_lm
from common.science.probe import probe_activation_gradients
from common.training.epoch import classification_loss, train_epoch
from common.training.recipes import AdamWRecipe, Schedule, TrainSettings
from tests.helpers.gpt_jobs import torchrun_script_worker

VOCAB = 61
CONFIGS = {  # the three families the issue names for the candidate test; hidden 16, 3 layers
    "gpt_neox": lambda: GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        use_parallel_residual=True,
    ),
    "gpt2": lambda: GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=3, n_head=2, n_positions=32),
    "llama": lambda: LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        max_position_embeddings=32,
    ),
}


def memory_batch(vocab: int = 257, batch: int = 4, length: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.randint(0, vocab, (batch, length + 1), generator=torch.Generator().manual_seed(0))
    return w[:, :-1], w[:, 1:]


def save_memory_model(folder: Path) -> Path:
    """A GPT-NeoX of ~13M parameters (4 layers of width 512): its AdamW state is ~100 MB, well above RSS noise."""
    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=257,
        hidden_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        intermediate_size=2048,
        max_position_embeddings=128,
    )
    from_config(config).save_pretrained(folder)
    return folder


def from_config(config):
    return HF_CLASSES[type(config).__name__](config)


def peak_rss(mode: str, folder: str) -> dict:
    torch.set_num_threads(1)
    decoder = HFDecoder(load_causal_lm(folder, tokenizer=False).model)
    x, y = memory_batch()
    if mode == "probe":
        with BlockInfluence(decoder):
            probe_activation_gradients(decoder, [(x, y)], loss_fn=classification_loss)
    else:
        recipe = AdamWRecipe(steps=1, lr=1e-4, eval_interval=1)
        train_epoch(
            decoder.train(),
            recipe.make_optimizer(decoder),
            [(x, y)],
            schedule=Schedule(1e-4, 1, 0),
            step=0,
            settings=TrainSettings(recipe),
            device=torch.device("cpu"),
        )
    return {"mode": mode, "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


HF_CLASSES = {"GPTNeoXConfig": GPTNeoXForCausalLM, "GPT2Config": GPT2LMHeadModel, "LlamaConfig": LlamaForCausalLM}


def torchrun_runs_worker(rank: int, ports: list[int], argvs: list[list[str]], outs: list[str], script: str) -> None:
    """Several invocations of a numbered script, one after another, in one of two torchrun-like processes (one import)."""
    for port, argv, out in zip(ports, argvs, outs, strict=True):
        torchrun_script_worker(rank, port, argv, out, script)


def peak_rss_in_child(mode: str, folder: str) -> int:
    """:func:`peak_rss` in a forked child process (the parent has run no tensor work: no thread pool to inherit)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.write(write, json.dumps(peak_rss(mode, folder)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as handle:
        text = handle.read()
    _, status = os.waitpid(pid, 0)
    if not text or status != 0:
        raise RuntimeError(f"the {mode} child failed (status {status})")
    return json.loads(text)["peak_rss_kb"]


if __name__ == "__main__":
    print(json.dumps({mode: peak_rss_in_child(mode, sys.argv[1]) for mode in ("probe", "train")}))
