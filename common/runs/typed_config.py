"""A run's config read once, into a frozen dataclass: the one converter between a config dict and its typed form.

A job function receives its run's config as a plain dict (what is hashed into the run's identity and stored as
``config.json``: docs/runs.md) and reads it once, at its entry, into a typed config (``run = ProbeRun.from_config(
config)``); from then on it and its helpers read attributes (``run.depth_n``, ``run.train.epochs``), never keys.

:func:`from_mapping` builds a dataclass from a mapping: each field is the key of the same name; a field whose type
is a dataclass (or a dataclass or None) is built from the nested mapping the same way, and a ``tuple[...]`` field
from a JSON list. An unknown key and a missing key are refused, each with a :class:`ValueError` that names the key
by its path (``train.epochs``). A key that may be absent is declared with :func:`optional` and read as its
default where absent; :func:`to_mapping` writes it back exactly where the config had it (a typed config built
directly: where it differs from its default, the rule of the recipes' ``LATER_FIELDS``, :mod:`common.training.recipes`),
so that ``to_mapping(from_mapping(cls, config)) == config`` for every config (JSON-equal: tuples come back as lists). Defaults of a run's settings live in its preset
(``common/presets/<slug>.py``); :func:`optional` is for keys that some configs leave out, never for a setting's
default. Where the typed configs live: docs/design.md, section "A job reads its config once".
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Self, TypeVar

T = TypeVar("T")

OPTIONAL = "typed_config.optional"  # the field metadata key of optional()
ABSENT = "_absent_keys"  # the attribute from_mapping sets: the optional keys its mapping left out


class TypedConfig:
    """Base of a run's typed config (a frozen dataclass): :meth:`from_config` reads the run's config dict once,
    :meth:`to_config` gives it back."""

    @classmethod
    def from_config(cls, config: Mapping) -> Self:
        """The typed config of a run's config dict (:func:`from_mapping`)."""
        return from_mapping(cls, config)

    def to_config(self) -> dict:
        """The config dict again (:func:`to_mapping`)."""
        return to_mapping(self)


def optional(default: Any = None) -> Any:
    """A dataclass field whose key a config may leave out (read as ``default``, written back only when it differs)."""
    return dataclasses.field(default=default, metadata={OPTIONAL: True})


def from_mapping(cls: type[T], mapping: Any, where: str = "") -> T:
    """The dataclass ``cls`` built from ``mapping``, nested dataclass fields from nested mappings.

    Raises :class:`ValueError` naming the key (its path from the top, ``where`` its prefix) for a key ``cls`` has
    no field for, for a field without a default whose key is missing, and for a section that is not a mapping.
    """
    if not isinstance(mapping, Mapping):
        raise ValueError(f"{cls.__name__}: {where.rstrip('.') or 'the config'} is {mapping!r}, not a mapping")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in mapping if k not in fields]
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown key {where}{unknown[0]}")
    hints = typing.get_type_hints(cls)
    values = {}
    for name, f in fields.items():
        if name in mapping:
            values[name] = _value(hints[name], mapping[name], f"{where}{name}.")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{cls.__name__}: missing key {where}{name}")
    typed = cls(**values)
    object.__setattr__(typed, ABSENT, frozenset(fields) - set(mapping))  # not a field: equality and repr ignore it
    return typed


def typed(cls: type[T], config: Any) -> T:
    """``config`` itself when it is a ``cls`` already, else ``cls`` built from it (:func:`from_mapping`): for the few
    functions that a script calls with a planned config dict and a job with its typed config."""
    return config if isinstance(config, cls) else from_mapping(cls, config)


def to_mapping(obj: Any) -> dict:
    """The config dict of a typed config (nested dataclasses as dicts, tuples as lists), the inverse of
    :func:`from_mapping`: an :func:`optional` field where its mapping had the key (built directly: where it differs
    from its default)."""
    absent = getattr(obj, ABSENT, None)
    return {
        f.name: _plain(getattr(obj, f.name))
        for f in dataclasses.fields(obj)
        if not f.metadata.get(OPTIONAL)
        or (f.name not in absent if absent is not None else getattr(obj, f.name) != f.default)
    }


def _value(hint: Any, value: Any, where: str) -> Any:
    """``value`` read as ``hint``: a dataclass from a mapping (None where the hint allows it), a tuple from a list."""
    kinds = typing.get_args(hint) if _is_union(hint) else (hint,)
    if value is None and type(None) in kinds:
        return None
    for kind in kinds:
        if dataclasses.is_dataclass(kind):
            return from_mapping(kind, value, where)
        if typing.get_origin(kind) is tuple and isinstance(value, list | tuple):
            return tuple(value)
    return value


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_mapping(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


__all__ = ["ABSENT", "OPTIONAL", "TypedConfig", "from_mapping", "optional", "to_mapping", "typed"]
