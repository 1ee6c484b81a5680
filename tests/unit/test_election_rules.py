"""The elector's rules (failover/election_rules.py), one row per situation: whether a
NameNode may stand for election and whether an active must step down."""

from __future__ import annotations

import pytest

from failover.election_rules import (
    ElectionInputs,
    Reason,
    ZKConnection,
    stand_for_election,
    step_down,
)
from hanamenode.ha import HAState

ACTIVE = HAState.ACTIVE
STANDBY = HAState.STANDBY
SUSPENDED = ZKConnection.SUSPENDED
LOST = ZKConnection.LOST

STAND_CASES: list[tuple[str, ElectionInputs, Reason | None]] = [
    ("healthy, connected, not ceding", ElectionInputs(), None),
    ("stopping wins over everything", ElectionInputs(stopping=True, healthy=False, zk=LOST),
     Reason.STOPPING),
    ("unhealthy", ElectionInputs(healthy=False, health_reason="disk full"), Reason.UNHEALTHY),
    ("cede requested", ElectionInputs(cede_left=3.0, cede_for=4.0), Reason.CEDED),
    ("cede requested while disconnected", ElectionInputs(cede_left=3.0, zk=SUSPENDED),
     Reason.CEDED),
    ("cede over", ElectionInputs(cede_left=0.0, cede_for=4.0), None),
    ("disconnected", ElectionInputs(zk=SUSPENDED, suspended_for=0.1), Reason.NOT_CONNECTED),
    ("session lost, not reconnected yet", ElectionInputs(zk=LOST), Reason.NOT_CONNECTED),
]


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [pytest.param(i, e, id=name) for name, i, e in STAND_CASES],
)
def test_stand_for_election(inputs: ElectionInputs, expected: Reason | None) -> None:
    decision = stand_for_election(inputs)
    assert (decision.reason if decision else None) is expected


STEP_DOWN_CASES: list[tuple[str, ElectionInputs, Reason | None]] = [
    ("active, all well", ElectionInputs(nn_state=ACTIVE), None),
    ("health bad while active",
     ElectionInputs(nn_state=ACTIVE, healthy=False, health_reason="cannot sync"),
     Reason.UNHEALTHY),
    ("cede requested while active", ElectionInputs(nn_state=ACTIVE, cede_left=1.0),
     Reason.CEDED),
    ("session suspended shorter than T",
     ElectionInputs(nn_state=ACTIVE, zk=SUSPENDED, suspended_for=1.9, session_timeout=2.0),
     None),
    ("session suspended longer than T",
     ElectionInputs(nn_state=ACTIVE, zk=SUSPENDED, suspended_for=2.1, session_timeout=2.0),
     Reason.DISCONNECTED),
    ("session expired", ElectionInputs(nn_state=ACTIVE, zk=LOST, session_expired=True),
     Reason.SESSION_LOST),
    ("session expired and reconnected with a new session",
     ElectionInputs(nn_state=ACTIVE, session_expired=True), Reason.SESSION_LOST),
    ("lock znode deleted", ElectionInputs(nn_state=ACTIVE, lock_node_lost=True),
     Reason.LOCK_LOST),
    ("left active on its own (edit log failed)", ElectionInputs(nn_state=STANDBY),
     Reason.LEFT_ACTIVE),
    ("session expiry reported before an unhealthy check",
     ElectionInputs(nn_state=ACTIVE, session_expired=True, healthy=False),
     Reason.SESSION_LOST),
]


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [pytest.param(i, e, id=name) for name, i, e in STEP_DOWN_CASES],
)
def test_step_down(inputs: ElectionInputs, expected: Reason | None) -> None:
    decision = step_down(inputs)
    assert (decision.reason if decision else None) is expected
    if decision is not None:
        assert decision.message  # logged and counted: never empty


def test_reason_values_are_the_step_down_metric_labels() -> None:
    assert {r.value for r in Reason} >= {
        "session_lost", "disconnected", "lock_lost", "unhealthy", "ceded", "left_active",
    }
