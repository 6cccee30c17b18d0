"""03's table files are records too (issue 47, item 4): each class of unusable table (torn, empty, foreign, a NaN in a
measured column) is left out with one warning line naming it and why, the 03 rows it would have entered name it and
are not decidable, and ``--strict`` refuses in one line. A torn ablation leaves the table in use."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from common.report import claim_rows, record_scan, records
from common.report.growth_table_scan import read_table
from common.report.rules import verdicts
from tests.helpers import figure_records

script = importlib.import_module("08_make_figures")


def cut(path: Path, keep: float) -> None:
    text = path.read_text()
    path.write_text(text[: int(len(text) * keep)])


def set_cell(path: Path, row: int, column: str, value: str) -> None:
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[row].split(",")
    cells[header.index(column)] = value
    lines[row] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


CLASSES = {  # class -> (how the table is spoiled, what the why says)
    "cut-mid-line": (lambda p: cut(p, 0.9), "torn: its last line has no line end"),
    "lost-fields": (lambda p: p.write_text("\n".join(p.read_text().splitlines()[:-1] + ["mean,,2"]) + "\n"), "torn"),
    "header-only": (lambda p: p.write_text(p.read_text().splitlines()[0] + "\n"), "no rows"),
    "empty": (lambda p: p.write_text(""), "not a readable CSV table (EmptyDataError)"),
    "binary": (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe"), "not a readable CSV table"),
    "foreign": (
        lambda p: p.write_text("model,loss\nResNet-10,0.3\n"),
        "no column depth_n, seeds, growth_train_loss ...",
    ),
    "nan-loss": (lambda p: set_cell(p, 2, "growth_test_loss", "nan"), "growth_test_loss of row 2 (ResNet-11)"),
    "inf-seeds": (lambda p: set_cell(p, 1, "seeds", "inf"), "seeds of row 1 (ResNet-10) is"),
    "text-in-a-number": (lambda p: set_cell(p, 1, "scratch_test_acc", "n/a"), "scratch_test_acc of row 1"),
}


@pytest.fixture
def out(tmp_path) -> Path:
    """03's runs and table (with its restart ablation) for preset smoke, and nothing else."""
    runs = tmp_path / "runs"
    figure_records.growth(runs)
    return runs


def rows_of(out: Path) -> dict[str, dict]:
    """The claims rows by claim, without the dataset a table's rows name."""
    rows = claim_rows.claim_rows(records.load_records(out, "smoke"))
    return {r["claim"].removesuffix(" (digits)"): r for r in rows}


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_each_class_of_unusable_table_is_left_out_named_and_its_rows_are_not_decidable(out, kind):
    spoil, says = CLASSES[kind]
    (table,) = (out / "growth_vs_scratch").glob("table-*.csv")
    before = rows_of(out)
    reading = {c for c, r in before.items() if "table-" in r["records"]}  # the rows that read the table
    assert any(verdicts.verdict_kind(before[c]["verdict"]) != verdicts.UNDECIDABLE for c in reading)
    spoil(table)
    scan = record_scan.scan_records(out)
    (left,) = scan.dropped
    assert left.dir == table and says in left.why and left.preset == "smoke", left.why
    assert "rerun 03_growth_vs_scratch.py" in left.why and "\n" not in record_scan.left_out_warning(left)
    assert table not in scan.tables and records.load_records(out, "smoke", scan).growth == []
    marked = {c: r for c, r in rows_of(out).items() if table.name in r["records"]}
    assert set(marked) == reading
    assert all(verdicts.verdict_kind(r["verdict"]) == verdicts.UNDECIDABLE for r in marked.values())


def test_a_torn_ablation_is_left_out_and_the_table_is_used_without_it(out):
    (ablation,) = (out / "growth_vs_scratch").glob("ablation-*.csv")
    assert records.load_records(out, "smoke").growth[0].ablation is not None
    cut(ablation, 0.5)
    scan = record_scan.scan_records(out)
    (left,) = scan.dropped
    assert left.dir == ablation and "torn" in left.why
    (table,) = records.load_records(out, "smoke", scan).growth
    assert table.ablation is None and table.path.name.startswith("table-")


def test_08_warns_for_a_torn_table_and_strict_refuses_it_in_one_line(out, tmp_path, capsys):
    (table,) = (out / "growth_vs_scratch").glob("table-*.csv")
    cut(table, 0.9)
    capsys.readouterr()
    assert script.main(["--out", str(out), "--figures-dir", str(tmp_path / "figs")]) == 0
    printed = capsys.readouterr()
    (warning,) = [x for x in printed.err.splitlines() if "could not be used" in x]
    assert f"growth_vs_scratch/{table.name}" in warning and "torn" in warning
    assert "1 finished runs left out" in printed.out.splitlines()[-1]
    assert script.main(["--out", str(out), "--strict", "--figures-dir", str(tmp_path / "strict")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("08_make_figures.py: error:") and table.name in line
    assert not (tmp_path / "strict").exists()


def test_the_tables_03_writes_pass_and_the_mean_row_needs_no_depth(out):
    for path in sorted((out / "growth_vs_scratch").glob("*.csv")):
        rows, why = read_table(path, path.name.split("-")[0])
        assert why is None and rows is not None and len(rows), path.name
    (table,) = (out / "growth_vs_scratch").glob("table-*.csv")
    rows, _ = read_table(table, "table")
    assert rows["depth_n"].isna().tolist() == [False] * (len(rows) - 1) + [True]  # the mean row's depth is empty
