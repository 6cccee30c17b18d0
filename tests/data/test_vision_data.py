"""common/data/vision.py: every data source, the tensor-resident loader and its augmentation (B.2, B.3)."""

import pickle
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from common.data import vision
from common.data.loader import TensorLoader, batch_crop, batch_flip, crop_flip_padded
from common.data.vision import imagenet100_classes, load_vision, make_synthetic
from common.errors import UserError
from common.models.resnet import ResNet, ResNetConfig


@pytest.fixture
def offline(monkeypatch):
    """Every download fails at once, as on a machine without internet (never waits on the network)."""

    def refuse(*args, **kwargs):
        raise urllib.error.URLError("offline (test)")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def write_fake_cifar10(root, per_batch=4):
    """The official python layout: pickles holding (N, 3072) uint8 rows in CHW order."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = {
            "data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            "labels": list(rng.integers(0, 10, per_batch)),
        }
        with open(folder / name, "wb") as handle:
            pickle.dump(entry, handle)


def write_fake_imagenet(root, classes=("n01558993", "n01692333"), per_class=3):
    for split in ("train", "val"):
        for k, wnid in enumerate(classes):
            folder = root / split / wnid
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = np.full((30, 40, 3), 40 * k + 10 * i, dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")


def write_npz(path, drop=()):
    rng = np.random.default_rng(1)
    arrays = {
        "x_train": rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8),
        "y_train": rng.integers(0, 5, 20),
        "x_test": rng.integers(0, 256, (8, 32, 32, 3), dtype=np.uint8),
        "y_test": rng.integers(0, 5, 8),
    }
    np.savez(path, **{k: v for k, v in arrays.items() if k not in drop})
    return path


def load_source(name, tmp_path):
    if name == "cifar10":
        write_fake_cifar10(tmp_path)
        return load_vision("cifar10", tmp_path)
    if name == "imagenet100":
        write_fake_imagenet(tmp_path)
        return load_vision("imagenet100", tmp_path, image_size=16)
    if name == "npz":
        return load_vision("npz", write_npz(tmp_path / "d.npz"))
    if name == "digits":
        return load_vision("digits", None)
    return load_vision("synthetic", None, num_train=64, num_test=32, image_size=16)


@pytest.mark.parametrize("name", ["cifar10", "imagenet100", "npz", "digits", "synthetic"])
def test_every_source_loads_uint8_nchw_and_feeds_a_resnet(name, tmp_path):
    data = load_source(name, tmp_path)
    assert data.x_train.dtype == data.x_test.dtype == torch.uint8 and data.x_train.shape[1] == 3
    assert data.y_train.dtype == torch.int64 and len(data.y_train) == len(data.x_train)
    assert int(data.y_train.max()) < data.num_classes and len(data.mean) == len(data.std) == 3
    loader = TensorLoader(data.x_train, data.y_train, 4, train=True, mean=data.mean, std=data.std)
    x, y = next(iter(loader))
    assert x.dtype == torch.float32 and x.shape == (4, *data.x_train.shape[1:])
    model = ResNet(ResNetConfig(extra_blocks=1, num_classes=data.num_classes)).eval()
    with torch.no_grad():
        logits = model(x)
    assert logits.shape == (4, data.num_classes) and torch.isfinite(logits).all()


def test_cifar10_reads_the_official_pickles(tmp_path):
    write_fake_cifar10(tmp_path, per_batch=4)
    data = load_vision("cifar10", tmp_path)
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "rb") as handle:
        raw = pickle.load(handle)
    assert torch.equal(data.x_test[1], torch.from_numpy(raw["data"][1].reshape(3, 32, 32)))
    assert data.num_classes == 10 and data.mean[0] == pytest.approx(0.4914)


def test_digits_are_scikit_learns_1797_images_split_80_20_with_a_fixed_seed():
    a, b = load_vision("digits", None, seed=0), load_vision("digits", None, seed=5)
    assert (len(a.y_train), len(a.y_test)) == (1437, 360)
    assert a.x_train.shape[1:] == (3, 32, 32) and a.num_classes == 10
    assert torch.equal(a.y_test, b.y_test)  # the split does not depend on the run seed


def test_synthetic_is_a_function_of_its_seed():
    a, b, c = (make_synthetic(num_train=16, num_test=8, image_size=8, seed=s) for s in (0, 0, 1))
    assert torch.equal(a.x_train, b.x_train) and not torch.equal(a.x_train, c.x_train)


@pytest.mark.parametrize(
    "dataset, needles",
    [("cifar10", ["cifar-10-python.tar.gz", "data_batch_1"]), ("cifar100", ["cifar-100-python.tar.gz"])],
)
def test_missing_cifar_offline_names_what_where_and_how(dataset, needles, tmp_path, offline):
    with pytest.raises(UserError) as info:
        load_vision(dataset, tmp_path / "empty")
    message = str(info.value)
    assert "\n" not in message and "download failed" in message and str(tmp_path / "empty") in message
    for needle in needles:
        assert needle in message


def test_npz_missing_keys_is_named(tmp_path):
    path = write_npz(tmp_path / "bad.npz", drop=("y_test",))
    with pytest.raises(UserError, match="lacks the keys y_test"):
        load_vision("npz", path)
    with pytest.raises(UserError, match="no .npz file"):
        load_vision("npz", tmp_path / "absent.npz")


def test_missing_imagenet100_folder_says_how_to_build_it(tmp_path):
    with pytest.raises(UserError, match="imagenet100_classes.txt"):
        load_vision("imagenet100", tmp_path)
    assert len(imagenet100_classes()) == 100


def test_imagenet100_decodes_once_then_reads_its_cache(tmp_path, monkeypatch):
    write_fake_imagenet(tmp_path)
    first = load_vision("imagenet100", tmp_path, image_size=16)
    assert first.x_train.shape == (6, 3, 16, 16) and first.num_classes == 2
    monkeypatch.setattr("common.data.vision._decode_folder", lambda *a: pytest.fail("decoded twice"))
    assert torch.equal(load_vision("imagenet100", tmp_path, image_size=16).x_test, first.x_test)


def load_together(n, *args, **kwargs):
    """``load_vision(*args, **kwargs)`` in ``n`` threads at once, as runs started together would."""
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: load_vision(*args, **kwargs), range(n)))


def test_runs_started_together_download_cifar_once(tmp_path, monkeypatch):
    downloads = []

    def slow_download(dataset, root, files):
        downloads.append(dataset)
        time.sleep(0.3)  # the other runs arrive meanwhile; without the lock they download too
        write_fake_cifar10(root)

    monkeypatch.setattr(vision, "_download_cifar", slow_download)
    loaded = load_together(3, "cifar10", tmp_path / "data")
    assert downloads == ["cifar10"] and all(torch.equal(d.x_train, loaded[0].x_train) for d in loaded)


def test_runs_started_together_decode_imagenet100_once(tmp_path, monkeypatch):
    write_fake_imagenet(tmp_path)
    decoded = []

    def slow_decode(dataset, image_size):
        decoded.append(Path(dataset.root).name)
        time.sleep(0.3)
        n = len(dataset)
        return torch.full((n, 3, image_size, image_size), len(decoded), dtype=torch.uint8), torch.zeros(
            n, dtype=torch.int64
        )

    monkeypatch.setattr(vision, "_decode_folder", slow_decode)
    loaded = load_together(3, "imagenet100", tmp_path, image_size=16)
    assert sorted(decoded) == ["train", "val"] and all(torch.equal(d.x_test, loaded[0].x_test) for d in loaded)


def window_matches(out, images, pad):
    """For each output image, which (dy, dx, mirrored) windows of the zero-padded input it equals."""
    _, _, h, w = images.shape
    padded = torch.nn.functional.pad(images, (pad, pad, pad, pad))
    hits = {}
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            window = padded[:, :, dy : dy + h, dx : dx + w]
            hits[dy, dx, False] = (out == window).flatten(1).all(1)
            hits[dy, dx, True] = (out == window.flip(3)).flatten(1).all(1)
    return hits


@pytest.mark.parametrize("flip", [False, True])
def test_crops_stay_within_the_padded_image_use_every_offset_and_flip_half(flip):
    b, pad = 3000, 2
    images = torch.randint(1, 256, (b, 2, 6, 5), dtype=torch.uint8)  # random content: one window matches
    if flip:
        out = crop_flip_padded(torch.nn.functional.pad(images, (pad,) * 4), pad, torch.Generator().manual_seed(1))
    else:
        out = batch_crop(images, pad, torch.Generator().manual_seed(1))
    assert out.shape == images.shape
    hits = window_matches(out, images, pad)
    assert bool(torch.stack(list(hits.values())).any(0).all())  # every crop is a window of the padded image
    counts = {key: int(hit.sum()) for key, hit in hits.items()}
    offsets = {(dy, dx): counts[dy, dx, False] + counts[dy, dx, True] for dy, dx, _ in counts}
    assert min(offsets.values()) > b / 25 / 2  # all 25 offsets, none rare
    mirrored = sum(v for (_, _, m), v in counts.items() if m) / b
    assert abs(mirrored - (0.5 if flip else 0.0)) < 0.04


def test_flips_are_fifty_fifty_and_exact_mirrors():
    images = torch.arange(4 * 5, dtype=torch.uint8).view(1, 1, 4, 5).expand(20000, 3, 4, 5)
    out = batch_flip(images, torch.Generator().manual_seed(0))
    flipped = (out == images.flip(3)).flatten(1).all(1)
    kept = (out == images).flatten(1).all(1)
    assert bool((flipped ^ kept).all())
    assert abs(flipped.float().mean().item() - 0.5) < 0.015  # 4 standard deviations


def test_loader_is_a_function_of_seed_and_epoch_and_eval_is_plain():
    data = make_synthetic(num_train=50, num_test=10, image_size=8)
    kwargs = {"mean": data.mean, "std": data.std}

    def epoch(seed, e):
        loader = TensorLoader(data.x_train, data.y_train, 16, train=True, seed=seed, **kwargs)
        loader.set_epoch(e)
        return torch.cat([x for x, _ in loader])

    assert torch.equal(epoch(0, 3), epoch(0, 3))
    assert not torch.equal(epoch(0, 3), epoch(0, 4)) and not torch.equal(epoch(0, 3), epoch(1, 3))
    train = TensorLoader(data.x_train, data.y_train, 16, train=True, **kwargs)
    assert len(train) == 3 and sum(len(y) for _, y in train) == 48  # drop_last while training
    plain = TensorLoader(data.x_train, data.y_train, 16, train=False, channels_last=True, **kwargs)
    xs, ys = zip(*plain)
    assert len(plain) == 4 and torch.equal(torch.cat(ys), data.y_train)
    mean = torch.tensor(data.mean).view(1, 3, 1, 1)
    std = torch.tensor(data.std).view(1, 3, 1, 1)
    torch.testing.assert_close(torch.cat(xs), (data.x_train.float() / 255 - mean) / std)
    assert xs[0].is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize(
    ("labels", "names", "needle"),
    [
        ({"y_train": 10**9}, None, "never appear in y_train"),  # a label far outside: counted, never listed
        ({"y_test": 2**40}, None, "only in y_test"),
        ({"y_train": 7}, ["a", "b", "c", "d", "e"], "label 7 is outside class_names' 5 classes"),
    ],
)
def test_labels_are_checked_against_the_class_count_before_anything_is_sized(labels, names, needle, tmp_path):
    rng = np.random.default_rng(1)
    arrays = {
        "x_train": rng.integers(0, 256, (20, 8, 8, 3), dtype=np.uint8),
        "y_train": np.arange(20) % 5,
        "x_test": rng.integers(0, 256, (8, 8, 8, 3), dtype=np.uint8),
        "y_test": np.arange(8) % 5,
    }
    for key, label in labels.items():
        arrays[key][0] = label
    if names is not None:
        arrays["class_names"] = np.array(names)
    np.savez(tmp_path / "d.npz", **arrays)
    with pytest.raises(UserError, match=needle):
        load_vision("npz", tmp_path / "d.npz")
