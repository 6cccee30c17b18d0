"""The layering of docs/design.md, section "Import layering", checked on the source: imports point down only.

Read with ``ast`` (nothing is imported), so a violation anywhere in ``common/`` fails here
with the module and the offending import named.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# common.precision (TF32/HF32 off, where float64 runs) is a leaf that the infrastructure uses too.
SCIENCE = {
    "common.probe",
    "common.projection",
    "common.saturation",
    "common.tangent",
    "common.growth",
    "common.scaling",
    "common.precision",
    "common.terminal_value",
}
# The launcher and what it alone uses (cli loads SLURM profiles).
LAUNCHING = {
    "common.launch",
    "common.local_pool",
    "common.slurm",
    "common.cli",
    "common.decoder_flags",
}
# Below the job modules, imported by several of them: the ResNet sweep's run configs, its job function (pickled by
# submitit, as the job modules' are) and the records API that scripts 02, 03, 06 and 07 read sweep runs through
# (its presets are data in common/presets/sweep.py).
SHARED_JOBS = {"common.resnet_sweep"}
# Script 08's job module reads every experiment's records, so it may import the other scripts' job modules.
READS_EVERY_EXPERIMENT = {"common.experiments.make_figures"}
DECODER_JOBS = {"common.experiments.gpt2_ascend", "common.experiments.pythia_cpt"}  # scripts 05 and 04
DECODER_SHARED = "common.experiments.decoder_runs"  # what both decoder experiments share
# The one import allowed inside a function: torch_npu exists only on Ascend machines.
FUNCTION_IMPORTS_ALLOWED = {
    ("common.device", "torch_npu"),  # only where an Ascend NPU is
    ("common.launch", "torch"),  # in a job process only: the launcher itself never needs torch
    ("benchmarks.gpu_throughput", "common.experiments.gpt2_ascend"),  # the text stack a bare GPU image may lack
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def common_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / "common").rglob("*.py"))}


MODULES = common_modules()


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


def repo_imports(name: str) -> set[str]:
    return {m for m, _ in imports_of(MODULES[name]) if m == "common" or m.startswith("common.")}


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


def is_experiment(name: str) -> bool:
    return name.startswith("common.experiments.")


def script_job_modules() -> dict[str, str]:
    """``NN_<name>.py`` -> its job module ``common.experiments.<name>``, for every numbered script."""
    return {p.name: f"common.experiments.{p.stem[3:]}" for p in sorted(ROOT.glob("[0-9][0-9]_*.py"))}


def test_science_modules_import_only_other_science_modules():
    present = SCIENCE & set(MODULES)
    assert {"common.probe", "common.projection", "common.tangent", "common.growth", "common.precision"} <= present
    for name in sorted(present):
        outside = {m for m in repo_imports(name) if m not in SCIENCE}
        assert not outside, f"{name} imports {sorted(outside)}: science modules must stand alone"


def test_the_precision_module_is_a_leaf():
    assert not repo_imports("common.precision"), "common.precision must import nothing of ours: everything imports it"


def test_nothing_below_the_experiments_imports_an_experiment():
    for name in sorted(MODULES):
        if is_experiment(name) or name == "common.experiments":
            continue
        upward = {m for m in repo_imports(name) if m.startswith("common.experiments")}
        assert not upward, f"{name} imports the job modules {sorted(upward)}"


def test_the_rules_simulation_reads_the_presets_not_the_job_modules():
    reached = closure("common.claim_rates")
    above = {m for m in reached if is_experiment(m)} | (reached & SHARED_JOBS)
    assert not above, f"common.claim_rates reaches {sorted(above)}: its designs are read from common/presets/"


def test_the_stopping_rules_read_only_the_saturation_verdicts_and_the_papers_line():
    """common.growth_stopping (script 09's rules, read by the report) imports of ours only common.saturation and
    common.paper: no job module, no launcher, so the report can read the rules without running anything."""
    ours = repo_imports("common.growth_stopping") - {"common"}
    assert ours <= {"common.saturation", "common.paper"}, f"common.growth_stopping imports {sorted(ours)}"


def test_job_modules_never_reach_the_launcher_or_submitit():
    experiments = [m for m in MODULES if is_experiment(m)]
    assert experiments, "no job modules found under common/experiments/"
    assert not SHARED_JOBS - set(MODULES), f"missing shared job modules: {sorted(SHARED_JOBS - set(MODULES))}"
    for name in [*experiments, *sorted(SHARED_JOBS)]:
        reached = closure(name) | {name}
        assert not reached & LAUNCHING, f"{name} reaches {sorted(reached & LAUNCHING)}"
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
    above = {m for m in repo_imports(DECODER_SHARED) if is_experiment(m)}
    assert not above, f"{DECODER_SHARED} imports the job modules {sorted(above)}"


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
def test_each_numbered_script_has_exactly_its_own_job_module(script):
    job = script_job_modules()[script]
    assert job in MODULES, f"{script} has no job module {job}"
    imported = {m for m, _ in imports_of(ROOT / script)}
    assert job in imported, f"{script} does not use its job module {job}"
    others = {m for m in imported if is_experiment(m)} - {job}
    assert not others, f"{script} imports other scripts' job modules {sorted(others)}: shared code belongs below them"


def test_a_scripts_job_module_imports_no_other_scripts_job_module():
    jobs = set(script_job_modules().values())
    for name in sorted(jobs - READS_EVERY_EXPERIMENT):
        peers = repo_imports(name) & jobs - {name}
        assert not peers, (
            f"{name} imports the job modules {sorted(peers)}: move what they share below them (e.g. common/resnet_sweep.py)"
        )


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
TEST_ROOMS = {"science", "models", "data", "experiments", "launch_runs", "report", "docs_layout"}


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


REPORT_PARTS = (  # the report's modules, below make_figures (script 08's job module)
    "common.experiments.records",
    "common.experiments.claim_rows",
    "common.experiments.report_rows",
    "common.experiments.ag_rows",
    "common.experiments.growth_rows",
    "common.experiments.insertion_rows",
    "common.experiments.scaling_rows",
    "common.experiments.claims_report",
)


def test_the_reports_records_have_one_home_below_the_figures_and_the_rows():
    """records.py is imported by make_figures and claim_rows and imports neither; no report part imports
    make_figures, not even for a type; the claim rules import nothing of the experiments."""
    imports = {name: repo_imports(name) for name in (*REPORT_PARTS, "common.experiments.make_figures")}
    assert "common.experiments.records" in imports["common.experiments.make_figures"]
    assert "common.experiments.records" in imports["common.experiments.claim_rows"]
    assert not imports["common.experiments.records"] & set(REPORT_PARTS), imports["common.experiments.records"]
    for name in REPORT_PARTS:
        assert "common.experiments.make_figures" not in imports[name], f"{name} imports make_figures"
    rules = [m for m in MODULES if m == "common.claims" or m.startswith("common.claim_rules")]
    assert len(rules) > 5
    for name in rules:
        upward = {m for m in repo_imports(name) if m.startswith("common.experiments")}
        assert not upward, f"{name} imports {sorted(upward)}: the claim rules are infrastructure"


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
