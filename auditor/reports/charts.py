"""Plotly figures of the reports, and their HTML divs.

Labels are HTML-escaped before they reach a figure: Plotly renders trace names and
category labels as a subset of HTML, and the divs are inserted into the page unescaped.
The numbers and the escaped labels are the only data in a chart.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

HEIGHT = 340
CONFIG = {"displaylogo": False, "responsive": True}


def label(value: object) -> str:
    return html.escape(str(value), quote=True)


def _layout(title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": label(title)},
        "height": HEIGHT,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "template": "plotly_white",
        "yaxis": {"title": {"text": label(y_title)}, "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": -0.2},
        **extra,
    }


def time_series(
    title: str, y_title: str, series: Mapping[str, Sequence[tuple[datetime, float | None]]], mode: str = "lines+markers"
) -> go.Figure:
    """One line per series name: (time, value) points."""
    fig = go.Figure(layout=_layout(title, y_title))
    for name, points in series.items():
        fig.add_trace(
            go.Scatter(
                x=[when.isoformat() for when, _ in points],
                y=[value for _, value in points],
                mode=mode,
                name=label(name),
            )
        )
    return fig


def bars(
    title: str, y_title: str, categories: Iterable[str], series: Mapping[str, Sequence[float]], stacked: bool = True
) -> go.Figure:
    """One bar trace per series name over ``categories``."""
    shown = [label(c) for c in categories]
    fig = go.Figure(layout=_layout(title, y_title, barmode="stack" if stacked else "group"))
    for name, values in series.items():
        fig.add_trace(go.Bar(x=shown, y=list(values), name=label(name)))
    return fig


def figure_div(fig: go.Figure, div_id: str) -> str:
    """The figure as a <div> and the <script> drawing it; plotly.js is loaded by the page."""
    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id, config=CONFIG)
