"""ThrottledLog: a repeating warning logged once per interval per key, with what was left out."""

from __future__ import annotations

import logging

import pytest

from auditor.lib.throttled_log import ThrottledLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "t.throttled"]


def test_it_logs_each_key_once_per_interval_and_counts_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="t.throttled")
    clock = Clock()
    throttled = ThrottledLog(logging.getLogger("t.throttled"), interval_s=60, clock=clock)
    for second in range(150):  # a failure a second on partition 0, for 150 s
        clock.now = 1000.0 + second
        throttled.warning((0, "timed out"), "record to %s/%d failed: %s", "t", 0, f"timed out #{second}")
    throttled.warning((1, "timed out"), "record to %s/%d failed: %s", "t", 1, "timed out")  # its own key

    assert messages(caplog) == [
        "record to t/0 failed: timed out #0",
        "record to t/0 failed: timed out #60 (after 59 more like it, not logged)",
        "record to t/0 failed: timed out #120 (after 59 more like it, not logged)",
        "record to t/1 failed: timed out",
    ]
    caplog.clear()
    throttled.flush()  # 29 left out since #120: the last one is logged, with the 28 before it
    assert messages(caplog) == ["record to t/0 failed: timed out #149 (after 28 more like it, not logged)"]
    caplog.clear()
    throttled.flush()
    throttled.warning((0, "timed out"), "again %s", "now")  # forgotten at flush: logged at once
    assert messages(caplog) == ["again now"]
