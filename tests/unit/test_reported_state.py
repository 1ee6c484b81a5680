"""``hadev.namenodes.reported_state``: how the harness reads a NameNode's HA state. A failed
connection is no answer: a fresh channel's connect or TLS handshake can fail at once on a
loaded machine (a graceful-failover chaos test saw a NameNode that was active read as "no
active NameNode" for that reason), so UNAVAILABLE is asked again until the timeout; any other
refusal, or the deadline, reads as no answer (None)."""

from __future__ import annotations

import time

from hadev.namenodes import STATE_RETRY_SECONDS, reported_state
from hanamenode.errors import NamenodeUnavailableError, StandbyError
from hanamenode.ha import HAState


def test_an_unreachable_namenode_is_asked_again_until_it_answers() -> None:
    timeouts: list[float] = []

    def flaky(timeout: float) -> HAState:
        timeouts.append(timeout)
        if len(timeouts) < 3:
            raise NamenodeUnavailableError("Handshake write failed")
        return HAState.ACTIVE

    assert reported_state(flaky, timeout=5.0) is HAState.ACTIVE
    assert len(timeouts) == 3
    assert all(0 < t <= 5.0 for t in timeouts) and timeouts[2] < timeouts[0]


def test_one_that_stays_unreachable_gives_none_at_the_deadline() -> None:
    calls = 0

    def away(timeout: float) -> HAState:
        nonlocal calls
        calls += 1
        raise NamenodeUnavailableError("connection refused")

    started = time.monotonic()
    assert reported_state(away, timeout=0.5) is None
    took = time.monotonic() - started
    assert 0.5 - STATE_RETRY_SECONDS <= took < 2.0 and calls >= 3


def test_another_refusal_is_not_asked_again() -> None:
    calls = 0

    def refuses(timeout: float) -> HAState:
        nonlocal calls
        calls += 1
        raise StandbyError("Operation category READ is not supported in state standby")

    assert reported_state(refuses, timeout=5.0) is None and calls == 1
