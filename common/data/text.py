"""Token data of the decoder experiments (paper B.4, B.5): sources, tokenizers, shards, batches.

Sources (:func:`documents`), each a stream of documents (strings):

- ``fineweb-edu``: FineWeb-Edu (``HuggingFaceFW/fineweb-edu``) streamed through ``datasets`` from a
  named sample config (default ``sample-10BT``), read until the token budget is reached;
- ``python-docs``: the English help texts that ship with CPython (``pydoc_data.topics``, 79
  topics, ~465 KB of prose): the offline default, no download;
- ``text``: a local text file (one document) or a folder of ``*.txt`` / ``*.md`` / ``*.rst`` files
  (one document each, in sorted path order).

Tokenizers fill one small interface, :class:`Tokenizer` (``name``, ``vocab_size``, ``eot_id``,
``encode_batch``): tiktoken's ``gpt2`` BPE (:class:`TiktokenTokenizer`), a byte-level tokenizer
(:class:`ByteTokenizer`, 256 bytes + EOT, needs nothing) and any Hugging Face tokenizer
(:class:`HFTokenizer`). Every document is written as ``[EOT] + tokens(document)`` (GPT-2's
convention), so EOT separates documents.

Preparing (:func:`prepare_tokens`) is its own resumable step with a progress bar. The token stream
``[EOT] doc0 [EOT] doc1 ...`` is cut at exact token counts: its first ``val_tokens`` tokens form the
held-out validation shard (so it does not change with the training budget), the next
``train_tokens`` (``None``: all the rest) the training shards of ``shard_tokens`` each. Shards are
written atomically and carry the stream positions (document, token offset) where they start and
end, so a killed preparation restarts after its last finished shard; ``meta.json`` is written last
and marks the directory complete.

Shard format (:func:`write_shard`, :func:`read_shard`): a 1024-byte header, the magic
``DSTOKENS``, a little-endian ``uint32`` version and ``uint32`` length, then JSON (token count,
tokenizer name, vocabulary size, EOT id, dtype, split, document range), zero-padded; then the
tokens, ``uint16`` when the vocabulary fits (ids < 65536) and ``uint32`` otherwise (Llama-3, Qwen2),
read back with ``np.memmap``. A truncated or foreign file is refused with one line.

Batches: :class:`TokenWindows` cuts token arrays into windows of ``T + 1`` tokens at stride ``T``
(inputs ``x = w[:-1]``, targets ``y = w[1:]``, int64 ``(B, T)``); :class:`TokenLoader` draws
training batches in a seeded order fixed by (seed, pass), split over ranks and gradient-accumulation
micro-batches; :class:`TokenBatches` serves fixed batches (validation, probe).
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
import struct
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import datasets
import numpy as np
import tiktoken
import torch
from tqdm.auto import tqdm

from common.device import cpu_count
from common.errors import UserError
from common.runs import atomic_file, atomic_write_json, file_lock, read_record

log = logging.getLogger(__name__)

SOURCES = ("fineweb-edu", "python-docs", "text")
TOKENIZERS = ("gpt2", "byte")
FINEWEB_DATASET = "HuggingFaceFW/fineweb-edu"
FINEWEB_SUBSET = "sample-10BT"  # the smallest named sample of FineWeb-Edu that holds 310M tokens
TEXT_SUFFIXES = (".txt", ".md", ".rst")

MAGIC = b"DSTOKENS"
VERSION = 1
HEADER_BYTES = 1024
META = "meta.json"
SHARD_TOKENS = 100_000_000  # tokens per training shard (whole documents, so a little more)
ENCODE_DOCS = 256  # documents per encode_batch call
MAX_UNDECODABLE = 1e-3  # a --text-file with more undecodable UTF-8 bytes than this fraction is refused (binary, not text)
META_KEYS = ("tokenizer", "dtype", "vocab_size", "val", "train")


# ----------------------------------------------------------------------------- tokenizers
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


def token_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` when every id fits (vocabulary <= 65536), else ``uint32``."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


# ----------------------------------------------------------------------------- shards
@dataclass(frozen=True)
class ShardHeader:
    """What a shard says about itself (the JSON part of its header)."""

    count: int  # tokens in the shard
    dtype: str  # "uint16" or "uint32"
    tokenizer: str
    vocab_size: int
    eot_id: int
    split: str  # "val" or "train"
    # Stream positions (document index, token offset in it, EOT included): from start to end, exclusive.
    doc_start: int
    start_offset: int
    doc_end: int
    end_offset: int
    version: int = VERSION


def write_shard(path: str | os.PathLike, tokens: np.ndarray, header: ShardHeader) -> None:
    """Header + tokens, written atomically (:func:`common.runs.atomic_file`: a crash leaves no torn shard)."""
    path = Path(path)
    tokens = np.asarray(tokens)
    if tokens.dtype != np.dtype(header.dtype) or len(tokens) != header.count:
        raise ValueError(f"tokens are {tokens.dtype} x {len(tokens)}, the header says {header.dtype} x {header.count}")
    blob = json.dumps(asdict(header), sort_keys=True).encode()
    head = MAGIC + struct.pack("<II", header.version, len(blob)) + blob
    if len(head) > HEADER_BYTES:
        raise ValueError(f"shard header of {len(head)} bytes does not fit in {HEADER_BYTES}")
    with atomic_file(path) as handle:
        handle.write(head.ljust(HEADER_BYTES, b"\0"))
        tokens.tofile(handle)


def read_shard(path: str | os.PathLike) -> tuple[ShardHeader, np.memmap]:
    """The header and a read-only ``np.memmap`` of the tokens; a foreign or truncated file is a one-line :class:`UserError`."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(HEADER_BYTES)
    fix = "delete it and prepare the data again (python 05_gpt2_ascend.py --prepare-only ...)"
    if len(head) < len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
        raise UserError(f"{path} is not a token shard (no {MAGIC.decode()} header); {fix}")
    version, length = struct.unpack("<II", head[len(MAGIC) : len(MAGIC) + 8])
    if version != VERSION:
        raise UserError(f"{path} is a version-{version} token shard, this code reads version {VERSION}; {fix}")
    try:
        header = ShardHeader(**json.loads(head[len(MAGIC) + 8 : len(MAGIC) + 8 + length]))
    except (ValueError, TypeError):
        raise UserError(f"{path} has a corrupt shard header; {fix}") from None
    expected = HEADER_BYTES + header.count * np.dtype(header.dtype).itemsize
    if size != expected:
        raise UserError(
            f"{path} is truncated or overlong: its header announces {header.count:,} {header.dtype} tokens "
            f"({expected:,} bytes) but the file has {size:,} bytes; {fix}"
        )
    if header.count == 0:
        return header, np.zeros(0, dtype=header.dtype)  # type: ignore[return-value]
    return header, np.memmap(path, dtype=header.dtype, mode="r", offset=HEADER_BYTES, shape=(header.count,))


# ----------------------------------------------------------------------------- sources
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
        keys = {"text_name": Path(text_path).name, "text_sha256": _fingerprint(text_files(text_path), Path(text_path))}
    return TextDataSpec(source=source, tokenizer=tokenizer, val_tokens=val_tokens, train_tokens=train_tokens, **keys)


def text_files(path: str | os.PathLike) -> list[Path]:
    """The file itself, or the ``*.txt``/``*.md``/``*.rst`` files under a folder (sorted, hidden ones skipped)."""
    path = Path(path).expanduser()
    if not path.is_file() and not path.is_dir():
        raise UserError(f"--text-file {path}: no such file or folder; give a text file or a folder of text files")
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*")
        if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )  # fmt: skip
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


def read_meta(directory: str | os.PathLike) -> dict:
    """The ``meta.json`` of a prepared token directory; a corrupt one is one line saying to delete the directory."""
    directory = Path(directory)
    return read_record(directory / META, META_KEYS, fix=f"delete {directory} and rerun the command to prepare the tokens again")


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
        raise UserError(f"{remote.name}: the download from {remote.url} has sha256 {digest}, not {remote.sha256}; nothing was saved; {fix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as handle:
            handle.write(payload)
    except OSError as exc:
        raise UserError(f"{path}: cannot save the downloaded {remote.name} there ({exc.strerror}); {fix}") from None
    return path


def preset_text_path(text_path: str | os.PathLike | None, source: str, remote: RemoteText | None) -> str | os.PathLike | None:
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
        return datasets.load_dataset(spec.dataset, name=spec.subset, split="train", streaming=True, revision=spec.revision)
    except Exception as exc:  # ConnectionError, DatasetNotFoundError, offline mode, ...
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"--source fineweb-edu: cannot stream {spec.dataset} ({spec.subset}) ({type(exc).__name__}: {reason}); "
            "run where the Hugging Face Hub is reachable, or train offline with --source python-docs --tokenizer byte "
            "or --source text --text-file PATH"
        ) from None


def documents(spec: TextDataSpec, *, text_path: str | os.PathLike | None = None, dataset: Iterable[dict] | None = None) -> Iterator[str]:
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
@dataclass
class _Progress:
    """What finished shards already hold (the resume point of a preparation)."""

    position: tuple[int, int] = (0, 0)  # (document, token offset in it) where the next shard starts
    val: Path | None = None
    train: list[Path] = field(default_factory=list)
    val_tokens: int = 0
    train_tokens: int = 0


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
        raise UserError(f"--data-root {root}: cannot create {directory} ({exc.strerror}); pass a writable --data-root") from None
    with file_lock(directory / ".lock"):
        if (directory / META).is_file():
            return directory
        tokenizer = tokenizer or get_tokenizer(spec.tokenizer)
        if tokenizer.name != spec.tokenizer:
            raise ValueError(f"tokenizer {tokenizer.name!r} does not match the spec's {spec.tokenizer!r}")
        _prepare(spec, directory, tokenizer, documents(spec, text_path=text_path, dataset=dataset), shard_tokens, progress)
    return directory


def _prepare(spec: TextDataSpec, directory: Path, tokenizer: Tokenizer, docs: Iterator[str], shard_tokens: int, progress: bool) -> None:
    """The token stream ``[EOT] doc0 [EOT] doc1 ...`` cut into the validation shard and the training shards."""
    dtype = token_dtype(tokenizer.vocab_size)
    done = _resume(directory)
    budget = spec.train_tokens
    bar = tqdm(total=spec.val_tokens + budget if budget is not None else None, unit="tok", unit_scale=True,
               desc=f"prepare {directory.name}", disable=not progress)  # fmt: skip
    if done.val is not None:
        log.info("%s: resuming at document %d (%d finished shards)", directory, done.position[0], len(done.train) + 1)
        bar.update(done.val_tokens + done.train_tokens)
    train_files, train_total = list(done.train), done.train_tokens
    buffer: list[np.ndarray] = []
    held = 0  # tokens in buffer
    start = done.position

    def wanted() -> int:  # tokens the shard being filled still needs
        if done.val is None:
            return spec.val_tokens - held
        size = shard_tokens if budget is None else min(shard_tokens, budget - train_total)
        return size - held

    def flush(position: tuple[int, int]) -> None:
        nonlocal buffer, held, start, train_total
        split = "val" if done.val is None else "train"
        name = "val_000000.bin" if split == "val" else f"train_{len(train_files):06d}.bin"
        tokens = np.concatenate(buffer) if buffer else np.zeros(0, dtype)
        write_shard(directory / name, tokens, ShardHeader(
            len(tokens), dtype.name, tokenizer.name, tokenizer.vocab_size, tokenizer.eot_id, split, *start, *position,
        ))  # fmt: skip
        if split == "val":
            done.val = directory / name
        else:
            train_files.append(directory / name)
            train_total += held
        buffer, held, start = [], 0, position

    index = done.position[0]
    finished = done.val is not None and budget is not None and train_total >= budget  # killed just before meta.json
    stream = itertools.islice(docs, done.position[0], None) if not finished else iter(())
    try:
        for texts in _chunks(stream, ENCODE_DOCS):
            for ids in tokenizer.encode_batch(texts):
                tokens = np.empty(len(ids) + 1, dtype)
                tokens[0], tokens[1:] = tokenizer.eot_id, ids
                offset = done.position[1] if index == done.position[0] else 0  # a document cut by the last shard
                while offset < len(tokens):
                    take = min(len(tokens) - offset, wanted())
                    buffer.append(tokens[offset : offset + take])
                    held, offset = held + take, offset + take
                    bar.update(take)
                    if wanted() == 0:
                        flush((index, offset) if offset < len(tokens) else (index + 1, 0))
                        finished = budget is not None and train_total >= budget
                        if finished:
                            break
                index += 1
                if finished:
                    break
            if finished:
                break
    except (UserError, TypeError, ValueError, AttributeError, KeyError, IndexError, NameError, AssertionError):
        raise  # a user error already, or a programming error: keeps its traceback
    except Exception as exc:  # a network error in the middle of a stream: finished shards are kept
        raise UserError(
            f"reading the {spec.source} documents failed after {index:,} documents ({type(exc).__name__}: {exc}); "
            f"rerun the same command to resume after the last finished shard in {directory}"
        ) from None
    finally:
        bar.close()
    if done.val is None:
        raise UserError(
            f"the {spec.source} source holds only {held:,} tokens, fewer than --val-tokens {spec.val_tokens:,}; "
            "lower --val-tokens or give more text"
        )
    if buffer:
        flush((index, 0))
    if train_total == 0:
        raise UserError(f"the {spec.source} source has no tokens left for training after the {spec.val_tokens:,} validation tokens; lower --val-tokens")
    if budget is not None and train_total < budget:
        log.warning("%s: the source ran out at %d training tokens (budget %d)", directory, train_total, budget)
    meta = {
        "spec": spec.identity(),
        "tokenizer": tokenizer.name,
        "vocab_size": tokenizer.vocab_size,
        "eot_id": tokenizer.eot_id,
        "dtype": dtype.name,
        "val": {"files": [done.val.name], "tokens": spec.val_tokens},
        "train": {"files": [p.name for p in train_files], "tokens": train_total},
        "documents": index,
        "exhausted": not finished,
        "version": VERSION,
    }
    atomic_write_json(directory / META, meta)  # last: the directory is complete
    log.info("%s: %d validation and %d training tokens from %d documents", directory, spec.val_tokens, train_total, index)


def _resume(directory: Path) -> _Progress:
    """The finished shards of an interrupted preparation (temp files of unfinished ones are removed)."""
    for tmp in directory.glob(".*.tmp"):
        tmp.unlink()
    val = directory / "val_000000.bin"
    train = sorted(directory.glob("train_*.bin"))
    if not val.exists():
        if train:
            raise UserError(f"{directory} has training shards but no validation shard; delete {directory} and prepare again")
        return _Progress()
    headers = [read_shard(p)[0] for p in [val, *train]]
    for i, (p, h) in enumerate(zip(train, headers[1:], strict=True)):
        if p.name != f"train_{i:06d}.bin" or (h.doc_start, h.start_offset) != (headers[i].doc_end, headers[i].end_offset):
            raise UserError(f"{directory}: the training shards are not consecutive at {p.name}; delete {directory} and prepare again")
    last = headers[-1]
    return _Progress(
        position=(last.doc_end, last.end_offset), val=val, train=train, val_tokens=headers[0].count,
        train_tokens=sum(h.count for h in headers[1:]),
    )  # fmt: skip


def _chunks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


# ----------------------------------------------------------------------------- reading
@dataclass
class TokenData:
    """A prepared directory, opened: the validation tokens and the training shards as memmaps."""

    directory: Path
    meta: dict
    val: np.ndarray
    train: list[np.ndarray]

    @classmethod
    def open(cls, directory: str | os.PathLike) -> TokenData:
        directory = Path(directory)
        if not (directory / META).is_file():
            raise UserError(f"{directory} holds no prepared tokens ({META} missing); prepare them first (--prepare-only)")
        meta = read_meta(directory)
        arrays = {}
        for name in [*meta["val"]["files"], *meta["train"]["files"]]:
            header, tokens = read_shard(directory / name)
            if (header.tokenizer, header.dtype) != (meta["tokenizer"], meta["dtype"]):
                raise UserError(f"{directory / name} was written with {header.tokenizer}/{header.dtype}, not {meta['tokenizer']}/{meta['dtype']}; delete {directory} and prepare again")
            arrays[name] = tokens
        return cls(directory, meta, arrays[meta["val"]["files"][0]], [arrays[n] for n in meta["train"]["files"]])

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def train_tokens(self) -> int:
        return int(self.meta["train"]["tokens"])


class TokenWindows:
    """Windows of ``T + 1`` tokens at stride ``T`` over token arrays (never across arrays): ``x = w[:-1]``, ``y = w[1:]``."""

    def __init__(self, arrays: Sequence[np.ndarray], block_size: int) -> None:
        self.arrays, self.block_size = list(arrays), int(block_size)
        counts = [max(0, (len(a) - 1) // self.block_size) for a in self.arrays]
        self.starts = np.cumsum([0, *counts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def gather(self, indices: np.ndarray) -> torch.Tensor:
        """Windows ``indices`` as one int64 tensor (n, T + 1)."""
        t = self.block_size
        which = np.searchsorted(self.starts, indices, side="right") - 1
        rows = [self.arrays[a][(i - self.starts[a]) * t : (i - self.starts[a]) * t + t + 1] for a, i in zip(which, indices, strict=True)]
        return torch.from_numpy(np.stack(rows).astype(np.int64))


def to_device(windows: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` of a (n, T + 1) window tensor on ``device`` (pinned, non-blocking on accelerators)."""
    if device.type != "cpu":
        windows = windows.pin_memory() if device.type == "cuda" else windows
        windows = windows.to(device, non_blocking=True)
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


class TokenLoader:
    """Training micro-batches of one rank: ``steps_per_epoch`` optimizer steps of ``global_batch`` windows per epoch.

    The windows of global step ``s`` are positions ``s * G .. (s + 1) * G - 1`` of an endless
    sequence of passes over all windows, pass ``p`` in a random order seeded by ``(seed, p)``:
    the data order is a function of the seed and the step alone (bit-identical resume). Step
    ``s``'s ``G`` windows split into ``accum * world_size`` micro-batches of ``micro_batch``; rank
    ``r`` takes micro-batches ``a * world_size + r`` for ``a = 0 .. accum - 1``, so any split of
    the same global batch averages the same gradient. An "epoch" of :func:`common.train.train` is
    one evaluation interval (``set_epoch``).
    """

    def __init__(
        self,
        windows: TokenWindows,
        *,
        global_batch: int,
        micro_batch: int,
        steps_per_epoch: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        device: torch.device | str = "cpu",
    ) -> None:
        if len(windows) == 0:
            raise UserError(f"the training tokens hold no window of {windows.block_size + 1} tokens; use a shorter --block-size")
        if global_batch % (micro_batch * world_size):
            raise UserError(
                f"a step of {global_batch} sequences does not split into micro-batches of {micro_batch} on "
                f"{world_size} processes; choose --micro-batch-size dividing {global_batch // world_size if global_batch % world_size == 0 else global_batch}"
            )
        self.windows, self.global_batch, self.micro_batch = windows, global_batch, micro_batch
        self.accum = global_batch // (micro_batch * world_size)
        self.steps_per_epoch, self.seed, self.rank, self.world_size = steps_per_epoch, seed, rank, world_size
        self.device = torch.device(device)
        self.epoch = 0
        self._orders: dict[int, np.ndarray] = {}

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.steps_per_epoch * self.accum

    def order(self, p: int) -> np.ndarray:
        """The window order of pass ``p`` (cached: the current and the next pass)."""
        if p not in self._orders:
            seed = int(hashlib.sha256(f"token-order:{self.seed}:{p}".encode()).hexdigest()[:15], 16)
            self._orders = {k: v for k, v in self._orders.items() if k >= p - 1}
            self._orders[p] = torch.randperm(len(self.windows), generator=torch.Generator().manual_seed(seed)).numpy()
        return self._orders[p]

    def window_ids(self, step: int, micro: int) -> np.ndarray:
        """The windows of micro-batch ``micro`` of global step ``step`` on this rank."""
        first = step * self.global_batch + (micro * self.world_size + self.rank) * self.micro_batch
        positions = np.arange(first, first + self.micro_batch)
        n = len(self.windows)
        return np.array([self.order(int(q))[int(j)] for q, j in zip(positions // n, positions % n, strict=True)])

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for s in range(self.steps_per_epoch):
            step = self.epoch * self.steps_per_epoch + s
            for micro in range(self.accum):
                yield to_device(self.windows.gather(self.window_ids(step, micro)), self.device)


class TokenBatches:
    """Fixed batches of windows (validation, probe): all windows in order, or the given ``indices``, ``batch_size`` at a time."""

    def __init__(
        self, windows: TokenWindows, batch_size: int, *, indices: Sequence[int] | None = None, device: torch.device | str = "cpu"
    ) -> None:
        self.windows, self.batch_size, self.device = windows, int(batch_size), torch.device(device)
        self.indices = np.arange(len(windows)) if indices is None else np.asarray(indices, dtype=np.int64)

    def __len__(self) -> int:
        return -(-len(self.indices) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for start in range(0, len(self.indices), self.batch_size):
            yield to_device(self.windows.gather(self.indices[start : start + self.batch_size]), self.device)


def sample_windows(windows: TokenWindows, batch_size: int, n_batches: int, seed: int) -> np.ndarray:
    """``n_batches * batch_size`` distinct windows in a seeded random order (fewer when there are fewer)."""
    g = torch.Generator().manual_seed(int(hashlib.sha256(f"probe-windows:{seed}".encode()).hexdigest()[:15], 16))
    order = torch.randperm(len(windows), generator=g).numpy()
    return order[: min(len(order), batch_size * n_batches)]
