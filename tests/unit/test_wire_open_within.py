"""``conf.wire.open_within``: opening an edits-wire connection never holds its caller past the
timeout or a cancellation, even when the connect itself takes long to honour its cancel.

uvloop's TLS connect, cancelled in its handshake on a loaded machine, was seen never to end;
with ``asyncio.wait_for`` around it, a standby stopping its subscriptions to become active
waited on it for 20 s (tests/chaos/test_graceful_failover.py failed under load). The stand-in
below is a connect that finishes only some time after it is cancelled.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from conf.wire import open_within

LATE = 0.5
"""How long the stand-in connect takes to end once cancelled."""


async def stubborn_connect(made: list[str]) -> str:
    """Connects after a long time, and on cancel still ends only ``LATE`` seconds later,
    successfully (as a handshake that completes anyway)."""
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await asyncio.sleep(LATE)
    made.append("connection")
    return "connection"


def test_a_timeout_does_not_wait_for_the_connect_and_a_late_connection_is_closed() -> None:
    closed: list[str] = []
    made: list[str] = []

    async def scenario() -> float:
        began = time.monotonic()
        with pytest.raises(TimeoutError, match=r"not connected within 0\.1s"):
            await open_within(stubborn_connect(made), 0.1, closed.append)
        took = time.monotonic() - began
        await asyncio.sleep(LATE + 0.3)  # the abandoned connect ends meanwhile
        return took

    took = asyncio.run(scenario())
    assert took < LATE, f"waited {took:.2f}s: for the cancelled connect"
    assert made == ["connection"] and closed == ["connection"]


def test_cancelling_the_caller_does_not_wait_for_the_connect() -> None:
    closed: list[str] = []

    async def scenario() -> float:
        caller = asyncio.ensure_future(open_within(stubborn_connect([]), 30, closed.append))
        await asyncio.sleep(0.05)
        began = time.monotonic()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        took = time.monotonic() - began
        await asyncio.sleep(LATE + 0.3)
        return took

    took = asyncio.run(scenario())
    assert took < LATE, f"the cancelled caller waited {took:.2f}s"
    assert closed == ["connection"]


def test_a_connection_made_in_time_is_returned() -> None:
    async def quick() -> str:
        await asyncio.sleep(0.01)
        return "connection"

    assert asyncio.run(open_within(quick(), 1.0, lambda _: None)) == "connection"


def test_a_failed_connect_raises_its_own_error() -> None:
    async def refused() -> str:
        raise ConnectionRefusedError("nothing listens there")

    with pytest.raises(ConnectionRefusedError, match="nothing listens"):
        asyncio.run(open_within(refused(), 1.0, lambda _: None))
