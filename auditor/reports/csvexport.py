"""The report's CSV: one row per finding or stuck item, safe to open in a spreadsheet.

Keys and messages come from other people's data. A cell a spreadsheet would take for a
formula (starting with = + - @, or a tab or carriage return that some strip first) is
prefixed with a single quote, so it is shown as text and never evaluated (CSV/formula
injection). Numbers stay numbers.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from auditor.reports.sections import CSV_COLUMNS

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> str | int | float:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def to_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] = CSV_COLUMNS) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([safe_cell(row.get(column)) for column in columns])
    return buffer.getvalue()
