"""The elector's rules (failover/election_rules.py), one row per situation: whether a
NameNode may stand for election and whether an active must step down."""

from __future__ import annotations

import pytest

from failover.election_rules import (
    ElectionInputs,
    Reason,
    ZKConnection,
    become_active,
    failover_note,
    journal_fenced,
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
    ("disconnected", ElectionInputs(zk=SUSPENDED), Reason.NOT_CONNECTED),
    ("active, disconnected (neutral): does not queue until reconnected",
     ElectionInputs(zk=SUSPENDED, nn_state=ACTIVE), Reason.NOT_CONNECTED),
    ("session lost, not reconnected yet", ElectionInputs(zk=LOST), Reason.NOT_CONNECTED),
    ("an observer never stands (HDFS-12943)", ElectionInputs(nn_state=HAState.OBSERVER),
     Reason.OBSERVER),
    ("an unhealthy observer: still because it is an observer",
     ElectionInputs(nn_state=HAState.OBSERVER, healthy=False), Reason.OBSERVER),
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
    ("health bad while active and disconnected (neutral mode)",
     ElectionInputs(nn_state=ACTIVE, healthy=False, zk=SUSPENDED), Reason.UNHEALTHY),
    ("cede requested while active", ElectionInputs(nn_state=ACTIVE, cede_left=1.0),
     Reason.CEDED),
    ("disconnected while active (neutral mode)",
     ElectionInputs(nn_state=ACTIVE, zk=SUSPENDED), None),
    ("session expired, no new session yet", ElectionInputs(nn_state=ACTIVE, zk=LOST,
                                                           session_expired=True), None),
    ("session expired, nobody else holds the lock",
     ElectionInputs(nn_state=ACTIVE, session_expired=True), None),
    ("session expired and another holds the lock",
     ElectionInputs(nn_state=ACTIVE, session_expired=True, other_holder="nn2"),
     Reason.SESSION_LOST),
    ("lock lost after reconnect", ElectionInputs(nn_state=ACTIVE, lock_node_lost=True),
     Reason.LOCK_LOST),
    ("fenced by the JournalNodes while disconnected",
     ElectionInputs(nn_state=STANDBY, fenced=True, zk=SUSPENDED), Reason.FENCED),
    ("fenced reported before the NameNode left ACTIVE",
     ElectionInputs(nn_state=ACTIVE, fenced=True), Reason.FENCED),
    ("left active on its own (quorum lost)", ElectionInputs(nn_state=STANDBY),
     Reason.LEFT_ACTIVE),
    ("fencing wins over an expired session and an unhealthy check",
     ElectionInputs(nn_state=STANDBY, fenced=True, session_expired=True, other_holder="nn2",
                    healthy=False),
     Reason.FENCED),
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
        "session_lost", "fenced", "lock_lost", "unhealthy", "ceded", "left_active",
    }


BECOME_ACTIVE_CASES: list[tuple[str, ElectionInputs, Reason | None]] = [
    ("connected, same session", ElectionInputs(), None),
    ("a standby in neutral mode never becomes active", ElectionInputs(zk=SUSPENDED),
     Reason.NOT_CONNECTED),
    ("session expired after winning the lock", ElectionInputs(session_expired=True),
     Reason.SESSION_LOST),
    ("turned unhealthy after winning the lock", ElectionInputs(healthy=False),
     Reason.UNHEALTHY),
    ("asked to cede after winning the lock", ElectionInputs(cede_left=1.0), Reason.CEDED),
]


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [pytest.param(i, e, id=name) for name, i, e in BECOME_ACTIVE_CASES],
)
def test_become_active(inputs: ElectionInputs, expected: Reason | None) -> None:
    decision = become_active(inputs)
    assert (decision.reason if decision else None) is expected


@pytest.mark.parametrize(
    ("zk", "stopping", "note"),
    [
        (ZKConnection.CONNECTED, False, ""),
        (SUSPENDED, False, "ZooKeeper unreachable: automatic failover suspended"),
        (LOST, False, "ZooKeeper unreachable: automatic failover suspended"),
        (SUSPENDED, True, ""),
    ],
)
def test_failover_note(zk: ZKConnection, stopping: bool, note: str) -> None:
    assert failover_note(ElectionInputs(zk=zk, stopping=stopping)) == note


@pytest.mark.parametrize(
    ("last_failure", "fenced"),
    [
        (None, False),
        ("writer fenced: 10.77.0.3:8485 refused heartbeat in epoch 3: epoch 3 is less than "
         "the last promised epoch 4", True),
        ("quorum lost: 2 exceptions thrown: 127.0.0.1:1: EpochError: epoch 3 is less than "
         "the last promised epoch 4; 127.0.0.1:2: EpochError: ...", True),
        ("quorum lost: 2 exceptions thrown: 127.0.0.1:1: UNAVAILABLE; 127.0.0.1:2: "
         "UNAVAILABLE", False),
    ],
)
def test_journal_fenced(last_failure: str | None, fenced: bool) -> None:
    assert journal_fenced(last_failure) is fenced
