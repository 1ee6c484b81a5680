"""The small parts of the elector (failover/attempts.py, cede.py, health.py's status,
lock_watch.py, election_lock.py), without
ZooKeeper or a NameNode. The elector over them runs in tests/failover/test_elector.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import cast

from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent, ZnodeStat

from failover.attempts import ActiveAttempt, AttemptLog
from failover.cede import Cede
from failover.election_lock import ElectionLock
from failover.health import HealthMonitor
from failover.lock_watch import LockNodeWatch
from hanamenode.errors import HealthCheckFailedError
from zk.client import SessionWatcher


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


def owned_by(session: int) -> ZnodeStat:
    return ZnodeStat(0, 0, 0, 0, 0, 0, 0, ephemeralOwner=session, dataLength=0,
                     numChildren=0, pzxid=0)


def test_the_lock_belongs_to_this_session_only() -> None:
    client = FakeClient()
    lock = ElectionLock(cast(KazooClient, client), "/lock", "nn1", cast(SessionWatcher, None),
                        lambda r, what: r, None, max_delay=1.0)
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
