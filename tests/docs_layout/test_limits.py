"""The size limits of docs/design.md, section "Limits": files, functions, copied blocks, the README.

- no Python file over :data:`MAX_FILE_LINES` lines and no function over :data:`MAX_FUNCTION_LINES` (tests aside);
- no block of :data:`MIN_COPY_LINES` or more statement lines copied inside ``common/``, the check of pylint's
  ``duplicate-code`` (R0801) with ``--ignore-imports --ignore-docstrings --ignore-comments --ignore-signatures``,
  written out here so that it runs in a second: every window of that many consecutive code lines (stripped, blank
  lines, comments, docstrings, imports and ``def`` lines left out) that occurs twice is a copy;
- the README at most :data:`MAX_README_LINES` lines.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
MIN_COPY_LINES = 6
MAX_README_LINES = 200


def source_files() -> list[Path]:
    return sorted(
        [*ROOT.glob("common/**/*.py"), *ROOT.glob("[0-9][0-9]_*.py"), *ROOT.glob("benchmarks/*.py")],
    )


def test_no_python_file_over_the_limit():
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in source_files()
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert not long, f"files over {MAX_FILE_LINES} lines: {long}"


def test_no_function_over_the_limit():
    long = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({size} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def code_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, stripped text)`` of a module's code lines: no blank line, comment, docstring, import or
    ``def``/``class`` line (a signature), as pylint's similarity checker with its ``--ignore-*`` options sees them."""
    tree = ast.parse(text)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            skip.update(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body_start = node.body[0].lineno
            skip.update(range(node.lineno, body_start))
            for d in node.decorator_list:
                skip.update(range(d.lineno, d.end_lineno + 1))
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                skip.update(range(first.lineno, first.end_lineno + 1))
    comments = {
        tok.start[0]
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT and tok.line.strip().startswith("#")
    }
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.split("  #")[0].strip()
        if stripped and number not in skip and number not in comments:
            out.append((number, stripped))
    return out


def test_no_block_is_copied_inside_common():
    seen: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for path in sorted(ROOT.glob("common/**/*.py")):
        lines = code_lines(path.read_text())
        for i in range(len(lines) - MIN_COPY_LINES + 1):
            window = tuple(text for _, text in lines[i : i + MIN_COPY_LINES])
            if sum(len(t) > 3 for t in window) == MIN_COPY_LINES:  # closing brackets alone are not code worth a copy
                seen[window].append(f"{path.relative_to(ROOT)}:{lines[i][0]}")
    copies = {places[0]: places[1:] for places in seen.values() if len(places) > 1}
    assert not copies, f"blocks of {MIN_COPY_LINES}+ lines copied (first place: copies): {copies}"


def test_the_readme_stays_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES}: prose belongs in docs/)"
