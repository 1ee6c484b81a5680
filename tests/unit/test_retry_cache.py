"""RetryCache: first answers kept for retries, bounded (LRU) and expiring, on a fake clock."""

from __future__ import annotations

import pytest

from hanamenode.errors import PathExistsError, RetryCallMismatchError
from hanamenode.namespace import Namespace, StatInfo
from hanamenode.retry_cache import CacheState, RetryCache

C1 = b"client-1-uuid-16"
C2 = b"client-2-uuid-16"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_success_is_answered_with_the_first_result(clock: FakeClock) -> None:
    cache = RetryCache(clock=clock)
    assert cache.lookup(C1, 1, "rename") is None
    cache.record_success(C1, 1, "/dst/a", txid=17, op="rename")
    entry = cache.lookup(C1, 1, "rename")
    assert entry is not None
    assert entry.state is CacheState.SUCCESS
    assert entry.txid == 17
    assert entry.answer() == "/dst/a"
    # Another call of the same client, or the same call number of another client, is new.
    assert cache.lookup(C1, 2, "rename") is None
    assert cache.lookup(C2, 1, "rename") is None


def test_failure_is_answered_with_the_first_error(clock: FakeClock) -> None:
    cache = RetryCache(clock=clock)
    error = PathExistsError("cannot create directory /a: directory exists")
    cache.record_failure(C1, 5, error, op="mkdir")
    entry = cache.lookup(C1, 5, "mkdir")
    assert entry is not None
    assert entry.state is CacheState.FAILED
    assert entry.txid == 0
    with pytest.raises(PathExistsError) as info:
        entry.answer()
    assert info.value is error


@pytest.mark.parametrize("first", ["success", "failure"])
def test_a_call_id_reused_for_another_call_is_refused_by_name(
    clock: FakeClock, first: str
) -> None:
    """A retry repeats its call: a mkdir's answer (True) is no answer to a create, which
    expects a file status (the daemon fuzzer's INTERNAL AttributeError, CI of stop 23)."""
    cache = RetryCache(clock=clock)
    if first == "success":
        cache.record_success(C1, 9, True, txid=12, op="mkdir")
    else:
        cache.record_failure(C1, 9, PathExistsError("x"), op="mkdir")
    logged = "logged at txid 12" if first == "success" else "nothing logged"
    with pytest.raises(
        RetryCallMismatchError,
        match=rf"call id 9 of client {C1.hex()} was a mkdir \({logged}\); it cannot be "
        "reused for a create",
    ):
        cache.lookup(C1, 9, "create")
    assert cache.lookup(C1, 9, "mkdir") is not None  # the entry stays for the real retry
    # An entry that does not name its call (read from a layout-2 image) answers as before.
    cache.restore(C2, 9, True, txid=12, remaining=60.0)
    entry = cache.lookup(C2, 9, "create")
    assert entry is not None and entry.answer() is True


def test_calls_without_a_client_id_are_not_cached(clock: FakeClock) -> None:
    cache = RetryCache(clock=clock)
    cache.record_success(b"", 1, True, txid=3, op="mkdir")
    assert len(cache) == 0
    assert cache.lookup(b"", 1, "mkdir") is None


def test_entries_expire(clock: FakeClock) -> None:
    cache = RetryCache(expiry=600.0, clock=clock)
    cache.record_success(C1, 1, True, txid=1, op="mkdir")
    clock.now += 599.9
    assert cache.lookup(C1, 1, "mkdir") is not None
    clock.now += 0.1
    assert cache.lookup(C1, 1, "mkdir") is None
    assert len(cache) == 0


def test_expired_entries_are_dropped_when_others_are_recorded(clock: FakeClock) -> None:
    cache = RetryCache(expiry=10.0, clock=clock)
    for call in range(5):
        cache.record_success(C1, call, True, txid=call + 1, op="mkdir")
    clock.now += 11
    cache.record_success(C2, 1, True, txid=9, op="mkdir")
    assert len(cache) == 1


def test_least_recently_used_entries_go_first_when_full(clock: FakeClock) -> None:
    cache = RetryCache(capacity=3, clock=clock)
    for call in (1, 2, 3):
        cache.record_success(C1, call, call, txid=call, op="mkdir")
    assert cache.lookup(C1, 1, "mkdir") is not None  # 1 is now the most recently used
    cache.record_success(C1, 4, 4, txid=4, op="mkdir")
    assert len(cache) == 3
    assert cache.lookup(C1, 2, "mkdir") is None
    assert [cache.lookup(C1, c, "mkdir") is not None for c in (1, 3, 4)] == [True, True, True]


def test_recording_again_replaces_the_entry(clock: FakeClock) -> None:
    cache = RetryCache(clock=clock)
    cache.record_failure(C1, 1, PathExistsError("x"), op="mkdir")
    cache.record_success(C1, 1, True, txid=4, op="mkdir")
    entry = cache.lookup(C1, 1, "mkdir")
    assert entry is not None and entry.state is CacheState.SUCCESS


def test_an_answer_that_logged_nothing_does_not_replace_a_remembered_one(
    clock: FakeClock,
) -> None:
    """A refusal or a no-op is recorded after its confirmation round, so a retry may have
    run meanwhile: the answer already remembered (here the retry's logged success) stays."""
    cache = RetryCache(clock=clock)
    cache.record_success(C1, 1, True, txid=4, op="mkdir")
    cache.record_failure(C1, 1, PathExistsError("x"), op="mkdir")
    cache.record_success(C1, 1, False, txid=0, op="mkdir")
    entry = cache.lookup(C1, 1, "mkdir")
    assert entry is not None and entry.txid == 4 and entry.answer() is True
    # Once the first entry has expired, the new answer is recorded.
    clock.now += 601
    cache.record_failure(C1, 1, PathExistsError("x"), op="mkdir")
    entry = cache.lookup(C1, 1, "mkdir")
    assert entry is not None and entry.state is CacheState.FAILED


@pytest.mark.parametrize(("capacity", "expiry"), [(0, 1.0), (1, 0.0), (1, -5.0)])
def test_bad_limits_are_refused(capacity: int, expiry: float) -> None:
    with pytest.raises(ValueError):
        RetryCache(capacity=capacity, expiry=expiry)


def test_apply_records_what_the_client_was_answered(clock: FakeClock) -> None:
    """The active's apply and a replay's apply record the same answers (HDFS-4942)."""
    active_cache, standby_cache = RetryCache(clock=clock), RetryCache(clock=clock)
    active = Namespace(retry_cache=active_cache)
    standby = Namespace(retry_cache=standby_cache)
    # Each op is prepared against the tree its predecessors made, as on the active.
    calls = [
        lambda: active.prepare_mkdir("/a", mtime_ms=1, client_id=C1, call_id=1),
        lambda: active.prepare_create("/a/f", mtime_ms=2, length=9, client_id=C1, call_id=2),
        lambda: active.prepare_rename("/a/f", "/g", mtime_ms=3, client_id=C2, call_id=1),
        lambda: active.prepare_delete("/g", mtime_ms=4, client_id=C1, call_id=3),
        lambda: active.prepare_mkdir("/untracked", mtime_ms=5),
    ]
    answers = []
    for txid, prepare in enumerate(calls, start=1):
        op = prepare()
        assert op is not None
        op.txid = txid
        answers.append(active.apply(op))
        standby.apply(op)
    assert answers[0] is True
    assert isinstance(answers[1], StatInfo) and answers[1].length == 9
    assert answers[2] == "/g"
    assert answers[3] is True
    for cache in (active_cache, standby_cache):
        assert len(cache) == 4
        for (cid, call), answer, txid, kind in zip(
            [(C1, 1), (C1, 2), (C2, 1), (C1, 3)],
            answers,
            [1, 2, 3, 4],
            ["mkdir", "create", "rename", "delete"],
            strict=False,  # answers also holds the untracked call's
        ):
            entry = cache.lookup(cid, call, kind)
            assert entry is not None
            assert entry.answer() == answer
            assert entry.txid == txid
