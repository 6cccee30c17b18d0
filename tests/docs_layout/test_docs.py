"""README.md and docs/*.md work as written from a fresh clone: every script command parses; what it reads exists.

What counts as a command: every line of a code block (indented or fenced) or inline code span that runs
a numbered script, ``python NN_*.py ...`` (also ``python3``, ``.venv/bin/python`` and ``torchrun [its
flags] NN_*.py ...``). A leading ``$ `` prompt and ``NAME=value`` environment prefixes are dropped, a
line ending in ``\\`` continues on the next, and ``# ...`` comments are dropped (shlex). ``$NAME`` and
``${NAME}`` are replaced by the value of the last ``NAME='...'`` line (a line holding only that
assignment) shown earlier in a code block of the same file, as a reader's shell would; a variable with
no such line fails.

Each command is parsed with its script's own ``build_parser()`` without running anything: a flag or
value that parser refuses fails. The files a command reads (:data:`INPUT_FLAGS`) must be in a fresh
clone (``git ls-files``), or be one of the few :data:`PLACEHOLDERS`, which the same file's prose
names (to substitute) or creates with the command given (shown before the first use). Outputs
(``--out``, ``--figures-dir``) are created by the scripts and need not exist.

Links between these files (a repository file, a ``#section`` anchor) are checked for every tracked
Markdown file by ``tests/docs_layout/test_doc_references.py::test_every_relative_markdown_link_resolves``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SCRIPTS = tuple(sorted(p.name for p in ROOT.glob("[0-9][0-9]_*.py")))
RUNNERS = ("python", "python3", ".venv/bin/python", "torchrun")
ACTIVATE = "source .venv/bin/activate"

# Flags whose value is a file or folder the script reads; --out and --figures-dir are written.
INPUT_FLAGS = ("--data-root", "--slurm-profile", "--text-file", "--model-path")
# Paths a fresh clone lacks that the docs use on purpose: the user's own copy of something (the file's
# prose says "stands for ... substitute"), or a file the docs create with the command given here.
PLACEHOLDERS = {
    "data/cifar10.npz": None,  # the user's CIFAR-like .npz (docs/01_train_resnet_sweep.md says how to make one)
    "data/imagenet100": None,  # the ImageNet-100 folder the user builds from ImageNet-1k
    "data/tinyshakespeare.txt": None,  # the user's text (05 --preset mini downloads Tiny Shakespeare there)
    "models/pythia-70m-deduped": None,  # a save_pretrained folder on a machine without the Hub
    "slurm/mycluster.toml": "cp slurm/example.toml slurm/mycluster.toml",
}

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
VARIABLE = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")


@dataclass(frozen=True)
class Command:
    file: str  # relative to the repository root
    line: int
    text: str  # as it reads in the file, after joining continuation lines and substituting variables
    script: str
    argv: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


# ----------------------------------------------------------------------------- reading markdown
def split_markdown(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """``(code lines, prose lines)`` of a markdown text, each ``(line number, text)``.

    Code: fenced blocks and indented blocks (4 spaces after a blank line, or after more code).
    """
    code, prose = [], []
    fenced, previous_blank, previous_code = False, True, False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced, previous_code = not fenced, False
            previous_blank = False
            continue
        indented = line.startswith("    ") and line.strip() and (previous_blank or previous_code)
        if fenced or indented:
            code.append((number, line))
            previous_code = True
        else:
            prose.append((number, line))
            previous_code = previous_code and not line.strip()  # a blank line inside an indented block
        previous_blank = not line.strip()
    return code, prose


def join_continuations(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Join shell lines ending in a backslash with the next; the joined line keeps the first number."""
    joined, pending = [], None
    for number, line in lines:
        if pending is not None:
            number, line = pending[0], pending[1] + " " + line.strip()
        if line.rstrip().endswith("\\"):
            pending = (number, line.rstrip()[:-1])
            continue
        pending = None
        joined.append((number, line))
    if pending is not None:
        joined.append(pending)
    return joined


def substitute(line: str, variables: dict[str, str]) -> str:
    """Replace ``$NAME`` / ``${NAME}`` with the value a reader's shell would hold; unknown: ``ValueError``."""

    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in variables:
            raise ValueError(f"${name} is used before any {name}='...' line sets it")
        return variables[name]

    return VARIABLE.sub(value, line)


def parse_command(text: str) -> tuple[str, list[str]] | None:
    """``(script, argv)`` when ``text`` runs a numbered script, else None."""
    text = text.strip()
    text = text[2:] if text.startswith("$ ") else text
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError:  # unbalanced quotes: not a shell line (code, output)
        return None
    while tokens and ASSIGNMENT.match(tokens[0]) and len(tokens) > 1:
        tokens = tokens[1:]  # environment prefix, e.g. HF_HUB_OFFLINE=1
    if not tokens or tokens[0] not in RUNNERS:
        return None
    scripts = [i for i, token in enumerate(tokens) if re.fullmatch(r"\d\d_\w+\.py", token)]
    if not scripts or (tokens[0] != "torchrun" and scripts[0] != 1):
        return None
    return tokens[scripts[0]], tokens[scripts[0] + 1 :]


def assignment(text: str) -> tuple[str, str] | None:
    """``(NAME, value)`` for a line that only assigns a shell variable, e.g. ``S='--launcher slurm'``."""
    try:
        tokens = shlex.split(text.strip(), comments=True)
    except ValueError:
        return None
    if len(tokens) == 1 and ASSIGNMENT.match(tokens[0]):
        name, value = tokens[0].split("=", 1)
        return name, value
    return None


def commands_in(text: str, name: str) -> list[Command]:
    """Every numbered-script command of the markdown file ``name``, in order (code blocks and inline spans)."""
    code, prose = split_markdown(text)
    candidates = join_continuations(code)
    candidates += [(n, m.group(2)) for n, line in prose for m in INLINE_CODE.finditer(line)]
    found, variables = [], {}
    for number, text in sorted(candidates, key=lambda c: c[0]):
        assigned = assignment(text)
        if assigned:
            variables[assigned[0]] = assigned[1]
            continue
        if parse_command(text) is None:
            continue
        expanded = substitute(text, variables)
        script, argv = parse_command(expanded)
        found.append(Command(name, number, expanded.strip(), script, tuple(argv)))
    return found


def all_commands() -> list[Command]:
    return [command for path in DOCS for command in commands_in(path.read_text(), path.relative_to(ROOT).as_posix())]


def prose_text(path: Path) -> str:
    """The file's text outside code blocks, without the commands in its inline spans."""
    _, prose = split_markdown(path.read_text())
    text = "\n".join(line for _, line in prose)
    return INLINE_CODE.sub(lambda m: "" if parse_command(m.group(2)) else m.group(0), text)


# ----------------------------------------------------------------------------- parsers and paths
@functools.cache
def parser_of(script: str):
    """The script's own argument parser (``build_parser()``), without running the script."""
    return importlib.import_module(Path(script).stem).build_parser()


def refusal(script: str, argv: tuple[str, ...]) -> str | None:
    """The error line the script's parser prints for ``argv``, or None when it accepts them."""
    if not (ROOT / script).is_file():
        return f"{script}: no such script"
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser_of(script).parse_args(list(argv))
    except SystemExit as exc:
        return stderr.getvalue().strip() or f"exit {exc.code}"
    return None


def input_paths(command: Command) -> list[str]:
    """The values the command gives :data:`INPUT_FLAGS` (not their defaults), as its script's parser reads them."""
    parser = parser_of(command.script)
    args = parser.parse_args(list(command.argv))
    given = {token.split("=", 1)[0] for token in command.argv if token.startswith("--")}
    paths = []
    for action in parser._actions:
        if set(action.option_strings) & set(INPUT_FLAGS) & given:
            value = getattr(args, action.dest)
            paths += [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]
    return paths


@functools.cache
def fresh_clone_paths() -> frozenset[str]:
    """Files and folders a fresh clone holds: ``git ls-files`` and their parents (else the work tree)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return frozenset(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if ".git" not in p.parts)
    files = [name for name in listed.stdout.decode().split("\0") if name]
    return frozenset({*files, *(parent.as_posix() for f in files for parent in Path(f).parents if parent != Path("."))})


def path_problem(command: Command, path: str, text_before: str, prose: str) -> str | None:
    """Why ``path`` would not be there for a reader of a fresh clone at this command, or None."""
    normal = Path(path).as_posix().rstrip("/")
    if normal in fresh_clone_paths():
        return None
    if normal not in PLACEHOLDERS:
        return f"{path} is not in a fresh clone and is no declared placeholder (PLACEHOLDERS in {Path(__file__).name})"
    creator = PLACEHOLDERS[normal]
    if creator is not None:
        return None if creator in text_before else f"{path} is used before the docs show `{creator}`"
    return (
        None
        if normal in prose
        else f"{path} is a placeholder that {command.file}'s prose never names (say to substitute it)"
    )


# ----------------------------------------------------------------------------- the tests
COMMANDS = all_commands()


def test_the_docs_show_every_numbered_script_and_the_readme_table_has_one_command_per_script():
    documented = {c.script for c in COMMANDS}
    assert set(SCRIPTS) <= documented, f"no documented command for {sorted(set(SCRIPTS) - documented)}"
    in_readme = {c.script for c in COMMANDS if c.file == "README.md"}
    assert set(SCRIPTS) <= in_readme, f"README's script table lacks {sorted(set(SCRIPTS) - in_readme)}"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.id)
def test_every_documented_command_is_accepted_by_its_scripts_parser(command):
    problem = refusal(command.script, command.argv)
    assert problem is None, f"{command.id}: `{command.text}` is refused: {problem}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_path_a_command_reads_is_in_a_fresh_clone_or_a_placeholder_the_text_explains(path):
    text, prose = path.read_text(), prose_text(path)
    lines = text.splitlines()
    problems = []
    for command in (c for c in COMMANDS if c.file == path.relative_to(ROOT).as_posix()):
        if refusal(command.script, command.argv):
            continue  # the parser test reports it
        before = "\n".join(lines[: command.line - 1])
        for used in input_paths(command):
            problem = path_problem(command, used, before, prose)
            if problem:
                problems.append(f"{command.id}: {problem}")
    assert not problems, "\n".join(problems)


def test_every_placeholder_is_used_by_a_documented_command():
    used = {Path(p).as_posix().rstrip("/") for c in COMMANDS if not refusal(c.script, c.argv) for p in input_paths(c)}
    assert set(PLACEHOLDERS) <= used, f"unused placeholders (drop them): {sorted(set(PLACEHOLDERS) - used)}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_file_with_bare_python_commands_says_to_activate_the_venv_before_them(path):
    lines = path.read_text().splitlines()
    bare = [c for c in COMMANDS if c.file == path.relative_to(ROOT).as_posix() and not c.text.startswith(".venv/")]
    if not bare:
        return
    first = min(c.line for c in bare)
    assert any(ACTIVATE in line for line in lines[: first - 1]), (
        f"{path.name}:{first} runs `python` before the file says `{ACTIVATE}` (the system python lacks the requirements)"
    )


# ----------------------------------------------------------------------------- the checks can fail
def test_the_checks_refuse_a_wrong_flag_an_unset_variable_and_a_missing_file():
    assert refusal("01_train_resnet_sweep.py", ("--no-such-flag",)) is not None
    assert refusal("02_probe_ag.py", ("--n-batches", "0")) is not None
    assert refusal("01_train_resnet_sweep.py", ("--depths", "0,1", "--preset", "smoke")) is None
    with pytest.raises(ValueError, match=r"\$S"):
        substitute("python 01_train_resnet_sweep.py $S", {})
    assert substitute("python 01_train_resnet_sweep.py ${S} --dry-run", {"S": "--launcher slurm"}).endswith(
        "--launcher slurm --dry-run"
    )
    command = Command("README.md", 1, "", "01_train_resnet_sweep.py", ())
    assert path_problem(command, "data/elsewhere.npz", "", "") is not None
    assert path_problem(command, "slurm/mycluster.toml", "", "") is not None
    assert path_problem(command, "slurm/mycluster.toml", PLACEHOLDERS["slurm/mycluster.toml"], "") is None
    assert path_problem(command, "slurm/example.toml", "", "") is None


def test_the_extractor_joins_continuations_drops_prompts_and_reads_indented_and_inline_commands():
    text = (
        "Run `python 08_make_figures.py --preset smoke` first.\n\n"
        "    S='--launcher slurm'\n"
        "    $ HF_HUB_OFFLINE=1 python 01_train_resnet_sweep.py --preset smoke \\\n"
        "        --depths 0,1 $S   # a comment\n"
        "    torchrun --nproc-per-node 8 05_gpt2_ascend.py --device cuda\n"
        "    python -m pytest\n"
        "    export PYTHONPATH=<repo>\n"
    )
    found = [(c.line, c.script, list(c.argv)) for c in commands_in(text, "page.md")]
    assert found == [
        (1, "08_make_figures.py", ["--preset", "smoke"]),
        (4, "01_train_resnet_sweep.py", ["--preset", "smoke", "--depths", "0,1", "--launcher", "slurm"]),
        (6, "05_gpt2_ascend.py", ["--device", "cuda"]),
    ]
    with pytest.raises(ValueError, match=r"\$S"):
        commands_in(text.replace("    S='--launcher slurm'\n", ""), "page.md")
