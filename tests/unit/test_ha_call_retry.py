"""Which failed HAServiceProtocol calls ``HAServiceTarget`` tries again (the rule is pure)."""

from __future__ import annotations

import grpc
import pytest

from failover.controller import retry_unsent

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
DROPPED = (
    "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:39771: "
    "Handshake read failed (Endpoint closing)"
)
REFUSED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:33805: "
    "Failed to connect to remote host: Connection refused"
)


@pytest.mark.parametrize(
    ("code", "details", "left", "retry"),
    [
        (UNAVAILABLE, DROPPED, 5.0, True),  # never sent: safe, and the peer is there
        (UNAVAILABLE, REFUSED, 5.0, False),  # nothing listens: fence it, do not wait
        (UNAVAILABLE, DROPPED, 0.1, False),  # no time for another attempt
        (UNAVAILABLE, "Socket closed", 5.0, False),  # maybe sent: a transition may have run
        (grpc.StatusCode.DEADLINE_EXCEEDED, DROPPED, 5.0, False),
        (grpc.StatusCode.FAILED_PRECONDITION, "", 5.0, False),
    ],
)
def test_only_calls_that_were_never_sent_are_tried_again(
    code: grpc.StatusCode, details: str, left: float, retry: bool
) -> None:
    assert retry_unsent(code, details, left) is retry
