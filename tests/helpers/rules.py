"""Every claim rule and identity check, found by what marks them: the rule text :func:`common.report.rules.verdicts.rule`
attaches (``fn.rule``). Identity checks are the rules of :mod:`common.report.rules.identities`; every other is a claim
rule but App. G's (:mod:`common.report.rules.app_g`: its verdict is Theorem 3's separated test, whose error rates the
theorem bounds, so it has no simulated case). Found, not listed, so that a new rule cannot be forgotten by the tests
that cover every rule."""

from __future__ import annotations

import importlib
import pkgutil

import common.report.rules as rules_package


def _marked() -> dict[str, list]:
    found: dict[str, list] = {}
    for info in pkgutil.iter_modules(rules_package.__path__):
        module = importlib.import_module(f"{rules_package.__name__}.{info.name}")
        for value in vars(module).values():
            if (
                callable(value)
                and isinstance(getattr(value, "rule", None), str)
                and value.__module__ == module.__name__
            ):
                found.setdefault(info.name, []).append(value)
    return found


def claim_rules() -> list:
    return [fn for name, fns in _marked().items() if name not in ("identities", "app_g") for fn in fns]


def identity_checks() -> list:
    return _marked().get("identities", [])
