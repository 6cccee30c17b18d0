"""Every reference between the repository's files resolves, and no file refers to one outside it.

The one citation style, used in code, docstrings, comments, tests and docs alike:

- a docs page: ``docs/<page>.md``; a section of it: ``docs/<page>.md, section "<heading>"``;
- a section of the front page: ``README, section "<heading>"``;
- a test: ``tests/<room>/<file>.py::<test function>``.

``<heading>`` is a Markdown heading's text without its ``#`` marks and backticks, either whole or
in its short form, the text before its first `` (``: ``section "Mini preset"`` names the heading
``### Mini preset (`--preset mini`, `make mini`)``. A short form must name one heading of its page.
A heading written ``"<like this>"`` is a placeholder in a description of the style, not a reference.
A reference may wrap: a line break with its indentation and a comment's ``#`` count as one space.

Inside Markdown files, relative links ``[text](path#anchor)`` are checked too: the path exists
(relative to the linking file) and the anchor is one GitHub derives from a heading of the target
page (lower case, punctuation dropped, spaces to hyphens, ``-1``, ``-2`` for repeats). In
``docs/``, a backticked dotted name ``common.module.name`` must name a module of ``common/``
and, when given, a name defined at its top level (and a class's attribute one level further),
read with ``ast`` (nothing is imported).

The files are those ``git ls-files`` lists (text files only), so the check covers what a fresh
clone holds.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Names of files that live outside the repository (spelled in pieces so that this file does not name them).
OUTSIDE = ("DESIGN" + ".md", "STYLE" + ".md", "../" + "shared")

PAGE = r"docs/(?P<page>[\w-]+(?:/[\w-]+)*\.md)"
DOCS_PAGE = re.compile(r"(?<![\w./-])" + PAGE)
DOCS_SECTION = re.compile(r"(?<![\w./-])" + PAGE + r"`*, section (?:\"(?P<heading>[^\"\n]+)\"|(?P<bad>\S*))")
README_SECTION = re.compile(r"\bREADME(?:\.md)?`*, section (?:\"(?P<heading>[^\"\n]+)\"|(?P<bad>\S*))")
TEST_REF = re.compile(r"(?<![\w./-])tests/(?P<file>(?:[\w-]+/)?[\w-]+\.py)::(?P<name>\w+)")
MD_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
DOTTED = re.compile(r"`(?P<name>common(?:\.\w+)+)`")
LINE_BREAK = re.compile(r"[ \t]*\n[ \t]*(?:#+[ \t]*)?")
PLACEHOLDER = re.compile(r"^<[^<>]+>$")
HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*#*\s*$")
FRONT_PAGES = ("README.md", "benchmarks/README.md")  # checked as on disk, tracked or not


def tracked_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return [ROOT / n for n in names.split("\0") if n and (ROOT / n).is_file()]


@functools.cache
def text_files() -> dict[str, str]:
    """``{repo-relative path: text}`` of every tracked text file (no NUL byte in its first 8 KiB)."""
    out = {}
    for path in tracked_files():
        data = path.read_bytes()
        if b"\0" not in data[:8192]:
            out[path.relative_to(ROOT).as_posix()] = data.decode("utf-8", errors="replace")
    return out


def outside_code_blocks(text: str) -> list[str]:
    """The lines of a Markdown text that are not inside a fenced code block."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


@functools.cache
def headings(page: str) -> tuple[str, ...]:
    """The headings of a Markdown file, ``#`` marks and backticks removed."""
    found = []
    for line in outside_code_blocks((ROOT / page).read_text()):
        m = HEADING.match(line)
        if m:
            found.append(m.group("text").replace("`", ""))
    return tuple(found)


def section_problem(page: str, heading: str) -> str | None:
    """None when ``heading`` names exactly one heading of ``page`` (whole or in its short form), or is a placeholder."""
    if PLACEHOLDER.match(heading):
        return None
    if not (ROOT / page).is_file():
        return f"{page} does not exist"
    all_headings = headings(page)
    if heading in all_headings:
        return None
    short = [h for h in all_headings if h.split(" (", 1)[0] == heading]
    if len(short) == 1:
        return None
    if short:
        return f"{page} has {len(short)} headings whose short form is {heading!r}: name one in full"
    return f"{page} has no heading {heading!r}"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


@functools.cache
def anchors(page: str) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in headings(page):
        base = github_anchor(h)
        count = seen.get(base, 0)
        out.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return frozenset(out)


def flattened(text: str) -> str:
    """``text`` with every line break, the indentation around it and a comment's ``#`` after it made one space."""
    return LINE_BREAK.sub(" ", text)


@functools.cache
def flattened_files() -> dict[str, str]:
    return {name: flattened(text) for name, text in text_files().items()}


def problems(pattern: re.Pattern, check) -> list[str]:
    """``<file>: <reference>: <problem>`` for every match of ``pattern`` (in the flattened text) that ``check`` refuses."""
    found = []
    for name, text in flattened_files().items():
        for m in pattern.finditer(text):
            problem = check(m, name)
            if problem:
                found.append(f"{name}: {m.group(0)[:160]!r}: {problem}")
    return found


def test_no_file_names_a_file_outside_the_repository():
    found = [
        f"{name}:{lineno}: {needle}"
        for name, text in text_files().items()
        for lineno, line in enumerate(text.splitlines(), 1)
        for needle in OUTSIDE
        if needle in line
    ]
    assert not found, (
        "files outside the repository are named (cite docs/design.md or docs/decisions.md instead):\n"
        + "\n".join(found)
    )


def test_every_docs_page_named_exists():
    def check(m: re.Match, _name: str) -> str | None:
        return None if (ROOT / "docs" / m.group("page")).is_file() else "no such page"

    found = problems(DOCS_PAGE, check)
    assert not found, "references to missing docs pages:\n" + "\n".join(found)


def test_every_docs_section_reference_names_an_existing_heading():
    def check(m: re.Match, _name: str) -> str | None:
        if m.group("bad") is not None:
            return 'not the citation style docs/<page>.md, section "<heading>"'
        return section_problem(f"docs/{m.group('page')}", m.group("heading"))

    found = problems(DOCS_SECTION, check)
    assert not found, "docs section references that do not resolve:\n" + "\n".join(found)


def test_every_readme_section_reference_names_an_existing_heading():
    def check(m: re.Match, _name: str) -> str | None:
        if m.group("bad") is not None:
            return 'not the citation style README, section "<heading>"'
        return section_problem("README.md", m.group("heading"))

    found = problems(README_SECTION, check)
    assert not found, "README section references that do not resolve:\n" + "\n".join(found)


def test_every_test_named_exists():
    def check(m: re.Match, _name: str) -> str | None:
        path = ROOT / "tests" / m.group("file")
        if not path.is_file():
            return "no such test file"
        return None if m.group("name") in functions_defined(path) else "no such test"

    found = problems(TEST_REF, check)
    assert not found, "references to missing tests:\n" + "\n".join(found)


def relative_links(text: str) -> list[str]:
    """The targets of a Markdown text's links that point inside the repository (not ``https:``, ``mailto:``, ...),
    outside fenced code blocks."""
    return [
        m.group("target")
        for line in outside_code_blocks(text)
        for m in MD_LINK.finditer(line)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", m.group("target"))
    ]


def link_problems(name: str, text: str) -> list[str]:
    """``<file>: <target>: <problem>`` for every relative link of ``text`` (the file ``name``, relative to the
    repository root) whose file does not exist in the repository or whose ``#anchor`` names no heading there."""
    found = []
    for target in relative_links(text):
        path, _, anchor = target.partition("#")
        resolved = (ROOT / name).parent / path if path else ROOT / name
        if not resolved.resolve().is_relative_to(ROOT) or not resolved.exists():
            found.append(f"{name}: {target}: no such file in the repository")
        elif (
            anchor
            and resolved.suffix == ".md"
            and anchor not in anchors(resolved.resolve().relative_to(ROOT).as_posix())
        ):
            found.append(f"{name}: {target}: no heading with anchor #{anchor}")
    return found


def test_every_relative_markdown_link_resolves():
    found = [
        problem for name, text in text_files().items() if name.endswith(".md") for problem in link_problems(name, text)
    ]
    assert not found, "Markdown links that do not resolve:\n" + "\n".join(found)


@pytest.mark.parametrize("page", FRONT_PAGES)
def test_every_link_of_the_front_pages_resolves(page):
    """README.md and benchmarks/README.md as they are on disk (committed or not): every relative link resolves."""
    text = (ROOT / page).read_text()
    assert relative_links(text), f"{page} has no relative link: nothing would be checked"
    found = link_problems(page, text)
    assert not found, "Markdown links that do not resolve:\n" + "\n".join(found)


def test_the_readme_links_the_timings_once():
    """The dated timings live in benchmarks/README.md (issue 55): the README points there once."""
    links = [
        t for t in relative_links((ROOT / "README.md").read_text()) if t.partition("#")[0] == "benchmarks/README.md"
    ]
    assert len(links) == 1, f"README.md links benchmarks/README.md {len(links)} times: {links}"


def test_the_link_check_catches_a_missing_file_and_a_missing_anchor():
    missing = "docs/" + "no-such-page.md"  # in pieces: a made-up page must not be named in this file
    text = (
        "[ok](docs/design.md#import-layering) [web](https://example.org/x.md) [here](#two-commands)\n"
        f"[file]({missing}) [anchor](docs/design.md#no-such-heading) [up](../outside.md)\n"
        f"```\n[in code]({missing})\n```\n"
    )
    assert link_problems("README.md", text) == [
        f"README.md: {missing}: no such file in the repository",
        "README.md: docs/design.md#no-such-heading: no heading with anchor #no-such-heading",
        "README.md: ../outside.md: no such file in the repository",
    ]


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@functools.cache
def functions_defined(path: Path) -> frozenset[str]:
    return frozenset(re.findall(r"^\s*def (\w+)\(", path.read_text(), re.MULTILINE))


def top_level_names(tree: ast.Module | ast.ClassDef) -> dict[str, ast.AST]:
    """Names a module (or class body) defines: functions, classes, assignments and imports."""
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            names.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
    return names


def dotted_name_problem(dotted: str) -> str | None:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            break
    else:
        return "no such module"
    rest = parts[cut:]
    if not rest:
        return None
    names = top_level_names(parsed(module))
    if rest[0] not in names:
        return f"{'.'.join(parts[:cut])} defines no {rest[0]}"
    node = names[rest[0]]
    if len(rest) > 1 and isinstance(node, ast.ClassDef) and rest[1] not in top_level_names(node):
        return f"{'.'.join(parts[: cut + 1])} has no attribute {rest[1]}"
    return None


@pytest.mark.parametrize("page", sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")))
def test_every_code_name_a_docs_page_gives_exists(page):
    found = [
        f"{page}: {m.group('name')}: {problem}"
        for m in DOTTED.finditer((ROOT / page).read_text())
        if (problem := dotted_name_problem(m.group("name")))
    ]
    assert not found, "names in the docs that the code does not define:\n" + "\n".join(found)


def test_the_checks_catch_made_up_references():
    docs, readme, tests = (
        "docs/",
        "README",
        "tests/",
    )  # in pieces: the made-up references below must not be in this file
    assert section_problem("docs/design.md", "Exact growth value V_S,l") is None
    assert section_problem("docs/decisions.md", "Mini preset") is None  # the short form of a heading with a "("
    assert section_problem("docs/design.md", "No such heading") == "docs/design.md has no heading 'No such heading'"
    assert section_problem(f"{docs}no-such-page.md", "Anything") == f"{docs}no-such-page.md does not exist"
    assert (
        github_anchor("Mini preset (`--preset mini`, `make mini`)".replace("`", ""))
        == "mini-preset---preset-mini-make-mini"
    )
    assert dotted_name_problem("common.science.projection.GramAccumulator.growth_value") is None
    assert (
        dotted_name_problem("common.science.projection.no_such_function")
        == "common.science.projection defines no no_such_function"
    )
    assert dotted_name_problem("common.no_such_module.f") == "common defines no no_such_module"
    line = f'see {docs}design.md, section "Madeup" and {docs}nopage.md, {readme}, section "Nowhere", {tests}test_layout.py::test_madeup'
    assert [m.group("heading") for m in DOCS_SECTION.finditer(line)] == ["Madeup"]
    assert [m.group("page") for m in DOCS_PAGE.finditer(line)] == ["design.md", "nopage.md"]
    assert [m.group("heading") for m in README_SECTION.finditer(line)] == ["Nowhere"]
    assert [m.group("name") for m in TEST_REF.finditer(line)] == ["test_madeup"]
    wrapped = flattened(f'x  # see {docs}design.md, section "Runs, records\n    # and launching" and more')
    assert [m.group("heading") for m in DOCS_SECTION.finditer(wrapped)] == ["Runs, records and launching"]
    assert all(needle not in Path(__file__).read_text() for needle in OUTSIDE)
