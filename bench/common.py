"""What every benchmark shares: percentiles, a table for people, one JSON line for machines.

DESIGN.md section 2 ``bench/``: a benchmark prints a table, then as its last line one JSON
object; it never asserts. The table uses rich when it is installed, aligned text otherwise::

    print_table("Journal RPC", ["metric", "value"], [["p50 us", "412.0"]])
    print_json({"journal_p50_us": 412.0})
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["percentile", "print_json", "print_table"]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of already sorted values, nearest-rank; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """One table on stdout: rich when available, else columns aligned with spaces."""
    cells = [[str(c) for c in row] for row in rows]
    try:
        rich_console: Any = importlib.import_module("rich.console")
        rich_table: Any = importlib.import_module("rich.table")
    except ImportError:
        widths = [len(h) for h in headers]
        for row in cells:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
        print(f"\n{title}")
        print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
        print("  ".join("-" * w for w in widths))
        for row in cells:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        return
    table = rich_table.Table(title=title)
    for header in headers:
        table.add_column(header)
    for row in cells:
        table.add_row(*row)
    rich_console.Console().print(table)


def print_json(result: Mapping[str, Any]) -> None:
    """The machine-readable result: one JSON object, the last line of the output."""
    sys.stdout.flush()
    print(json.dumps(dict(result), sort_keys=True), flush=True)
