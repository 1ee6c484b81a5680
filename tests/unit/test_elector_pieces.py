"""The small parts of the elector (failover/attempts.py, cede.py, health.py's status,
lock_watch.py, election_lock.py, elector_state.py, elector_thread.py, rejoin.py,
breadcrumb.py's take-over), without ZooKeeper or a NameNode. The elector over them runs in
tests/failover/test_elector.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import cast

import pytest
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent, ZnodeStat
from kazoo.recipe.lock import Lock
from structlog.testing import capture_logs

from failover import lock_watch as lock_watch_module
from failover.attempts import ActiveAttempt, AttemptLog
from failover.breadcrumb import Breadcrumb
from failover.cede import Cede
from failover.election_lock import ElectionLock
from failover.election_rules import Decision, ElectionInputs, step_down
from failover.elector_state import ElectorState, StateBoard
from failover.elector_thread import ElectorThread
from failover.health import HealthMonitor
from failover.lock_watch import LockNodeWatch
from failover.rejoin import Rejoin
from hanamenode.errors import HealthCheckFailedError, ServiceFailedError
from hanamenode.ha import HAState
from zk.client import SessionWatcher
from zk.paths import ActiveNodeInfo


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_attempts_are_numbered_and_the_last_is_kept() -> None:
    attempts = AttemptLog()
    assert (attempts.seq, attempts.last) == (0, None)
    attempts.record(False, "cannot fence nn1")
    assert attempts.record(True, "became active") == ActiveAttempt(2, True, "became active")
    assert attempts.last == ActiveAttempt(2, True, "became active")


def test_waiting_for_an_attempt_after_a_sequence_number() -> None:
    attempts = AttemptLog()
    attempts.record(False, "before")
    seq = attempts.seq
    assert attempts.wait_after(seq, 0.01) is None  # an earlier attempt does not answer
    timer = threading.Timer(0.05, attempts.record, (True, "won"))
    timer.start()
    try:
        assert attempts.wait_after(seq, 5.0) == ActiveAttempt(2, True, "won")
    finally:
        timer.join()
    assert attempts.wait_after(0, 0.0) == ActiveAttempt(2, True, "won")


def test_a_cede_lasts_its_seconds_and_ends_early_on_request() -> None:
    clock = Clock()
    cede = Cede(clock)
    assert (cede.left(), cede.seconds) == (0.0, 0.0)
    cede.begin(4.0)
    clock.now += 1.0
    assert (cede.left(), cede.seconds) == (3.0, 4.0)
    clock.now += 5.0
    assert cede.left() == 0.0
    cede.begin(4.0)
    cede.end()
    assert (cede.left(), cede.seconds) == (0.0, 4.0)  # the length stays for messages


def test_health_status_changes_only_with_health() -> None:
    reasons = iter(["edit log failed at txid 7", "edit log failed at txid 8", None])
    changes: list[tuple[bool, str]] = []
    seen: list[tuple[bool, str]] = []
    three = threading.Event()

    def check() -> None:
        reason = next(reasons, None)
        if reason is not None:
            raise HealthCheckFailedError(reason)

    def tick() -> None:
        if len(seen) < 3:
            seen.append(monitor.status)
        else:
            three.set()

    monitor = HealthMonitor(check, 0.001, lambda h, r: changes.append((h, r)), name="nn1",
                            on_tick=tick)
    assert monitor.status == (False, "not checked yet")
    monitor.start()
    try:
        assert three.wait(5.0)
    finally:
        monitor.stop()
    failed = (False, "edit log failed at txid 7")
    assert seen == [failed, failed, (True, "healthy")]
    assert changes == [failed, (True, "healthy")]


class FakeResult:
    def __init__(self, value: object) -> None:
        self.value = value

    def get(self, block: bool = True) -> object:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value

    def rawlink(self, callback: Callable[[FakeResult], None]) -> None:
        callback(self)


class FakeClient:
    """Answers ``exists_async`` with ``answer`` and keeps the watch callbacks."""

    def __init__(self) -> None:
        self.answer: object = object()  # a stat: the znode exists
        self.watches: list[tuple[str, Callable[[WatchedEvent], None]]] = []
        self.client_id: tuple[int, bytes] | None = (7, b"")

    def exists_async(self, path: str, watch: Callable[[WatchedEvent], None]) -> FakeResult:
        self.watches.append((path, watch))
        return FakeResult(self.answer)


def deleted(path: str) -> WatchedEvent:
    return WatchedEvent(EventType.DELETED, KeeperState.CONNECTED, path)


def test_the_lock_watch_reports_the_deletion_of_the_watched_znode() -> None:
    client, wakes = FakeClient(), []
    watch = LockNodeWatch(cast(KazooClient, client), lambda: wakes.append(1))
    watch.keep_armed(connected=True)
    assert client.watches == []  # nothing watched yet
    watch.watch("/lock/a")
    watch.keep_armed(connected=False)
    assert client.watches == []
    watch.keep_armed(connected=True)
    watch.keep_armed(connected=True)  # armed once
    assert [p for p, _ in client.watches] == ["/lock/a"] and not watch.lost
    client.watches[0][1](deleted("/lock/a"))
    assert watch.lost and len(wakes) == 2


def test_the_lock_watch_is_armed_again_after_the_connection_dropped() -> None:
    client = FakeClient()
    watch = LockNodeWatch(cast(KazooClient, client), lambda: None)
    watch.watch("/lock/a")
    watch.keep_armed(connected=True)
    watch.disarm()
    watch.keep_armed(connected=True)
    assert [p for p, _ in client.watches] == ["/lock/a", "/lock/a"]


def test_a_lock_znode_already_gone_when_watched_is_lost() -> None:
    client = FakeClient()
    client.answer = None
    watch = LockNodeWatch(cast(KazooClient, client), lambda: None)
    watch.watch("/lock/a")
    watch.keep_armed(connected=True)
    assert watch.lost


def test_a_failed_lock_check_is_logged_and_armed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The question failed (connection lost mid-call): the lock is not taken as lost, the
    # failure is logged with the path, and the next poll asks again.
    monkeypatch.setattr(lock_watch_module, "log", structlog.get_logger(lock_watch_module.__name__))
    client, wakes = FakeClient(), []
    client.answer = ConnectionLoss()
    watch = LockNodeWatch(cast(KazooClient, client), lambda: wakes.append(1))
    watch.watch("/lock/a")
    with capture_logs() as logs:
        watch.keep_armed(connected=True)
    assert not watch.lost and wakes == [1]
    [entry] = [e for e in logs if e["log_level"] == "warning"]
    assert entry["path"] == "/lock/a" and "ConnectionLoss" in entry["error"]
    client.answer = object()
    watch.keep_armed(connected=True)
    assert [p for p, _ in client.watches] == ["/lock/a", "/lock/a"] and not watch.lost


def owned_by(session: int) -> ZnodeStat:
    return ZnodeStat(0, 0, 0, 0, 0, 0, 0, ephemeralOwner=session, dataLength=0,
                     numChildren=0, pzxid=0)


def test_the_lock_belongs_to_this_session_only() -> None:
    client = FakeClient()
    lock = ElectionLock(cast(KazooClient, client), "/lock", "nn1", cast(SessionWatcher, None),
                        lambda r, what: r, None, wake=lambda: None,
                        max_delay=1.0)
    assert lock.owns(owned_by(7))
    assert not lock.owns(owned_by(8))
    assert not lock.owns(None)
    client.client_id = None  # no session
    assert not lock.owns(owned_by(7))


def test_the_next_tenure_watches_its_own_lock_znode() -> None:
    # The watch on the first tenure's znode fired when it was given back, for a path no
    # longer watched; the second tenure must still arm a watch on its own znode.
    client = FakeClient()
    watch = LockNodeWatch(cast(KazooClient, client), lambda: None)
    watch.watch("/lock/a")
    watch.keep_armed(connected=True)
    watch.stop()
    client.watches[0][1](deleted("/lock/a"))
    watch.watch("/lock/b")
    assert not watch.lost
    watch.keep_armed(connected=True)
    assert [p for p, _ in client.watches] == ["/lock/a", "/lock/b"]
    client.watches[1][1](deleted("/lock/b"))
    assert watch.lost


class FakeWait:
    """A kazoo ``Lock`` stand-in that records whether its wait was cancelled."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def test_a_wait_for_the_lock_is_published_only_while_eligible() -> None:
    board = StateBoard(structlog.get_logger())
    lock = FakeWait()
    assert not board.queue(cast(Lock, lock), lambda: "ceded")
    assert board.state is ElectorState.STOPPED
    assert board.queue(cast(Lock, lock), lambda: None)
    assert board.state is ElectorState.WAITING
    board.interrupt()  # a change that does not cancel
    assert not lock.cancelled
    board.interrupt(cancel=True)
    assert lock.cancelled
    board.dequeue()
    later = FakeWait()
    board.interrupt(cancel=True)  # nothing published: nothing to cancel
    assert not later.cancelled


def test_a_change_under_the_condition_is_seen_by_the_eligibility_check() -> None:
    # Whichever comes first, a cede either keeps the round out of the queue or cancels it.
    board = StateBoard(structlog.get_logger())
    cede = Cede()
    lock = FakeWait()
    board.interrupt(lambda: cede.begin(4.0), cancel=True)
    assert not board.queue(cast(Lock, lock), lambda: "ceded" if cede.left() > 0 else None)
    cede.end()
    assert board.queue(cast(Lock, lock), lambda: "ceded" if cede.left() > 0 else None)
    board.interrupt(lambda: cede.begin(4.0), cancel=True)
    assert lock.cancelled


def test_waiting_until_the_lock_is_released() -> None:
    board = StateBoard(structlog.get_logger())
    board.set(ElectorState.ACTIVE)
    assert not board.wait_released(0.01)
    timer = threading.Timer(0.05, board.set, (ElectorState.OUT,))
    timer.start()
    try:
        assert board.wait_released(5.0)
    finally:
        timer.join()


def test_the_elector_thread_pauses_until_woken_or_stopped() -> None:
    loop = ElectorThread("nn1")
    paused = threading.Event()
    rounds: list[bool] = []

    def run() -> None:
        while not loop.stopping:
            paused.set()
            loop.pause(30.0)
            rounds.append(loop.stopping)

    assert not loop.started and not loop.running
    loop.start(run)
    assert paused.wait(5.0) and loop.running
    paused.clear()
    loop.wake()
    assert paused.wait(5.0)
    loop.stop()
    assert not loop.join(5.0)
    assert rounds == [False, True] and not loop.running and loop.started


class Rejoining:
    """A Rejoin driven with recorded answers."""

    def __init__(self, state: HAState, holder: str | Exception | None) -> None:
        self.rejoin = Rejoin("nn1", structlog.get_logger())
        self.rejoin.begin()
        self.state, self.holder = state, holder
        self.steps: list[str] = []

    def read_holder(self) -> str | None:
        if isinstance(self.holder, Exception):
            raise self.holder
        return self.holder

    def check(self) -> None:
        def decide(holder: str) -> Decision | None:
            return step_down(ElectionInputs(session_expired=True, other_holder=holder,
                                            nn_state=self.state))

        self.rejoin.check(lambda: self.state, self.read_holder, decide,
                          lambda d: self.steps.append(d.reason.value))


@pytest.mark.parametrize(
    ("state", "holder", "steps", "still_rejoining"),
    [
        (HAState.ACTIVE, "nn2", ["session_lost"], False),
        (HAState.ACTIVE, None, [], True),
        (HAState.ACTIVE, "nn1", [], True),
        (HAState.ACTIVE, ServiceFailedError("ZooKeeper unreachable"), [], True),
        (HAState.STANDBY, "nn2", [], False),
    ],
    ids=["another holds the lock", "nobody holds it", "we hold it again",
         "holder unreadable: read again later", "no longer active"],
)
def test_rejoining_as_the_active(
    state: HAState, holder: str | Exception | None, steps: list[str], still_rejoining: bool
) -> None:
    r = Rejoining(state, holder)
    r.check()
    assert (r.steps, r.rejoin.as_active) == (steps, still_rejoining)
    r.check()  # once stepped down, never again
    assert r.steps == steps


def test_not_rejoining_checks_nothing() -> None:
    r = Rejoining(HAState.ACTIVE, "nn2")
    r.rejoin.end()
    r.check()
    assert r.steps == []


class CrumbClient:
    """The breadcrumb's znode in a dict: ``get_async``, ``create_async``, ``set_async``."""

    def __init__(self, data: bytes | None) -> None:
        self.data = data
        self.version = 0

    def get_async(self, path: str) -> FakeResult:
        if self.data is None:
            return FakeResult(NoNodeError())
        return FakeResult((self.data, owned_by(0)._replace(version=self.version)))

    def create_async(self, path: str, data: bytes) -> FakeResult:
        self.data = data
        return FakeResult(path)

    def set_async(self, path: str, data: bytes, version: int) -> FakeResult:
        assert version == self.version
        self.data, self.version = data, version + 1
        return FakeResult(None)


NN1 = ActiveNodeInfo("ns1", "nn1", "10.0.0.1:8020")
NN2 = ActiveNodeInfo("ns1", "nn2", "10.0.0.2:8020")


@pytest.mark.parametrize(
    ("before", "fenced", "told"),
    [
        (None, [], "nothing to fence"),
        (NN2, [], "nothing to fence"),
        (NN1, ["nn1"], "nn1 stepped down"),
    ],
    ids=["no breadcrumb", "names this NameNode", "names another"],
)
def test_taking_over_fences_whom_the_breadcrumb_names_then_names_this_namenode(
    before: ActiveNodeInfo | None, fenced: list[str], told: str
) -> None:
    client = CrumbClient(None if before is None else before.to_bytes())
    crumb = Breadcrumb(cast(KazooClient, client), "/crumb", NN2)
    calls: list[str] = []

    def fence(old: ActiveNodeInfo) -> str:
        calls.append(old.namenode_id)
        return f"{old.namenode_id} stepped down"

    assert crumb.take_over(lambda result, what: result.get(), fence) == told
    assert calls == fenced
    assert client.data == NN2.to_bytes()
