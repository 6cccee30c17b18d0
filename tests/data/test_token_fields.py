"""Token data's fields against their meaning (issue 47, item 3): a shard header, a prepared folder's meta.json, the
token ids themselves and FineWeb-Edu's rows are checked on load, each refused in one line before anything is sized
from them."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from common.data.text_sources import documents, text_data_spec
from common.data.token_preparation import prepare_tokens
from common.data.token_shards import HEADER_BYTES, MAGIC, VERSION, ShardHeader, TokenData, read_shard, write_shard
from common.errors import UserError

GOOD = {
    "count": 4, "dtype": "uint16", "tokenizer": "byte", "vocab_size": 257, "eot_id": 256, "split": "train",
    "doc_start": 0, "start_offset": 0, "doc_end": 1, "end_offset": 0, "version": VERSION,
}  # fmt: skip


def raw_shard(path, fields: dict, payload: bytes = bytes(8)) -> None:
    """A shard whose header JSON is ``fields`` as given (write_shard would refuse most of these)."""
    blob = json.dumps(fields).encode()
    path.write_bytes((MAGIC + struct.pack("<II", VERSION, len(blob)) + blob).ljust(HEADER_BYTES, b"\0") + payload)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"dtype": "float64"}, "dtype 'float64'"),
        ({"dtype": "no-such-type"}, "dtype 'no-such-type'"),
        ({"dtype": "uint32"}, "expected uint16"),  # 257 ids fit in uint16: the writer never picks uint32
        ({"count": -4}, "count -4"),
        ({"count": "4"}, "count '4'"),
        ({"vocab_size": True}, "vocab_size True"),
        ({"vocab_size": 1, "eot_id": 0}, "vocab_size 1 is below 2"),
        ({"eot_id": 257}, "eot_id 257 is outside the vocabulary of 257"),
        ({"doc_end": -1}, "doc_end -1"),
        ({"split": "test"}, "split 'test'"),
    ],
)
def test_a_shard_header_against_its_meaning(tmp_path, change, needle):
    raw_shard(tmp_path / "good.bin", GOOD)
    assert read_shard(tmp_path / "good.bin")[0] == ShardHeader(**GOOD)
    raw_shard(tmp_path / "bad.bin", {**GOOD, **change})
    with pytest.raises(UserError, match="corrupt shard header") as info:
        read_shard(tmp_path / "bad.bin")
    assert needle in str(info.value) and "\n" not in str(info.value) and "prepare the data again" in str(info.value)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A prepared folder of CPython's help texts, byte-tokenised (a few hundred kB)."""
    spec = text_data_spec("python-docs", "byte", val_tokens=2_000, train_tokens=6_000)
    return prepare_tokens(spec, tmp_path_factory.mktemp("tokens"), progress=False)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda m: m["val"].update(files=["../../elsewhere.bin"]), "not file names in the folder"),
        (lambda m: m["train"].update(files=["sub/train_000000.bin"]), "not file names in the folder"),
        (lambda m: m["val"].update(files=[]), "not one val shard"),
        (lambda m: m.update(train="train_000000.bin"), "not one val shard and a list of train shards"),
        (lambda m: m.update(vocab_size="257"), "vocab_size '257'"),
        (lambda m: m.update(dtype="uint32"), "expected uint16"),
        (lambda m: m.update(tokenizer="gpt2"), "was written with byte/uint16/257 ids, not gpt2/uint16/257"),
    ],
)
def test_a_prepared_folder_whose_meta_json_breaks_its_meaning_is_refused_before_a_shard_is_read(
    prepared, tmp_path, edit, needle
):
    folder = tmp_path / "copy"
    folder.mkdir()
    for path in prepared.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    meta = json.loads((folder / "meta.json").read_text())
    TokenData.open(folder)  # the copy opens as it is
    edit(meta)
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match="prepare") as info:
        TokenData.open(folder)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_token_id_outside_the_vocabulary_is_refused_in_the_batch_that_holds_it(prepared, tmp_path):
    data = TokenData.open(prepared)
    windows = data.windows("val", block_size=16)
    assert windows.gather(np.arange(len(windows))).max() < 257  # every real window passes
    tokens = np.arange(100, dtype=np.uint16) % 257
    tokens[70] = 300  # fits uint16, but the header allows ids below 257 only
    write_shard(tmp_path / "s.bin", tokens, ShardHeader(**{**GOOD, "count": 100}))
    _, memmap = read_shard(tmp_path / "s.bin")
    data.val = memmap
    windows = data.windows("val", block_size=16)  # windows 0-5: tokens 0-96; id 300 sits in window 4 (64-80)
    assert windows.gather(np.array([0, 1, 5])).shape == (3, 17)
    with pytest.raises(UserError, match="token id 300 in window 4 is outside the vocabulary of 257") as info:
        windows.gather(np.array([0, 4, 5]))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("row", [{"txt": "a document"}, {"text": None}, {"text": 42}, ["text", "a document"]])
def test_a_fineweb_row_without_a_text_string_is_refused_naming_the_row(row):
    spec = text_data_spec("fineweb-edu", "byte", val_tokens=10, train_tokens=10)
    stream = documents(spec, dataset=[{"text": "first document"}, row])
    assert next(stream) == "first document"
    with pytest.raises(UserError, match="row 1 of HuggingFaceFW/fineweb-edu .* has no 'text' string") as info:
        next(stream)
    assert "\n" not in str(info.value)
