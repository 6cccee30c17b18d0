"""Every number has a range and every list a size, checked while the flags are parsed (issue 47, classes 1 and 6).

Classes, each with its own cases: a value above or below its flag's bound, a list longer than its flag takes, a range
too long to build, a repeated value in any list flag (``--policy`` included), a blank list item (issue 59), a mistyped
choice or flag answered with the nearest valid one, an abbreviated flag refused. A refused command creates nothing
(checked on the filesystem). The table in docs/runs.md is the module's, every list flag has a size in it, every preset
of every script fits inside it, and no preset refuses a value the table allows with a limit of its own (issue 59).
"""

from __future__ import annotations

import argparse
import importlib
import re
from dataclasses import fields, is_dataclass, replace
from pathlib import Path

import pytest

from common.errors import ParamError
from common.launch import bounds
from common.launch.cli import comma_ints, comma_list, comma_names, positive_ints
from common.presets import expand_decoder as expand_presets
from common.presets import grow_by_criterion as grow_presets
from common.presets.choose import names_of, repeated_values
from tests.helpers.script_checks import main_error

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in ROOT.glob("[0-9][0-9]_*.py"))
LAUNCHING = [s for s in SCRIPTS if not s.startswith("08")]


def refused(script: str, argv: list[str], tmp_path: Path, capsys) -> str:
    """Run ``script``'s ``main`` in this process; assert exit 2 with one error line and nothing created under
    ``tmp_path``; return the line."""
    code, line = main_error(script, [*argv, "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert not list(tmp_path.iterdir()), "a refused command created something"
    return line


@pytest.mark.parametrize(
    ("script", "argv", "needle"),
    [
        ("01_train_resnet_sweep", ["--depths", "0,5000"], "--depths: 5,000 is above the highest value, 1,000"),
        ("01_train_resnet_sweep", ["--seeds", "0:1500"], "--seeds: 1,501 values, more than the 1,000"),
        ("01_train_resnet_sweep", ["--epochs", "1000000"], "--epochs: 1,000,000 is above"),
        ("02_probe_ag", ["--seeds", "4294967296"], "--seeds: 4,294,967,296 is above the highest value"),
        ("05_gpt2_ascend", ["--depths", "1,2000"], "--depths: 2,000 is above"),
        ("07_weight_scaling", ["--depths", "4,8,200000"], "--depths: 200,000 is above the highest value, 100,000"),
        ("09_grow_by_criterion", ["--budget-depth", "-1"], "--budget-depth: -1 is below the lowest value, 0"),
        ("09_grow_by_criterion", ["--cap", "5000"], "--cap: 5,000 is above"),
        ("10_expand_decoder", ["--train-steps", "1000000000000"], "--train-steps: 1,000,000,000,000 is above"),
        ("10_expand_decoder", ["--blocks", "1:101"], "--blocks: 101 values, more than the 100"),
        ("10_expand_decoder", ["--runs-per-device", "65"], "--runs-per-device: 65 is above"),
        ("03_growth_vs_scratch", ["--seed", "2147483648"], "--seed: 2,147,483,648 is above"),
        ("03_growth_vs_scratch", ["--insert-at", "FRACTIONS:1001"], "--insert-at: 1,001 values, more than the 1,000"),
        ("03_growth_vs_scratch", ["--insert-at", "FRACTIONS:15000"], "--insert-at: 15,000 values, more than the"),
        ("04_pythia_cpt", ["--model", ",".join(f"m{i}" for i in range(101))], "--model: 101 values, more than the 100"),
        ("04_pythia_cpt", [x for i in range(101) for x in ("--model-path", f"m{i}")], "--model-path: 101 values"),
        ("09_grow_by_criterion", ["--every", "100001"], "--every: 100,001 is above the highest value, 100,000"),
        ("09_grow_by_criterion", ["--ratio-below", "2e6"], "--ratio-below: 2,000,000.0 is above the highest value"),
    ],
)
def test_a_value_or_a_list_beyond_its_bound_is_one_line_and_creates_nothing(script, argv, needle, tmp_path, capsys):
    argv = [fractions(int(a.split(":")[1])) if a.startswith("FRACTIONS:") else a for a in argv]
    line = refused(script, ["--preset", "smoke", *argv], tmp_path, capsys)
    assert needle in line and 'docs/runs.md, section "Bounds"' in line, line


def fractions(n: int) -> str:
    """``n`` increasing fractions of a run in (0, 1), as ``--insert-at`` takes them."""
    return ",".join(str((i + 1) / (n + 1)) for i in range(n))


@pytest.mark.parametrize(
    ("script", "argv", "flag"),
    [
        ("03_growth_vs_scratch", ["--insert-at", "0.15,,0.3"], "--insert-at"),
        ("09_grow_by_criterion", ["--policy", "criterion,,none"], "--policy"),
        ("09_grow_by_criterion", ["--policy", "criterion,none,"], "--policy"),
        ("10_expand_decoder", ["--policy", ",criterion"], "--policy"),
        ("01_train_resnet_sweep", ["--seeds", "0,,1"], "--seeds"),
        ("06_matched_insertion", ["--depths", "0, ,6"], "--depths"),
        ("10_expand_decoder", ["--blocks", "1,2,"], "--blocks"),
        ("04_pythia_cpt", ["--model", "a,,b"], "--model"),
    ],
)
def test_a_blank_list_item_is_one_line_and_creates_nothing(script, argv, flag, tmp_path, capsys):
    line = refused(script, ["--preset", "smoke", *argv], tmp_path, capsys)
    assert f"argument {flag}: " in line and "holds a blank item" in line, line


def is_list_flag(action: argparse.Action) -> bool:
    """A flag that takes several values: a list type, a repeatable flag, or help that says comma-separated."""
    list_types = (comma_ints, positive_ints, comma_names, comma_list)
    return (
        isinstance(action, argparse._AppendAction)
        or action.type in list_types
        or hasattr(action.type, "__wrapped__")  # cli.names_flag of a preset's list parser
        or "comma-separated" in (action.help or "")
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_list_flag_has_a_size_in_the_table(script):
    parser = importlib.import_module(script).build_parser()
    lists = [a for a in parser._actions if a.option_strings and is_list_flag(a)]
    for action in lists:
        bound = bounds.bound_of(parser.prog, action.dest)
        assert bound is not None and bound.size is not None, f"{script} {max(action.option_strings, key=len)}"
    assert lists or script[:2] in ("08", "11"), script  # 08 reads records; 11 probes one network


def test_a_names_flags_size_is_the_number_of_its_names():
    assert bounds.SCRIPT_BOUNDS["09", "policies"].size == len(grow_presets.ARMS)
    assert bounds.SCRIPT_BOUNDS["10", "policies"].size == len(expand_presets.ARMS)


# A preset may refuse a field's highest value for another field's sake (these checks, by their words); any other
# refusal of a value the table allows would be a second limit, which the table alone sets (issue 59).
CROSS_FIELD = (
    "is not a multiple of block_size",  # batch_tokens and block_size (04, 05)
    "must divide the width",  # n_head and n_embd (05)
    "not among the depths",  # ablation_depths and depths (03)
    "give one fraction per block",  # depths and insert_at (03)
)


@pytest.mark.parametrize("script", LAUNCHING)
def test_no_preset_keeps_a_second_limit_below_the_tables_highest(script):
    slug = re.sub(r"^\d\d_", "", script)
    presets = getattr(importlib.import_module(f"common.presets.{slug}"), "PRESETS", {})
    for name, preset in presets.items():
        for f in fields(preset):
            bound, value = bounds.bound_of(script, f.name), getattr(preset, f.name)
            if bound is None or bound.high is None or isinstance(value, bool):
                continue
            if isinstance(value, list | tuple):
                if not value or not all(isinstance(v, int | float) for v in value):
                    continue
                highest = type(value)([type(value[0])(bound.high)])
            elif value is None:  # the preset leaves it to the data (06's depths: every finished one)
                highest = (bound.high,) if "tuple" in str(f.type) else bound.high
            elif isinstance(value, int | float):
                highest = type(value)(bound.high)
            else:
                continue  # a count of seeds where the table bounds a list of them, and the like
            try:
                replace(preset, **{f.name: highest})
            except ParamError as exc:
                assert any(words in str(exc) for words in CROSS_FIELD), (script, name, f.name, str(exc))


@pytest.mark.parametrize("text", ["0:1000000000000", "0:" + str(10**18) + ":1", ",".join(["1"] * 10_001)])
def test_a_list_is_measured_before_it_is_built(text):
    # 10**12 values would take terabytes: measured first, it is one error (a built list would be a MemoryError)
    with pytest.raises(argparse.ArgumentTypeError, match="more than any list flag takes"):
        comma_ints(text)


class Counted:
    """A value whose comparisons are counted: a check that compares every pair makes n**2 / 2 of them."""

    compared = 0

    def __init__(self, v: int) -> None:
        self.v = v

    def __hash__(self) -> int:
        return hash(self.v)

    def __eq__(self, other) -> bool:
        Counted.compared += 1
        return self.v == other.v


def test_the_repeat_check_is_linear_in_the_list():
    n = 20_000  # a quadratic check would compare about 2 * 10**8 pairs here
    values = [Counted(i) for i in range(n)] + [Counted(7), Counted(7)]
    Counted.compared = 0
    assert [v.v for v in repeated_values(values)] == [7]
    assert Counted.compared <= 4, Counted.compared  # only equal hashes are compared: the repeats
    assert len(comma_ints(",".join(map(str, range(bounds.MAX_LIST_VALUES))))) == bounds.MAX_LIST_VALUES


@pytest.mark.parametrize(
    ("script", "argv", "needle"),
    [
        ("09_grow_by_criterion", ["--policy", "criterion,cyclic,criterion"], "--policy: 'criterion,cyclic,criterion'"),
        ("10_expand_decoder", ["--policy", "even,even"], "argument --policy: 'even,even': names even twice"),
        ("01_train_resnet_sweep", ["--depths", "0,1,0"], "argument --depths: '0,1,0' repeats 0"),
        ("06_matched_insertion", ["--seeds", "3,3"], "argument --seeds: '3,3' repeats 3"),
        ("10_expand_decoder", ["--blocks", "2,2"], "repeats 2"),
    ],
)
def test_a_repeated_value_in_any_list_flag_is_refused_naming_the_flag(script, argv, needle, tmp_path, capsys):
    line = refused(script, ["--preset", "smoke", *argv], tmp_path, capsys)
    assert needle in line, line
    assert "policies" not in line  # the flag, never the preset's field


@pytest.mark.parametrize(
    ("script", "argv", "suggestion"),
    [
        ("10_expand_decoder", ["--policy", "critrion"], "did you mean criterion?"),
        ("09_grow_by_criterion", ["--policy", "cyclc"], "did you mean cyclic?"),
        ("02_probe_ag", ["--device", "cdua"], "did you mean 'cuda'?"),
        ("01_train_resnet_sweep", ["--launcher", "slrum"], "did you mean 'slurm'?"),
        ("10_expand_decoder", ["--block", "1"], "did you mean --blocks?"),
        ("01_train_resnet_sweep", ["--dept", "1"], "did you mean --depths?"),
    ],
)
def test_a_mistyped_choice_or_flag_is_answered_with_the_nearest_valid_one(script, argv, suggestion, tmp_path, capsys):
    line = refused(script, ["--preset", "smoke", *argv], tmp_path, capsys)
    assert suggestion in line, line


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_script_accepts_an_abbreviated_flag(script):
    parser = importlib.import_module(script).build_parser()
    assert parser.allow_abbrev is False
    with pytest.raises(SystemExit):
        parser.parse_args(["--pres", "smoke"])


def test_names_of_refuses_repeats_and_unknowns_from_python_too():
    with pytest.raises(Exception, match="names a twice"):
        names_of("a,b,a", ("a", "b"), "policies")
    with pytest.raises(Exception, match="did you mean beta"):
        names_of("bet", ("alpha", "beta"), "policies")
    assert names_of("b,a", ("a", "b"), "policies") == ("b", "a")


def test_docs_runs_holds_the_bounds_table():
    text = (ROOT / "docs" / "runs.md").read_text()
    assert bounds.bounds_markdown() in text


def test_every_bounded_flag_exists_in_some_script():
    dests = {a.dest for s in LAUNCHING for a in importlib.import_module(s).build_parser()._actions}
    assert set(bounds.BOUNDS) <= dests, sorted(set(bounds.BOUNDS) - dests)
    assert {d for _, d in bounds.SCRIPT_BOUNDS} <= dests


def _preset_values(preset) -> dict:
    out = {}
    for f in fields(preset):
        value = getattr(preset, f.name)
        if is_dataclass(value):
            out.update(_preset_values(value))
        else:
            out[f.name] = value
    return out


@pytest.mark.parametrize("script", LAUNCHING)
def test_every_preset_fits_inside_the_bounds(script):
    slug = re.sub(r"^\d\d_", "", script)
    presets = getattr(importlib.import_module(f"common.presets.{slug}"), "PRESETS", {})
    checked = 0
    for name, preset in presets.items():
        for dest, value in _preset_values(preset).items():
            bound = bounds.bound_of(script, dest)
            if bound is None or not isinstance(value, int | float | list | tuple) or isinstance(value, bool):
                continue
            if isinstance(value, list | tuple) and not all(isinstance(v, int | float) for v in value):
                continue
            assert bound.problem(value) is None, (script, name, dest, value)
            checked += 1
    assert checked or not presets, f"{script}: no preset field has a bounded name"
