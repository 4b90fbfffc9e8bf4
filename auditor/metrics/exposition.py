"""The Prometheus text exposition format, version 0.0.4.

https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format
One ``# HELP`` and one ``# TYPE`` line per metric, then its samples, each on one line;
label values escape backslash, double quote and line feed, help text backslash and
line feed. Written here rather than pulled from prometheus-client: the auditor keeps
no in-process metric state (every scrape reads the database), so only this encoding
would be used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from auditor.metrics.registry import Family, Sample

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """Integers without a fraction, floats as Python's shortest round-trip repr, NaN and ±Inf as Go spells them."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def sample_line(sample: Sample) -> str:
    value = format_value(sample.value)
    if not sample.labels:
        return f"{sample.name} {value}"
    labels = ",".join(f'{name}="{escape_label_value(text)}"' for name, text in sample.labels.items())
    return f"{sample.name}{{{labels}}} {value}"


def render(families: Iterable[Family]) -> str:
    lines: list[str] = []
    for family in families:
        if family.help:
            lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        lines.extend(sample_line(sample) for sample in family.samples)
    return "\n".join(lines) + "\n"
