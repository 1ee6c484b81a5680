"""``hanamenode.peers.until_reached``, under ``get_service_status`` (every state read of the
harness): a failed connection is no answer. A fresh channel's connect or TLS handshake can
fail at once on a loaded machine (a graceful-failover chaos test saw a NameNode that was
active read as "no active NameNode" for that reason), so UNAVAILABLE is asked again until the
timeout; any other refusal, or the last one at the deadline, is raised."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from hanamenode.errors import NamenodeUnavailableError, StandbyError
from hanamenode.ha import HAState
from hanamenode.peers import RETRY_SECONDS, until_reached


def test_an_unreachable_namenode_is_asked_again_until_it_answers() -> None:
    timeouts: list[float] = []

    def flaky(timeout: float) -> HAState:
        timeouts.append(timeout)
        if len(timeouts) < 3:
            raise NamenodeUnavailableError("Handshake write failed")
        return HAState.ACTIVE

    assert until_reached(flaky, timeout=5.0) is HAState.ACTIVE
    assert len(timeouts) == 3
    assert all(0 < t <= 5.0 for t in timeouts) and timeouts[2] < timeouts[0]


def always(error: Exception) -> tuple[Callable[[float], HAState], list[float]]:
    """A state call that always raises ``error``, and the timeouts it was called with."""
    calls: list[float] = []

    def state(timeout: float) -> HAState:
        calls.append(timeout)
        raise error

    return state, calls


def test_one_that_stays_unreachable_is_named_at_the_deadline() -> None:
    away, calls = always(NamenodeUnavailableError("connection refused"))
    started = time.monotonic()
    with pytest.raises(NamenodeUnavailableError, match="connection refused"):
        until_reached(away, timeout=0.5)
    took = time.monotonic() - started
    assert 0.5 - RETRY_SECONDS <= took < 2.0 and len(calls) >= 3


def test_another_refusal_is_not_asked_again() -> None:
    refuses, calls = always(StandbyError("Operation category READ is not supported"))
    with pytest.raises(StandbyError):
        until_reached(refuses, timeout=5.0)
    assert len(calls) == 1
