"""The registry of place rules (:mod:`common.models.places`): :class:`Place`, :class:`PlaceRule`, :func:`register_places`,
:func:`places_for`, the places of a user's list of modules (:func:`places_of_modules`) and the modules that names or
patterns pick (:func:`modules_named`, script 11's ``--places``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import nn

from common.errors import UserError


@dataclass(frozen=True, eq=False)
class Place:
    """A residual-stream state: the input of ``module``; a zero-output block goes to ``container[position]``."""

    name: str
    module: nn.Module
    container: nn.Module | None = None  # nn.Sequential / nn.ModuleList the forward pass runs in order; None: none
    position: int | None = None  # where in it (len(container): appended at its end)
    head: bool = False  # the state entering the head (not a block's input)
    note: str | None = None  # why this place cannot be grown into, when container is None


@dataclass(frozen=True)
class PlaceRule:
    """One model family's rule: which models it knows (``matches``) and their places (``places``)."""

    name: str
    matches: Callable[[nn.Module], bool]
    places: Callable[[nn.Module], list[Place]]


PLACE_RULES: dict[str, PlaceRule] = {}


def register_places(rule: PlaceRule) -> PlaceRule:
    """Add a family's rule (a new family is a new file with one rule, not a new branch)."""
    if rule.name in PLACE_RULES:
        raise ValueError(f"place rule {rule.name!r} is already registered")
    PLACE_RULES[rule.name] = rule
    return rule


def rule_for(model: nn.Module) -> PlaceRule | None:
    """The first registered rule that knows ``model``, or None."""
    return next((rule for rule in PLACE_RULES.values() if rule.matches(model)), None)


PLACES_HINT = (
    "places=[model.block1, model.block2, ...] or places='blocks.*': the input of each listed module is a place"
)


def places_for(model: nn.Module, hint: str = PLACES_HINT) -> list[Place]:
    """``places="auto"``: the places of a model a registered rule knows; otherwise a one-line :class:`UserError`
    naming ``hint`` (how to list the blocks: the Python argument, or script 11's ``--places``)."""
    rule = rule_for(model)
    if rule is None:
        raise UserError(
            f"{type(model).__name__}: places='auto' knows {', '.join(PLACE_RULES)} models only; pass the list of its "
            f"residual blocks instead ({hint})"
        )
    return rule.places(model)


def modules_named(model: nn.Module, spec: str | Sequence[str], hint: str = PLACES_HINT) -> list[nn.Module]:
    """The modules of ``model`` that ``spec`` names: module names as ``named_modules`` spells them (``blocks.0``), or
    patterns in which ``*`` stands for one name part and ``?`` for one character (``blocks.*``, ``layer?.*``), comma
    separated in one string or listed; in the order given (a pattern: the model's order). A name or pattern that
    finds nothing is a :class:`UserError` naming a few of the model's modules."""
    entries = [e.strip() for e in (spec.split(",") if isinstance(spec, str) else spec)]
    named = {name: m for name, m in model.named_modules() if name}
    found: list[nn.Module] = []
    for entry in entries:
        if not entry:
            raise UserError(f"places {spec!r} holds an empty name; give module names or patterns ({hint})")
        pattern = re.compile(re.escape(entry).replace(r"\*", "[^.]+").replace(r"\?", "[^.]"))
        hits = [m for name, m in named.items() if pattern.fullmatch(name)]
        if not hits:
            some = ", ".join(list(named)[:8]) or "none"
            raise UserError(
                f"places: {entry!r} names no module of {type(model).__name__} (its modules: {some}, ...); {hint}"
            )
        found += hits
    return found


def places_of_modules(model: nn.Module, modules: Sequence[nn.Module], hint: str = "places=[...]") -> list[Place]:
    """The places of a user's list: the input of each module, named by its path in ``model``; a zero-output block
    goes in front of it in the ``nn.Sequential`` or ``nn.ModuleList`` that holds it (none: probed, not grown into).
    ``hint``: how the caller's refusals name the list (script 11: its ``--places`` flag)."""
    paths = {id(m): path for path, m in model.named_modules()}
    parents = {id(child): m for m in model.modules() for child in m.children()}
    places, seen = [], set()
    for i, module in enumerate(modules):
        if not isinstance(module, nn.Module) or id(module) not in paths:
            raise UserError(
                f"places[{i}] ({type(module).__name__}) is not a submodule of {type(model).__name__}; "
                "list the model's own blocks (places=[model.layers[0], ...])"
            )
        if id(module) in seen:
            raise UserError(f"places names {paths[id(module)] or 'the model'} twice; give each place once ({hint})")
        seen.add(id(module))
        parent = parents.get(id(module))
        container, position = in_sequence(parent, module)
        note = (
            None if container is not None else f"{paths[id(parent)] or 'the model'} is no nn.Sequential or ModuleList"
        )
        places.append(Place(f"{paths[id(module)]}.in", module, container, position, note=note))
    return places


def in_sequence(parent: nn.Module | None, module: nn.Module) -> tuple[nn.Module | None, int | None]:
    """``(parent, index of module in it)`` when ``parent`` is an ``nn.Sequential`` or ``nn.ModuleList``, else None."""
    if isinstance(parent, nn.Sequential | nn.ModuleList):
        return parent, next(i for i, m in enumerate(parent) if m is module)
    return None, None
