"""The layering of docs/design.md, section "Import layering", checked on the source: imports point down only.

Read with ``ast`` (nothing is imported), so a violation anywhere in ``common/`` fails here
with the module and the offending import named.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The layers are the folders of common/ (docs/design.md, section "Import layering"); errors.py is the one leaf beside
# them (the one exception type for user mistakes, which every layer raises).
LAYERS = {"science", "models", "data", "training", "runs", "launch", "presets", "experiments", "report", "power"}
# What each layer may import of ours, besides itself and common.errors. Lower layers never import higher ones: the
# science imports nothing else; training, runs and launch never import the report or a job module.
MAY_IMPORT = {
    "science": set(),
    "runs": set(),
    "training": {"science", "runs"},
    "data": {"training", "runs"},
    "models": {"science", "training", "runs", "presets"},
    "presets": {"science", "training", "data", "models"},
    "launch": {"training", "runs", "data", "models", "presets"},
    "experiments": {"science", "training", "runs", "data", "models", "presets", "report"},
    "report": {"science", "training", "runs", "data", "models", "presets", "experiments"},
    "power": {"runs", "presets", "report"},
}
# Job modules may import the report's modules only where they read every experiment (08's job).
READS_EVERY_EXPERIMENT = {"common.experiments.make_figures"}
SHARED_JOBS = "common.experiments.shared"  # what several job modules share, below all of them
DECODER_JOBS = {"common.experiments.gpt2_ascend", "common.experiments.pythia_cpt"}  # scripts 05 and 04
DECODER_SHARED = "common.experiments.shared.decoder_runs"  # what both decoder experiments share
# The one import allowed inside a function: torch_npu exists only on Ascend machines.
FUNCTION_IMPORTS_ALLOWED = {
    ("common.training.device", "torch_npu"),  # only where an Ascend NPU is
    ("common.launch.launcher", "torch"),  # in a job process only: the launcher itself never needs torch
    ("benchmarks.gpu_check", "common.experiments.gpt2_ascend"),  # the text stack a bare GPU image may lack
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def common_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / "common").rglob("*.py"))}


MODULES = common_modules()


@functools.cache
def imports_of(path: Path) -> list[tuple[str, bool]]:
    """``(imported module, inside a function?)`` for every import statement of a file.

    ``from common import runs`` and ``from common.experiments import x`` name the submodule when it
    is one of ours, so the graph is between modules, not packages.
    """
    tree = ast.parse(path.read_text())
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                found.extend((alias.name, in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                for alias in child.names:
                    sub = f"{child.module}.{alias.name}"
                    found.append((sub if sub in MODULES else child.module, in_function))
            visit(child, nested)

    visit(tree, False)
    return found


@functools.cache
def repo_imports(name: str) -> set[str]:
    return {m for m, _ in imports_of(MODULES[name]) if m == "common" or m.startswith("common.")}


@functools.cache
def closure(name: str) -> set[str]:
    """Every module of ours that importing ``name`` imports, directly or not."""
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        for m in repo_imports(current):
            if m in MODULES and m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def layer(name: str) -> str | None:
    """The layer (folder of ``common/``) a module of ours belongs to; None for ``common`` and ``common.errors``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else None


def is_job_module(name: str) -> bool:
    return name.startswith("common.experiments.") and not name.startswith(SHARED_JOBS)


def script_job_modules() -> dict[str, str]:
    """``NN_<slug>.py`` -> its job module ``common.experiments.<slug>``, for every numbered script."""
    return {p.name: f"common.experiments.{p.stem[3:]}" for p in sorted(ROOT.glob("[0-9][0-9]_*.py"))}


def own_modules(job: str) -> set[str]:
    """A job module and its own helpers beside it, named by it (``<slug>_<what>``)."""
    return {job} | {m for m in MODULES if m.startswith(job + "_")}


def test_common_holds_only_the_layer_folders_and_the_one_leaf():
    top = sorted(p.name for p in (ROOT / "common").iterdir() if p.name != "__pycache__")
    assert top == sorted(["__init__.py", "errors.py", *LAYERS]), top
    assert {m for m in MODULES if layer(m) is None} == {"common", "common.errors"}


@pytest.mark.parametrize("room", sorted(LAYERS))
def test_each_layer_imports_only_the_layers_below_it(room):
    allowed = MAY_IMPORT[room] | {room}
    for name in sorted(m for m in MODULES if layer(m) == room):
        bad = {m for m in repo_imports(name) if m in MODULES and layer(m) not in allowed and layer(m) is not None}
        assert not bad, f"{name} ({room}) imports {sorted(bad)}: {room} may import {sorted(MAY_IMPORT[room])}"


def test_the_errors_leaf_and_the_precision_module_import_nothing_of_ours():
    assert not repo_imports("common.errors")
    assert not repo_imports("common.science.precision"), "precision must import nothing of ours: everything uses it"


def test_only_the_report_of_every_experiment_imports_the_report_among_the_job_modules():
    for name in sorted(m for m in MODULES if m.startswith("common.experiments.")):
        report = {m for m in repo_imports(name) if layer(m) == "report"}
        assert not report or name in READS_EVERY_EXPERIMENT, f"{name} imports the report's {sorted(report)}"


def test_the_shared_job_modules_import_no_job_module():
    for name in sorted(m for m in MODULES if m.startswith(SHARED_JOBS + ".")):
        jobs = {m for m in repo_imports(name) if is_job_module(m)}
        assert not jobs, f"{name} imports the job modules {sorted(jobs)}"


def test_no_script_reaches_the_power_simulation():
    """The rules' simulation regenerates committed tables (``python -m common.power...``); no run path imports it."""
    for script in sorted(ROOT.glob("[0-9][0-9]_*.py")):
        reached = set().union(*(closure(m) | {m} for m, _ in imports_of(script) if m in MODULES))
        assert not {m for m in reached if layer(m) == "power"}, f"{script.name} reaches the power simulation"


def test_the_rules_simulation_reads_the_presets_not_the_job_modules():
    reached = closure("common.power.claim_rates")
    assert not {m for m in reached if m.startswith("common.experiments")}, sorted(reached)


def test_the_stopping_rules_read_only_the_saturation_verdicts_and_the_papers_line():
    """09's post-hoc rules, read by the report, import of ours only the science's saturation and the papers' numbers."""
    ours = repo_imports("common.report.grow_by_criterion_stopping") - {"common"}
    assert ours <= {"common.science.saturation", "common.presets.paper"}, sorted(ours)


def test_job_modules_never_reach_the_launcher_or_submitit():
    jobs = [m for m in MODULES if m.startswith("common.experiments.")]
    assert len(jobs) > 10, "no job modules found under common/experiments/"
    for name in jobs:
        reached = closure(name) | {name}
        launching = {m for m in reached if layer(m) == "launch"}
        assert not launching, f"{name} reaches {sorted(launching)}"
        third_party = {m.split(".")[0] for r in reached for m, _ in imports_of(MODULES[r])}
        assert "submitit" not in third_party, f"{name} pulls in submitit through {sorted(reached)}"


def test_the_decoder_experiments_share_one_module_below_both_and_import_neither_other():
    assert DECODER_SHARED in MODULES and set(MODULES) >= DECODER_JOBS
    for name in sorted(DECODER_JOBS):
        imported = repo_imports(name)
        assert DECODER_SHARED in imported, f"{name} does not use {DECODER_SHARED}"
        assert not imported & DECODER_JOBS, (
            f"{name} imports the other decoder experiment {sorted(imported & DECODER_JOBS)}"
        )


def test_no_import_hides_inside_a_function():
    files = [
        *MODULES.values(),
        *ROOT.glob("[0-9][0-9]_*.py"),
        *ROOT.glob("benchmarks/*.py"),
        *ROOT.glob("tests/**/*.py"),
    ]
    hidden = []
    for path in files:
        name = module_name(path)
        hidden += [
            f"{name}: {m}" for m, inside in imports_of(path) if inside and (name, m) not in FUNCTION_IMPORTS_ALLOWED
        ]
    assert not hidden, f"imports inside functions: {hidden}"


@pytest.mark.parametrize("script", sorted(script_job_modules()))
def test_each_numbered_script_uses_its_own_job_module_and_no_other_scripts(script):
    job = script_job_modules()[script]
    assert job in MODULES, f"{script} has no job module {job}"
    imported = {m for m, _ in imports_of(ROOT / script)}
    assert job in imported, f"{script} does not use its job module {job}"
    others = {m for m in imported if is_job_module(m)} - own_modules(job)
    assert not others, f"{script} imports other scripts' job modules {sorted(others)}: shared code belongs below them"


def test_a_scripts_job_module_imports_no_other_scripts_job_module():
    jobs = set(script_job_modules().values())
    for name in sorted(jobs - READS_EVERY_EXPERIMENT):
        peers = {m for m in repo_imports(name) if is_job_module(m)} - own_modules(name)
        assert not peers, f"{name} imports {sorted(peers)}: move what they share to common/experiments/shared/"


def test_every_job_module_is_a_scripts_or_its_helper():
    jobs = set(script_job_modules().values())
    for name in sorted(m for m in MODULES if is_job_module(m)):
        assert any(name == j or name.startswith(j + "_") for j in jobs), f"{name} is named by no script's slug"


def test_no_name_shadows_the_common_package():
    files = [
        *ROOT.glob("common/**/*.py"),
        *ROOT.glob("[0-9][0-9]_*.py"),
        *ROOT.glob("benchmarks/*.py"),
        *ROOT.glob("tests/**/*.py"),
    ]
    shadowing = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id == "common" and isinstance(node.ctx, ast.Store):
                shadowing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.arg) and node.arg == "common":
                shadowing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not shadowing, f"local names called 'common': {shadowing}"


# The tests mirror the house (docs/design.md, section "Import layering"): one folder per room, helpers apart.
TEST_ROOMS = LAYERS | {"benchmarks", "docs_layout"}  # one folder per layer of common/, and the benchmarks' own


def test_every_test_file_sits_in_its_rooms_folder_and_helpers_sit_apart():
    tests = ROOT / "tests"
    at_top = sorted(p.name for p in tests.glob("*.py"))
    assert at_top == ["__init__.py", "conftest.py"], f"tests/ holds more than conftest.py: {at_top}"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == TEST_ROOMS | {"helpers"}, f"test folders {sorted(folders)}, rooms {sorted(TEST_ROOMS)}"
    assert not list((tests / "helpers").glob("test_*.py")), "a test among the helpers"
    for room in TEST_ROOMS:
        strays = sorted(
            p.name for p in (tests / room).glob("*.py") if p.name != "__init__.py" and not p.name.startswith("test_")
        )
        assert not strays, f"tests/{room}/ holds non-test modules {strays}: they belong in tests/helpers/"


def test_the_reports_records_have_one_home_below_the_figures_and_the_rows():
    """records.py is imported by 08's job and by claim_rows and imports neither; no report module imports 08's job;
    the claim rules import nothing of the experiments."""
    report = [m for m in MODULES if layer(m) == "report"]
    assert "common.report.records" in repo_imports("common.experiments.make_figures")
    assert "common.report.records" in repo_imports("common.report.claim_rows")
    assert not {m for m in repo_imports("common.report.records") if "rows" in m}, repo_imports("common.report.records")
    for name in report:
        assert "common.experiments.make_figures" not in repo_imports(name), f"{name} imports 08's job"
    rules = [m for m in report if m.startswith("common.report.rules")]
    assert len(rules) > 5
    for name in rules:
        upward = {
            m
            for m in repo_imports(name)
            if layer(m) not in (None, "science")
            and m != "common.presets.paper"
            and not m.startswith("common.report.rules")
        }
        assert not upward, f"{name} imports {sorted(upward)}: the claim rules are functions of numbers"


def test_no_import_circle_not_even_a_type_only_one():
    """Every import of every module of ``common/`` (those under ``if TYPE_CHECKING`` too) is an edge; the graph has no
    cycle (a depth-first search that meets a module still on its path has found one)."""
    graph = {name: sorted(m for m in repo_imports(name) if m in MODULES and m != name) for name in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for nxt in graph[name]:
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name, [name])):
            raise AssertionError(f"import circle: {' -> '.join(cycle)}")
