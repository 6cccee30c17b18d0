"""A preset by name, with the fields the flags set: the one lookup every planner makes (``(preset, overrides)``)."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import fields, replace
from typing import TypeVar

from common.errors import ParamError, one_of

P = TypeVar("P")
H = TypeVar("H", bound=Hashable)


def choose_preset(presets: dict[str, P], name: str, overrides: dict | None) -> P:
    """Preset ``name`` of ``presets`` with the fields ``overrides`` sets (None meaning "the preset's value"); its
    ``__post_init__`` checks each field. A key that is no field of the preset is a programming error."""
    preset = one_of("preset", name, presets)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(given) - {f.name for f in fields(preset)}
    if unknown:
        raise TypeError(f"unknown preset fields {sorted(unknown)}")
    return replace(preset, **given)


def repeated_values(values: Iterable[H]) -> list[H]:
    """The values that occur more than once, in the order they first occur; linear in the list (one hash each)."""
    return [value for value, count in Counter(values).items() if count > 1]


class BlankItem(ValueError):
    """A comma-separated list with a blank item between its values (``0.15,,0.3``, ``criterion,``): a value left out
    or a comma too many, refused rather than skipped (docs/runs.md, section "Bounds")."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(f"{text!r} holds a blank item; remove the extra comma or give the missing value")


def comma_items(text: str) -> list[str]:
    """``text``'s comma-separated items, stripped; ``[]`` when every item is blank (``""``, ``","``: the caller's "no
    values" error); :class:`BlankItem` when a blank item stands among values. The one splitter of every list flag."""
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        return []
    if "" in items:
        raise BlankItem(text)
    return items


def names_of(text: str, allowed: tuple[str, ...], param: str) -> tuple[str, ...]:
    """Comma-separated names of ``allowed``, each once, in the order given (a flag's type, e.g. ``--policy``); a
    :class:`~common.errors.ParamError` of ``param`` naming the choices, or the blank item, otherwise."""
    try:
        names = tuple(comma_items(text))
    except BlankItem:
        raise ParamError(param, text, "holds a blank item; remove the extra comma or give the missing name") from None
    unknown = [n for n in names if n not in allowed]
    if not names or unknown:
        near = difflib.get_close_matches(unknown[0], allowed, n=1, cutoff=0.5) if unknown else []
        hint = f"did you mean {near[0]}? " if near else ""
        raise ParamError(param, text, f"{hint}use one or more of {', '.join(allowed)}, comma-separated")
    if repeated := repeated_values(names):
        raise ParamError(param, text, f"names {', '.join(repeated)} twice; give each once (each name is one run)")
    return names
