"""Rate-limited logging of refused and failed calls: a flood of bad requests must leave a
trace without filling the disk (issue 10).

``LogThrottle`` is the pure decision. Time is cut into windows; in each window:

- the first occurrence of a key (for the JournalNode: rpc, journal and error class) is
  logged in full, with its cause;
- repeats of a key are only counted, and become one line with the count when a later
  window starts (a repeated line becomes one line with a count);
- at most ``max_lines`` keys get lines per window; occurrences of further keys are counted
  under ``OTHERS`` and reported the same way. Memory stays at ``max_lines + 1`` keys.

Counts are reported at the first offer after their window ended (no timer thread): a burst
that is followed by silence is summarized by the next refusal, or never if none comes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K")

OTHERS = ("<other keys>",)
"""The key that counts occurrences of keys beyond a window's ``max_lines``."""


@dataclass(frozen=True, slots=True)
class Line(Generic[K]):
    """A line to log: the first occurrence of ``key`` (``count`` 1, ``first``) or a summary
    of ``count`` repeats in the window that just ended."""

    key: K | tuple[str]
    count: int
    first: bool


class LogThrottle(Generic[K]):
    def __init__(self, window_seconds: float = 10.0, max_lines: int = 20) -> None:
        if window_seconds <= 0 or max_lines < 1:
            raise ValueError("a throttle needs a positive window and at least one line")
        self.window_seconds = window_seconds
        self.max_lines = max_lines
        self._window_start: float | None = None
        self._repeats: dict[K | tuple[str], int] = {}

    def offer(self, key: K, now: float) -> list[Line[K]]:
        """Record one occurrence of ``key`` at ``now``; return the lines to log for it."""
        lines: list[Line[K]] = []
        if self._window_start is None or now - self._window_start >= self.window_seconds:
            lines = [Line(k, n, False) for k, n in self._repeats.items() if n > 0]
            self._repeats = {}
            self._window_start = now
        if key in self._repeats:
            self._repeats[key] += 1
        elif len(self._repeats) < self.max_lines:
            self._repeats[key] = 0
            lines.append(Line(key, 1, True))
        else:
            self._repeats[OTHERS] = self._repeats.get(OTHERS, 0) + 1
        return lines
