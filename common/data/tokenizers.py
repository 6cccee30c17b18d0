"""Tokenizers of the decoder experiments (paper B.4, B.5): one small interface, three kinds.

:class:`Tokenizer` (``name``, ``vocab_size``, ``eot_id``, ``encode_batch``) is all that preparing
token shards needs (:mod:`common.data.token_preparation`): tiktoken's ``gpt2`` BPE
(:class:`TiktokenTokenizer`), a byte-level tokenizer (:class:`ByteTokenizer`, 256 bytes + EOT, needs
nothing) and any Hugging Face tokenizer (:class:`HFTokenizer`). Every document is written as
``[EOT] + tokens(document)`` (GPT-2's convention), so EOT separates documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np
import tiktoken

from common.errors import UserError
from common.training.device import cpu_count

TOKENIZERS = ("gpt2", "byte")  # the tokenizers known by name (script 05's --tokenizer)


class Tokenizer(Protocol):
    """What preparing data needs from a tokenizer (tiktoken, bytes, or Hugging Face)."""

    name: str  # recorded in the data identity and in every shard header
    vocab_size: int  # ids are < vocab_size
    eot_id: int  # end-of-text: written before every document

    def encode_batch(self, texts: list[str]) -> Sequence[Sequence[int]]:
        """Token ids of each text, without special tokens."""
        ...


class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255 and EOT = 256 (vocabulary 257): needs no download."""

    name = "byte"
    vocab_size = 257
    eot_id = 256

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class TiktokenTokenizer:
    """A ``tiktoken`` encoding (``gpt2``: vocabulary 50257, EOT 50256), batch-encoded on every CPU."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding
        self.name = encoding.name
        self.vocab_size = encoding.n_vocab
        self.eot_id = encoding.eot_token

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.encoding.encode_ordinary_batch(texts, num_threads=cpu_count())


class HFTokenizer:
    """A Hugging Face tokenizer (``AutoTokenizer.from_pretrained(...)``): EOT is its ``eos_token_id``."""

    def __init__(self, tokenizer, name: str | None = None) -> None:
        if tokenizer.eos_token_id is None:
            raise UserError(f"tokenizer {tokenizer.name_or_path} has no eos_token; pick a tokenizer that has one")
        self.tokenizer = tokenizer
        self.name = name or tokenizer.name_or_path
        self.vocab_size = len(tokenizer)
        self.eot_id = int(tokenizer.eos_token_id)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]


def load_tiktoken(name: str = "gpt2") -> TiktokenTokenizer:
    """tiktoken's encoding ``name``; offline (vocabulary not cached) one line naming ``--tokenizer byte``."""
    try:
        encoding = tiktoken.get_encoding(name)
    except Exception as exc:  # requests' ConnectionError offline, a hash mismatch, ...
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        raise UserError(
            f"--tokenizer {name}: tiktoken could not load its vocabulary ({type(exc).__name__}: {reason}); it downloads "
            "it once from the internet (cached under $TIKTOKEN_CACHE_DIR); offline, use --tokenizer byte"
        ) from None
    return TiktokenTokenizer(encoding)


def get_tokenizer(name: str) -> Tokenizer:
    """``gpt2`` (tiktoken) or ``byte``."""
    if name == "byte":
        return ByteTokenizer()
    if name == "gpt2":
        return load_tiktoken("gpt2")
    raise UserError(f"--tokenizer {name}: unknown tokenizer; use one of {', '.join(TOKENIZERS)}")


def tokenizer_vocab_size(name: str) -> int:
    """The vocabulary size of a named tokenizer without loading it (the model's ``vocab_size``)."""
    sizes = {"byte": ByteTokenizer.vocab_size, "gpt2": 50257}
    if name not in sizes:
        raise UserError(f"--tokenizer {name}: unknown tokenizer; use one of {', '.join(TOKENIZERS)}")
    return sizes[name]
