"""The small parts of the elector (failover/attempts.py, cede.py, health.py's status), without
ZooKeeper or a NameNode. The elector over them runs in tests/failover/test_elector.py."""

from __future__ import annotations

import threading

from failover.attempts import ActiveAttempt, AttemptLog
from failover.cede import Cede
from failover.health import HealthMonitor
from hanamenode.errors import HealthCheckFailedError


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
