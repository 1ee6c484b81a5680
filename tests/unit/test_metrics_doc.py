"""README's Metrics table names every metric the daemons export, and nothing they don't."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFINING = [
    "journalnode/server.py",
    "hanamenode/metrics.py",
    "qjm/metrics.py",
    "failover/metrics.py",
]
NAME = re.compile(r"\b(?:journalnode|hanamenode|qjm)_[a-z_]+\b")


def _defined() -> set[str]:
    names: set[str] = set()
    for module in DEFINING:
        text = (ROOT / module).read_text()
        names |= set(re.findall(r'"((?:journalnode|hanamenode|qjm)_[a-z_]+)"', text))
    # Samples of one histogram, not metrics of their own.
    return {n for n in names if not n.endswith(("_count", "_sum", "_bucket", "_total"))}


def test_readme_metrics_table_matches_the_code() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    documented = set(NAME.findall(section))
    defined = _defined()
    assert defined, "no metric definitions found: has a defining module moved?"
    assert not defined - documented, f"README's Metrics table lacks {sorted(defined - documented)}"
    assert not documented - defined, f"README names unknown metrics {sorted(documented - defined)}"
