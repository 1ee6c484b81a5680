"""The NameNode's failover history (docs/operations.md §13.1): every HA transition it made,
newest first, with when it began, from and to which state, why, and how long it took; and
since when it has been in its present state.

``FSNamesystem`` records a transition when its state actually changes; whoever asks for
the transition names the cause (the elector after an election, a cede or a step-down; the
HA RPCs for ``hactl`` and for a new active's graceful fence; the edit log when it fails)::

    history = TransitionHistory(20)
    history.record(HAState.STANDBY, HAState.ACTIVE, Cause.GRACEFUL, "hactl failover",
                   started=clock.time(), seconds=0.054)
    history.entries()[0].cause      # Cause.GRACEFUL
    history.state_since             # wall-clock time the present state began
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from dataclasses import dataclass

from conf import clock
from hanamenode.ha import HAState

__all__ = [
    "Cause", "Transition", "TransitionHistory", "edit_log_failure_cause", "journal_fenced",
]


class Cause(enum.Enum):
    """Why a NameNode changed state; the value is what the page and ``/status.json`` say."""

    GRACEFUL = "graceful"
    """``hactl failover``: the active ceded the election and the target took it over."""
    EXPIRED_SESSION = "expired session"
    """A ZooKeeper session ended: the active's own (it steps down once another NameNode
    holds the lock), or, for the NameNode that takes over, the previous active's (killed,
    cut off), whose breadcrumb it then had to fence."""
    MANUAL = "manual"
    """``hactl transition-to-active`` / ``transition-to-standby`` / ``transition-to-observer``,
    or ``hactl failover`` without automatic failover."""
    FENCING = "fencing"
    """This NameNode was fenced: a new active asked it to step down (graceful fence), or the
    JournalNodes refused its epoch."""
    ELECTION = "election"
    """It won the election lock with nobody to fence (the first election)."""
    EDIT_LOG_FAILURE = "edit log failure"
    """Its edit log failed (a quorum of JournalNodes lost) and it left the active state."""
    UNHEALTHY = "unhealthy"
    """Its elector's health check failed: it stepped down."""
    LOCK_LOST = "lock lost"
    """Its election lock znode was deleted: it stepped down."""
    SHUTDOWN = "shutdown"
    """The NameNode was stopping."""


@dataclass(frozen=True, slots=True)
class Transition:
    """One change of state: begun at ``time`` (seconds since the epoch), ``seconds`` long."""

    time: float
    from_state: HAState
    to_state: HAState
    cause: Cause
    detail: str
    seconds: float

    def to_json(self) -> dict[str, object]:
        return {
            "time": self.time,
            "from": self.from_state.value,
            "to": self.to_state.value,
            "cause": self.cause.value,
            "detail": self.detail,
            "duration_seconds": round(self.seconds, 6),
        }


class TransitionHistory:
    """The last ``size`` transitions and when the present state began; any thread reads it,
    the NameNode's loop records into it."""

    def __init__(self, size: int, *, started: float | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: deque[Transition] = deque(maxlen=size)
        self.started = clock.time() if started is None else started
        """When the NameNode started (its uptime counts from here)."""
        self._state_since = self.started

    def record(
        self, from_state: HAState, to_state: HAState, cause: Cause, detail: str, *,
        started: float, seconds: float,
    ) -> Transition:
        entry = Transition(started, from_state, to_state, cause, detail, seconds)
        with self._lock:
            self._entries.append(entry)
            self._state_since = started + seconds
        return entry

    def entered(self, when: float | None = None) -> None:
        """The present state began at ``when`` (now) without a transition to record: the
        end of the startup (initializing to standby or observer)."""
        with self._lock:
            self._state_since = clock.time() if when is None else when

    def entries(self) -> list[Transition]:
        """Newest first."""
        with self._lock:
            return list(reversed(self._entries))

    @property
    def state_since(self) -> float:
        """Wall-clock time at which the present state began."""
        return self._state_since

    @property
    def newest(self) -> Transition | None:
        with self._lock:
            return self._entries[-1] if self._entries else None


def journal_fenced(last_failure: str | None) -> bool:
    """Whether the NameNode's last edit-log failure (``FSNamesystem.last_failure``) was the
    JournalNodes refusing its epoch (a higher epoch was promised to another writer), as
    opposed to a lost quorum: the edit log says ``writer fenced: ...`` when its QJM learned
    of the newer epoch (docs/consistency.md §5.1), and a failed sync names ``EpochError``."""
    return last_failure is not None and (
        last_failure.startswith("writer fenced") or "EpochError" in last_failure
    )


def edit_log_failure_cause(reason: str) -> Cause:
    """The cause of leaving the active state after the edit log failed with ``reason``."""
    return Cause.FENCING if journal_fenced(reason) else Cause.EDIT_LOG_FAILURE
