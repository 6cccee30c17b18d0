"""The one markdown-table writer (common/runs/tables.py): cells, formats, escaping, alignment, and a table read back."""

from __future__ import annotations

import math

import numpy as np
import pytest

from common.report.claims_report import claims_cells
from common.runs.tables import Column, cell_text, markdown_table


def test_a_missing_value_is_an_empty_cell_unless_its_column_names_one():
    assert cell_text(None) == cell_text(math.nan) == cell_text(np.float64("nan")) == ""
    assert cell_text(math.nan, ".4f", missing="nan") == "nan"
    table = markdown_table([{"a": None, "b": math.nan}], [Column("a"), Column("b", fmt=".3f", missing="-")])
    assert table.splitlines()[2] == "|  | - |"


def test_a_float_shows_four_significant_digits_unless_its_column_gives_a_format():
    assert cell_text(2 / 3) == "0.6667" and cell_text(np.float64(123456.0)) == "1.235e+05"
    assert cell_text(7) == "7" and cell_text(True) == "True" and cell_text("x") == "x"
    assert cell_text(2 / 3, ".2f") == "0.67" and cell_text(0.5, "") == "0.5" and cell_text(1e-3, "g") == "0.001"


def test_a_pipe_or_line_break_in_a_value_cannot_break_the_table():
    rows = [{"claim": "a | b\nc", "n": 1}]
    lines = markdown_table(rows).splitlines()
    assert lines == ["| claim | n |", "|---|---|", "| a \\| b c | 1 |"]


def test_columns_take_a_key_or_a_function_of_the_row_under_their_header():
    rows = [{"depth": 8, "loss": 0.25, "std": 0.01}, {"depth": 14, "loss": 0.5, "std": None}]
    columns = [Column("model", lambda r: f"ResNet-{r['depth']}"), Column("loss", fmt=".2f"), Column("spread", "std")]
    lines = markdown_table(rows, columns).splitlines()
    assert lines[0] == "| model | loss | spread |"
    assert lines[2:] == ["| ResNet-8 | 0.25 | 0.01 |", "| ResNet-14 | 0.50 |  |"]


def test_without_columns_the_first_rows_keys_are_the_columns_and_a_missing_key_is_empty():
    lines = markdown_table([{"x": 1, "y": 2}, {"x": 3}]).splitlines()
    assert lines == ["| x | y |", "|---|---|", "| 1 | 2 |", "| 3 |  |"]


def test_alignment_marks_the_separator_and_an_unknown_one_is_refused():
    columns = [Column("a"), Column("b", align="left"), Column("c", align="center"), Column("d", align="right")]
    assert markdown_table([], columns).splitlines()[1] == "|---|:--|:-:|--:|"
    with pytest.raises(ValueError, match="align"):
        markdown_table([], [Column("a", align="middle")])


def test_a_written_table_reads_back_cell_for_cell():
    rows = [
        {"id": 1, "claim": "V_S,l <= AG_l | at every candidate", "verdict": "holds (smoke scale)"},
        {"id": 2, "claim": "c", "verdict": "not run"},
    ]
    read = claims_cells(markdown_table(rows) + "\n\nafter the table")
    assert read == [{k: str(v) for k, v in r.items()} for r in rows]
