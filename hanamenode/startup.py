"""Startup progress of one NameNode (docs/operations.md §13.3), after HDFS's
``StartupProgress``: the phases a NameNode goes through from its start until it serves in an
HA state with its namespace up to the edit log's end, each with its figures and elapsed time.

HDFS's phases are loading the fsimage, loading the edits, saving a checkpoint and safe mode.
This NameNode saves no checkpoint at start and has no safe mode (it keeps no block reports);
it does connect to the JournalNodes as a standby before its first replay, and the NameNode
that wins the first election replays the edits inside its transition to active. So its
phases, in order:

- ``loading_fsimage``: which image, its txid, its inodes;
- ``becoming_standby``: the reader of the edit log, the tailer and the checkpointer start;
- ``loading_edits``: from the image's txid + 1 up to the end of the log the JournalNodes
  report (the tailer's first good round, or the catch-up of a first transition to active);
- ``becoming_active``: only when a transition to active starts before the edits are loaded
  (the winner of the first election): recovery, the replay, a new segment.

The startup is complete when ``loading_edits`` is, and no ``becoming_active`` runs.

``StartupProgress`` is the recorder the namesystem writes into from its loop and its bridge
threads; ``describe`` is a pure function of its records that makes the JSON of
``/status.json``'s ``startup``::

    progress = StartupProgress()
    progress.begin(Phase.LOADING_FSIMAGE, image="fsimage_...0.db")
    progress.end(Phase.LOADING_FSIMAGE, txid=0, inodes=1)
    describe(progress.records(), now=clock.monotonic(), last_applied_txid=0)
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from conf import clock

__all__ = ["Phase", "PhaseRecord", "PhaseStatus", "StartupProgress", "describe"]

Detail = int | str | None


class Phase(enum.Enum):
    LOADING_FSIMAGE = "loading_fsimage"
    BECOMING_STANDBY = "becoming_standby"
    LOADING_EDITS = "loading_edits"
    BECOMING_ACTIVE = "becoming_active"


PHASE_TITLES = {
    Phase.LOADING_FSIMAGE: "Loading fsimage",
    Phase.BECOMING_STANDBY: "Becoming standby",
    Phase.LOADING_EDITS: "Loading edits",
    Phase.BECOMING_ACTIVE: "Becoming active",
}

DETAIL_KEYS: Mapping[Phase, tuple[str, ...]] = {
    Phase.LOADING_FSIMAGE: ("image", "txid", "inodes"),
    Phase.BECOMING_STANDBY: (),
    Phase.LOADING_EDITS: ("from_txid", "target_txid", "last_txid", "applied", "by"),
    Phase.BECOMING_ACTIVE: ("epoch", "recovered_txid", "first_txid"),
}
"""The keys of each phase's ``details`` (every one always present, null until known)."""


class PhaseStatus(enum.Enum):
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PhaseRecord:
    """One phase as recorded: monotonic start and end, wall-clock start, its details."""

    phase: Phase
    status: PhaseStatus
    started: float
    started_time: float
    ended: float | None = None
    error: str | None = None
    details: Mapping[str, Detail] = field(default_factory=dict)


class StartupProgress:
    """Thread-safe record of the startup phases. A phase begins once, or again after it
    failed (a first transition to active that failed, tried again before the edits are
    loaded); ``update`` and ``end`` of a phase that is not running are ignored (the tailer
    reports every round; only the first good one ends ``loading_edits``). Unknown detail keys are a
    ValueError (a typo would otherwise vanish from the page)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[Phase, PhaseRecord] = {}

    def _checked(self, phase: Phase, details: Mapping[str, Detail]) -> dict[str, Detail]:
        unknown = set(details) - set(DETAIL_KEYS[phase])
        if unknown:
            raise ValueError(f"startup phase {phase.value}: unknown details {sorted(unknown)}")
        return dict(details)

    def begin(self, phase: Phase, **details: Detail) -> bool:
        """Start ``phase``; False (and nothing changes) when it had begun already and did not
        fail."""
        checked = self._checked(phase, details)
        with self._lock:
            record = self._records.get(phase)
            if record is not None and record.status is not PhaseStatus.FAILED:
                return False
            self._records[phase] = PhaseRecord(
                phase, PhaseStatus.RUNNING, clock.monotonic(), clock.time(), details=checked
            )
            return True

    def update(self, phase: Phase, **details: Detail) -> None:
        checked = self._checked(phase, details)
        with self._lock:
            record = self._records.get(phase)
            if record is not None and record.status is PhaseStatus.RUNNING:
                self._records[phase] = replace(record, details={**record.details, **checked})

    def end(self, phase: Phase, **details: Detail) -> bool:
        """Complete ``phase``; False when it was not running."""
        return self._finish(phase, PhaseStatus.COMPLETE, None, details)

    def fail(self, phase: Phase, error: str) -> bool:
        """Mark ``phase`` failed with ``error``; False when it was not running."""
        return self._finish(phase, PhaseStatus.FAILED, error, {})

    def _finish(
        self, phase: Phase, status: PhaseStatus, error: str | None, details: Mapping[str, Detail]
    ) -> bool:
        checked = self._checked(phase, details)
        with self._lock:
            record = self._records.get(phase)
            if record is None or record.status is not PhaseStatus.RUNNING:
                return False
            self._records[phase] = replace(
                record, status=status, ended=clock.monotonic(), error=error,
                details={**record.details, **checked},
            )
            return True

    def status(self, phase: Phase) -> PhaseStatus | None:
        with self._lock:
            record = self._records.get(phase)
            return None if record is None else record.status

    def records(self) -> tuple[PhaseRecord, ...]:
        """The phases begun so far, in the order of ``Phase``."""
        with self._lock:
            return tuple(self._records[p] for p in Phase if p in self._records)


def is_complete(records: Sequence[PhaseRecord]) -> bool:
    """Edits loaded, and no transition to active of the startup still running."""
    by_phase = {r.phase: r.status for r in records}
    return by_phase.get(Phase.LOADING_EDITS) is PhaseStatus.COMPLETE and (
        by_phase.get(Phase.BECOMING_ACTIVE) is not PhaseStatus.RUNNING
    )


def describe(
    records: Sequence[PhaseRecord], *, now: float, last_applied_txid: int
) -> dict[str, Any]:
    """The ``startup`` object of ``/status.json`` (schema: docs/operations.md §13.2).

    A running ``loading_edits`` counts what is applied so far from ``last_applied_txid``, the
    namespace's, since txids are consecutive.
    """
    phases = []
    for r in records:
        details: dict[str, Detail] = {key: r.details.get(key) for key in DETAIL_KEYS[r.phase]}
        if r.phase is Phase.LOADING_EDITS and r.status is PhaseStatus.RUNNING:
            start = details["from_txid"]
            if isinstance(start, int):
                details["last_txid"] = max(last_applied_txid, start - 1)
                details["applied"] = max(0, last_applied_txid - start + 1)
        end = now if r.ended is None else r.ended
        phases.append({
            "name": r.phase.value,
            "title": PHASE_TITLES[r.phase],
            "status": r.status.value,
            "started_time": r.started_time,
            "elapsed_seconds": round(max(0.0, end - r.started), 3),
            "error": r.error,
            "details": details,
        })
    complete = is_complete(records)
    elapsed: float | None = None
    if records:
        first = min(r.started for r in records)
        last = max((r.ended for r in records if r.ended is not None), default=now)
        elapsed = round(max(0.0, (last if complete else now) - first), 3)
    return {"complete": complete, "elapsed_seconds": elapsed, "phases": phases}
