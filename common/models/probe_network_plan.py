"""Before :func:`common.models.probe_network.probe_network` probes: the places, one example through the model, and
the memory the probe will need against the memory there is (issue 58, items 1 and 5).

- :func:`resolve_places`: ``"auto"`` (a registered rule), module names or patterns, or the modules themselves;
- :func:`measure`: two examples of the first batch through the probe's own pass
  (:func:`common.science.activations.activation_gradients`): each place's state shape, the bytes autograd saves per
  example (parameters left out), the logits' shape, which the label and loss checks see before the loss is taken;
  a model whose forward fails, or never enters a place, or enters one twice, is one line;
- :func:`skip_connections`: for places the user named, whether each module's input reaches its output through an
  addition (``out = z + f(z)``, a residual block: a path in the autograd graph from the output to the input through an
  ``Add`` node and shape-only steps), and whether a place reads the model's raw input;
- :func:`place_sizes` and :func:`check_memory`: each place's ``k``, ``d`` and rows, and the estimated peak
  (:func:`common.science.memory.probe_bytes`) against :func:`common.science.memory.available_bytes`; what does not fit
  is one line naming the largest places and the ways out (``exact=False``, fewer places, smaller batches).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from common.errors import UserError
from common.models.candidates import Candidate
from common.models.places.registry import Place, modules_named, places_for, places_of_modules
from common.models.probe_network_checks import PYTHON, Names
from common.science.activations import activation_gradients, probe_mode
from common.science.memory import PlaceSize, available_bytes, exact_bytes, probe_bytes
from common.science.tangent import get_family

LAYOUTS = {4: "conv3x3", 3: "linear", 2: "linear"}  # state dimensions -> tangent family (NCHW map, tokens, vectors)
SHAPE_ONLY = ("View", "Reshape", "UnsafeView", "Clone", "Expand", "Alias", "ToCopy", "Permute", "Transpose", "Dropout")


def resolve_places(model: nn.Module, places, names: Names = PYTHON) -> list[Place]:
    """``"auto"``: :func:`common.models.places.places_for`; other text, or a list of names: the modules they name
    (:func:`common.models.places.modules_named`); a list of modules: :func:`places_of_modules`; a list of
    :class:`Place`: as given. A place listed twice is refused."""
    if isinstance(places, str) and places == "auto":
        return places_for(model, names.places)
    entries = [places] if isinstance(places, str) else list(places)
    if not entries:
        raise UserError(f"places is empty; give 'auto' or at least one of the model's blocks ({names.places})")
    if all(isinstance(p, Place) for p in entries):
        if len({id(p.module) for p in entries}) < len(entries):
            raise UserError(f"places lists one module twice; give each place once ({names.places})")
        return entries
    if all(isinstance(p, str) for p in entries):
        entries = modules_named(model, places if isinstance(places, str) else entries, names.places)
    return places_of_modules(model, entries, names.places)


@dataclass
class Measured:
    """What one example of the first batch shows: each place's state shape (batch of one), the bytes autograd saves
    for one example (parameters left out), the logits' shape."""

    shapes: list[tuple[int, ...]]
    dtypes: list[torch.dtype]
    activation_bytes: int
    logits_shape: tuple[int, ...]


def measure(wrapped: nn.Module, places: list[Place], x, y, loss_fn, names: Names, on_logits=None) -> Measured:
    """The first two examples of ``x`` through the probe's pass (module docstring); ``on_logits(logits, y)`` sees
    their logits before the loss does (the label and loss checks); a failure is one :class:`UserError` line."""
    params = {t.untyped_storage().data_ptr() for t in [*wrapped.parameters(), *wrapped.buffers()]}
    saved: dict[int, int] = {}
    logits: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    def loss(out, target: torch.Tensor) -> torch.Tensor:
        if not isinstance(out, torch.Tensor) or out.dim() == 0:
            raise UserError(f"the model returns a {type(out).__name__}, not a tensor of logits with a batch axis")
        logits.append((1, *out.shape[1:]))
        if on_logits is not None:
            on_logits(out.detach(), target)
        return loss_fn(out, target)

    candidates = [Candidate(i, p.name, p.module, "linear") for i, p in enumerate(places)]
    m = min(2, int(x.shape[0]))
    try:
        with probe_mode(wrapped), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            _, states, _ = activation_gradients(wrapped, x[:m], y[:m], loss, candidates)
    except UserError:
        raise
    except Exception as exc:  # the user's model or loss on their data: one line, not a traceback
        text = " ".join(str(exc).split())[:300]
        if "never entered" in text or "entered twice" in text:
            raise UserError(
                f"{text.replace('candidates', 'places').replace('candidate', 'place')}; list modules the forward "
                f"runs once each, whose input is the residual stream ({names.places})"
            ) from None
        raise UserError(
            f"the model's forward and backward pass fails on {names.batch(0)} ({type(exc).__name__}: {text})"
        ) from None
    shapes = [(1, *z.shape[1:]) for z in states]
    return Measured(shapes, [z.dtype for z in states], sum(saved.values()) // m, logits[0])


def family_of(name: str, shape: tuple[int, ...], dtype: torch.dtype, family: str | None = None) -> str:
    """The tangent family of a state of ``shape``: ``conv3x3`` for an NCHW map, ``linear`` for ``(batch, tokens,
    width)`` or ``(batch, width)``; an explicit ``family`` must fit the layout. Otherwise a :class:`UserError`."""
    if not dtype.is_floating_point:
        raise UserError(f"place {name}: its input is {dtype} (ids, not a state); name modules after the embedding")
    found = LAYOUTS.get(len(shape))
    if family is not None:
        get_family(family)  # an unknown name: ValueError naming the known ones
    chosen = family or found
    fits = chosen == "conv3x3" and len(shape) == 4 or chosen == "linear" and len(shape) in (2, 3)
    if not fits:
        want = (
            "an NCHW feature map (batch, channels, height, width)" if chosen == "conv3x3" else "(batch, tokens, width)"
        )
        raise UserError(
            f"place {name}: its state has shape {tuple(shape)} for one example, which the {chosen or 'no'} tangent family does not fit "
            f"(it needs {want if chosen else 'an NCHW map or (batch, tokens, width)'}); "
            "name modules whose input is the residual stream, or another family"
        )
    return chosen


def skip_connections(wrapped: nn.Module, places: list[Place], x: torch.Tensor) -> tuple[list[bool | None], list[bool]]:
    """``(skip, raw)`` per place: its module's input reaches its output through an addition (None: not known, the
    forward failed on a detached input); its input is the model's own input ``x``."""
    markers: list = [None] * len(places)
    outputs: list = [None] * len(places)
    raw = [False] * len(places)

    def enter(i: int):
        def hook(module, args):
            if not args or not isinstance(args[0], torch.Tensor) or not args[0].is_floating_point():
                return None
            raw[i] = raw[i] or args[0] is x
            marked = args[0].detach().requires_grad_(True).clone()  # a fresh start: the graph below ends here
            markers[i] = marked.grad_fn
            return (marked, *args[1:])

        return hook

    def leave(i: int):
        def hook(module, args, out):
            out = out[0] if isinstance(out, tuple | list) and out else out
            outputs[i] = out if isinstance(out, torch.Tensor) else None

        return hook

    handles = [h for i, p in enumerate(places) for h in (p.module.register_forward_pre_hook(enter(i)),)]
    handles += [p.module.register_forward_hook(leave(i)) for i, p in enumerate(places)]
    try:
        with probe_mode(wrapped), torch.enable_grad():
            wrapped(x)
    except Exception:  # an input the forward cannot take detached: skip connections unknown, nothing refused
        return [None] * len(places), raw
    finally:
        for h in handles:
            h.remove()
    return [
        _adds_input(o.grad_fn, m) if o is not None and m is not None else None
        for o, m in zip(outputs, markers, strict=True)
    ], raw


def _adds_input(node, marker) -> bool:
    """An ``Add`` node in the graph below ``node`` one of whose operands is ``marker`` (through shape-only steps)."""
    seen, todo = set(), [node]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        nxt = [n for n, _ in fn.next_functions if n is not None]
        if type(fn).__name__.startswith("AddBackward") and any(_direct(n, marker) for n in nxt):
            return True
        todo += nxt
    return False


def _direct(fn, marker) -> bool:
    while fn is not None and fn is not marker:
        nxt = [n for n, _ in fn.next_functions if n is not None]
        if not type(fn).__name__.startswith(SHAPE_ONLY) or len(nxt) != 1:
            return False
        fn = nxt[0]
    return fn is marker


def place_sizes(places: list[Place], measured: Measured, families: list[str], examples: int, pass_examples: int):
    """Each place's :class:`common.science.memory.PlaceSize` for ``examples`` pooled examples in passes of
    ``pass_examples``."""
    sizes = []
    for p, shape, dtype, fam_name in zip(places, measured.shapes, measured.dtypes, families, strict=True):
        fam, z = get_family(fam_name), torch.empty(shape, device="meta")
        d, per = fam.width(z), fam.rows_per_example(z)
        size, k = torch.empty((), dtype=dtype).element_size(), fam.feature_dim(d)
        kept = d if fam_name == "conv3x3" else k  # the rows form keeps psi's maps for conv3x3, the rows otherwise
        sizes.append(PlaceSize(p.name, k, d, examples * per, pass_examples * per, z.numel() * size, kept, size))
    return sizes


def gb(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**28 else f"{n / 2**20:.0f} MiB"


def check_memory(sizes, measured: Measured, pass_examples: int, device, names: Names, **modes) -> int:
    """The estimated peak (bytes) of a probe in ``modes`` (:func:`common.science.memory.probe_bytes`'s ``exact``,
    ``contributions``, ``direction``) against what there is; too much is one line naming the largest places."""
    need = probe_bytes(sizes, activation_bytes=measured.activation_bytes, pass_examples=pass_examples, **modes)
    have, source = available_bytes(device)
    if have is None or need <= have:
        return need
    largest = sorted(sizes, key=lambda p: -exact_bytes(p, True)[0])[:3]
    what = ", ".join(f"{p.name} {gb(exact_bytes(p, True)[0])}" for p in largest)
    mode = "the exact probe" if modes.get("exact") else "App. G's probe" if modes.get("contributions") else "the probe"
    ways = f"{names.exact}, " if modes.get("exact") else ""
    raise UserError(
        f"{mode} needs about {gb(need)} at its peak but {gb(have)} is free ({source}); the largest places: {what}; "
        f"ways out: {ways}fewer places ({names.places}), {names.batches}"
    )
