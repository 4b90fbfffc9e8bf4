"""The report's CSV: proper quoting, and no cell a spreadsheet would run as a formula."""

from __future__ import annotations

import csv
import io

from auditor.reports.csvexport import safe_cell, to_csv


def test_it_prefixes_formula_cells_with_a_quote() -> None:
    for text in ("=1+1", "+1", "-1+2", "@SUM(A1:A2)", "\t=1", "\r=1", '=HYPERLINK("http://x","y")'):
        assert safe_cell(text) == "'" + text
    assert safe_cell("a=1") == "a=1" and safe_cell("tickets") == "tickets"


def test_it_keeps_numbers_and_empties_as_they_are() -> None:
    assert (safe_cell(-1), safe_cell(5), safe_cell(1.5), safe_cell(None), safe_cell(True)) == (-1, 5, 1.5, "", "true")


def test_it_quotes_commas_quotes_and_newlines() -> None:
    text = to_csv([{"key": 'a,"b"\nc', "binding": "=cmd|' /C calc'!A0"}], columns=("binding", "key"))
    assert list(csv.reader(io.StringIO(text))) == [["binding", "key"], ["'=cmd|' /C calc'!A0", 'a,"b"\nc']]
    assert text.endswith("\r\n")
