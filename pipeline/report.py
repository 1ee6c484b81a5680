"""Plain-text tables and progress lines for the reports ``hapipe`` prints for people.

Pure functions returning strings: the CLI prints them, tests read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["format_duration", "format_table"]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "  "
) -> str:
    """Columns aligned with spaces; numbers right-aligned, text left-aligned."""
    cells = [[_cell(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [
        bool(rows) and all(isinstance(row[i], int | float) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return (indent + "  ".join(parts)).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h01m``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
