"""A trained decoder of script 05 (``common/models/gpt.py``) as a Hugging Face ``GPT2LMHeadModel`` folder.

What maps to what (:func:`hf_config`, :func:`to_hf_gpt2`): our nanoGPT layout is GPT-2's, module for module.
``wte`` / ``wpe`` / ``ln_f`` become ``transformer.wte`` / ``transformer.wpe`` / ``transformer.ln_f``, block ``i``
becomes ``transformer.h.i`` with the same ``ln_1``, ``attn.c_attn``, ``attn.c_proj``, ``ln_2``, ``mlp.c_fc`` and
``mlp.c_proj``, and ``lm_head`` stays tied to ``wte`` (``tie_word_embeddings``). Hugging Face's GPT-2 computes its
projections with ``Conv1D`` (``x @ W + b``, ``W`` of shape ``(in, out)``), the transpose of ``nn.Linear``'s
``(out, in)``: every projection weight is copied transposed, every bias and LayerNorm affine as it is. Our model
has no bias when ``GPTConfig.bias`` is False; GPT-2 always has them, and zero biases give the same function, so
they are exported as zeros.

Why the logits agree: both compute, token by token, ``z_0 = wte[x] + wpe[t]``, then per block
``z + c_proj(attn(ln_1(z)))`` and ``z + c_proj(gelu_tanh(c_fc(ln_2(z))))``, then ``lm_head(ln_f(z_L))``, with the
same head split of ``c_attn``'s output (``q, k, v`` each ``d`` wide, ``n_head`` heads of ``d / n_head``), the same
causal softmax scaled by ``1 / sqrt(d / n_head)`` (``scale_attn_weights``, not by layer index), the same tanh GELU
(``gelu_new``: ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``, what ``nn.GELU(approximate="tanh")``
computes) and the same LayerNorm epsilon; dropout is 0 in both at evaluation. Only the order of floating-point
operations differs (``addmm`` against ``linear``, the attention kernel), so the logits agree to rounding. The
embedding keeps its padded rows (``GPTConfig.padded_vocab_size``, 320 for 257 byte tokens): ids the tokenizer never
emits, as in training.

The tokenizer (:func:`byte_tokenizer`) is :class:`common.data.tokenizers.ByteTokenizer` in the ``tokenizers``
library: a BPE with GPT-2's 256-character byte alphabet (``bytes_to_unicode``) as its vocabulary, numbered by byte
value, and no merges, so that every UTF-8 byte is one token whose id is the byte, plus ``<|endoftext|>`` = 256, the
EOT every training document starts with (GPT-2's convention: it is both BOS and EOS). Special tokens are split
(``split_special_tokens``): the literal text ``<|endoftext|>`` encodes to its bytes, as in our shards.

:func:`save_hf_gpt2` writes the model (config, safetensors weights) and that tokenizer into one folder
with ``save_pretrained`` (a finished run of 05: :func:`common.experiments.shared.gpt2_runs.export_run`), through a temporary sibling folder renamed into place, so ``from_pretrained`` of
``AutoModelForCausalLM`` and ``AutoTokenizer`` loads it offline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import uuid
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

from common.errors import UserError
from common.models.gpt import GPT, GPTConfig
from common.runs.atomic import write_error

EOT_TOKEN = "<|endoftext|>"  # GPT-2's end-of-text, id ByteTokenizer.eot_id = 256
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")  # what an export holds


def hf_config(config: GPTConfig) -> GPT2Config:
    """The ``GPT2Config`` of a ``GPTConfig``: same shape, padded vocabulary, tanh GELU, no dropout, tied head.

    ``vocab_size`` is the padded size the embedding has (``config.padded_vocab_size``), ``n_positions`` the context
    ``block_size``; BOS and EOS are the last id of the unpadded vocabulary, the EOT of both tokenizers of script 05
    (256 of the byte tokenizer, 50256 of tiktoken's ``gpt2``).
    """
    eot = config.vocab_size - 1
    return GPT2Config(
        vocab_size=config.padded_vocab_size,
        n_positions=config.block_size,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=config.hidden,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        summary_first_dropout=0.0,
        layer_norm_epsilon=config.layer_norm_eps,
        scale_attn_weights=True,
        scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False,
        tie_word_embeddings=True,  # GPT.lm_head.weight is GPT.wte.weight: one parameter
        bos_token_id=eot,
        eos_token_id=eot,
    )


def _bias(module: nn.Linear | nn.LayerNorm, size: int) -> torch.Tensor:
    """The module's bias, or zeros (``GPTConfig.bias`` False: GPT-2's bias at 0 is the same function)."""
    weight = module.weight
    return module.bias.detach() if module.bias is not None else torch.zeros(size, dtype=weight.dtype)


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """Our weights under ``GPT2LMHeadModel``'s names: projections transposed (``Conv1D``), the rest as they are."""
    d = model.config.n_embd

    def linear(prefix: str, m: nn.Linear) -> dict[str, torch.Tensor]:
        return {f"{prefix}.weight": m.weight.detach().t().contiguous(), f"{prefix}.bias": _bias(m, m.out_features)}

    def norm(prefix: str, m: nn.LayerNorm) -> dict[str, torch.Tensor]:
        return {f"{prefix}.weight": m.weight.detach(), f"{prefix}.bias": _bias(m, d)}

    state = {"transformer.wte.weight": model.wte.weight.detach(), "transformer.wpe.weight": model.wpe.weight.detach()}
    for i, block in enumerate(model.blocks):
        h = f"transformer.h.{i}"
        state |= norm(f"{h}.ln_1", block.ln_1) | linear(f"{h}.attn.c_attn", block.attn.c_attn)
        state |= linear(f"{h}.attn.c_proj", block.attn.c_proj) | norm(f"{h}.ln_2", block.ln_2)
        state |= linear(f"{h}.mlp.c_fc", block.mlp.c_fc) | linear(f"{h}.mlp.c_proj", block.mlp.c_proj)
    state |= norm("transformer.ln_f", model.ln_f)
    state["lm_head.weight"] = model.lm_head.weight.detach()  # the same tensor as wte: tied
    return state


def to_hf_gpt2(model: GPT) -> GPT2LMHeadModel:
    """A ``GPT2LMHeadModel`` (eval mode, our dtype, on the CPU) computing the same logits as ``model``.

    The model's ``config`` must describe it (a block inserted after building, ``insert_decoder_block``, makes
    ``n_layer`` differ from ``len(model.blocks)``: the exported depth is the blocks')."""
    config = dataclasses.replace(model.config, n_layer=len(model.blocks))
    like = model.wte.weight
    hf = GPT2LMHeadModel(hf_config(config)).to(like.dtype).eval()
    state = {k: v.to("cpu") for k, v in hf_state_dict(model).items()}
    hf.load_state_dict(state, strict=True)
    return hf


def byte_tokenizer(model_max_length: int | None = None) -> PreTrainedTokenizerFast:
    """:class:`~common.data.tokenizers.ByteTokenizer` as a Hugging Face fast tokenizer: id = UTF-8 byte, EOT 256.

    A BPE over GPT-2's byte-to-unicode alphabet, token ``bytes_to_unicode()[b]`` with id ``b``, and no merges:
    the ByteLevel pre-tokenizer maps each byte to its character (no regex split, no prefix space), so each byte is
    one token; the ByteLevel decoder maps them back to bytes and decodes UTF-8 (an invalid sequence becomes U+FFFD,
    as ``ByteTokenizer.decode`` does). ``model_max_length``: the context, recorded for callers that truncate.
    """
    alphabet = bytes_to_unicode()
    backend = Tokenizer(models.BPE(vocab={alphabet[b]: b for b in range(256)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    extra = {} if model_max_length is None else {"model_max_length": model_max_length}
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=EOT_TOKEN,
        eos_token=EOT_TOKEN,
        split_special_tokens=True,  # the text "<|endoftext|>" is 13 bytes, as in our shards; EOT is eos_token_id
        clean_up_tokenization_spaces=False,  # decode gives the bytes back, spaces before punctuation included
        **extra,
    )


def _fsync_files(folder: Path) -> None:
    """Flush the files ``save_pretrained`` wrote (it writes them flat) to disk before the folder is renamed."""
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())


def _is_export(folder: Path) -> bool:
    """Whether ``folder`` is empty or holds an earlier export (then :func:`export_run` may replace it)."""
    names = {p.name for p in folder.iterdir()}
    if not names:
        return True
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return set(MODEL_FILES) <= names and json.loads((folder / "config.json").read_text())["model_type"] == "gpt2"
    return False


def save_hf_gpt2(model: GPT, folder: str | os.PathLike) -> Path:
    """Write ``model`` and the byte tokenizer to ``folder`` as one Hugging Face folder; return it.

    ``config.json``, ``model.safetensors`` (and ``generation_config.json``) from ``GPT2LMHeadModel.save_pretrained``,
    ``tokenizer.json`` and ``tokenizer_config.json`` from the tokenizer's. Written into a temporary sibling folder,
    fsynced, then renamed to ``folder``: a crash never leaves a partial export there (the old one, the new one, or,
    between the two renames of a replacement, none, the old one then a hidden ``.old`` sibling). An earlier
    export at ``folder`` is replaced; any other non-empty folder there is refused (one line).
    """
    folder = Path(folder)
    if folder.exists() and not (folder.is_dir() and _is_export(folder)):
        raise UserError(f"{folder} exists and is not an earlier export; delete it or choose another folder")
    hf, tokenizer = to_hf_gpt2(model), byte_tokenizer(model.config.block_size)
    tmp = folder.parent / f".{folder.name}.{uuid.uuid4().hex[:8]}.tmp"
    old = folder.parent / f".{folder.name}.{uuid.uuid4().hex[:8]}.old"
    try:
        tmp.mkdir(parents=True)  # the umask's mode, as any folder
        hf.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _fsync_files(tmp)
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not folder.exists():  # the earlier export moved aside, the new one not in place
            old.rename(folder)
        if isinstance(exc, OSError) and (error := write_error(folder, exc)) is not None:
            raise error from None
        raise
    shutil.rmtree(old, ignore_errors=True)
    return folder


__all__ = ["byte_tokenizer", "hf_config", "hf_state_dict", "save_hf_gpt2", "to_hf_gpt2"]
