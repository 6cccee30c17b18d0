"""``common/presets/paper.py`` is the one source of the papers' settings and numbers.

Read with ``ast``: every value it defines is read somewhere in ``common/`` or a numbered script, and no
other module writes one of its distinctive values (a tuple, a string, a large integer, a ``range`` of them)
a second time, so a preset cannot drift from the paper's grid while paper.py still shows the right one.
"""

from __future__ import annotations

import ast
from pathlib import Path

from common.presets import paper

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "common" / "presets" / "paper.py"


def paper_names() -> list[str]:
    tree = ast.parse(PAPER.read_text())
    return [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)]


def code_files() -> list[Path]:
    files = [*sorted(ROOT.glob("common/**/*.py")), *sorted(ROOT.glob("[0-9][0-9]_*.py"))]
    return [p for p in files if p != PAPER]


def distinctive(value: object) -> bool:
    """Values that cannot match by coincidence; an epoch count like 300 or a head count like 12 can."""
    if isinstance(value, tuple):
        return len(value) >= 2
    if isinstance(value, str):
        return True
    return isinstance(value, int) and not isinstance(value, bool) and value > 500


def literal(node: ast.AST) -> object | None:
    """The value a tuple, a constant or a ``range(...)`` of constants spells out; None for anything else."""
    try:
        if isinstance(node, ast.Tuple | ast.Constant):
            return ast.literal_eval(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            return tuple(range(*(ast.literal_eval(a) for a in node.args)))
    except (ValueError, TypeError, SyntaxError):
        pass
    return None


def test_every_paper_value_is_read_by_the_code():
    read: set[str] = set()
    for path in code_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                read.add(node.id)
            elif isinstance(node, ast.Attribute):
                read.add(node.attr)
            elif isinstance(node, ast.ImportFrom) and node.module == "common.presets.paper":
                read.update(alias.name for alias in node.names)
    names = paper_names()
    assert "CIFAR_EXTRA_BLOCKS" in names and "LOW_SIGNAL_AG" in names
    unread = [name for name in names if name not in read]
    assert not unread, f"common/presets/paper.py defines {unread}, which no module reads: use them or delete them"


def test_no_module_writes_a_paper_value_again():
    values: dict[str, str] = {}
    for name in paper_names():
        value = getattr(paper, name)
        parts = value.values() if isinstance(value, dict) else [value]
        values.update({repr(v): name for v in parts if distinctive(v)})
    assert repr(paper.CIFAR_EXTRA_BLOCKS) in values and repr(paper.FINEWEB_EDU_TOKENS) in values
    again = []
    for path in code_files():
        for node in ast.walk(ast.parse(path.read_text())):
            value = literal(node)
            if distinctive(value) and repr(value) in values:
                again.append(f"{path.relative_to(ROOT)}:{node.lineno} writes {values[repr(value)]} again")
    assert not again, f"read these from common/presets/paper.py instead: {again}"
