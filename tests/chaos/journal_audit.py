"""HDFS-3077's system-test checks (§7.4.1) on a live cluster's JournalNode directories.

Finalized segment files never change once renamed into place, so they are read straight from
each JournalNode's ``current/`` while it runs (without its lock), each parsed record by
record once and remembered::

    audit = JournalAudit(dev)
    report = audit.check()
    assert report.ok, report.describe()

- finalized segments with the same name are byte-identical (md5) on every JournalNode;
- the union of the finalized segments is one run of txids: each starts right after the
  previous one ends, so no txid was finalized twice (and none is missing in between);
- no mkdir of a path appears twice in the log (a retry executed twice would).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hadev.devcluster import DevCluster
from qjm.reader import EditLogReadError, iter_segment_ops

_FINALIZED = re.compile(r"edits_(\d{19})-(\d{19})")


@dataclass(frozen=True)
class Segment:
    first: int
    last: int
    md5: str
    mkdirs: tuple[str, ...]


@dataclass
class AuditReport:
    segments: int = 0
    last_txid: int = 0
    mismatches: list[str] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    repeated_mkdirs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.mismatches or self.overlaps or self.gaps or self.corrupt or self.repeated_mkdirs
        )

    def describe(self) -> str:
        parts = [f"{self.segments} finalized segments up to txid {self.last_txid}"]
        for label, items in (
            ("differ between JournalNodes", self.mismatches),
            ("overlap (a txid finalized twice)", self.overlaps),
            ("gaps between finalized segments", self.gaps),
            ("corrupt", self.corrupt),
            ("paths made by two mkdir edits", self.repeated_mkdirs),
        ):
            if items:
                parts.append(f"{label}: {items[:5]}{' ...' if len(items) > 5 else ''}")
        return "; ".join(parts)


class JournalAudit:
    """Reads the finalized segments of every JournalNode of ``dev`` (see module docstring)."""

    def __init__(self, dev: DevCluster) -> None:
        self.dirs: dict[str, Path] = {
            jn.jn_id: dev.journal_dir(jn.jn_id) for jn in dev.journalnodes
        }
        self._seen: dict[tuple[str, str], Segment] = {}
        self._corrupt: dict[tuple[str, str], str] = {}

    def _read(self, jn: str, path: Path, first: int, last: int) -> None:
        key = (jn, path.name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return  # purged meanwhile
        try:
            ops = list(iter_segment_ops(iter([data]), first, last, f"{jn}/{path.name}"))
        except EditLogReadError as exc:
            self._corrupt[key] = str(exc)
            return
        mkdirs = tuple(op.mkdir.path for op in ops if op.WhichOneof("op") == "mkdir")
        self._seen[key] = Segment(first, last, hashlib.md5(data).hexdigest(), mkdirs)

    def check(self) -> AuditReport:
        present: set[tuple[str, str]] = set()
        for jn, directory in self.dirs.items():
            for path in sorted(directory.iterdir()):
                match = _FINALIZED.fullmatch(path.name)
                if match is None:
                    continue
                present.add((jn, path.name))
                if (jn, path.name) not in self._seen and (jn, path.name) not in self._corrupt:
                    self._read(jn, path, int(match.group(1)), int(match.group(2)))
        report = AuditReport(corrupt=[f"{k[0]}/{k[1]}: {v}" for k, v in self._corrupt.items()])
        by_name: dict[str, dict[str, Segment]] = {}
        for (jn, name), segment in self._seen.items():
            if (jn, name) in present:
                by_name.setdefault(name, {})[jn] = segment
        for name, copies in sorted(by_name.items()):
            if len({s.md5 for s in copies.values()}) > 1:
                report.mismatches.append(f"{name}: {({jn: s.md5[:8] for jn, s in copies.items()})}")
        ranges = sorted({(s.first, s.last) for copies in by_name.values() for s in copies.values()})
        for (first0, last0), (first1, last1) in itertools.pairwise(ranges):
            if first1 <= last0:
                report.overlaps.append(f"{first0}-{last0} and {first1}-{last1}")
            elif first1 > last0 + 1:
                report.gaps.append(f"txids {last0 + 1}-{first1 - 1}")
        counts: Counter[str] = Counter()
        for copies in by_name.values():
            counts.update(next(iter(copies.values())).mkdirs)
        report.repeated_mkdirs = sorted(path for path, n in counts.items() if n > 1)
        report.segments = len(ranges)
        report.last_txid = ranges[-1][1] if ranges else 0
        return report
