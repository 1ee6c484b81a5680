"""The simulator's trace: every event of a run, digested, with a short tail kept for reports.

Two runs of the same seed must write the same trace line for line (docs/architecture.md §8.2), so
``trace_digest`` (sha256 of every line) is what the determinism test compares. Lines never hold
wall-clock times, object ids or anything iterated in hash order.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable


class Trace:
    """Append-only event log: a running sha256, the last ``tail_len`` lines, an optional echo."""

    def __init__(self, tail_len: int = 40, echo: Callable[[str], None] | None = None) -> None:
        self._digest = hashlib.sha256()
        self._tail: deque[str] = deque(maxlen=tail_len)
        self._echo = echo
        self.lines = 0

    def __call__(self, line: str) -> None:
        self._digest.update(line.encode())
        self._digest.update(b"\n")
        self._tail.append(line)
        self.lines += 1
        if self._echo is not None:
            self._echo(line)

    @property
    def digest(self) -> str:
        return self._digest.hexdigest()

    def tail(self) -> tuple[str, ...]:
        return tuple(self._tail)


def short(exc: BaseException, limit: int = 160) -> str:
    """``ClassName: message`` cut to ``limit`` characters, for one trace line."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
