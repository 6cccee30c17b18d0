"""Preparing a text source's documents into token shards (paper B.4, B.5): its own resumable step, with a progress bar.

:func:`prepare_tokens` tokenises the documents of a :class:`common.data.text_sources.TextDataSpec` (read by
:func:`common.data.text_sources.documents`) into ``<data root>/<spec.dirname()>``. The token stream
``[EOT] doc0 [EOT] doc1 ...`` (:mod:`common.data.tokenizers`) is cut at exact token counts: its first ``val_tokens``
tokens form the held-out validation shard (so it does not change with the training budget), the next
``train_tokens`` (``None``: all the rest) the training shards of ``shard_tokens`` each, in the format of
:mod:`common.data.token_shards`. Shards are written atomically and carry the stream positions (document, token offset)
where they start and end, so a killed preparation restarts after its last finished shard; ``meta.json`` is written
last and marks the directory complete.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from common.data.text_sources import TextDataSpec, documents, require_tokens
from common.data.token_shards import (
    META,
    VAL_SHARD,
    VERSION,
    ShardHeader,
    read_meta,
    read_shard,
    token_dtype,
    train_shard_name,
    write_shard,
)
from common.data.tokenizers import Tokenizer, get_tokenizer
from common.errors import UserError
from common.runs.atomic import atomic_write_json
from common.runs.locks import file_lock

log = logging.getLogger("common.data.text_sources")  # one logger for a source and its preparation (the name in logs)

SHARD_TOKENS = 100_000_000  # tokens per training shard (whole documents, so a little more)
ENCODE_DOCS = 256  # documents per encode_batch call


def prepare_tokens(
    spec: TextDataSpec,
    root: str | os.PathLike,
    *,
    text_path: str | os.PathLike | None = None,
    dataset: Iterable[dict] | None = None,
    tokenizer: Tokenizer | None = None,
    shard_tokens: int = SHARD_TOKENS,
    progress: bool = True,
) -> Path:
    """Tokenise ``spec``'s documents into ``root/<spec.dirname()>``; resumable; returns the directory.

    A complete directory (``meta.json``) is returned at once. A local source too short for its validation shard is
    refused in one line before the directory exists (:func:`check_holds_validation`). Otherwise finished shards are kept
    and the stream restarts where the last one ended (earlier documents are skipped without
    tokenising). Only one process prepares a directory at a time (a lock file); the others wait,
    then find it complete.
    """
    directory = Path(root).expanduser() / spec.dirname()
    if (directory / META).is_file():
        read_meta(directory)  # a corrupt meta.json is named now, before any run starts
        return directory
    tokenizer = tokenizer or get_tokenizer(spec.tokenizer)
    if not directory.exists():
        check_holds_validation(spec, tokenizer, text_path=text_path, dataset=dataset)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"--data-root {root}: cannot create {directory} ({exc.strerror}); pass a writable --data-root"
        ) from None
    with file_lock(directory / ".lock"):
        if (directory / META).is_file():
            return directory
        if tokenizer.name != spec.tokenizer:
            raise ValueError(f"tokenizer {tokenizer.name!r} does not match the spec's {spec.tokenizer!r}")
        _prepare(
            spec, directory, tokenizer, documents(spec, text_path=text_path, dataset=dataset), shard_tokens, progress
        )
    return directory


def check_holds_validation(
    spec: TextDataSpec,
    tokenizer: Tokenizer,
    *,
    text_path: str | os.PathLike | None = None,
    dataset: Iterable[dict] | None = None,
) -> None:
    """Before anything is created: a local source (``text``, ``python-docs``) must hold its validation shard and at
    least one training token, counted with the run's tokenizer on the stream :func:`_prepare` cuts (reading stops once
    there are enough); else one line (:func:`common.data.text_sources.require_tokens`). FineWeb-Edu is streamed from
    the Hub (billions of tokens) and counted as it is prepared."""
    if spec.source == "fineweb-edu":
        return
    need, held = spec.val_tokens + 1, 0
    docs = documents(spec, text_path=text_path, dataset=dataset)
    for _, tokens, _ in _document_tokens(docs, tokenizer, token_dtype(tokenizer.vocab_size), (0, 0)):
        held += len(tokens)
        if held >= need:
            return
    name = f"--text-file {spec.text_name}" if spec.source == "text" else f"the {spec.source} source"
    fix = "give more text or lower --val-tokens"
    require_tokens(held, need, name, f"--val-tokens {spec.val_tokens:,} and one training token", fix)


def _prepare(
    spec: TextDataSpec, directory: Path, tokenizer: Tokenizer, docs: Iterator[str], shard_tokens: int, progress: bool
) -> None:
    """The token stream ``[EOT] doc0 [EOT] doc1 ...`` cut into the validation shard and the training shards, then ``meta.json``."""
    shards = _Shards.resume(directory, tokenizer, spec, shard_tokens)
    documents_read = shards.start[0]  # the last of them perhaps only in part
    total = spec.val_tokens + spec.train_tokens if spec.train_tokens is not None else None
    with tqdm(
        total=total,
        initial=shards.written,
        unit="tok",
        unit_scale=True,
        desc=f"prepare {directory.name}",
        disable=not progress,
    ) as bar:
        stream = _document_tokens(_read_source(docs, spec.source, directory), tokenizer, shards.dtype, shards.start)
        for index, tokens, offset in stream if not shards.finished else ():  # finished: killed just before meta.json
            bar.update(shards.fill(tokens, index, offset))
            documents_read = index + 1
            if shards.finished:
                break
    if shards.val is None:
        raise UserError(
            f"the {spec.source} source holds only {shards.held:,} tokens, fewer than --val-tokens {spec.val_tokens:,}; "
            "lower --val-tokens or give more text"
        )
    exhausted = not shards.finished
    if shards.held:
        shards.flush((documents_read, 0))
    if shards.train_tokens == 0:
        raise UserError(
            f"the {spec.source} source has no tokens left for training after the {spec.val_tokens:,} validation tokens; lower --val-tokens"
        )
    if spec.train_tokens is not None and shards.train_tokens < spec.train_tokens:
        log.warning(
            "%s: the source ran out at %d training tokens (budget %d)",
            directory,
            shards.train_tokens,
            spec.train_tokens,
        )
    meta = {
        "spec": spec.identity(),
        "tokenizer": tokenizer.name,
        "vocab_size": tokenizer.vocab_size,
        "eot_id": tokenizer.eot_id,
        "dtype": shards.dtype.name,
        "val": {"files": [shards.val.name], "tokens": spec.val_tokens},
        "train": {"files": [p.name for p in shards.train], "tokens": shards.train_tokens},
        "documents": documents_read,
        "exhausted": exhausted,
        "version": VERSION,
    }
    atomic_write_json(directory / META, meta)  # last: the directory is complete
    log.info(
        "%s: %d validation and %d training tokens from %d documents",
        directory,
        spec.val_tokens,
        shards.train_tokens,
        documents_read,
    )


@dataclass
class _Shards:
    """The shards of one preparation: the finished ones (on disk) and the one being filled (in memory)."""

    directory: Path
    tokenizer: Tokenizer
    val_tokens: int  # the validation shard's size
    train_budget: int | None  # training tokens in all (None: until the source runs out)
    shard_tokens: int  # a training shard's size
    start: tuple[int, int] = (
        0,
        0,
    )  # stream position (document, token offset in it) where the shard being filled starts
    val: Path | None = None  # the validation shard, once written
    train: list[Path] = field(default_factory=list)  # the finished training shards
    train_tokens: int = 0  # tokens in them
    buffer: list[np.ndarray] = field(default_factory=list)  # the shard being filled
    held: int = 0  # tokens in buffer

    @classmethod
    def resume(cls, directory: Path, tokenizer: Tokenizer, spec: TextDataSpec, shard_tokens: int) -> _Shards:
        """The finished shards of an interrupted preparation, checked to follow one another (temp files of unfinished ones are removed)."""
        shards = cls(directory, tokenizer, spec.val_tokens, spec.train_tokens, shard_tokens)
        for tmp in directory.glob(".*.tmp"):
            tmp.unlink()
        val, train = directory / VAL_SHARD, sorted(directory.glob("train_*.bin"))
        if not val.exists():
            if train:
                raise UserError(
                    f"{directory} has training shards but no validation shard; delete {directory} and prepare again"
                )
            return shards
        headers = [read_shard(p)[0] for p in [val, *train]]
        for i, (p, h) in enumerate(zip(train, headers[1:], strict=True)):
            if p.name != train_shard_name(i) or (h.doc_start, h.start_offset) != (
                headers[i].doc_end,
                headers[i].end_offset,
            ):
                raise UserError(
                    f"{directory}: the training shards are not consecutive at {p.name}; delete {directory} and prepare again"
                )
        shards.start = (headers[-1].doc_end, headers[-1].end_offset)
        shards.val, shards.train, shards.train_tokens = val, train, sum(h.count for h in headers[1:])
        log.info("%s: resuming at document %d (%d finished shards)", directory, shards.start[0], len(headers))
        return shards

    @property
    def dtype(self) -> np.dtype:
        return token_dtype(self.tokenizer.vocab_size)

    @property
    def written(self) -> int:
        """Tokens in the finished shards."""
        return (self.val_tokens if self.val is not None else 0) + self.train_tokens

    @property
    def finished(self) -> bool:
        """Whether the training budget is met (without a budget, never: the source runs out first)."""
        return self.val is not None and self.train_budget is not None and self.train_tokens >= self.train_budget

    def room(self) -> int:
        """Tokens the shard being filled still takes: the validation shard's, or a training shard's (at most what the budget has left)."""
        if self.val is None:
            size = self.val_tokens
        elif self.train_budget is None:
            size = self.shard_tokens
        else:
            size = min(self.shard_tokens, self.train_budget - self.train_tokens)
        return size - self.held

    def fill(self, tokens: np.ndarray, index: int, offset: int) -> int:
        """Add ``tokens[offset:]`` (document ``index``), writing each shard as it fills, until the document or the budget ends;
        the number of tokens added."""
        first = offset
        while offset < len(tokens) and not self.finished:
            end = offset + min(len(tokens) - offset, self.room())
            self.buffer.append(tokens[offset:end])
            self.held += end - offset
            offset = end
            if self.room() == 0:
                self.flush((index, end) if end < len(tokens) else (index + 1, 0))
        return offset - first

    def flush(self, end: tuple[int, int]) -> None:
        """Write the shard being filled (the validation shard first, then training shards); it ends at stream position ``end``."""
        split, name = ("val", VAL_SHARD) if self.val is None else ("train", train_shard_name(len(self.train)))
        tokens = np.concatenate(self.buffer) if self.buffer else np.zeros(0, self.dtype)
        t = self.tokenizer
        write_shard(
            self.directory / name,
            tokens,
            ShardHeader(len(tokens), self.dtype.name, t.name, t.vocab_size, t.eot_id, split, *self.start, *end),
        )
        if split == "val":
            self.val = self.directory / name
        else:
            self.train.append(self.directory / name)
            self.train_tokens += self.held
        self.buffer, self.held, self.start = [], 0, end


def _read_source(docs: Iterator[str], source: str, directory: Path) -> Iterator[str]:
    """``docs``, where a failure of the source itself (a network error in the middle of a stream) becomes one line
    saying that the same command resumes: the finished shards are kept."""
    read = 0
    try:
        for doc in docs:
            yield doc
            read += 1
    except UserError:
        raise
    except (
        Exception
    ) as exc:  # only the source's own iteration is guarded here: datasets', requests' or fsspec's errors alike
        raise UserError(
            f"reading the {source} documents failed after {read:,} documents ({type(exc).__name__}: {exc}); "
            f"rerun the same command to resume after the last finished shard in {directory}"
        ) from None


def _document_tokens(
    docs: Iterable[str], tokenizer: Tokenizer, dtype: np.dtype, start: tuple[int, int]
) -> Iterator[tuple[int, np.ndarray, int]]:
    """``(index, [EOT] + tokens, offset)`` of every document from stream position ``start``: earlier documents are
    skipped untokenised, and ``offset`` is where the last finished shard cut document ``start[0]`` (0 for the rest)."""
    first, cut = start
    index = first
    for texts in _chunks(itertools.islice(docs, first, None), ENCODE_DOCS):
        for ids in tokenizer.encode_batch(texts):
            tokens = np.empty(len(ids) + 1, dtype)
            tokens[0], tokens[1:] = tokenizer.eot_id, ids
            yield index, tokens, cut if index == first else 0
            index += 1


def _chunks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk
