"""The steps of a graceful failover (failover/graceful.py) over recorded peers: who is asked
to cede and to rejoin, in which order, and what the caller is told when a step fails. The
real thing runs in tests/failover/test_hactl.py and tests/chaos/test_graceful_failover.py."""

from __future__ import annotations

import pytest
import structlog

from failover.graceful import Attempt, graceful_failover
from hanamenode.errors import NamenodeError, ServiceFailedError


def run(
    holder: str | None,
    attempt: Attempt | None,
    refuse: frozenset[str] = frozenset(),
) -> tuple[list[str], str | Exception]:
    calls: list[str] = []

    def cede(nn: str) -> None:
        calls.append(f"cede {nn}")
        if nn in refuse:
            raise NamenodeError(f"{nn} did not answer")

    def rejoin(nn: str) -> None:
        calls.append(f"rejoin {nn}")

    def wait_won() -> Attempt | None:
        calls.append("wait")
        return attempt

    try:
        result: str | Exception = graceful_failover(
            "nn2", holder=holder, others=["nn1", "nn2", "nn3"], cede=cede, rejoin=rejoin,
            wait_won=wait_won, log=structlog.get_logger(), within=20.0,
        )
    except ServiceFailedError as exc:
        result = exc
    return calls, result


def test_the_holder_and_the_others_cede_then_rejoin() -> None:
    calls, result = run("nn1", (True, "became active"))
    assert calls == ["cede nn1", "cede nn3", "wait", "rejoin nn1", "rejoin nn3"]
    assert result == "nn1"


def test_nobody_holds_the_lock() -> None:
    calls, result = run(None, (True, "became active"))
    assert calls == ["cede nn1", "cede nn3", "wait", "rejoin nn1", "rejoin nn3"]
    assert result == ""


def test_a_holder_that_does_not_cede_stops_the_failover_before_anything_else() -> None:
    calls, result = run("nn1", (True, "x"), refuse=frozenset({"nn1"}))
    assert calls == ["cede nn1"]
    assert isinstance(result, ServiceFailedError)
    assert "Unable to get the active NameNode nn1 to cede: nn1 did not answer" in str(result)


def test_another_namenode_that_does_not_cede_is_not_asked_to_rejoin() -> None:
    calls, result = run("nn1", (True, "became active"), refuse=frozenset({"nn3"}))
    assert calls == ["cede nn1", "cede nn3", "wait", "rejoin nn1"]
    assert result == "nn1"


@pytest.mark.parametrize(
    ("attempt", "message"),
    [
        (None, "Unable to become active: NameNode nn2 did not win the election within 20s"),
        ((False, "cannot fence nn1"), "Unable to become active: cannot fence nn1"),
    ],
)
def test_the_ceded_rejoin_even_when_this_namenode_did_not_become_active(
    attempt: Attempt | None, message: str
) -> None:
    calls, result = run("nn1", attempt)
    assert calls[-2:] == ["rejoin nn1", "rejoin nn3"]
    assert isinstance(result, ServiceFailedError) and str(result) == message
