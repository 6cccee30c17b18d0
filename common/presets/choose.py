"""A preset by name, with the fields the flags set: the one lookup every planner makes (``(preset, overrides)``)."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TypeVar

from common.errors import one_of

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
