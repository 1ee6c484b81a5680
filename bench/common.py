"""What every benchmark shares: percentiles, a table for people, one JSON line for machines.

docs/architecture.md §8.6 ``bench/``: a benchmark prints a table, then as its last line one JSON
object; it never asserts. The table uses rich when it is installed, aligned text otherwise::

    print_table("Journal RPC", ["metric", "value"], [["p50 us", "412.0"]])
    print_json({"journal_p50_us": 412.0})

Also the measurements several benchmarks take: the fdatasync floor of a directory's
filesystem, and a JournalNode's own counters for one journal from its ``/metrics``.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "journal_metrics",
    "percentile",
    "print_json",
    "print_table",
    "raw_fdatasync_latencies",
]


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


def raw_fdatasync_latencies(path: Path, record_len: int, calls: int) -> list[float]:
    """Seconds each of ``calls`` appends of ``record_len`` bytes plus ``os.fdatasync`` took,
    as a JournalNode writes a batch: the floor under any durable 1-edit write."""
    record = b"r" * record_len
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        out = []
        for _ in range(calls):
            began = time.perf_counter()
            os.write(fd, record)
            os.fdatasync(fd)
            out.append(time.perf_counter() - began)
        return out
    finally:
        os.close(fd)


def journal_metrics(metrics_url: str, journal_id: str) -> dict[str, float]:
    """A JournalNode's samples for one journal from its ``/metrics`` page, by sample name
    (``journalnode_txns_written_total``, ``journalnode_sync_seconds_sum``, ...); histogram
    buckets are left out."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("journal") == journal_id and "le" not in sample.labels
    }
