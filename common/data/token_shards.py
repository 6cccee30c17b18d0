"""The token-shard format of the decoder experiments (paper B.4, B.5) and the batches read from it.

Shard format (:func:`write_shard`, :func:`read_shard`): a 1024-byte header, the magic
``DSTOKENS``, a little-endian ``uint32`` version and ``uint32`` length, then JSON (token count,
tokenizer name, vocabulary size, EOT id, dtype, split, document range), zero-padded; then the
tokens, ``uint16`` when the vocabulary fits (ids < 65536) and ``uint32`` otherwise (Llama-3, Qwen2),
read back with ``np.memmap``. A truncated or foreign file is refused with one line. A prepared
directory (:mod:`common.data.token_preparation` writes it) holds ``val_000000.bin``, ``train_*.bin`` and
``meta.json`` (written last: the directory is complete); :class:`TokenData` opens it.

Batches: :class:`TokenWindows` cuts token arrays into windows of ``T + 1`` tokens at stride ``T``
(inputs ``x = w[:-1]``, targets ``y = w[1:]``, int64 ``(B, T)``); :class:`TokenLoader` draws
training batches in a seeded order fixed by (seed, pass), split over ranks and gradient-accumulation
micro-batches; :class:`TokenBatches` serves fixed batches (validation, probe).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from common.errors import UserError
from common.runs.atomic import atomic_file
from common.runs.record_io import read_record

MAGIC = b"DSTOKENS"
VERSION = 1
HEADER_BYTES = 1024
META = "meta.json"
META_KEYS = ("tokenizer", "dtype", "vocab_size", "val", "train")
DEFAULT_DATA_ROOT = "data/tokens"  # where scripts 04 and 05 prepare their token shards unless --data-root says
VAL_SHARD = "val_000000.bin"  # the held-out validation shard of a prepared directory


def train_shard_name(index: int) -> str:
    """The file name of training shard ``index`` of a prepared directory."""
    return f"train_{index:06d}.bin"


def token_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` when every id fits (vocabulary <= 65536), else ``uint32``."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


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
    """Header + tokens, written atomically (:func:`common.runs.run_store.atomic_file`: a crash leaves no torn shard)."""
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
    if problem := header_problem(header):
        raise UserError(f"{path} has a corrupt shard header ({problem}); {fix}")
    expected = HEADER_BYTES + header.count * np.dtype(header.dtype).itemsize
    if size != expected:
        raise UserError(
            f"{path} is truncated or overlong: its header announces {header.count:,} {header.dtype} tokens "
            f"({expected:,} bytes) but the file has {size:,} bytes; {fix}"
        )
    if header.count == 0:
        return header, np.zeros(0, dtype=header.dtype)  # type: ignore[return-value]
    return header, np.memmap(path, dtype=header.dtype, mode="r", offset=HEADER_BYTES, shape=(header.count,))


def header_problem(header: ShardHeader) -> str | None:
    """What is wrong with a shard header's fields against their meaning, or None: counts and stream positions are
    non-negative integers, the vocabulary has at least two ids, the EOT id is one of them, the dtype is the one
    :func:`token_dtype` gives that vocabulary, the split is ``val`` or ``train``. Checked before anything is read."""
    numbers = {
        f: getattr(header, f)
        for f in ("count", "vocab_size", "eot_id", "doc_start", "start_offset", "doc_end", "end_offset")
    }
    for name, value in numbers.items():
        if type(value) is not int or value < 0:
            return f"{name} {value!r} is not a non-negative integer"
    if header.vocab_size < 2:
        return f"vocab_size {header.vocab_size} is below 2"
    if header.eot_id >= header.vocab_size:
        return f"eot_id {header.eot_id} is outside the vocabulary of {header.vocab_size:,}"
    if header.dtype != token_dtype(header.vocab_size).name:
        return f"dtype {header.dtype!r} for a vocabulary of {header.vocab_size:,} (expected {token_dtype(header.vocab_size).name})"
    if header.split not in ("val", "train"):
        return f"split {header.split!r} is neither 'val' nor 'train'"
    return None


def read_meta(directory: str | os.PathLike) -> dict:
    """The ``meta.json`` of a prepared token directory; a corrupt one is one line saying to delete the directory."""
    directory = Path(directory)
    return read_record(
        directory / META, META_KEYS, fix=f"delete {directory} and rerun the command to prepare the tokens again"
    )


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
            raise UserError(
                f"{directory} holds no prepared tokens ({META} missing); prepare them first (--prepare-only)"
            )
        meta = read_meta(directory)
        arrays = {}
        val, train = _checked_shard_names(meta, directory)
        for name in [val, *train]:
            header, tokens = read_shard(directory / name)
            if (header.tokenizer, header.dtype, header.vocab_size) != (
                meta["tokenizer"],
                meta["dtype"],
                meta["vocab_size"],
            ):
                raise UserError(
                    f"{directory / name} was written with {header.tokenizer}/{header.dtype}/{header.vocab_size:,} ids, not "
                    f"{meta['tokenizer']}/{meta['dtype']}/{meta['vocab_size']} as {META} says; delete {directory} and prepare again"
                )
            arrays[name] = tokens
        return cls(directory, meta, arrays[val], [arrays[n] for n in train])

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    def windows(self, split: str, block_size: int) -> TokenWindows:
        """The windows of the ``val`` shard or the ``train`` shards, each batch checked against the vocabulary."""
        arrays = [self.val] if split == "val" else self.train
        return TokenWindows(arrays, block_size, vocab_size=self.vocab_size)

    @property
    def train_tokens(self) -> int:
        return int(self.meta["train"]["tokens"])


def _checked_shard_names(meta: dict, directory: Path) -> tuple[str, list[str]]:
    """The val shard and the train shards ``meta.json`` lists, its fields first checked against their meaning: one val
    shard and a list of train shards, each a plain file name in the directory (no folder, no ``..``), a vocabulary of
    at least two ids and the dtype :func:`token_dtype` gives it."""
    try:
        val, train = list(meta["val"]["files"]), list(meta["train"]["files"])
    except (TypeError, KeyError):
        val, train = [], None
    vocab = meta["vocab_size"]
    bad = [n for n in [*val, *(train or [])] if not isinstance(n, str) or Path(n).name != n or n in (".", "..")]
    if train is None or len(val) != 1:
        problem = "not one val shard and a list of train shards"
    elif bad:
        problem = f"shard names {bad[:3]!r} are not file names in the folder"
    elif type(vocab) is not int or vocab < 2:
        problem = f"vocab_size {vocab!r} is not an integer of at least 2"
    elif meta["dtype"] != token_dtype(vocab).name:
        problem = f"dtype {meta['dtype']!r} for a vocabulary of {vocab:,} (expected {token_dtype(vocab).name})"
    else:
        return val[0], train
    raise UserError(
        f"{directory / META}: {problem}; delete {directory} and rerun the command to prepare the tokens again"
    )


class TokenWindows:
    """Windows of ``T + 1`` tokens at stride ``T`` over token arrays (never across arrays): ``x = w[:-1]``, ``y = w[1:]``.

    With ``vocab_size``, every gathered batch is checked to hold ids below it: a token the shard's header does not
    allow is refused in one line before it reaches an embedding (cheap: one ``max`` over ``B x (T + 1)`` ids)."""

    def __init__(self, arrays: Sequence[np.ndarray], block_size: int, *, vocab_size: int | None = None) -> None:
        self.arrays, self.block_size, self.vocab_size = list(arrays), int(block_size), vocab_size
        counts = [max(0, (len(a) - 1) // self.block_size) for a in self.arrays]
        self.starts = np.cumsum([0, *counts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def gather(self, indices: np.ndarray) -> torch.Tensor:
        """Windows ``indices`` as one int64 tensor (n, T + 1)."""
        t = self.block_size
        which = np.searchsorted(self.starts, indices, side="right") - 1
        rows = [
            self.arrays[a][(i - self.starts[a]) * t : (i - self.starts[a]) * t + t + 1]
            for a, i in zip(which, indices, strict=True)
        ]
        windows = np.stack(rows)
        if self.vocab_size is not None and windows.size and int(windows.max()) >= self.vocab_size:
            where = int(indices[int(np.argmax(windows.max(axis=1)))])
            raise UserError(
                f"token id {int(windows.max()):,} in window {where:,} is outside the vocabulary of {self.vocab_size:,}: "
                "a corrupt token shard; delete its folder and prepare the data again (--prepare-only)"
            )
        return torch.from_numpy(windows.astype(np.int64))


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
    the same global batch averages the same gradient. An "epoch" of :func:`common.training.loop.train` is
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
            raise UserError(
                f"the training tokens hold no window of {windows.block_size + 1} tokens; use a shorter --block-size"
            )
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
        self,
        windows: TokenWindows,
        batch_size: int,
        *,
        indices: Sequence[int] | None = None,
        device: torch.device | str = "cpu",
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
