"""``journalnode.log_throttle``: a flood of refusals costs a few lines, each repeat counted."""

from __future__ import annotations

import pytest

from journalnode.log_throttle import OTHERS, Line, LogThrottle


def test_first_occurrence_is_logged_repeats_become_one_counted_line() -> None:
    t: LogThrottle[str] = LogThrottle(window_seconds=10, max_lines=5)
    assert t.offer("a", 0.0) == [Line("a", 1, True)]
    assert [t.offer("a", 0.1 * i) for i in range(1, 100)] == [[]] * 99
    assert t.offer("b", 5.0) == [Line("b", 1, True)]
    # The next window: the 99 repeats of "a" as one line, then "a" again in full.
    assert t.offer("a", 10.0) == [Line("a", 99, False), Line("a", 1, True)]
    assert t.offer("a", 20.0) == [Line("a", 1, True)]  # no repeats meanwhile: no summary


def test_many_keys_cost_at_most_max_lines_per_window_and_bounded_memory() -> None:
    t: LogThrottle[int] = LogThrottle(window_seconds=10, max_lines=3)
    lines = [line for i in range(10_000) for line in t.offer(i, 0.0)]
    assert lines == [Line(0, 1, True), Line(1, 1, True), Line(2, 1, True)]
    assert t.offer(0, 10.0) == [Line(OTHERS, 9_997, False), Line(0, 1, True)]


@pytest.mark.parametrize(("window", "max_lines"), [(0, 1), (1, 0)])
def test_a_throttle_needs_a_window_and_a_line(window: float, max_lines: int) -> None:
    with pytest.raises(ValueError):
        LogThrottle(window, max_lines)
