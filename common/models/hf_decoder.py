"""Any Hugging Face causal LM as a decoder of this repository: layer list, candidates, Block Influence, loading.

:func:`find_decoder_layers` finds a causal LM's decoder-layer ``nn.ModuleList`` and its final norm
by one generic rule, not a table of families: the outermost ``ModuleList`` of ``config.num_hidden_layers``
modules of one class, and the first child of the same parent registered after it whose class name
holds ``Norm``. That is ``gpt_neox.layers`` / ``final_layer_norm`` (GPT-NeoX, Pythia),
``transformer.h`` / ``ln_f`` (GPT-2), ``model.layers`` / ``model.norm`` (Llama, Qwen2, Mistral) and
``model.layers`` / ``model.final_layernorm`` (Phi). A model without such a list is a one-line
:class:`~common.errors.UserError`.

:class:`HFDecoder` wraps the model in the interface the probe and the training loop already use
(``forward(ids) -> logits``, ``blocks``, ``candidates()``, ``candidate_width``). Candidates
(docs/design.md, section "Insertion candidates"): the residual stream entering each layer (the input
of ``layers[i]``) plus the stream leaving the last layer before the final norm (the input of the
norm): ``n_layer + 1`` states of width ``d_model``, one row per token, each with the ``linear``
tangent family, exactly as ``common/models/gpt.py`` declares them. The probe reads them with its own
forward pre-hooks.

:class:`BlockInfluence` records ShortGPT's Block Influence (Men et al. 2024) in the same forward
pass: ``BI_i = 1 - mean over tokens of cos(x_i, x_{i+1})``, ``x_i`` the residual stream entering
layer ``i`` and ``x_{i+1}`` the one leaving it (for the last layer: the final norm's input, not the
normed state that ``output_hidden_states`` returns there).

:func:`load_causal_lm` loads ``AutoModelForCausalLM`` and ``AutoTokenizer`` from a Hub id at a
revision (through ``huggingface_hub.snapshot_download``, whose snapshot directory is named by the
resolved commit) or from a local directory, and records what was loaded: id or path, revision,
commit hash and the sha256 of every weight file. A Hub id that cannot be fetched (offline, no
network) is one line naming ``--model-path`` and ``HF_HUB_OFFLINE``.
"""

from __future__ import annotations

import copy
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import huggingface_hub
import safetensors
import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from common.errors import UserError
from common.models.candidates import Candidate
from common.science.precision import float64_device

TANGENT_FAMILY = "linear"  # the protocol's zero-output block at every candidate, as for common/models/gpt.py
# Residual output projections (the last Linear of attention and of the MLP), by attribute name:
# GPT-NeoX dense / dense_4h_to_h, GPT-2 c_proj, Llama / Qwen2 / Mistral o_proj / down_proj, Phi dense / fc2.
OUTPUT_PROJECTIONS = ("dense", "dense_4h_to_h", "c_proj", "o_proj", "down_proj", "fc2", "out_proj")
WEIGHT_SUFFIXES = (".safetensors", ".bin")
SNAPSHOT_FILES = [
    "*.json",
    "*.txt",
    "*.model",
    "*.tiktoken",
    "*.safetensors",
]  # the weights as safetensors when the repo has them
FAMILIES = "GPT-NeoX, GPT-2, Llama, Qwen2, Mistral, Phi"


# ----------------------------------------------------------------------------- the layer list
@dataclass(frozen=True)
class DecoderParts:
    """Where a causal LM keeps its decoder layers and its final norm (dotted module paths)."""

    layers: nn.ModuleList
    final_norm: nn.Module
    layers_path: str
    norm_path: str


def find_decoder_layers(model: nn.Module) -> DecoderParts:
    """The decoder-layer ``ModuleList`` and the final norm of a causal LM; a one-line UserError when there is none.

    The list: the outermost ``nn.ModuleList`` whose modules all have one class and, when the
    config names it, ``config.num_hidden_layers`` of them. The norm: the first module registered
    after the list in the same parent whose class name contains ``Norm``.
    """
    n_layer = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    lists = {}
    for path, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0 or any(path.startswith(p + ".") for p in lists):
            continue
        if len({type(m) for m in module}) == 1 and (n_layer is None or len(module) == n_layer):
            lists[path] = module
    name = type(model).__name__
    if len(lists) != 1:
        found = "none" if not lists else ", ".join(lists)
        raise UserError(
            f"{name}: cannot find its decoder layers (one nn.ModuleList of {n_layer or 'identical'} layers; found {found}); "
            f"the probe reads causal LMs whose layers sit in one ModuleList ({FAMILIES})"
        )
    [(path, layers)] = lists.items()
    parent_path, _, list_name = path.rpartition(".")
    parent = model.get_submodule(parent_path)
    children = list(parent.named_children())
    after = [c for c in children[[n for n, _ in children].index(list_name) + 1 :] if "Norm" in type(c[1]).__name__]
    if not after:
        raise UserError(
            f"{name}: found its layers at {path} but no final norm after them in {parent_path or 'the model'}; "
            f"the probe's last candidate is the input of that norm ({FAMILIES})"
        )
    norm_name, norm = after[0]
    return DecoderParts(layers, norm, path, f"{parent_path}.{norm_name}" if parent_path else norm_name)


# ----------------------------------------------------------------------------- the adapter
class HFDecoder(nn.Module):
    """A Hugging Face causal LM with the repository's decoder interface: ``forward(ids) -> logits``, ``candidates()``.

    ``blocks`` is the model's own layer list (not a copy): inserting into it inserts into the model.
    The wrapped model is ``self.lm`` (its ``state_dict`` keys carry the prefix ``lm.``).
    """

    def __init__(self, lm: PreTrainedModel) -> None:
        super().__init__()
        self.lm = lm
        object.__setattr__(self, "parts", find_decoder_layers(lm))  # not a submodule: no duplicate state_dict keys

    @property
    def blocks(self) -> nn.ModuleList:
        return self.parts.layers

    @property
    def n_layer(self) -> int:
        return len(self.parts.layers)

    @property
    def d_model(self) -> int:
        return int(self.lm.config.hidden_size)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=idx, use_cache=False).logits  # (B, T, vocab)

    def candidates(self) -> list[Candidate]:
        """The ``L + 1`` candidates: every layer's input, then the final norm's input."""
        found = [Candidate(i, f"layer{i}.in", layer, TANGENT_FAMILY) for i, layer in enumerate(self.parts.layers)]
        found.append(Candidate(len(found), "final_norm.in", self.parts.final_norm, TANGENT_FAMILY))
        return found

    def candidate_width(self, index: int) -> int:
        return self.d_model


def zero_output_layer(layer: nn.Module) -> nn.Module:
    """A copy of ``layer`` with its residual output projections (weights and biases) at zero: the identity.

    The projections are the modules named in :data:`OUTPUT_PROJECTIONS` (attention and MLP);
    the other weights keep the copied layer's values.
    """
    new = copy.deepcopy(layer)
    zeroed = 0
    with torch.no_grad():
        for name, module in new.named_modules():
            if name.rpartition(".")[2] in OUTPUT_PROJECTIONS and hasattr(module, "weight"):
                module.weight.zero_()
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
                zeroed += 1
    if zeroed < 2:
        raise ValueError(
            f"{type(layer).__name__}: found {zeroed} of its two output projections ({', '.join(OUTPUT_PROJECTIONS)})"
        )
    return new


def insert_zero_layer(decoder: HFDecoder, index: int) -> nn.Module:
    """Insert :func:`zero_output_layer` of a neighbour at candidate ``index`` (before layer ``index``; ``L``: before the norm)."""
    layers = decoder.blocks
    if not 0 <= index <= len(layers):
        raise ValueError(f"candidate {index} out of range: the model has {len(layers) + 1} candidates")
    layer = zero_output_layer(layers[min(index, len(layers) - 1)])
    layers.insert(index, layer)
    config = decoder.lm.config
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types.insert(index, config.layer_types[min(index, len(config.layer_types) - 1)])
    renumber_layers(layers, config)
    return layer


def renumber_layers(layers: nn.ModuleList, config) -> None:
    """Every module's ``layer_idx`` in layer ``i`` set to ``i``, and ``config.num_hidden_layers`` to the list's length.

    A copied layer keeps its source's ``self_attn.layer_idx``; a generation cache keyed by it would give
    two layers one slot. Llama-style loops read ``layers[: num_hidden_layers]``.
    """
    for i, layer in enumerate(layers):
        for module in layer.modules():
            if isinstance(getattr(module, "layer_idx", None), int):
                module.layer_idx = i
    config.num_hidden_layers = len(layers)


# ----------------------------------------------------------------------------- Block Influence
def block_influence_per_token(x_in: torch.Tensor, x_out: torch.Tensor) -> torch.Tensor:
    """``1 - cos(x_in, x_out)`` per token (float64; ``(..., d)`` in, ``(...)`` out): ShortGPT's Block Influence.

    In float64 where the states live, or on the CPU for a device without float64 (MPS, NPU:
    :func:`common.science.precision.float64_device`).
    """
    f64 = float64_device(x_in.device)
    return 1.0 - F.cosine_similarity(x_in.to(f64, torch.float64), x_out.to(f64, torch.float64), dim=-1)


class BlockInfluence:
    """Records Block Influence of every layer during the forward passes inside ``with recorder:``.

    A forward pre-hook keeps each layer's input, a forward hook its output (the first element when
    it returns a tuple); :meth:`values` is the mean over every token seen, one value per layer.
    """

    def __init__(self, decoder: HFDecoder) -> None:
        self.layers = list(decoder.blocks)
        self.sums = [0.0] * len(self.layers)
        self.tokens = [0] * len(self.layers)
        self._inputs: list[torch.Tensor | None] = [None] * len(self.layers)
        self._handles: list = []

    def __enter__(self) -> BlockInfluence:
        for i, layer in enumerate(self.layers):
            self._handles.append(layer.register_forward_pre_hook(self._keep_input(i)))
            self._handles.append(layer.register_forward_hook(self._record(i)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _keep_input(self, i: int):
        def hook(module, args):
            self._inputs[i] = args[0].detach()

        return hook

    def _record(self, i: int):
        def hook(module, args, output):
            out = output[0] if isinstance(output, tuple) else output
            with torch.no_grad():
                bi = block_influence_per_token(self._inputs[i], out.detach())
            self.sums[i] += float(bi.sum())
            self.tokens[i] += bi.numel()
            self._inputs[i] = None

        return hook

    def values(self) -> list[float | None]:
        return [s / n if n else None for s, n in zip(self.sums, self.tokens, strict=True)]


# ----------------------------------------------------------------------------- loading
@dataclass
class LoadedLM:
    """A causal LM, its tokenizer (None when not asked for) and what was loaded (:attr:`record`)."""

    model: PreTrainedModel
    tokenizer: object | None
    record: dict = field(default_factory=dict)  # model, revision, commit_hash, weight_files {name: sha256}


class HubUnavailable(UserError):
    """A Hub model could not be fetched (offline, unreachable, or not in the cache): one line, like any :class:`UserError`."""


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` as huggingface_hub reads it (now, or when it was imported)."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE") or bool(
        huggingface_hub.constants.HF_HUB_OFFLINE
    )


def is_local(model: str) -> bool:
    """A local directory (or something written as a path) rather than a Hub id ``owner/name``."""
    return Path(model).expanduser().exists() or model.startswith((".", "/", "~")) or model.count("/") > 1


def resolve_snapshot(repo: str, revision: str | None, *, local_only: bool = False) -> Path:
    """The local snapshot directory of ``repo`` at ``revision`` (downloaded when missing and online).

    Its name is the resolved commit hash (huggingface_hub's cache layout). Weights: the
    safetensors files when the revision has them, else the PyTorch ``.bin`` files.
    ``local_only``: from the cache, never over the network (the ranks of a job that one rank per
    node has fetched for).
    """
    offline = hub_offline() or local_only
    try:
        folder = Path(
            huggingface_hub.snapshot_download(
                repo, revision=revision, allow_patterns=SNAPSHOT_FILES, local_files_only=offline
            )
        )
        if not weight_files(folder):
            folder = Path(
                huggingface_hub.snapshot_download(
                    repo, revision=revision, allow_patterns=["*.bin"], local_files_only=offline
                )
            )
    except Exception as exc:  # LocalEntryNotFoundError offline, connection errors, unknown repo or revision
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        if not offline:
            where = f"{type(exc).__name__}: {reason}"
        elif local_only and not hub_offline():
            where = "it is not in this process's local cache, where this node's first process should have downloaded it"
        else:
            where = "HF_HUB_OFFLINE is set and it is not in the local cache"
        raise HubUnavailable(
            f"--model {repo}{f' --revision {revision}' if revision else ''}: cannot load it from the Hugging Face Hub ({where}); "
            "download it where the Hub is reachable (unset HF_HUB_OFFLINE there) and pass the directory with --model-path DIR"
        ) from None
    return folder


def weight_files(folder: str | os.PathLike) -> list[Path]:
    """The weight files ``from_pretrained`` reads from ``folder``: its safetensors files, else its ``.bin`` files."""
    folder = Path(folder)
    for suffix in WEIGHT_SUFFIXES:
        found = sorted(p for p in folder.glob(f"*{suffix}") if p.is_file())
        if found:
            return found
    return []


def check_weight_files(folder: str | os.PathLike) -> list[Path]:
    """The weight files of ``folder``, each safetensors file's header read (cheap: no tensor is loaded);
    a folder without weights, or a file that is not safetensors, is a :class:`UserError` naming it."""
    files = weight_files(folder)
    if not files:
        raise UserError(f"{folder}: no *.safetensors or *.bin weight files; give a folder written by save_pretrained")
    for path in files:
        if path.suffix != ".safetensors":
            continue
        try:
            with safetensors.safe_open(str(path), "pt"):
                pass
        except Exception as exc:  # SafetensorError (a bad header), OSError
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            raise UserError(
                f"{path} is not a readable safetensors file ({reason}); replace it with the model's own file"
            ) from None
    return files


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_causal_lm(
    model: str,
    *,
    revision: str | None = None,
    tokenizer: bool = True,
    dtype: torch.dtype = torch.float32,
    hash_weights: bool = True,
    local_only: bool = False,
) -> LoadedLM:
    """``AutoModelForCausalLM`` (and ``AutoTokenizer``) from a Hub id at ``revision`` or a local directory.

    The record: ``model`` (the id, or the resolved directory), ``revision``, ``commit_hash`` (the
    snapshot's commit for a Hub id; for a local directory the commit of a Hub cache snapshot it is
    in, else None), ``weight_files`` (``{file name: sha256}``; None values with ``hash_weights=False``,
    e.g. on the ranks that write no record) and ``model_class``. ``local_only``: a Hub id from the
    local cache only (:func:`resolve_snapshot`).
    """
    if is_local(model):
        folder = Path(model).expanduser().resolve()
        if not folder.is_dir():
            raise UserError(
                f"--model-path {model}: no such directory; give a folder written by save_pretrained (config.json and weights)"
            )
        commit = folder.name if folder.parent.name == "snapshots" else None
        name = str(folder)
    else:
        folder = resolve_snapshot(model, revision, local_only=local_only)
        commit, name = folder.name, model
    files = check_weight_files(folder)
    try:
        lm = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
        tok = AutoTokenizer.from_pretrained(folder) if tokenizer else None
    except (
        OSError,
        ValueError,
        KeyError,
        safetensors.SafetensorError,
    ) as exc:  # unknown architecture, missing tokenizer files, ...
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(
            f"{name}: transformers cannot load it as a causal LM with its tokenizer ({reason}); pass a causal LM's folder or Hub id"
        ) from None
    record = {
        "model": name,
        "revision": revision,
        "commit_hash": commit,
        "weight_files": {p.name: sha256_file(p) if hash_weights else None for p in files},
        "model_class": type(lm).__name__,
    }
    return LoadedLM(lm, tok, record)
