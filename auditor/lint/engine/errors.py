"""The one error the lint engine raises for input it cannot read."""

from __future__ import annotations


class LintInputError(ValueError):
    """A config, option or value the engine cannot use.

    The message names the input, the line where known, and what was expected; it never
    contains a secret value.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None) -> None:
        where = source or "input"
        if line is not None:
            where = f"{where}: line {line}"
        super().__init__(f"{where}: {message}")
        self.reason = message  # without the input's name, for a form that shows it by its field
        self.source = source
        self.line = line
