"""ReadIndex: one quorum round per batch of readers, and never a round that began before
the reader arrived (qjm/read_index.py)."""

from __future__ import annotations

import threading

import pytest

from qjm.errors import QuorumException
from qjm.read_index import ReadIndex, ReadIndexTimeout
from tests.namenode.cluster import wait_for

pytestmark = pytest.mark.timeout(30)


class Rounds:
    """A round function whose rounds the test releases one by one."""

    def __init__(self) -> None:
        self.started = 0
        self.release = [threading.Event() for _ in range(10)]
        self.fail: dict[int, BaseException] = {}

    def __call__(self) -> None:
        self.started += 1
        n = self.started
        assert self.release[n].wait(10)
        if n in self.fail:
            raise self.fail[n]


def confirm_in_thread(index: ReadIndex, done: list[str], name: str) -> threading.Thread:
    def run() -> None:
        try:
            index.confirm(10)
            done.append(name)
        except Exception as exc:
            done.append(f"{name}: {type(exc).__name__}")

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def test_readers_arriving_during_a_round_share_the_next_one() -> None:
    rounds = Rounds()
    index = ReadIndex(rounds)
    done: list[str] = []
    first = confirm_in_thread(index, done, "a")
    wait_for(lambda: rounds.started == 1)
    late = [confirm_in_thread(index, done, name) for name in ("b", "c", "d")]
    rounds.release[1].set()
    first.join(10)
    assert done == ["a"]  # round 1 was in flight when b, c, d arrived: not theirs
    wait_for(lambda: rounds.started == 2)
    assert done == ["a"]
    rounds.release[2].set()
    for t in late:
        t.join(10)
    assert sorted(done) == ["a", "b", "c", "d"]
    assert index.rounds == 2 and rounds.started == 2


def test_a_failed_round_fails_every_reader_that_waited_for_it() -> None:
    rounds = Rounds()
    rounds.fail[2] = QuorumException("confirmEpoch(): EpochError from 2 of 3")
    index = ReadIndex(rounds)
    done: list[str] = []
    first = confirm_in_thread(index, done, "a")
    wait_for(lambda: rounds.started == 1)
    late = [confirm_in_thread(index, done, name) for name in ("b", "c")]
    rounds.release[1].set()
    rounds.release[2].set()
    for t in [first, *late]:
        t.join(10)
    assert sorted(done) == ["a", "b: QuorumException", "c: QuorumException"]


def test_a_reader_gives_up_when_no_round_finishes_in_time() -> None:
    rounds = Rounds()
    index = ReadIndex(rounds)
    done: list[str] = []
    first = confirm_in_thread(index, done, "a")
    wait_for(lambda: rounds.started == 1)
    with pytest.raises(ReadIndexTimeout):
        index.confirm(0.2)
    rounds.release[1].set()
    first.join(10)
