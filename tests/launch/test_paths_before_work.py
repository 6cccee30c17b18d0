"""Every path is checked before work (issue 47, class 2): an empty folder name is refused, and a folder that cannot be
made (a file in the way) is refused in one line naming the flag, before any probe or training, creating nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.script_checks import main_error

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in ROOT.glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_empty_out_is_an_error(script, capsys):
    code, line = main_error(script, ["--preset", "smoke", "--out", " "], capsys)
    assert code == 2 and "--out: an empty path" in line, line


@pytest.mark.parametrize(("script", "flag"), [("10_expand_decoder", "--save")])  # 08's --figures-dir: tests/report
def test_an_output_folder_that_cannot_be_made_is_refused_before_work_and_creates_nothing(
    script, flag, tmp_path, capsys
):
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    out = tmp_path / "runs"
    code, line = main_error(script, ["--preset", "smoke", "--out", str(out), flag, str(blocker / "inside")], capsys)
    assert code == 2 and f"{flag} {blocker / 'inside'}: cannot write there" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a-file", *(["runs"] if script.startswith("08") else [])]
    )
    assert not any(out.iterdir()) if out.exists() else True


@pytest.mark.parametrize(("script", "flag"), [("10_expand_decoder", "--save"), ("08_make_figures", "--figures-dir")])
def test_an_empty_output_folder_name_is_an_error(script, flag, tmp_path, capsys):
    code, line = main_error(script, ["--preset", "smoke", "--out", str(tmp_path), flag, ""], capsys)
    assert code == 2 and f"argument {flag}: an empty path" in line, line
