"""The elector's decisions as pure functions: may this NameNode stand for election, may it
become active now, and must the active step down? (docs/architecture.md §6.2,
docs/consistency.md §6; the thread that acts on them is ``failover.elector``.)

Each reads one frozen ``ElectionInputs`` snapshot the elector takes of its state, so each
rule can be tested from a table without ZooKeeper or a NameNode::

    inputs = ElectionInputs(zk=ZKConnection.SUSPENDED, nn_state=HAState.ACTIVE)
    step_down(inputs)      # None: neutral mode, the active keeps serving

Neutral mode (HDFS's ``enterNeutralMode``): losing ZooKeeper is not a reason to step down.
Write safety rests on the JournalNodes' epochs, not on the lock, so an active that cannot
reach ZooKeeper keeps serving and steps down only when the JournalNodes fence it, when it
reconnects and finds its lock znode gone, or when its session expired and another NameNode
holds the lock. Nothing becomes active without a live session, so a standby that cannot
reach ZooKeeper stays standby.

A ``Reason`` names the rule that fired; its value is the label of the step-down metric.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from hanamenode.ha import HAState
from hanamenode.transitions import Cause, journal_fenced

__all__ = [
    "Decision",
    "ElectionInputs",
    "Reason",
    "ZKConnection",
    "become_active",
    "failover_note",
    "journal_fenced",
    "stand_for_election",
    "step_down",
    "transition_cause",
]

FAILOVER_SUSPENDED = "ZooKeeper unreachable: automatic failover suspended"


class ZKConnection(enum.Enum):
    """kazoo's connection states (``KazooState``), by the same names."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    """The connection is down; the session may still live on the servers."""
    LOST = "LOST"
    """The session expired or was closed: its ephemeral znodes (the lock) are gone."""


class Reason(enum.Enum):
    """Why a NameNode stays out of the election or steps down. The value is the metric label
    (``hanamenode_elector_step_downs_total{reason=...}``)."""

    STOPPING = "stopping"
    UNHEALTHY = "unhealthy"
    CEDED = "ceded"
    NOT_CONNECTED = "not_connected"
    SESSION_LOST = "session_lost"
    """The session expired and another NameNode holds the lock now."""
    FENCED = "fenced"
    """The JournalNodes promised a higher epoch to another writer: this one is deposed."""
    LOCK_LOST = "lock_lost"
    LEFT_ACTIVE = "left_active"
    """The NameNode left ACTIVE on its own (its edit log failed)."""
    OBSERVER = "observer"
    """An observer never stands for election (HDFS-12943)."""


@dataclass(frozen=True, slots=True)
class Decision:
    reason: Reason
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class ElectionInputs:
    """What the rules look at, taken at one instant.

    ``session_expired``: the session this NameNode won the lock in has ended since (kazoo
    reported LOST). ``other_holder``: the NameNode holding the lock now, when that was read
    after the session expired ("" when nobody else, or not read yet). ``lock_node_lost``:
    the lock znode it holds was found deleted. ``fenced``: the NameNode reports that the
    JournalNodes refused its epoch. ``cede_left``: seconds left of a cede (0: not
    ceding), ``cede_for`` its requested length.
    """

    stopping: bool = False
    healthy: bool = True
    health_reason: str = "healthy"
    cede_left: float = 0.0
    cede_for: float = 0.0
    zk: ZKConnection = ZKConnection.CONNECTED
    session_expired: bool = False
    other_holder: str = ""
    lock_node_lost: bool = False
    fenced: bool = False
    nn_state: HAState = HAState.STANDBY


def stand_for_election(i: ElectionInputs) -> Decision | None:
    """Why this NameNode may not queue for the lock now; None when it may."""
    if i.stopping:
        return Decision(Reason.STOPPING, "stopping")
    if i.nn_state is HAState.OBSERVER:
        return Decision(Reason.OBSERVER, "an observer does not stand for election")
    if not i.healthy:
        return Decision(Reason.UNHEALTHY, f"unhealthy: {i.health_reason}")
    if i.cede_left > 0:
        return Decision(Reason.CEDED, f"ceded the election for {i.cede_for:g}s")
    if i.zk is not ZKConnection.CONNECTED:
        return Decision(Reason.NOT_CONNECTED, "not connected to ZooKeeper")
    return None


def become_active(i: ElectionInputs) -> Decision | None:
    """Why the lock holder may not make its NameNode active now (None: it may). Never without
    a live session: a standby that cannot reach ZooKeeper stays standby."""
    if i.session_expired:
        return Decision(Reason.SESSION_LOST, "the ZooKeeper session expired")
    out = stand_for_election(i)
    if out is not None:
        return Decision(out.reason, f"no longer eligible: {out.message}")
    return None


def step_down(i: ElectionInputs) -> Decision | None:
    """Why the active must step down now; None while it stays active, which includes neutral
    mode (disconnected from ZooKeeper, for however long). The order is the order of
    precedence: the first reason that holds is the one reported."""
    if i.fenced:
        return Decision(
            Reason.FENCED, "fenced by the JournalNodes: another writer holds a higher epoch"
        )
    if i.session_expired and i.other_holder:
        return Decision(
            Reason.SESSION_LOST,
            f"the ZooKeeper session expired and NameNode {i.other_holder} holds the lock",
        )
    if i.lock_node_lost:
        return Decision(Reason.LOCK_LOST, "the election lock znode was deleted")
    if not i.healthy:
        return Decision(Reason.UNHEALTHY, f"the NameNode is unhealthy: {i.health_reason}")
    if i.cede_left > 0:
        return Decision(Reason.CEDED, "asked to cede the election")
    if i.nn_state is not HAState.ACTIVE:
        return Decision(
            Reason.LEFT_ACTIVE,
            f"the NameNode left the active state without the elector (now "
            f"{i.nn_state.value}): its edit log failed, or a new active fenced it",
        )
    return None


def failover_note(i: ElectionInputs) -> str:
    """What ``hactl get-service-state`` adds after the state ("" when nothing)."""
    return "" if i.zk is ZKConnection.CONNECTED or i.stopping else FAILOVER_SUSPENDED


def transition_cause(reason: Reason) -> Cause:
    """What the failover history (``hanamenode.transitions``) records as the cause of a
    step-down the elector decided for ``reason``."""
    return _CAUSES.get(reason, Cause.SHUTDOWN)


_CAUSES = {
    Reason.CEDED: Cause.GRACEFUL,  # only a graceful failover asks an elector to cede
    Reason.SESSION_LOST: Cause.EXPIRED_SESSION,
    Reason.FENCED: Cause.FENCING,
    Reason.LOCK_LOST: Cause.LOCK_LOST,
    Reason.UNHEALTHY: Cause.UNHEALTHY,
    Reason.LEFT_ACTIVE: Cause.EDIT_LOG_FAILURE,
}
