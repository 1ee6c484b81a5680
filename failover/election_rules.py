"""The elector's two decisions as pure functions: may this NameNode stand for election, and
must the active step down? (docs/architecture.md §6.2; the thread that acts on them is
``failover.elector``.)

Both read one frozen ``ElectionInputs`` snapshot the elector takes of its state, so each
rule can be tested from a table without ZooKeeper or a NameNode::

    inputs = ElectionInputs(zk=ZKConnection.SUSPENDED, suspended_for=3.0, session_timeout=2.0,
                            nn_state=HAState.ACTIVE)
    step_down(inputs)      # Decision(Reason.DISCONNECTED, "disconnected from ZooKeeper ...")

A ``Reason`` names the rule that fired; its value is the label of the step-down metric.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from hanamenode.ha import HAState

__all__ = [
    "Decision",
    "ElectionInputs",
    "Reason",
    "ZKConnection",
    "stand_for_election",
    "step_down",
]


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
    DISCONNECTED = "disconnected"
    """Disconnected longer than the session timeout: the servers may have expired the session
    and another NameNode may be winning."""
    LOCK_LOST = "lock_lost"
    LEFT_ACTIVE = "left_active"
    """The NameNode left ACTIVE on its own (its edit log failed)."""


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
    reported LOST). ``lock_node_lost``: the lock znode it holds was deleted. ``cede_left``:
    seconds left of a cede (0: not ceding), ``cede_for`` its requested length.
    """

    stopping: bool = False
    healthy: bool = True
    health_reason: str = "healthy"
    cede_left: float = 0.0
    cede_for: float = 0.0
    zk: ZKConnection = ZKConnection.CONNECTED
    suspended_for: float = 0.0
    session_timeout: float = 10.0
    session_expired: bool = False
    lock_node_lost: bool = False
    nn_state: HAState = HAState.STANDBY


def stand_for_election(i: ElectionInputs) -> Decision | None:
    """Why this NameNode may not queue for the lock now; None when it may."""
    if i.stopping:
        return Decision(Reason.STOPPING, "stopping")
    if not i.healthy:
        return Decision(Reason.UNHEALTHY, f"unhealthy: {i.health_reason}")
    if i.cede_left > 0:
        return Decision(Reason.CEDED, f"ceded the election for {i.cede_for:g}s")
    if i.zk is not ZKConnection.CONNECTED:
        return Decision(Reason.NOT_CONNECTED, "not connected to ZooKeeper")
    return None


def step_down(i: ElectionInputs) -> Decision | None:
    """Why the lock holder must step down now; None while it may stay active. The order is
    the order of precedence: the first reason that holds is the one reported."""
    if i.session_expired:
        return Decision(Reason.SESSION_LOST, "the ZooKeeper session expired")
    if i.zk is ZKConnection.SUSPENDED and i.suspended_for > i.session_timeout:
        return Decision(
            Reason.DISCONNECTED,
            f"disconnected from ZooKeeper for {i.suspended_for:.1f}s, longer than the session "
            f"timeout ({i.session_timeout:g}s)",
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
            f"the NameNode left the active state on its own (now {i.nn_state.value})",
        )
    return None
