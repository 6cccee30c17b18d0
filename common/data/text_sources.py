"""Text sources of the decoder experiments (paper B.4, B.5) and their preparation into token shards.

Sources (:func:`documents`), each a stream of documents (strings):

- ``fineweb-edu``: FineWeb-Edu (``HuggingFaceFW/fineweb-edu``) streamed through ``datasets`` from a
  named sample config (default ``sample-10BT``), read until the token budget is reached;
- ``python-docs``: the English help texts that ship with CPython (``pydoc_data.topics``, 79
  topics, ~465 KB of prose): the offline default, no download;
- ``text``: a local text file (one document) or a folder of ``*.txt`` / ``*.md`` / ``*.rst`` files
  (one document each, in sorted path order); a preset's default text (:class:`RemoteText`, Tiny
  Shakespeare) is downloaded into ``data/`` and checked against its sha256.

:class:`TextDataSpec` is the identity of a prepared token set (source, tokenizer, budgets, a text's
fingerprint). Preparing (:func:`prepare_tokens`) is its own resumable step with a progress bar. The
token stream ``[EOT] doc0 [EOT] doc1 ...`` (:mod:`common.data.tokenizers`) is cut at exact token
counts: its first ``val_tokens`` tokens form the held-out validation shard (so it does not change
with the training budget), the next ``train_tokens`` (``None``: all the rest) the training shards of
``shard_tokens`` each, in the format of :mod:`common.data.token_shards`. Shards are written
atomically and carry the stream positions (document, token offset) where they start and end, so a
killed preparation restarts after its last finished shard; ``meta.json`` is written last and marks
the directory complete.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import json
import logging
import os
import pydoc_data.topics
import re
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets
import numpy as np
from tqdm.auto import tqdm

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
from common.runs.atomic import atomic_file, atomic_write_json
from common.runs.locks import file_lock

log = logging.getLogger(__name__)

SOURCES = ("fineweb-edu", "python-docs", "text")
FINEWEB_DATASET = "HuggingFaceFW/fineweb-edu"
FINEWEB_SUBSET = "sample-10BT"  # the smallest named sample of FineWeb-Edu that holds 310M tokens
TEXT_SUFFIXES = (".txt", ".md", ".rst")
SHARD_TOKENS = 100_000_000  # tokens per training shard (whole documents, so a little more)
ENCODE_DOCS = 256  # documents per encode_batch call
MAX_UNDECODABLE = (
    1e-3  # a --text-file with more undecodable UTF-8 bytes than this fraction is refused (binary, not text)
)


@dataclass(frozen=True)
class TextDataSpec:
    """The identity of a prepared token set: where the documents come from, the tokenizer and the budgets."""

    source: str
    tokenizer: str
    val_tokens: int  # the first tokens of the stream: the held-out validation shard
    train_tokens: int | None  # exactly this many training tokens after them; None: all the rest
    dataset: str | None = None  # fineweb-edu: the Hugging Face dataset id
    subset: str | None = None  # fineweb-edu: the named sample config
    revision: str | None = None  # fineweb-edu: the dataset revision (None: the latest)
    text_name: str | None = None  # text: the file or folder name
    text_sha256: str | None = None  # text: a fingerprint of the files' paths and bytes

    def identity(self) -> dict:
        return asdict(self)

    def dirname(self) -> str:
        """``<source>-<tokenizer>-<hash8>``: the prepared directory under the data root."""
        digest = hashlib.sha1(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:8]
        return f"{self.source}-{re.sub(r'[^A-Za-z0-9._-]+', '_', self.tokenizer)}-{digest}"


def text_data_spec(
    source: str,
    tokenizer: str,
    *,
    val_tokens: int,
    train_tokens: int | None,
    text_path: str | os.PathLike | None = None,
    subset: str = FINEWEB_SUBSET,
    dataset: str = FINEWEB_DATASET,
    revision: str | None = None,
) -> TextDataSpec:
    """The :class:`TextDataSpec` of a source; a ``text`` source is fingerprinted by its files' contents."""
    if source not in SOURCES:
        raise UserError(f"--source {source}: unknown source; use one of {', '.join(SOURCES)}")
    if val_tokens <= 0 or (train_tokens is not None and train_tokens <= 0):
        raise UserError(f"--val-tokens {val_tokens} / --train-tokens {train_tokens}: both must be positive")
    keys: dict = {}
    if source == "fineweb-edu":
        keys = {"dataset": dataset, "subset": subset, "revision": revision}
    elif source == "text":
        if text_path is None:
            raise UserError("--source text needs --text-file PATH (a text file, or a folder of .txt/.md/.rst files)")
        keys = text_fingerprint(text_path)
    return TextDataSpec(source=source, tokenizer=tokenizer, val_tokens=val_tokens, train_tokens=train_tokens, **keys)


def text_fingerprint(text_path: str | os.PathLike) -> dict:
    """``{"text_name", "text_sha256"}`` of a ``--text-file`` (a file or folder): the data identity of a text source,
    its files' relative paths and bytes hashed (the files are checked as :func:`text_files` checks them)."""
    return {"text_name": Path(text_path).name, "text_sha256": _fingerprint(text_files(text_path), Path(text_path))}


def text_files(path: str | os.PathLike) -> list[Path]:
    """The file itself, or the ``*.txt``/``*.md``/``*.rst`` files under a folder (sorted, hidden ones skipped)."""
    path = Path(path).expanduser()
    if not path.is_file() and not path.is_dir():
        raise UserError(f"--text-file {path}: no such file or folder; give a text file or a folder of text files")
    files = (
        [path]
        if path.is_file()
        else sorted(
            p
            for p in path.rglob("*")
            if p.is_file()
            and p.suffix.lower() in TEXT_SUFFIXES
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
    )
    if not files:
        raise UserError(f"--text-file {path}: the folder holds no {'/'.join(TEXT_SUFFIXES)} files")
    for f in files:
        check_text(f)
    if all(f.stat().st_size == 0 for f in files):
        what = "the file is empty" if len(files) == 1 and files[0] == path else "every text file in the folder is empty"
        raise UserError(f"--text-file {path}: {what}; give a file with text in it")
    return files


def check_text(path: Path) -> None:
    """Refuse a ``--text-file`` that is not UTF-8 text: any NUL byte, or more than :data:`MAX_UNDECODABLE` of its
    bytes undecodable (read in chunks; ``errors="replace"`` would turn a binary file into training text)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    size = nul = bad = 0
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            size += len(chunk)
            nul += chunk.count(b"\0")
            bad += sum(1 for c in decoder.decode(chunk) if "\udc80" <= c <= "\udcff")
    bad += sum(1 for c in decoder.decode(b"", final=True) if "\udc80" <= c <= "\udcff")
    if nul:
        raise UserError(f"--text-file {path}: {nul:,} NUL bytes in {size:,}; that is a binary file, not text")
    if bad > MAX_UNDECODABLE * size:
        raise UserError(
            f"--text-file {path}: {bad:,} of its {size:,} bytes are not UTF-8 (more than {MAX_UNDECODABLE:.1%}); "
            "give a UTF-8 text file"
        )


def _fingerprint(files: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(root) if f != root else f.name).encode() + b"\0")
        with open(f, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class RemoteText:
    """A public text file a preset trains on by default: where it is fetched from, and its sha256."""

    name: str  # the file name it is saved under (part of a run's data identity, as with --text-file)
    url: str
    sha256: str  # of the file's bytes, checked before anything is saved
    size: int  # bytes (said in messages only)


# Karpathy's char-rnn copy: the usual public URL of Tiny Shakespeare (40,000 lines of Shakespeare's plays).
TINY_SHAKESPEARE = RemoteText(
    name="tinyshakespeare.txt",
    url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
    sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    size=1_115_394,
)
TEXT_DIR = "data"  # where a downloaded text is saved, beside CIFAR's download (gitignored)
DOWNLOAD_TIMEOUT_S = 60


def fetch_url(url: str) -> bytes:
    """The bytes at ``url`` (the one network call of :func:`download_text`; tests replace it)."""
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
        return response.read()


def download_text(remote: RemoteText, folder: str | os.PathLike = TEXT_DIR) -> Path:
    """``folder/remote.name``: fetched from ``remote.url`` when missing, its sha256 checked, saved atomically.

    The returned path is then used exactly as ``--text-file`` would be, so the two routes give the
    same data identity and run hashes. A file already there is used as it is (its fingerprint
    enters the identity like any ``--text-file``); a failed download or a wrong sha256 saves nothing
    and is one line naming ``--text-file`` as the offline fix.
    """
    path = Path(folder) / remote.name
    if path.is_file():
        return path
    fix = f"fetch {remote.url} ({remote.size:,} bytes) where the internet is reachable and pass --text-file PATH/{remote.name}"
    log.info("%s not found; downloading it from %s", path, remote.url)
    try:
        payload = fetch_url(remote.url)
    except Exception as exc:  # URLError, timeouts, HTTP errors alike
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UserError(f"{remote.name}: the download failed ({type(exc).__name__}: {reason}); {fix}") from None
    digest = hashlib.sha256(payload).hexdigest()
    if digest != remote.sha256:
        raise UserError(
            f"{remote.name}: the download from {remote.url} has sha256 {digest}, not {remote.sha256}; nothing was saved; {fix}"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as handle:
            handle.write(payload)
    except OSError as exc:
        raise UserError(f"{path}: cannot save the downloaded {remote.name} there ({exc.strerror}); {fix}") from None
    return path


def preset_text_path(
    text_path: str | os.PathLike | None, source: str, remote: RemoteText | None
) -> str | os.PathLike | None:
    """``text_path``, or for a ``text`` source without one the preset's ``remote`` text, downloaded (:func:`download_text`)."""
    if text_path is not None or source != "text" or remote is None:
        return text_path
    return download_text(remote)


def python_docs() -> list[str]:
    """CPython's bundled help texts (``pydoc_data.topics``), one document per topic, sorted by topic."""
    return [pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics)]


def load_fineweb(spec: TextDataSpec) -> Iterable[dict]:
    """FineWeb-Edu's sample ``spec.subset`` as a ``datasets`` streaming dataset; offline: one line naming the alternatives."""
    try:
        return datasets.load_dataset(
            spec.dataset, name=spec.subset, split="train", streaming=True, revision=spec.revision
        )
    except Exception as exc:  # ConnectionError, DatasetNotFoundError, offline mode, ...
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"--source fineweb-edu: cannot stream {spec.dataset} ({spec.subset}) ({type(exc).__name__}: {reason}); "
            "run where the Hugging Face Hub is reachable, or train offline with --source python-docs --tokenizer byte "
            "or --source text --text-file PATH"
        ) from None


def documents(
    spec: TextDataSpec, *, text_path: str | os.PathLike | None = None, dataset: Iterable[dict] | None = None
) -> Iterator[str]:
    """The documents of ``spec``'s source in their fixed order.

    ``dataset`` replaces the FineWeb-Edu stream by any iterable of rows with a ``text`` column (a
    local ``datasets.Dataset`` in the tests).
    """
    if spec.source == "python-docs":
        yield from python_docs()
    elif spec.source == "text":
        if text_path is None:
            raise UserError("--source text needs --text-file PATH")
        files = text_files(text_path)
        if _fingerprint(files, Path(text_path).expanduser()) != spec.text_sha256:
            raise UserError(f"--text-file {text_path}: the files changed since this run was planned; plan it again")
        for f in files:
            yield f.read_text(encoding="utf-8", errors="replace")
    elif spec.source == "fineweb-edu":
        for row in dataset if dataset is not None else load_fineweb(spec):
            yield row["text"]
    else:
        raise UserError(f"--source {spec.source}: unknown source; use one of {', '.join(SOURCES)}")


# ----------------------------------------------------------------------------- preparing
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

    A complete directory (``meta.json``) is returned at once. Otherwise finished shards are kept
    and the stream restarts where the last one ended (earlier documents are skipped without
    tokenising). Only one process prepares a directory at a time (a lock file); the others wait,
    then find it complete.
    """
    directory = Path(root).expanduser() / spec.dirname()
    if (directory / META).is_file():
        read_meta(directory)  # a corrupt meta.json is named now, before any run starts
        return directory
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"--data-root {root}: cannot create {directory} ({exc.strerror}); pass a writable --data-root"
        ) from None
    with file_lock(directory / ".lock"):
        if (directory / META).is_file():
            return directory
        tokenizer = tokenizer or get_tokenizer(spec.tokenizer)
        if tokenizer.name != spec.tokenizer:
            raise ValueError(f"tokenizer {tokenizer.name!r} does not match the spec's {spec.tokenizer!r}")
        _prepare(
            spec, directory, tokenizer, documents(spec, text_path=text_path, dataset=dataset), shard_tokens, progress
        )
    return directory


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
