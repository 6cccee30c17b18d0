"""Markdown tables (GitHub-flavoured): the one writer behind every ``.md`` table the scripts save, and the claims report.

A table is a list of rows (mappings) and its columns. A :class:`Column` has a header and says how a row gives its
cell: a key of the row (by default the header itself) or a function of the whole row (a cell built from several
values), and an optional format spec. A missing value (None or NaN) is an empty cell unless the column says what it
shows (``missing``: ``nan`` for a ratio that is undefined, say); without a format spec a float
shows 4 significant digits and anything else its ``str``; a ``|`` in a cell is escaped and a line break becomes a
space, so that no value can break the table. Columns carry no alignment unless asked (``---``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ALIGNMENTS = {"": "---", "left": ":--", "center": ":-:", "right": "--:"}  # the separator cell of each alignment
FLOAT_FORMAT = ".4g"  # a float's cell when its column gives no format


@dataclass(frozen=True)
class Column:
    """One column: its ``header``; ``value``, the row's key (None: the header) or a function of the row; ``fmt``, a
    format spec for a present value, as in an f-string (None: :data:`FLOAT_FORMAT` for a float, ``str`` otherwise;
    ``""``: the value as an f-string shows it); ``align``, one of :data:`ALIGNMENTS`; ``missing``, the text of a
    None or NaN value."""

    header: str
    value: str | Callable[[Mapping], Any] | None = None
    fmt: str | None = None
    align: str = ""
    missing: str = ""

    def cell(self, row: Mapping) -> str:
        """This column's cell of ``row``, as markdown text."""
        value = self.value(row) if callable(self.value) else row.get(self.header if self.value is None else self.value)
        return cell_text(value, self.fmt, self.missing)


def cell_text(value: Any, fmt: str | None = None, missing: str = "") -> str:
    """One cell: ``missing`` for None and NaN, else ``value`` in ``fmt`` (:class:`Column`), ``|`` escaped, no line break."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    if fmt is None:
        return escape(format(value, FLOAT_FORMAT) if isinstance(value, float) else str(value))
    return escape(format(value, fmt))


def escape(text: str) -> str:
    """``text`` safe inside a table cell: ``|`` escaped, line breaks as spaces."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Iterable[Mapping], columns: Sequence[str | Column] | None = None) -> str:
    """The markdown table of ``rows``: one line per row, in ``columns`` (names are :class:`Column` of that key;
    None: the first row's keys), after the header and the separator line. No trailing newline."""
    rows = list(rows)
    if columns is None:
        columns = list(rows[0]) if rows else []
    columns = [c if isinstance(c, Column) else Column(c) for c in columns]
    for c in columns:
        if c.align not in ALIGNMENTS:
            raise ValueError(f"column {c.header!r}: align {c.align!r} is not one of {sorted(ALIGNMENTS)}")
    lines = [
        "| " + " | ".join(escape(c.header) for c in columns) + " |",
        "|" + "".join(f"{ALIGNMENTS[c.align]}|" for c in columns),
    ]
    lines += ["| " + " | ".join(c.cell(r) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


__all__ = ["ALIGNMENTS", "FLOAT_FORMAT", "Column", "cell_text", "escape", "markdown_table"]
