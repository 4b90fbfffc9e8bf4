"""The lab's scenarios, by name. Each family module declares its scenarios with @scenario;
the modules are listed here explicitly (no discovery by file name)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from auditor.lab.compare import Outcome
from auditor.lab.world import World

ScenarioFunction = Callable[[World], Outcome]


@dataclass(frozen=True)
class Scenario:
    name: str
    family: str
    summary: str
    run: ScenarioFunction


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, summary: str) -> Callable[[ScenarioFunction], ScenarioFunction]:
    def register(function: ScenarioFunction) -> ScenarioFunction:
        if name in SCENARIOS:
            raise ValueError(f"lab scenario {name!r} is declared twice")
        SCENARIOS[name] = Scenario(name, function.__module__.rsplit(".", 1)[-1], summary, function)
        return function

    return register


def all_scenarios() -> dict[str, Scenario]:
    from auditor.lab.scenarios import FAMILIES  # noqa: F401  (importing them registers them)

    return SCENARIOS


def select(names: list[str]) -> list[Scenario]:
    """The named scenarios in the given order (all when none are named); ValueError names unknown ones."""
    known = all_scenarios()
    if not names:
        return list(known.values())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown lab scenario(s): {', '.join(unknown)} (known: {', '.join(known)})")
    return [known[n] for n in names]
