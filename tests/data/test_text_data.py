"""common/data/ tokenizers, token_shards, text_sources and token_preparation: shards, sources, tokenizers, resumable preparation, token batches;
requirements-npu.txt."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
import requests
import tiktoken
import tiktoken.load
from packaging.requirements import Requirement
from tiktoken_ext.openai_public import r50k_pat_str
from tokenizers import Tokenizer as RawTokenizer
from tokenizers import models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from common.data import text_sources, token_preparation, token_shards
from common.data.text_sources import python_docs, text_data_spec
from common.data.token_preparation import prepare_tokens
from common.data.token_shards import (
    ShardHeader,
    TokenBatches,
    TokenData,
    TokenLoader,
    TokenWindows,
    read_shard,
    token_dtype,
    write_shard,
)
from common.data.tokenizers import ByteTokenizer, HFTokenizer, TiktokenTokenizer, get_tokenizer
from common.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
EOT = ByteTokenizer.eot_id


def header(tokens: np.ndarray, vocab: int, **keys) -> ShardHeader:
    return ShardHeader(len(tokens), tokens.dtype.name, "t", vocab, vocab - 1, "train", 0, 0, 1, 0, **keys)


@pytest.mark.parametrize("vocab", [257, 50257, 1 << 16, (1 << 16) + 1, 151_936])
def test_shard_round_trip_through_memmap_with_a_checked_header(tmp_path, vocab):
    dtype = token_dtype(vocab)
    assert dtype == (np.uint16 if vocab <= 65536 else np.uint32)
    tokens = np.random.default_rng(0).integers(0, vocab, 1000).astype(dtype)
    tokens[:2] = [vocab - 1, 0]  # the largest id survives the round trip
    write_shard(tmp_path / "s.bin", tokens, header(tokens, vocab))
    got_header, got = read_shard(tmp_path / "s.bin")
    assert isinstance(got, np.memmap) and got.dtype == dtype and np.array_equal(got, tokens)
    assert got_header == header(tokens, vocab) and got_header.version == token_shards.VERSION
    assert (tmp_path / "s.bin").stat().st_size == token_shards.HEADER_BYTES + tokens.nbytes
    assert (tmp_path / "s.bin").read_bytes()[:8] == b"DSTOKENS"


def test_truncated_or_foreign_shards_are_refused_with_one_line(tmp_path):
    tokens = np.arange(100, dtype=np.uint16)
    write_shard(tmp_path / "s.bin", tokens, header(tokens, 257))
    data = (tmp_path / "s.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:-3])
    (tmp_path / "foreign.bin").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(2000))
    (tmp_path / "tiny.bin").write_bytes(b"DS")
    (tmp_path / "future.bin").write_bytes(data[:8] + (2).to_bytes(4, "little") + data[12:])
    for name, needle in [
        ("cut", "truncated"),
        ("foreign", "not a token shard"),
        ("tiny", "not a token shard"),
        ("future", "version-2"),
    ]:
        with pytest.raises(UserError, match=needle) as info:
            read_shard(tmp_path / f"{name}.bin")
        assert "\n" not in str(info.value) and "prepare the data again" in str(info.value), name


def write_docs(folder: Path, docs: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, doc in enumerate(docs):
        (folder / f"{i:03d}.txt").write_text(doc)
    (folder / "skip.bin").write_bytes(b"\0\1")  # not a text file: ignored
    return folder


def test_validation_documents_come_first_then_the_training_budget_cut_exactly(tmp_path):
    docs = ["alpha " * 5, "beta gamma " * 4, "delta " * 6, "epsilon " * 9]
    folder = write_docs(tmp_path / "docs", docs)
    spec = text_data_spec("text", "byte", val_tokens=20, train_tokens=70, text_path=folder)
    data = TokenData.open(prepare_tokens(spec, tmp_path / "tok", text_path=folder, progress=False))
    stream = [t for d in docs for t in [EOT, *d.encode()]]  # EOT before every document
    assert data.val.tolist() == stream[:20]  # the validation shard: the stream's first 20 tokens
    assert np.concatenate(data.train).tolist() == stream[20:90] and data.train_tokens == 70
    assert data.meta["documents"] == 3 and not data.meta["exhausted"]  # the 4th document was never needed
    val_header, _ = read_shard(data.directory / "val_000000.bin")
    assert (val_header.doc_start, val_header.start_offset, val_header.doc_end, val_header.end_offset) == (0, 0, 0, 20)
    # Another budget is another directory; the validation shard does not depend on it.
    bigger = text_data_spec("text", "byte", val_tokens=20, train_tokens=None, text_path=folder)
    assert bigger.dirname() != spec.dirname()
    everything = TokenData.open(prepare_tokens(bigger, tmp_path / "tok", text_path=folder, progress=False))
    assert (
        np.array_equal(everything.val, data.val)
        and everything.train_tokens == len(stream) - 20
        and everything.meta["exhausted"]
    )
    # A changed file changes the identity, and an old spec refuses the new files.
    (folder / "001.txt").write_text("changed")
    assert text_data_spec("text", "byte", val_tokens=20, train_tokens=70, text_path=folder) != spec
    with pytest.raises(UserError, match="changed since"):
        list(text_sources.documents(spec, text_path=folder))


def test_a_source_too_short_for_its_validation_shard_is_one_line_before_anything_is_created(tmp_path):
    """The stream of two documents "ab" and "cd" is [EOT] a b [EOT] c d: 6 tokens. The validation shard and one
    training token fit in it up to --val-tokens 5; at 6 the refusal comes before the data root exists (issue 59)."""
    folder = write_docs(tmp_path / "docs", ["ab", "cd"])
    root = tmp_path / "tokens"
    for val_tokens in (6, 10**9):
        spec = text_data_spec("text", "byte", val_tokens=val_tokens, train_tokens=None, text_path=folder)
        with pytest.raises(UserError) as info:
            prepare_tokens(spec, root, text_path=folder, progress=False)
        needs = f"--text-file docs: 6 tokens, too short for --val-tokens {val_tokens:,} and one training token"
        assert str(info.value).startswith(needs) and "\n" not in str(info.value), info.value
        assert not root.exists()
    docs = text_data_spec("python-docs", "byte", val_tokens=10**9, train_tokens=None)
    with pytest.raises(UserError, match=r"the python-docs source: [\d,]+ tokens, too short for --val-tokens"):
        prepare_tokens(docs, root, progress=False)
    assert not root.exists()
    spec = text_data_spec("text", "byte", val_tokens=5, train_tokens=None, text_path=folder)
    data = TokenData.open(prepare_tokens(spec, root, text_path=folder, progress=False))
    assert data.val.tolist() == [EOT, *b"ab", EOT, *b"c"] and np.concatenate(data.train).tolist() == [*b"d"]


def local_fineweb(n: int, seed: int = 0) -> datasets.Dataset:
    rng = np.random.default_rng(seed)
    words = ["learn", "depth", "residual", "gradient", "token", "block", "saturation"]
    return datasets.Dataset.from_dict(
        {"text": [" ".join(rng.choice(words, rng.integers(3, 30))) for _ in range(n)], "id": list(range(n))}
    )


class Flaky:
    """The rows of a dataset, failing with a network error after ``fail_after`` rows."""

    def __init__(self, rows, fail_after: int) -> None:
        self.rows, self.fail_after = rows, fail_after

    def __iter__(self):
        for i, row in enumerate(self.rows):
            if i == self.fail_after:
                raise requests.ConnectionError("connection reset (test)")
            yield row


def test_fineweb_streams_from_a_named_sample_until_the_budget(tmp_path, monkeypatch):
    rows = local_fineweb(400)
    pulled, calls = [], []

    def fake_load_dataset(path, name=None, split=None, streaming=False, revision=None):
        calls.append({"path": path, "name": name, "split": split, "streaming": streaming})

        def counted():
            for row in rows.to_iterable_dataset():
                pulled.append(row["id"])
                yield row

        return counted()

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    spec = text_data_spec("fineweb-edu", "byte", val_tokens=300, train_tokens=2000, subset="sample-10BT")
    data = TokenData.open(prepare_tokens(spec, tmp_path, progress=False))
    assert calls == [{"path": "HuggingFaceFW/fineweb-edu", "name": "sample-10BT", "split": "train", "streaming": True}]
    expected = np.concatenate([[EOT, *r.encode()] for r in rows["text"]])
    assert np.array_equal(np.concatenate([data.val, *data.train]), expected[: len(data.val) + 2000])
    assert data.train_tokens == 2000 and len(pulled) < 400  # stopped reading once the budget was met

    monkeypatch.setattr(
        datasets, "load_dataset", lambda *a, **k: (_ for _ in ()).throw(ConnectionError("offline (test)"))
    )
    with pytest.raises(UserError, match="--source python-docs") as info:
        prepare_tokens(text_data_spec("fineweb-edu", "byte", val_tokens=10, train_tokens=10, subset="other"), tmp_path)
    assert "\n" not in str(info.value)


def test_an_interrupted_preparation_resumes_to_the_same_shards(tmp_path, monkeypatch):
    monkeypatch.setattr(
        token_preparation, "ENCODE_DOCS", 16
    )  # documents per tokenizer call: several calls before the failure
    rows = local_fineweb(300, seed=1)
    spec = text_data_spec("fineweb-edu", "byte", val_tokens=500, train_tokens=None)
    keys = {"shard_tokens": 1500, "progress": False}
    with pytest.raises(UserError, match="rerun the same command to resume"):
        prepare_tokens(spec, tmp_path / "a", dataset=Flaky(rows, fail_after=200), **keys)
    partial = sorted(p.name for p in (tmp_path / "a" / spec.dirname()).glob("*.bin"))
    assert (
        "val_000000.bin" in partial
        and len(partial) >= 3
        and not (tmp_path / "a" / spec.dirname() / "meta.json").exists()
    )
    seen = []

    class Recorder:
        def __iter__(self):
            for row in rows:
                seen.append(row["id"])
                yield row

    resumed = prepare_tokens(spec, tmp_path / "a", dataset=Recorder(), **keys)
    fresh = prepare_tokens(spec, tmp_path / "b", dataset=rows, **keys)
    names = sorted(p.name for p in fresh.glob("*.bin"))
    assert names == sorted(p.name for p in resumed.glob("*.bin")) and set(partial) <= set(names)
    assert all((resumed / n).read_bytes() == (fresh / n).read_bytes() for n in names)
    assert json.loads((resumed / "meta.json").read_text()) == json.loads((fresh / "meta.json").read_text())
    assert len(seen) == 300  # the skipped rows are read (cheap) but only the rest is tokenised


def test_python_docs_is_the_offline_default_source(tmp_path):
    docs = python_docs()
    assert len(docs) == 79 and sum(map(len, docs)) > 400_000 and docs[0].startswith('The "assert" statement')
    spec = text_data_spec("python-docs", "byte", val_tokens=4096, train_tokens=8192)
    data = TokenData.open(prepare_tokens(spec, tmp_path, progress=False))
    assert data.val[0] == EOT and ByteTokenizer().decode(data.val[1:23]) == docs[0][:22]
    assert data.train_tokens == 8192 and data.meta["spec"]["source"] == "python-docs"


def test_tiktoken_offline_is_one_line_naming_the_byte_tokenizer(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # no cached vocabulary

    def offline(url):
        raise requests.ConnectionError(f"Failed to resolve host for {url} (test)")

    monkeypatch.setattr(tiktoken.load, "read_file", offline)
    with pytest.raises(UserError, match="--tokenizer byte") as info:
        get_tokenizer("gpt2")
    assert "\n" not in str(info.value) and "ConnectionError" in str(info.value)


def test_tiktoken_and_hugging_face_tokenizers_fill_the_interface(tmp_path):
    ranks = {bytes([i]): i for i in range(256)}
    tik = TiktokenTokenizer(
        tiktoken.Encoding(
            "bytes-bpe", pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 256}
        )
    )
    assert (tik.name, tik.vocab_size, tik.eot_id) == ("bytes-bpe", 257, 256)
    assert [list(t) for t in tik.encode_batch(["ab", "c"])] == [[97, 98], [99]]

    vocab = {"<unk>": 0, "<eos>": 1, "the": 2, "cat": 3, "sat": 4}
    raw = RawTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    hf = HFTokenizer(
        PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<eos>", unk_token="<unk>"), name="toy-words"
    )
    assert (hf.name, hf.vocab_size, hf.eot_id) == ("toy-words", 5, 1)
    folder = write_docs(tmp_path / "docs", ["the cat", "cat sat the", "the the cat sat dog"])
    spec = text_data_spec("text", "toy-words", val_tokens=3, train_tokens=None, text_path=folder)
    data = TokenData.open(prepare_tokens(spec, tmp_path / "tok", text_path=folder, tokenizer=hf, progress=False))
    assert data.val.tolist() == [1, 2, 3] and np.concatenate(data.train).tolist() == [1, 3, 4, 2, 1, 2, 2, 3, 4, 0]
    assert read_shard(data.directory / "val_000000.bin")[0].tokenizer == "toy-words" and data.val.dtype == np.uint16


def test_token_batches_shift_by_one_and_split_one_global_batch_over_ranks_and_micro_batches():
    arrays = [np.arange(0, 1000, dtype=np.uint16), np.arange(2000, 2600, dtype=np.uint16)]
    windows = TokenWindows(arrays, block_size=16)
    assert len(windows) == 999 // 16 + 599 // 16
    whole = TokenLoader(windows, global_batch=8, micro_batch=8, steps_per_epoch=5, seed=3)
    split = [
        TokenLoader(windows, global_batch=8, micro_batch=2, steps_per_epoch=5, seed=3, rank=r, world_size=2)
        for r in (0, 1)
    ]
    assert whole.accum == 1 and split[0].accum == 2 and len(split[0]) == 10
    for epoch in (0, 7):  # any epoch, entered directly (a resumed run)
        for loader in (whole, *split):
            loader.set_epoch(epoch)
        batches = list(whole)
        parts = [list(s) for s in split]
        for step, (x, y) in enumerate(batches):
            assert torch_equal(x[:, 1:], y[:, :-1]) and x.shape == (8, 16)
            assert (y - x == 1).all()  # consecutive tokens: never across the two arrays
            mine = [parts[r][step * 2 + a][0] for r in (0, 1) for a in (0, 1)]
            assert sorted(map(tuple, np.concatenate(mine).tolist())) == sorted(map(tuple, x.tolist()))
    epoch0, epoch1 = (TokenLoader(windows, global_batch=8, micro_batch=8, steps_per_epoch=5, seed=3) for _ in range(2))
    epoch1.set_epoch(1)
    first = np.concatenate([x.numpy() for x, _ in epoch0] + [x.numpy() for x, _ in epoch1])
    assert len({tuple(r) for r in first[: len(windows)]}) == min(
        len(first), len(windows)
    )  # a pass visits each window once
    val = TokenBatches(windows, 10)
    assert len(val) == 10 and sum(len(x) for x, _ in val) == len(windows)


def torch_equal(a, b) -> bool:
    return bool((a == b).all())


# ----------------------------------------------------------------------------- requirements-npu.txt
def pins(path: Path) -> dict[str, str]:
    reqs = [Requirement(line) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return {r.name.lower().replace("_", "-"): str(r.specifier) for r in reqs}


def test_npu_requirements_differ_from_the_main_pins_only_in_torch():
    main, npu = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-npu.txt")
    assert (
        npu.pop("torch-npu") == "==2.14.0" and npu.pop("torch") == "==2.14.0" and npu.pop("torchvision") == "==0.29.0"
    )
    main.pop("torch"), main.pop("torchvision")
    assert npu == main


def test_npu_requirements_resolve_on_the_package_index():
    """torch_npu and torchvision as pinned exist for this platform, and both accept the pinned torch.

    Fast: the index's version list for torch, and the metadata of the two others (``pip install
    --dry-run --no-deps --report``, no wheel is downloaded for them); skips when the index cannot be reached.
    """
    npu = pins(ROOT / "requirements-npu.txt")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--retries", "0", "--timeout", "15"]
    index = subprocess.run([*pip, "index", "versions", "torch"], capture_output=True, text=True, timeout=120)
    if index.returncode != 0:
        reason = (index.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"the package index is not reachable from here: {reason}")
    torch_pin = npu["torch"].removeprefix("==")
    available = re.search(r"Available versions: (.*)", index.stdout)
    assert available and torch_pin in [v.strip() for v in available.group(1).split(",")], (
        f"torch {torch_pin} is not on the index"
    )
    wanted = [f"torch_npu{npu['torch-npu']}", f"torchvision{npu['torchvision']}"]
    proc = subprocess.run(
        [*pip, "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet", "--report", "-", *wanted],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr.strip().splitlines()[-1:]
    report = json.loads(proc.stdout)
    found = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"] for i in report["install"]}
    assert set(found) == {"torch-npu", "torchvision"}
    for name, meta in found.items():
        needs = [Requirement(r) for r in meta.get("requires_dist", []) if Requirement(r).name == "torch"]
        assert needs and all(r.specifier.contains(torch_pin) for r in needs), f"{name} {meta['version']} needs {needs}"
