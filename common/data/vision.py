"""Image classification data of the ResNet sweeps (paper B.2, B.3): the sources and their normalisation.

Sources (:func:`load_vision`), each returned as uint8 NCHW tensors on the CPU:

- ``cifar10`` / ``cifar100``: the official python pickles, downloaded by torchvision into
  ``data_root`` when missing (50,000 train / 10,000 test images, 10 / 100 classes, B.2);
- ``imagenet100``: ``ImageFolder`` trees ``data_root/train`` and ``data_root/val`` (the subset is
  whatever the folders hold; the standard 100 WordNet ids ship as ``imagenet100_classes.txt``),
  decoded once at ``image_size`` pixels (resize shorter side, centre crop) and cached (B.3);
- ``npz``: a file with ``x_train``, ``y_train``, ``x_test``, ``y_test`` (uint8 NHWC images);
- ``digits``: scikit-learn's bundled 1,797 8x8 handwritten digits, upsampled to 32x32 RGB and
  split 80/20 with a fixed seed (the offline default of the smoke preset: real data, no download);
- ``synthetic``: class-dependent smooth patterns plus noise, generated from a seed (tests).

Training augmentation (B.2: random crop after 4-pixel zero padding, horizontal flip, per-channel
normalisation) and the tensor-resident loader are in :mod:`common.data.loader`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import logging
import os
import pickle
import socket
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from sklearn.datasets import load_digits
from torchvision import transforms

from common.errors import UserError
from common.runs.locks import file_lock
from common.runs.run_store import save_checkpoint
from common.training.device import cpu_count

log = logging.getLogger(__name__)

DATASETS = ("cifar10", "cifar100", "imagenet100", "npz", "digits", "synthetic")
IMAGENET100_CLASSES_FILE = Path(__file__).with_name("imagenet100_classes.txt")
IMAGENET100_IMAGE_SIZE = 64  # reproduction decision (docs/decisions.md): CIFAR-style stem at 64x64 pixels
DIGITS_SPLIT_SEED = 0  # the digits train/test split never depends on a run's seed
DOWNLOAD_TIMEOUT_S = 30

# Per-dataset normalisation (B.2): the usual per-channel statistics of the training images.
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
CIFAR100_STATS = ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

_CIFAR = {
    "cifar10": {
        "title": "CIFAR-10",
        "folder": "cifar-10-batches-py",
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
        "label_key": "labels",
        "num_classes": 10,
        "stats": CIFAR10_STATS,
        "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    },
    "cifar100": {
        "title": "CIFAR-100",
        "folder": "cifar-100-python",
        "train": ["train"],
        "test": ["test"],
        "label_key": "fine_labels",
        "num_classes": 100,
        "stats": CIFAR100_STATS,
        "url": "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    },
}


@dataclass
class VisionData:
    """One dataset in memory: uint8 NCHW images and int64 labels, on the CPU."""

    x_train: torch.Tensor  # (N, C, H, W) uint8
    y_train: torch.Tensor  # (N,) int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]  # per channel, in [0, 1] units
    std: tuple[float, ...]
    name: str

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]


DATA_ROOT_DATASETS = ("cifar10", "cifar100", "imagenet100", "npz")  # the sources that read --data-root


@functools.cache  # once per (dataset, data root), however many configs a planner builds
def warn_unused_data_root(dataset: str, data_root: str | os.PathLike | None) -> None:
    """Log a warning when ``--data-root`` is given for a source that does not read it (digits, synthetic)."""
    if data_root and dataset not in DATA_ROOT_DATASETS:
        log.warning(
            "--data-root %s is not used: --dataset %s reads no files (only %s do)",
            data_root,
            dataset,
            ", ".join(DATA_ROOT_DATASETS),
        )


def load_vision(
    dataset: str,
    data_root: str | Path | None,
    *,
    seed: int = 0,
    image_size: int | None = None,
    num_train: int | None = None,
    num_test: int | None = None,
    num_classes: int | None = None,
) -> VisionData:
    """Load one of :data:`DATASETS` (module docstring) as a :class:`VisionData`.

    ``data_root``: the download / ImageFolder directory, or the ``.npz`` file for ``npz``
    (unused by ``digits`` and ``synthetic``). ``seed``, ``num_train``, ``num_test`` and
    ``num_classes`` configure ``synthetic`` (defaults 512 / 256 / 10); ``image_size`` sets the
    ImageNet-100 resolution (default 64) and the synthetic one (default 32).
    """
    if dataset in _CIFAR:
        return _load_cifar(dataset, Path(data_root) if data_root else Path("data"))
    if dataset == "imagenet100":
        return _load_imagenet100(data_root, image_size or IMAGENET100_IMAGE_SIZE)
    if dataset == "npz":
        return load_npz(data_root)
    if dataset == "digits":
        return _load_digits()
    if dataset == "synthetic":
        return make_synthetic(
            num_train=num_train or 512,
            num_test=num_test or 256,
            num_classes=num_classes or 10,
            image_size=image_size or 32,
            seed=seed,
        )
    raise UserError(f"--dataset {dataset}: unknown dataset; use one of {', '.join(DATASETS)}")


@contextlib.contextmanager
def one_at_a_time(*locks: Path) -> Iterator[None]:
    """Prepare data under :func:`common.runs.locks.file_lock` on the first of ``locks`` that can be created.

    Runs started together (an array job, ``--launcher local``) would otherwise all download
    CIFAR or decode ImageNet-100 at once into the same files. Where no lock file can be created
    (a read-only data root and cache), nothing will be written either, so none is needed.
    """
    for path in locks:
        made = [p for p in (path.parent, *path.parent.parents) if not p.exists()]  # folders this call creates
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        except OSError:
            continue
        try:
            with file_lock(path):  # the lock file goes with the lock
                yield
        finally:
            for folder in made:  # a failed download leaves no empty data folder behind
                with contextlib.suppress(OSError):
                    folder.rmdir()
        return
    log.debug("no lock file can be created at %s; preparing the data without one", ", ".join(map(str, locks)))
    yield


# ----------------------------------------------------------------------------- CIFAR (B.2)
def _load_cifar(dataset: str, root: Path) -> VisionData:
    spec = _CIFAR[dataset]
    folder = root / spec["folder"]
    files = [folder / name for name in spec["train"] + spec["test"]]
    with one_at_a_time(root / f".{dataset}.lock"):  # parallel runs: one downloads, the others wait
        if not all(f.is_file() for f in files):
            _download_cifar(dataset, root, files)
    x_train, y_train = _read_cifar_pickles([folder / n for n in spec["train"]], spec["label_key"])
    x_test, y_test = _read_cifar_pickles([folder / n for n in spec["test"]], spec["label_key"])
    mean, std = spec["stats"]
    return VisionData(x_train, y_train, x_test, y_test, spec["num_classes"], mean, std, dataset)


def _download_cifar(dataset: str, root: Path, files: list[Path]) -> None:
    """Download through torchvision; any failure becomes one line saying how to get the data."""
    spec = _CIFAR[dataset]
    cls = torchvision.datasets.CIFAR10 if dataset == "cifar10" else torchvision.datasets.CIFAR100
    missing = ", ".join(f.name for f in files if not f.is_file())
    log.info("%s not found under %s (missing %s); downloading it with torchvision", spec["title"], root, missing)
    previous = socket.getdefaulttimeout()
    try:
        root.mkdir(parents=True, exist_ok=True)
        socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
        cls(str(root), train=True, download=True)
    except Exception as exc:  # URLError, timeouts, checksum and disk errors alike
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"{spec['title']} not found: looked for {spec['folder']}/{{{missing}}} under --data-root {root} "
            f"and the download failed ({reason}); run once with internet access to download it there, "
            f"or fetch {spec['url']} and extract it into {root}"
        ) from None
    finally:
        socket.setdefaulttimeout(previous)


def _read_cifar_pickles(paths: list[Path], label_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The official pickles hold ``data`` as (N, 3072) uint8 rows in CHW order."""
    images, labels = [], []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                entry = pickle.load(handle, encoding="latin1")
            images.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            labels.append(np.asarray(entry[label_key], dtype=np.int64))
        except Exception as exc:
            raise UserError(
                f"{path} is not a readable CIFAR batch ({type(exc).__name__}); delete it to download again"
            ) from None
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


# ----------------------------------------------------------------------------- ImageNet-100 (B.3)
def imagenet100_classes() -> list[str]:
    """The standard ImageNet-100 WordNet ids (Tian et al. 2019), shipped with the repository."""
    return IMAGENET100_CLASSES_FILE.read_text().split()


def _load_imagenet100(data_root: str | Path | None, image_size: int) -> VisionData:
    if data_root is None:
        raise UserError(
            "ImageNet-100 needs --data-root: a folder with train/ and val/, one sub-folder per WordNet id "
            '(the 100 ids are in common/data/imagenet100_classes.txt; see docs/01_train_resnet_sweep.md, section "ImageNet-100")'
        )
    root = Path(data_root)
    splits = {"train": root / "train", "val": root / "val"}
    for name, folder in splits.items():
        if not folder.is_dir() or not any(p.is_dir() for p in folder.iterdir()):
            raise UserError(
                f"ImageNet-100 not found: looked for {folder} with one sub-folder of images per class "
                f"({name}/n01558993/*.JPEG, ...); build train/ and val/ from ImageNet-1k with the 100 WordNet ids "
                'in common/data/imagenet100_classes.txt (docs/01_train_resnet_sweep.md, section "ImageNet-100") and pass their parent as --data-root'
            )
    try:
        folders = {name: torchvision.datasets.ImageFolder(str(path)) for name, path in splits.items()}
    except (FileNotFoundError, OSError) as exc:
        raise UserError(
            f"ImageNet-100 under {root}: {exc}; every class folder of train/ and val/ needs images"
        ) from None
    classes = folders["train"].classes
    if folders["val"].classes != classes:
        raise UserError(
            f"ImageNet-100: {splits['val']} and {splits['train']} hold different class folders; make them match"
        )
    unknown = sorted(set(classes) - set(imagenet100_classes()))
    if unknown:
        log.warning(
            "ImageNet-100: %d of %d class folders are not in the standard list (e.g. %s)",
            len(unknown),
            len(classes),
            unknown[0],
        )
    meta = {
        "classes": classes,
        "counts": [len(folders["train"].samples), len(folders["val"].samples)],
        "size": image_size,
    }
    caches = _imagenet100_caches(root, image_size)
    tensors = _first_cache(caches, meta)  # caches are written atomically: read without the lock
    if tensors is None:
        with one_at_a_time(*(cache.with_suffix(".lock") for cache in caches)):  # parallel runs decode once
            tensors = _first_cache(caches, meta)
            if tensors is None:
                tensors = {}
                for name, ds in folders.items():
                    tensors[f"x_{name}"], tensors[f"y_{name}"] = _decode_folder(ds, image_size)
                _write_cache(caches, meta, tensors)
    mean, std = IMAGENET_STATS
    return VisionData(
        tensors["x_train"],
        tensors["y_train"],
        tensors["x_val"],
        tensors["y_val"],
        len(classes),
        mean,
        std,
        "imagenet100",
    )


def _decode_folder(dataset, image_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode every image once: resize the shorter side to ``image_size``, centre crop, uint8 CHW."""
    dataset.transform = transforms.Compose(
        [transforms.Resize(image_size), transforms.CenterCrop(image_size), transforms.PILToTensor()]
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=min(16, cpu_count()), shuffle=False)
    log.info("ImageNet-100: decoding %d images from %s at %dpx (once; cached)", len(dataset), dataset.root, image_size)
    xs, ys = zip(*loader, strict=True) if len(dataset) else ((), ())
    return torch.cat(xs), torch.cat(ys).to(torch.int64)


def _imagenet100_caches(root: Path, image_size: int) -> list[Path]:
    """Where decoded images are cached: beside the data, else in ~/.cache (read-only data roots)."""
    key = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:8]
    home = Path.home() / ".cache" / "depth-sufficiency" / f"imagenet100-{key}-{image_size}px.pt"
    return [root / f".imagenet100-{image_size}px.pt", home]


def _first_cache(paths: list[Path], meta: dict) -> dict | None:
    return next((t for t in (_read_cache(p, meta) for p in paths) if t is not None), None)


def _read_cache(path: Path, meta: dict) -> dict | None:
    if not path.is_file():
        return None
    try:
        state = torch.load(path, weights_only=True)
    except Exception:
        log.warning("ignoring unreadable cache %s", path)
        return None
    return state["tensors"] if state.get("meta") == meta else None


def _write_cache(paths: list[Path], meta: dict, tensors: dict) -> None:
    for path in paths:
        try:
            save_checkpoint(path, {"meta": meta, "tensors": tensors})
            log.info("ImageNet-100: cached the decoded images at %s", path)
            return
        except OSError as exc:
            log.warning("cannot cache decoded images at %s (%s)", path, exc.strerror)
    log.warning("ImageNet-100: no writable cache location; the images will be decoded again next time")


# ----------------------------------------------------------------------------- npz, digits, synthetic
NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


def load_npz(data_root: str | Path | None, flag: str = "--data-root") -> VisionData:
    """An ``.npz`` of 01's layout, each defect one line naming ``flag`` (``--data-root``; script 11: ``--data``)."""
    hint = f"pass {flag} a .npz holding x_train, y_train, x_test, y_test (uint8 NHWC images, integer labels)"
    if data_root is None or not Path(data_root).is_file():
        raise UserError(f"{'--dataset npz: ' * (flag == '--data-root')}no .npz file at {flag} {data_root}; {hint}")
    try:
        archive = np.load(path := Path(data_root), allow_pickle=False)
    except Exception as exc:
        raise UserError(f"{path} is not a readable .npz file ({type(exc).__name__}); {hint}") from None
    with archive:
        missing = [k for k in NPZ_KEYS if k not in archive.files]
        if missing:
            raise UserError(
                f"{path} lacks the keys {', '.join(missing)} (it has {', '.join(archive.files) or 'none'}); {hint}"
            )
        try:
            arrays = {k: archive[k] for k in NPZ_KEYS}
            names = archive["class_names"] if "class_names" in archive.files else None
        except ValueError as exc:  # object arrays need pickle, which is never loaded from a data file
            what = "object arrays (pickled Python objects)" if "allow_pickle" in str(exc) else type(exc).__name__
            raise UserError(
                f"{path} holds {what}, which are not loaded; save numeric arrays (np.savez with uint8 images and "
                f"integer labels, np.asarray(..., dtype=np.uint8)); {hint}"
            ) from None
        except Exception as exc:  # a truncated or corrupt member
            raise UserError(f"{path} is not a readable .npz file ({type(exc).__name__}); {hint}") from None
    xs = {k: _npz_images(path, k, arrays[k], hint) for k in ("x_train", "x_test")}
    ys = {k: _npz_labels(path, k, arrays[k], len(xs["x" + k[1:]]), hint) for k in ("y_train", "y_test")}
    num_classes = int(max(ys["y_train"].max(), ys["y_test"].max())) + 1
    if names is not None and num_classes > len(names):
        raise UserError(f"{path}: label {num_classes - 1:,} is outside class_names' {len(names)} classes; {hint}")
    num_classes = num_classes if names is None else len(names)
    _check_npz_classes(path, ys["y_train"], ys["y_test"], num_classes)
    mean, std = channel_stats(xs["x_train"])
    return VisionData(xs["x_train"], ys["y_train"], xs["x_test"], ys["y_test"], num_classes, mean, std, path.stem)


def _check_npz_classes(path: Path, y_train: torch.Tensor, y_test: torch.Tensor, num_classes: int) -> None:
    """Refuse labels a classifier cannot learn from: fewer than 2 classes in ``y_train``, or a class (0 .. C-1,
    C from the largest label or ``class_names``) that ``y_train`` never shows; the head would get C outputs
    regardless, and a test label never trained on is an error the run cannot fix."""
    seen = set(y_train.unique().tolist())
    if len(seen) < 2:
        raise UserError(
            f"{path}: y_train holds {len(seen)} class{'es' if len(seen) != 1 else ''} ({', '.join(map(str, sorted(seen)))}); "
            "a classifier needs at least 2: save a file whose training split holds every class"
        )
    only_test = sorted(set(y_test.unique().tolist()) - seen)
    if only_test:
        raise UserError(
            f"{path}: label{'s' if len(only_test) > 1 else ''} {', '.join(map(str, only_test[:10]))} "
            f"appear{'' if len(only_test) > 1 else 's'} only in y_test, never in y_train; save a file whose training "
            "split holds every class of its test split"
        )
    if len(seen) < num_classes:  # counted, never listed: a label of 10**9 must not build a set of 10**9 classes
        never = ", ".join(map(str, itertools.islice((c for c in range(num_classes) if c not in seen), 10)))
        raise UserError(
            f"{path}: {num_classes - len(seen):,} classes of 0..{num_classes - 1:,} never appear in y_train ({never}"
            "...; the head would get outputs no image trains); number the labels 0..C-1 with every class in y_train"
        )


def _npz_images(path: Path, key: str, x: np.ndarray, hint: str) -> torch.Tensor:
    if x.dtype != np.uint8 or x.ndim not in (3, 4) or (x.ndim == 4 and x.shape[-1] not in (1, 3)) or len(x) == 0:
        raise UserError(f"{path}: {key} has dtype {x.dtype} and shape {x.shape}, expected uint8 (N, H, W, 3); {hint}")
    x = x[..., None] if x.ndim == 3 else x
    t = torch.from_numpy(np.ascontiguousarray(x)).permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW
    return t.expand(-1, 3, -1, -1).contiguous() if t.shape[1] == 1 else t  # grey -> RGB


def _npz_labels(path: Path, key: str, y: np.ndarray, n: int, hint: str) -> torch.Tensor:
    if y.ndim != 1 or len(y) != n or not np.issubdtype(y.dtype, np.integer) or (len(y) and y.min() < 0):
        raise UserError(f"{path}: {key} has dtype {y.dtype} and shape {y.shape}, expected {n} labels >= 0; {hint}")
    return torch.from_numpy(y.astype(np.int64))


def _load_digits() -> VisionData:
    """scikit-learn's 8x8 digits (values 0..16) as 32x32 RGB uint8, split 80/20 with a fixed seed."""
    bunch = load_digits()
    x = torch.from_numpy(bunch.images).float().div(16.0).unsqueeze(1)  # (1797, 1, 8, 8) in [0, 1]
    x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
    x = x.mul(255).round().clamp(0, 255).to(torch.uint8).expand(-1, 3, -1, -1).contiguous()
    y = torch.from_numpy(bunch.target.astype(np.int64))
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(DIGITS_SPLIT_SEED))
    cut = int(0.8 * len(y))
    train, test = order[:cut], order[cut:]
    mean, std = channel_stats(x[train])
    return VisionData(x[train], y[train], x[test], y[test], 10, mean, std, "digits")


def make_synthetic(
    *, num_train: int = 512, num_test: int = 256, num_classes: int = 10, image_size: int = 32, seed: int = 0
) -> VisionData:
    """Learnable synthetic images: a smooth, horizontally symmetric prototype per class plus noise.

    Symmetric prototypes keep the class under the horizontal flip; the noise and a random
    brightness per image keep the task from being trivial. Everything follows from ``seed``.
    """
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(num_classes, 3, 4, 4, generator=g)
    protos = F.interpolate(coarse, size=(image_size, image_size), mode="bilinear", align_corners=False)
    protos = (protos + protos.flip(-1)) / 2

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, num_classes, (n,), generator=g)
        brightness = 0.3 * torch.randn(n, 1, 1, 1, generator=g)
        x = 1.5 * protos[y] + brightness + 0.4 * torch.randn(n, 3, image_size, image_size, generator=g)
        return (128 + 60 * x).round().clamp(0, 255).to(torch.uint8), y

    x_train, y_train = draw(num_train)
    x_test, y_test = draw(num_test)
    mean, std = channel_stats(x_train)
    return VisionData(x_train, y_train, x_test, y_test, num_classes, mean, std, "synthetic")


def class_balanced_indices(labels: torch.Tensor, k: int, seed: int) -> torch.Tensor:
    """Indices of ``k / C`` examples of each of the ``C`` classes present in ``labels``, ascending.

    Each class's examples are drawn without replacement by a generator seeded with ``seed`` alone
    (a data seed, never a run's seed), so every run that asks for the same ``(k, seed)`` gets the
    same examples. ``k`` must be a multiple of ``C`` that no class is too small for.
    """
    classes = torch.unique(labels)
    per_class, rest = divmod(k, len(classes))
    if k <= 0 or rest:
        raise UserError(
            f"--train-subset {k}: give a positive multiple of the {len(classes)} classes (K / {len(classes)} images per class)"
        )
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for c in classes.tolist():
        members = torch.nonzero(labels == c).flatten()
        if len(members) < per_class:
            raise UserError(
                f"--train-subset {k}: class {c} has {len(members)} training images, fewer than the {per_class} asked; lower K"
            )
        chosen.append(members[torch.randperm(len(members), generator=generator)[:per_class]])
    return torch.cat(chosen).sort().values


def with_train_subset(data: VisionData, k: int, seed: int) -> VisionData:
    """``data`` with its training split cut to the class-balanced subset :func:`class_balanced_indices` draws.

    The test split and the normalisation statistics stay those of the whole dataset (B.2's
    "dataset-specific normalization"), so a subset changes nothing but which images are trained on.
    """
    keep = class_balanced_indices(data.y_train, k, seed)
    return replace(data, x_train=data.x_train[keep], y_train=data.y_train[keep])


def channel_stats(images: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 NCHW images, in [0, 1] units (normalisation of B.2)."""
    x = images.double().div(255)
    std = x.std(dim=(0, 2, 3)).clamp_min(1e-3)
    return tuple(x.mean(dim=(0, 2, 3)).tolist()), tuple(std.tolist())
