"""``qjm.quorum``: the majority rule as a decision table, and ``QuorumCall`` over futures.

Futures are completed from other threads, in every order, and already-completed futures (the
simulator's way) must behave the same. No sockets, no disk.
"""

from __future__ import annotations

import itertools
import pickle
import threading
import time
from concurrent.futures import CancelledError, Future

import pytest

from qjm.errors import QuorumException, QuorumTimeout
from qjm.quorum import (
    QuorumCall,
    QuorumResult,
    majority,
    quorum_decision,
    wait_for_write_quorum,
)

WON, LOST, PENDING = QuorumResult.WON, QuorumResult.LOST, QuorumResult.PENDING

# (id, total, successes, failures, min_successes, max_failures, expected)
DECISION_TABLE = [
    ("3-nothing-yet", 3, 0, 0, 2, 1, PENDING),
    ("3-one-ok", 3, 1, 0, 2, 1, PENDING),
    ("3-one-failed", 3, 0, 1, 2, 1, PENDING),
    ("3-one-each", 3, 1, 1, 2, 1, PENDING),
    ("3-majority-ok", 3, 2, 0, 2, 1, WON),
    ("3-majority-ok-one-failed", 3, 2, 1, 2, 1, WON),
    ("3-all-ok", 3, 3, 0, 2, 1, WON),
    ("3-two-failed", 3, 0, 2, 2, 1, LOST),
    ("3-two-failed-one-ok", 3, 1, 2, 2, 1, LOST),
    ("5-two-ok-two-failed", 5, 2, 2, 3, 2, PENDING),
    ("5-three-ok", 5, 3, 2, 3, 2, WON),
    ("5-three-failed", 5, 2, 3, 3, 2, LOST),
    ("1-ok", 1, 1, 0, 1, 0, WON),
    ("1-failed", 1, 0, 1, 1, 0, LOST),
    ("1-pending", 1, 0, 0, 1, 0, PENDING),
    # A tolerant max_failures does not hide that too few loggers are left to win.
    ("5-tolerant-but-impossible", 5, 1, 3, 3, 5, LOST),
    ("5-tolerant-still-possible", 5, 1, 2, 3, 5, PENDING),
    # format() needs every JournalNode (HDFS-3077 §4.2): all successes, no failure allowed.
    ("format-all-ok", 3, 3, 0, 3, 0, WON),
    ("format-one-failed", 3, 2, 1, 3, 0, LOST),
    ("format-waiting", 3, 2, 0, 3, 0, PENDING),
    # A win is a win even if more failures arrived than the caller would have tolerated.
    ("won-checked-first", 3, 2, 1, 2, 0, WON),
]


@pytest.mark.parametrize(
    ("total", "successes", "failures", "min_successes", "max_failures", "expected"),
    [row[1:] for row in DECISION_TABLE],
    ids=[row[0] for row in DECISION_TABLE],
)
def test_quorum_decision(
    total: int,
    successes: int,
    failures: int,
    min_successes: int,
    max_failures: int,
    expected: QuorumResult,
) -> None:
    assert quorum_decision(total, successes, failures, min_successes, max_failures) is expected


@pytest.mark.parametrize(("total", "successes", "failures"), [(3, 2, 2), (3, -1, 0), (-1, 0, 0)])
def test_quorum_decision_rejects_impossible_counts(
    total: int, successes: int, failures: int
) -> None:
    with pytest.raises(ValueError):
        quorum_decision(total, successes, failures, 2, 1)


@pytest.mark.parametrize(
    ("n", "expected"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)]
)
def test_majority(n: int, expected: int) -> None:
    assert majority(n) == expected
    # Any two majorities overlap: that is what the fencing argument (HDFS-3077 §2.3) needs.
    assert 2 * majority(n) > n


def test_majority_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        majority(0)


# ---------------------------------------------------------------------------------- helpers


def done(value: object) -> Future[object]:
    f: Future[object] = Future()
    f.set_result(value)
    return f


def failed(exc: BaseException) -> Future[object]:
    f: Future[object] = Future()
    f.set_exception(exc)
    return f


def pending(n: int) -> dict[str, Future[object]]:
    return {f"jn{i}": Future() for i in range(1, n + 1)}


def complete(f: Future[object], outcome: str, key: str) -> None:
    if outcome == "ok":
        f.set_result(f"{key}-result")
    else:
        f.set_exception(OSError(f"{key} is down"))


# -------------------------------------------------------------------- already-completed futures


def test_already_completed_futures_decide_without_waiting() -> None:
    call = QuorumCall({"jn1": done(1), "jn2": failed(OSError("disk")), "jn3": done(3)})
    assert call.count_responses() == 3
    call.wait_for(3, 2, 1, timeout_s=0)  # timeout 0: decided already, so no QuorumTimeout
    assert call.successes() == {"jn1": 1, "jn3": 3}
    assert set(call.exceptions()) == {"jn2"}
    assert (call.count_successes(), call.count_exceptions(), len(call)) == (2, 1, 3)


def test_already_failed_majority_is_lost_at_once() -> None:
    call = QuorumCall({"jn1": failed(OSError("a")), "jn2": failed(OSError("b")), "jn3": done(3)})
    with pytest.raises(QuorumException) as info:
        wait_for_write_quorum(call, 3, 0, "newEpoch(2)")
    assert not isinstance(info.value, QuorumTimeout)


def test_cancelled_future_counts_as_exception() -> None:
    f: Future[object] = Future()
    f.cancel()
    call = QuorumCall({"jn1": f, "jn2": done(2)})
    assert isinstance(call.exceptions()["jn1"], CancelledError)


# -------------------------------------------------------------- completion from other threads

# Every order in which three loggers can answer, and the 1-based position of the answer that
# decides a majority wait: the second success, or the second failure.
ORDERS = sorted(set(itertools.permutations(["ok", "ok", "fail"])) | set(
    itertools.permutations(["ok", "fail", "fail"])
))


def deciding_position(order: tuple[str, ...]) -> int:
    oks = fails = 0
    for i, outcome in enumerate(order, 1):
        oks += outcome == "ok"
        fails += outcome == "fail"
        if oks == 2 or fails == 2:
            return i
    raise AssertionError(order)


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_wait_returns_exactly_when_the_quorum_is_decided(order: tuple[str, ...]) -> None:
    futures = pending(3)
    call = QuorumCall(futures)
    returned = threading.Event()
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            call.wait_for(3, 2, 1, timeout_s=10)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        returned.set()

    thread = threading.Thread(target=waiter, name="quorum-waiter")
    thread.start()
    decide_at = deciding_position(order)
    for i, (key, outcome) in enumerate(zip(futures, order, strict=True), 1):
        if i > decide_at:
            break
        # The waiter must still be blocked before the deciding answer. A short wait cannot make
        # a correct implementation fail; it only bounds how long we look for a premature return.
        assert not returned.wait(0.02), f"returned before answer {i}"
        complete(futures[key], outcome, key)
    assert returned.wait(5), "did not return after the deciding answer"
    thread.join(5)
    assert not errors
    assert call.count_responses() == decide_at
    won = order[:decide_at].count("ok") == 2
    assert (call.count_successes() >= 2) == won


def test_futures_completed_concurrently_from_many_threads() -> None:
    futures = pending(7)
    call = QuorumCall(futures)
    barrier = threading.Barrier(len(futures))
    outcomes = ["ok", "fail", "ok", "ok", "fail", "ok", "fail"]

    def answer(key: str, outcome: str) -> None:
        barrier.wait()
        complete(futures[key], outcome, key)

    threads = [
        threading.Thread(target=answer, args=(k, o), name=f"answer-{k}")
        for k, o in zip(futures, outcomes, strict=True)
    ]
    for t in threads:
        t.start()
    result = wait_for_write_quorum(call, 7, 10, "journal(1, 1)")
    assert len(result) >= majority(7)
    for t in threads:
        t.join(5)
    assert call.count_successes() == 4 and call.count_exceptions() == 3
    expected = {k: f"{k}-result" for k, o in zip(futures, outcomes, strict=True) if o == "ok"}
    assert call.successes() == expected


def test_min_responses_returns_whatever_the_outcome() -> None:
    call = QuorumCall({"jn1": done(1), "jn2": failed(OSError("x")), "jn3": Future()})
    call.wait_for(min_responses=2, min_successes=3, max_exceptions=5, timeout_s=0)
    assert call.count_responses() == 2


def test_non_positive_minimums_switch_conditions_off() -> None:
    # min_successes=0 must not mean "already satisfied": wait for every answer instead.
    call = QuorumCall({"jn1": done(1), "jn2": Future()})
    with pytest.raises(QuorumTimeout):
        call.wait_for(min_responses=2, min_successes=0, max_exceptions=-1, timeout_s=0)


# -------------------------------------------------------------------------------- timeouts


def test_timeout_on_a_fake_clock_carries_the_partial_outcome() -> None:
    # The clock reads 0 when the wait starts and 100 at its first check: past the deadline, so
    # the call times out without sleeping (the real wait is bounded by fake-clock time).
    ticks = iter([0.0, 100.0])
    call = QuorumCall({"jn1": done("r1"), "jn2": Future(), "jn3": Future()})
    with pytest.raises(QuorumTimeout) as info:
        call.wait_for(3, 2, 1, timeout_s=20, time_fn=lambda: next(ticks), operation_name="op")
    assert isinstance(info.value, QuorumException)
    assert info.value.successes == {"jn1": "r1"}
    assert "Timed out waiting 20s for a quorum of nodes to respond to op" in str(info.value)


def test_timeout_in_real_time() -> None:
    call = QuorumCall(pending(3))
    start = time.monotonic()
    with pytest.raises(QuorumTimeout):
        wait_for_write_quorum(call, 3, 0.05, "getJournalState()")
    elapsed = time.monotonic() - start
    assert 0.05 <= elapsed < 5


def test_negative_timeout_is_a_caller_bug() -> None:
    with pytest.raises(ValueError):
        QuorumCall(pending(1)).wait_for(1, 1, 0, timeout_s=-1)


# ---------------------------------------------------------------------- wait_for_write_quorum


def test_write_quorum_returns_successes_without_waiting_for_stragglers() -> None:
    futures: dict[str, Future[object]] = {"jn1": done("a"), "jn2": done("b"), "jn3": Future()}
    assert wait_for_write_quorum(QuorumCall(futures), 3, 10, "journal(1, 3)") == {
        "jn1": "a",
        "jn2": "b",
    }


@pytest.mark.parametrize(("n", "failures"), [(1, 1), (3, 2), (5, 3), (7, 4)])
def test_write_quorum_fails_as_soon_as_majority_is_impossible(n: int, failures: int) -> None:
    futures: dict[str, Future[object]] = {
        f"127.0.0.1:{i}": failed(OSError(f"down {i}")) if i <= failures else Future()
        for i in range(1, n + 1)
    }
    with pytest.raises(QuorumException) as info:
        wait_for_write_quorum(QuorumCall(futures), n, 10, "newEpoch(5)")
    message = str(info.value)
    assert f"Got too many exceptions to achieve quorum size {majority(n)}/{n}" in message
    assert "newEpoch(5)" in message
    assert f"{failures} exceptions thrown" in message
    assert "127.0.0.1:1: OSError: down 1" in message
    assert len(info.value.exceptions) == failures


def test_quorum_exception_message_names_every_logger() -> None:
    class EpochError(Exception):
        pass

    call = QuorumCall(
        {
            "127.0.0.1:2": failed(TimeoutError("timed out")),
            "127.0.0.1:1": failed(EpochError("epoch 3 < promised 4")),
            "127.0.0.1:3": done(None),
        }
    )
    with pytest.raises(QuorumException) as info:
        call.rethrow_exception("Got too many exceptions to achieve quorum size 2/3")
    assert str(info.value) == (
        "Got too many exceptions to achieve quorum size 2/3. 1 successful responses: "
        "127.0.0.1:3. 2 exceptions thrown: 127.0.0.1:1: EpochError: epoch 3 < promised 4; "
        "127.0.0.1:2: TimeoutError: timed out"
    )


def test_quorum_exception_survives_pickling() -> None:
    exc = QuorumTimeout("Timed out", {"jn1": 1}, {"jn2": OSError("down")})
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is QuorumTimeout
    assert str(copy) == str(exc)
    assert copy.successes == {"jn1": 1} and set(copy.exceptions) == {"jn2"}
