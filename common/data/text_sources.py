"""Text sources of the decoder experiments (paper B.4, B.5): documents, and the identity of a token set made of them.

Sources (:func:`documents`), each a stream of documents (strings):

- ``fineweb-edu``: FineWeb-Edu (``HuggingFaceFW/fineweb-edu``) streamed through ``datasets`` from a
  named sample config (default ``sample-10BT``), read until the token budget is reached;
- ``python-docs``: the English help texts that ship with CPython (``pydoc_data.topics``, 79
  topics, ~465 KB of prose): the offline default, no download;
- ``text``: a local text file (one document) or a folder of ``*.txt`` / ``*.md`` / ``*.rst`` files
  (one document each, in sorted path order), checked to be UTF-8 text; a preset's default text (:class:`RemoteText`,
  Tiny Shakespeare) is downloaded into ``data/`` and checked against its sha256.

:class:`TextDataSpec` is the identity of a prepared token set (source, tokenizer, budgets, a text's
fingerprint). Preparing it into token shards (:func:`common.data.token_preparation.prepare_tokens`) is its own
resumable step.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import os
import pydoc_data.topics
import re
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import datasets

from common.errors import UserError
from common.runs.atomic import atomic_file

log = logging.getLogger(__name__)

SOURCES = ("fineweb-edu", "python-docs", "text")
FINEWEB_DATASET = "HuggingFaceFW/fineweb-edu"
FINEWEB_SUBSET = "sample-10BT"  # the smallest named sample of FineWeb-Edu that holds 310M tokens
TEXT_SUFFIXES = (".txt", ".md", ".rst")
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


def require_tokens(held: int, need: int, what: str, split: str, fix: str) -> None:
    """The one check of a text too short for its split, in 04, 05 (:func:`common.data.token_preparation.prepare_tokens`,
    before the token directory exists) and 10 (its held-out part and probe windows) alike: when ``held`` tokens are
    fewer than the ``need`` of ``split`` (the flags that ask for them), one line naming ``what`` text and ``fix``."""
    if held < need:
        raise UserError(f"{what}: {held:,} tokens, too short for {split} (needs {need:,}); {fix}")


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
        for index, row in enumerate(dataset if dataset is not None else load_fineweb(spec)):
            text = row.get("text") if isinstance(row, Mapping) else None
            if not isinstance(text, str):
                raise UserError(
                    f"--source fineweb-edu: row {index:,} of {spec.dataset} ({spec.subset}) has no 'text' string "
                    f"(got {type(text).__name__}); this code reads FineWeb-Edu's schema: a 'text' column of documents"
                )
            yield text
    else:
        raise UserError(f"--source {spec.source}: unknown source; use one of {', '.join(SOURCES)}")
