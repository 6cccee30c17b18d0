"""A preset by name, with the fields the flags set: the one lookup every planner makes (``(preset, overrides)``)."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TypeVar

from common.errors import ParamError, one_of

P = TypeVar("P")


def choose_preset(presets: dict[str, P], name: str, overrides: dict | None) -> P:
    """Preset ``name`` of ``presets`` with the fields ``overrides`` sets (None meaning "the preset's value"); its
    ``__post_init__`` checks each field. A key that is no field of the preset is a programming error."""
    preset = one_of("preset", name, presets)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(given) - {f.name for f in fields(preset)}
    if unknown:
        raise TypeError(f"unknown preset fields {sorted(unknown)}")
    return replace(preset, **given)


def names_of(text: str, allowed: tuple[str, ...], param: str) -> tuple[str, ...]:
    """Comma-separated names of ``allowed``, each once, in the order given (a flag's type, e.g. ``--policy``); a
    :class:`~common.errors.ParamError` of ``param`` naming the choices otherwise."""
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not names or any(n not in allowed for n in names):
        raise ParamError(param, text, f"use one or more of {', '.join(allowed)}, comma-separated")
    return names
