"""Script 11's inputs: the user's model (a torchvision name with a ``state_dict``, ``pkg.module:function``, or a Hugging
Face folder) and its examples (an image folder, an ``.npz`` as :mod:`common.data.vision` reads it, or a text file),
as the analysis batches and App. G's independent sample (a calibration and a test part).

Every mistake (a missing file, an unknown model, a factory that fails, a checkpoint that does not fit, an ``.npz``
or an image folder that cannot be read, a binary or empty text, a sample that would not fit in memory) is one
:class:`UserError` naming script 11's flag and the fix; :func:`load_inputs` loads and checks them all, and the
script calls it before any run folder exists. Checkpoints are read with ``torch.load(weights_only=True)``: a tensor
file, never pickled code. Text files are checked as 04, 05 and 10 check them
(:func:`common.data.text_sources.text_files`: binary or empty is refused).
"""

from __future__ import annotations

import hashlib
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torchvision
from torch import nn
from torchvision import transforms

from common.data.text_sources import text_files
from common.data.vision import load_npz, make_synthetic
from common.errors import ParamError, UserError
from common.models.hf_decoder import load_causal_lm
from common.models.places.torchvision_resnet import small_resnet
from common.presets.probe_ag import app_g_sizes
from common.science.memory import available_bytes

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SMOKE_CLASSES = 10
HEAD_WEIGHTS = ("fc.weight", "heads.head.weight", "classifier.weight", "head.weight")  # torchvision heads
MODEL_HINT = (
    "give --model NAME (a torchvision model, e.g. resnet18) or --model pkg.module:function, or --model-path DIR"
)
BYTES_PER_VALUE = 9  # an image value held as uint8, as float32, and (synthetic) as float32 noise while made
FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # pkg.module:function


def one_line(exc: BaseException) -> str:
    """An exception as a short line: its type and the start of its text."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:240]}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_spec(model: str | None, weights: str | None, model_path: str | None, smoke: bool) -> tuple[dict, dict]:
    """``(identity, runtime)`` of the model flags: what the run is named by (the weights' sha256, not their path) and
    where the files are; a missing file or an unknown name is a :class:`UserError`."""
    if model and model_path:
        raise UserError("--model and --model-path name two models; give one")
    if weights and model_path:
        raise UserError(
            "--weights is for --model; a --model-path folder holds its own weights (save_pretrained): leave it out"
        )
    if weights and not Path(weights).is_file():
        raise UserError(f"--weights {weights}: no such file; give a state_dict saved with torch.save")
    digest = sha256_of(Path(weights)) if weights else None
    runtime = {"weights": str(Path(weights).resolve()) if weights else None}
    if model_path:
        if not Path(model_path).is_dir():
            raise UserError(f"--model-path {model_path}: no such directory; give a folder written by save_pretrained")
        return {"source": "hf", "name": Path(model_path).name}, {
            **runtime,
            "model_path": str(Path(model_path).resolve()),
        }
    if model is None:
        if not smoke:
            raise UserError(f"no model given; {MODEL_HINT}")
        return {"source": "smoke", "name": "small-resnet", "weights_sha256": digest}, runtime
    if ":" in model:
        if not FACTORY.fullmatch(model):
            raise UserError(f"--model {model}: not pkg.module:function (a module path, a colon, a function's name)")
        return {"source": "callable", "name": model, "weights_sha256": digest}, runtime
    if model not in torchvision.models.list_models(module=torchvision.models):
        raise UserError(f"--model {model}: not a torchvision image classifier; {MODEL_HINT}")
    return {"source": "torchvision", "name": model, "weights_sha256": digest}, runtime


def build_model(spec: dict, runtime: dict, num_classes: int | None):
    """``(model, tokenizer)``: the model of :func:`model_spec` with its weights loaded, in eval mode on the CPU."""
    if spec["source"] == "hf":
        try:
            loaded = load_causal_lm(runtime["model_path"], tokenizer=True, hash_weights=False)
        except UserError as exc:  # its own line, named by the flag (and not the path twice)
            text, path = str(exc), runtime["model_path"]
            raise UserError(f"--model-path {path}: {text.removeprefix(f'{path}: ')}") from None
        except Exception as exc:  # a corrupt folder transformers reads halfway
            raise UserError(f"--model-path {runtime['model_path']}: cannot load it ({one_line(exc)})") from None
        if loaded.tokenizer is None:
            raise UserError(f"--model-path {runtime['model_path']}: the folder has no tokenizer; save it beside")
        return loaded.model.eval(), loaded.tokenizer
    state = read_state_dict(runtime["weights"]) if runtime.get("weights") else None
    classes = next((int(state[k].shape[0]) for k in HEAD_WEIGHTS if state and k in state), num_classes)
    if spec["source"] == "smoke":
        torch.manual_seed(0)
        model = small_resnet(num_classes=classes or SMOKE_CLASSES)
    elif spec["source"] == "torchvision":
        model = torchvision.models.get_model(spec["name"], weights=None, num_classes=classes or 1000)
    else:
        model = call_factory(spec["name"])
    if state is not None:
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            first = " ".join(line.strip() for line in str(exc).strip().splitlines()[:2])[:240]
            raise UserError(f"--weights {runtime['weights']} does not fit --model {spec['name']} ({first})") from None
    return model.eval(), None


def read_state_dict(path: str) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # not a torch file, pickled code, a truncated file
        raise UserError(
            f"--weights {path} is not a state_dict torch.load reads with weights_only=True ({type(exc).__name__})"
        ) from None
    for key in ("state_dict", "model"):  # a training checkpoint holding the weights under one key
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserError(f"--weights {path} holds no state_dict (a dict of tensors); save model.state_dict()")
    return state


def call_factory(text: str) -> nn.Module:
    """``pkg.module:function`` called with no arguments; it must return an ``nn.Module``. The user's code failing
    (on import or in the call) is one line naming ``--model``."""
    module_name, _, function = text.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own code failing on import
        raise UserError(f"--model {text}: cannot import {module_name} ({one_line(exc)}); {MODEL_HINT}") from None
    factory = getattr(module, function, None)
    if not callable(factory):
        raise UserError(f"--model {text}: {module_name} has no function {function}; {MODEL_HINT}")
    try:
        model = factory()
    except Exception as exc:
        raise UserError(
            f"--model {text}: {function}() failed ({one_line(exc)}); give a function that takes no arguments and "
            "returns the nn.Module"
        ) from None
    if not isinstance(model, nn.Module):
        raise UserError(f"--model {text} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


# ----------------------------------------------------------------------------- the examples
@dataclass
class Examples:
    """The analysis batches and App. G's calibration and test parts (None: no App. G test), with their record."""

    analysis: list
    cal: list | None
    test: list | None
    record: dict
    num_classes: int | None = None


def data_spec(data: str | None, text_file: str | None, smoke: bool) -> tuple[dict, dict]:
    """``(identity, runtime)`` of the data flags; a missing file is a :class:`UserError` naming its flag."""
    if data and text_file:
        raise UserError("--data and --text-file name two samples; give one")
    if text_file:
        if not Path(text_file).is_file():
            what = "is a folder" if Path(text_file).is_dir() else ": no such file"
            raise UserError(f"--text-file {text_file}{' ' * (what[0] != ':')}{what}; give one text file")
        text_files(text_file)  # as 04, 05 and 10 check it: missing, binary (NUL bytes, not UTF-8) or empty: refused
        return {"source": "text", "name": Path(text_file).name, "sha256": sha256_of(Path(text_file))}, {
            "data": str(Path(text_file).resolve())
        }
    if data is None:
        if not smoke:
            raise UserError("no examples given; pass --data (an image folder or an .npz) or --text-file (a text)")
        return {"source": "synthetic", "name": "synthetic"}, {"data": None}
    path = Path(data)
    if path.is_dir():
        return {"source": "folder", "name": path.name}, {"data": str(path.resolve())}
    if path.suffix == ".npz" and path.is_file():
        return {"source": "npz", "name": path.name, "sha256": sha256_of(path)}, {"data": str(path.resolve())}
    raise UserError(f"--data {data}: neither an image folder (one subfolder per class) nor an .npz file")


def load_examples(config: dict, tokenizer) -> Examples:
    """The analysis batches and App. G's parts of ``config``'s data, in the probe seed's order."""
    source, p = config["data"]["source"], config["probe"]
    if source == "text":
        analysis, pool = text_windows(
            config["runtime"]["data"], tokenizer, p["seq_len"], p["batch_size"] * p["n_batches"]
        )
        return split_examples(analysis, pool, config, lambda ids: {"input_ids": ids})
    analysis, pool, classes = image_tensors(config)
    examples = split_examples(analysis, pool, config, lambda xy: xy)
    examples.num_classes = classes
    return examples


def check_sample_memory(images: int, shape: tuple[int, ...], config: dict) -> None:
    """Before ``images`` images of ``shape`` are made or read: about :data:`BYTES_PER_VALUE` bytes per value (the
    uint8 images and their float32 copy, and the synthetic noise) against the memory there is, else one line."""
    need = images * BYTES_PER_VALUE * int(torch.tensor(shape).prod())
    have, source = available_bytes()
    if have is not None and need > have:
        p = config["probe"]
        raise UserError(
            f"--batch-size {p['batch_size']} x --n-batches {p['n_batches']} and --app-g-n {p['app_g_n']}: {images:,} "
            f"images of {'x'.join(map(str, shape))} need about {need / 2**30:.1f} GiB but {have / 2**30:.1f} GiB is "
            f"free ({source}); give fewer or smaller batches, a smaller --app-g-n or --image-size"
        )


def image_tensors(config: dict):
    """``((x, y) analysis pool, (x, y) App. G pool, classes)`` of an image source, normalised float images (only the
    analysis examples used, and App. G's pool when it is run), their memory checked first."""
    source, p, seed = config["data"]["source"], config["probe"], config["seed"]
    need, app_g_n = p["batch_size"] * p["n_batches"], p["app_g_n"]
    if source == "folder":
        return folder_images(config, need)
    if source == "npz":
        try:
            data = load_npz(config["runtime"]["data"], flag="--data")
        except UserError as exc:  # its lines start with the file's path: named by the flag
            raise UserError(str(exc) if str(exc).startswith("--data") else f"--data {exc}") from None
        check_sample_memory(min(need, len(data.x_train)) + len(data.x_test) * bool(app_g_n), data.image_shape, config)
    else:
        check_sample_memory(need + max(app_g_n, 1), (3, p["image_size"], p["image_size"]), config)
        data = make_synthetic(num_train=need, num_test=max(app_g_n, 1), image_size=p["image_size"], seed=seed)
    mean, std = torch.tensor(data.mean).view(1, -1, 1, 1), torch.tensor(data.std).view(1, -1, 1, 1)
    norm = lambda x: (x.float() / 255 - mean) / std  # noqa: E731
    pool = (norm(data.x_test), data.y_test) if app_g_n else (data.x_test[:0], data.y_test[:0])
    return (norm(data.x_train[:need]), data.y_train[:need]), pool, data.num_classes


def folder_images(config: dict, need: int):
    """An ImageFolder's images (resized, centre-cropped, ImageNet-normalised): a seeded ``need`` for the analysis and
    the next ``app_g_n`` for App. G; a folder or an image that cannot be read is one line naming ``--data``."""
    p, root, seed = config["probe"], config["runtime"]["data"], config["seed"]
    size, app_g_n = p["image_size"], p["app_g_n"]
    transform = transforms.Compose(
        [
            transforms.Resize(size),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    try:
        folder = torchvision.datasets.ImageFolder(root, transform=transform)
    except (FileNotFoundError, OSError) as exc:
        raise UserError(f"--data {root}: not an image folder ({exc}); give one subfolder of images per class") from None
    order = torch.randperm(len(folder), generator=torch.Generator().manual_seed(seed))[: need + app_g_n].tolist()
    check_sample_memory(len(order), (3, size, size), config)
    items = []
    for i in order:
        try:
            items.append(folder[i])
        except Exception as exc:  # PIL's UnidentifiedImageError, a truncated file, ...
            raise UserError(f"--data {root}: cannot read {folder.samples[i][0]} ({one_line(exc)}); remove it") from None
    x, y = torch.stack([im for im, _ in items]), torch.tensor([label for _, label in items])
    return (x[:need], y[:need]), (x[need:], y[need:]), len(folder.classes)


def text_windows(path: str, tokenizer, seq_len: int, need: int):
    """Windows of ``seq_len`` tokens of a text: the first ``need`` for the analysis, the rest for App. G."""
    ids = tokenizer(Path(path).read_text(errors="replace"))["input_ids"]
    n = len(ids) // seq_len
    windows = torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)
    return windows[:need], windows[need:]


def split_examples(analysis, pool, config: dict, as_batch) -> Examples:
    """Analysis batches of ``batch_size`` (exactly ``n_batches``) and App. G's sample (``app_g_n`` of the pool, or every
    example left) split at random, with a seed of the probe seed, into a calibration and a test part."""
    p, seed = config["probe"], config["seed"]
    b, nb, n_app = p["batch_size"], p["n_batches"], p["app_g_n"]
    have = len(analysis[0]) if isinstance(analysis, tuple) else len(analysis)
    if have < b * nb:
        raise UserError(
            f"--batch-size {b} x --n-batches {nb} needs {b * nb} examples; the data holds {have}: fewer batches or smaller ones"
        )
    used = (analysis[0][: b * nb], analysis[1][: b * nb]) if isinstance(analysis, tuple) else analysis[: b * nb]
    batches = [as_batch(chunk) for chunk in chunks(used, b)]
    record = {"n_analysis": b * nb, "batch_size": b, "n_batches": nb, "n_cal": 0, "n_test": 0}
    if not n_app:
        return Examples(batches, None, None, record)
    size = len(pool[0]) if isinstance(pool, tuple) else len(pool)
    n = min(n_app, size)
    try:
        n_cal, n_test = app_g_sizes(n, p["app_g_cal_fraction"])
    except ParamError:
        raise UserError(
            f"--app-g-n {n_app}: the data leaves {size} examples for App. G; use --app-g-n 0 or more data"
        ) from None
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed + 1))[:n]
    take = (lambda idx: (pool[0][idx], pool[1][idx])) if isinstance(pool, tuple) else (lambda idx: pool[idx])
    cal, test = take(order[:n_cal]), take(order[n_cal:])
    record |= {"n_cal": n_cal, "n_test": n_test}
    return Examples(batches, [as_batch(c) for c in chunks(cal, b)], [as_batch(c) for c in chunks(test, b)], record)


def chunks(data, size: int) -> list:
    """Consecutive batches of ``size`` (the last may be shorter) of a tensor or an ``(x, y)`` pair."""
    n = len(data[0]) if isinstance(data, tuple) else len(data)
    return [
        (data[0][i : i + size], data[1][i : i + size]) if isinstance(data, tuple) else data[i : i + size]
        for i in range(0, n, size)
    ]


def load_inputs(config: dict) -> tuple[nn.Module, Examples]:
    """The model (weights loaded; with random weights, a head for the data's classes) and its examples, every
    defect one :class:`UserError` line: what the script checks before any run folder exists, and what the job uses."""
    model, tokenizer = build_model(config["model"], config["runtime"], None)
    examples = load_examples(config, tokenizer)
    random = config["model"]["source"] in ("smoke", "torchvision") and not config["runtime"]["weights"]
    if examples.num_classes and random:
        model, _ = build_model(config["model"], config["runtime"], examples.num_classes)  # the data's classes
    return model, examples
