"""SQL identifier validation: only plain names reach generated SQL, always quoted."""

from __future__ import annotations

import re

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class IdentifierError(ValueError):
    pass


def validate_identifier(name: str, what: str = "identifier") -> str:
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise IdentifierError(f"{what} {name!r} is not a valid SQL identifier (letters, digits, _)")
    return name


def validate_table_name(name: str) -> tuple[str | None, str]:
    """'schema.table' or 'table' -> (schema, table), each validated."""
    if not isinstance(name, str):
        raise IdentifierError(f"table {name!r} is not a string")
    parts = name.split(".")
    if len(parts) == 1:
        return None, validate_identifier(parts[0], "table")
    if len(parts) == 2:
        return validate_identifier(parts[0], "schema"), validate_identifier(parts[1], "table")
    raise IdentifierError(f"table {name!r} must be 'table' or 'schema.table'")
