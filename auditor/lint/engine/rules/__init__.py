"""The rules, one module per target: each check declared with its rule's metadata above it."""

from __future__ import annotations

from collections.abc import Iterator

from auditor.lint.engine.terms import REFUSES_TO_START, Finding, Subject


def refused_values(s: Subject) -> Iterator[Finding]:
    """Each explicit setting whose value the client refuses as written (effective.client_refusal):
    the findings of P109 and C105."""
    for setting in s.settings.values():
        if setting.explicit and setting.refused:
            yield Finding(
                setting,
                setting.refused_expected,
                f"{REFUSES_TO_START}: {setting.describe()} ({setting.refused})",
            )


def ignored_keys(s: Subject) -> Iterator[Finding]:
    """Each explicit setting the client ignores (a Java key with blanks around it): P011 and C009."""
    for setting in s.settings.values():
        if setting.explicit and setting.ignored:
            meant = s.settings.get(setting.name.strip())
            runs = f": it runs with {meant.describe()}" if meant is not None else ""
            yield Finding(setting, repr(setting.name.strip()), f"{setting.ignored}{runs}")
