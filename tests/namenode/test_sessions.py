"""Sessions and multis against real NameNodes on three real JournalNodes, over real gRPC
(docs/protocol.md §13, docs/consistency.md §11).

A session answers each call by its id, as the unary call would (the same answer, or the same
status code, message and error class), in the order the calls finish; it refuses a bad call
alone and goes on; it holds at most its limit of unanswered calls; it ends with a StandbyError
when the NameNode leaves the active state, and the client library resends the unanswered
calls to the new active with the same ids. A multi applies all of its ops or none, on the
active and on the standby that tails it, and is retry-cached as one call.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from hanamenode.client import CreateOp, DeleteOp, HaFsClient, MkdirsOp, RenameOp
from hanamenode.errors import (
    ERROR_CLASS_KEY,
    MULTI_INDEX_KEY,
    InvalidArgumentError,
    PathExistsError,
    PathNotFoundError,
)
from proto import namenode_pb2
from tests.namenode.cluster import NameNodeCluster, header

pytestmark = pytest.mark.timeout(120)

LIMIT = 8


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NameNodeCluster]:
    """nn1 active, nn2 standby, nn3 observer; sessions hold at most ``LIMIT`` calls."""
    conf = {
        "dfs.namenode.session.max-unanswered-calls": LIMIT,
        "dfs.namenode.multi.max-ops": 1000,
        "dfs.namenode.observer.read.max-wait.ms": 1500,
    }
    with NameNodeCluster(tmp_path, namenodes=3, conf=conf) as c:
        c.transition_to_active("nn1")
        c.fsn("nn3").transition_to_observer()
        yield c


class Stream:
    """A raw Session stream: ``send`` calls, ``answers`` as they come (one per id)."""

    def __init__(self, cluster: NameNodeCluster, nn: str) -> None:
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self.responses = cluster.client(nn).Session(self._requests(), timeout=60)

    def _requests(self) -> Iterator[Any]:
        while (item := self._outbox.get()) is not None:
            yield item

    def send(self, seen_txid: int = 0, **call: Any) -> int:
        call_id = next(self._ids)
        self._outbox.put(namenode_pb2.SessionRequest(id=call_id, seen_txid=seen_txid, **call))
        return call_id

    def answers(self, count: int) -> list[Any]:
        got: list[Any] = []
        while len(got) < count:
            got.extend(next(self.responses).responses)
        return got

    def close(self) -> None:
        self._outbox.put(None)


def error_of(answer: Any) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    assert answer.WhichOneof("answer") == "error", answer
    code = next(c for c in grpc.StatusCode if c.value[0] == answer.error.code)
    return code, answer.error.message, {t.key: t.value for t in answer.error.trailers}


def unary_refusal(call: Any, request: Any) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=10)
    trailers = {k: v for k, v in info.value.trailing_metadata() or () if k != "hn-state-txid"}
    return info.value.code(), info.value.details(), trailers


def test_each_call_is_answered_by_id_as_its_unary_call_would_be(
    cluster: NameNodeCluster,
) -> None:
    stub = cluster.client("nn1")
    stub.Mkdirs(namenode_pb2.MkdirsRequest(header=header(), path="/a"), timeout=10)
    stream = Stream(cluster, "nn1")
    try:
        ids = {
            stream.send(create=namenode_pb2.CreateRequest(header=header(), path="/a/f")): "ok",
            stream.send(mkdirs=namenode_pb2.MkdirsRequest(header=header(), path="/a")): "exists",
            stream.send(get_file_info=namenode_pb2.GetFileInfoRequest(
                header=header(), path="/nope")): "missing",
            stream.send(delete=namenode_pb2.DeleteRequest(header=header(), path="a")): "bad",
            stream.send(msync=namenode_pb2.MsyncRequest(header=header())): "msync",
        }
        by_id = {a.id: a for a in stream.answers(len(ids))}
    finally:
        stream.close()
    assert set(by_id) == set(ids)
    created = next(i for i, what in ids.items() if what == "ok")
    assert by_id[created].create.status.path == "/a/f" and by_id[created].create.txid > 0
    assert by_id[created].state_txid == by_id[created].create.txid
    msync = next(i for i, what in ids.items() if what == "msync")
    assert by_id[msync].msync.txid >= by_id[created].create.txid
    # Each refusal is the unary call's: code, message and error class.
    unary = {
        "exists": unary_refusal(stub.Mkdirs, namenode_pb2.MkdirsRequest(
            header=header(), path="/a")),
        "missing": unary_refusal(stub.GetFileInfo, namenode_pb2.GetFileInfoRequest(
            header=header(), path="/nope")),
        "bad": unary_refusal(stub.Delete, namenode_pb2.DeleteRequest(header=header(), path="a")),
    }
    for call_id, what in ids.items():
        if what in unary:
            assert error_of(by_id[call_id]) == unary[what], what
    assert unary["exists"][2][ERROR_CLASS_KEY] == "PathExistsError"


def test_calls_are_answered_as_they_finish_not_in_order(cluster: NameNodeCluster) -> None:
    """On the observer, a read that carries a txid it has not applied is held (up to
    max-wait), while a stale read sent after it is answered at once."""
    stream = Stream(cluster, "nn3")
    try:
        ahead = cluster.fsn("nn1").last_applied_txid + 1000
        held = stream.send(seen_txid=ahead, get_file_info=namenode_pb2.GetFileInfoRequest(
            header=header(), path="/"))
        quick = stream.send(get_file_info=namenode_pb2.GetFileInfoRequest(
            header=header(stale=True), path="/"))
        answers = stream.answers(2)
    finally:
        stream.close()
    assert [a.id for a in answers] == [quick, held]
    assert answers[0].get_file_info.status.is_dir
    code, message, trailers = error_of(answers[1])
    assert code == grpc.StatusCode.UNAVAILABLE and trailers[ERROR_CLASS_KEY] == (
        "ObserverBehindError"
    ), message


def test_a_retried_call_runs_once_on_a_session(cluster: NameNodeCluster) -> None:
    same = header()
    stream = Stream(cluster, "nn1")
    try:
        first = stream.send(create=namenode_pb2.CreateRequest(header=same, path="/once"))
        (answer,) = stream.answers(1)
        applied = cluster.fsn("nn1").last_applied_txid
        again = stream.send(create=namenode_pb2.CreateRequest(header=same, path="/once"))
        (retry,) = stream.answers(1)
    finally:
        stream.close()
    assert (answer.id, retry.id) == (first, again)
    # The first answer, from the retry cache: a second run would be refused (file exists).
    assert retry.create == answer.create
    assert cluster.fsn("nn1").last_applied_txid == applied


def test_bad_calls_are_refused_alone_and_the_session_goes_on(cluster: NameNodeCluster) -> None:
    stream = Stream(cluster, "nn1")
    try:
        long_path = stream.send(get_file_info=namenode_pb2.GetFileInfoRequest(
            header=header(), path="/" + "x" * 40_000))
        empty = stream.send()
        too_many = stream.send(multi=namenode_pb2.MultiRequest(header=header(), ops=[
            namenode_pb2.MultiOp(mkdirs=namenode_pb2.MkdirsRequest(path=f"/m{i}"))
            for i in range(1001)
        ]))
        good = stream.send(mkdirs=namenode_pb2.MkdirsRequest(header=header(), path="/fine"))
        by_id = {a.id: a for a in stream.answers(4)}
    finally:
        stream.close()
    code, message, _ = error_of(by_id[long_path])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message == (
        "GetFileInfo: request field path is 40001 bytes, longer than the limit of 32000"
    )
    code, message, _ = error_of(by_id[empty])
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "carries no call" in message
    code, message, _ = error_of(by_id[too_many])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message == "a multi holds at most 1000 ops (dfs.namenode.multi.max-ops), not 1001"
    assert by_id[good].mkdirs.created
    assert not cluster.fsn("nn1").namespace.exists("/m0")


def test_a_session_holds_at_most_its_limit_of_unanswered_calls(
    cluster: NameNodeCluster,
) -> None:
    """10,000 calls sent at once, none read until all are sent: the calls past the limit
    are refused RESOURCE_EXHAUSTED, the server never holds more than the limit of calls and
    of refusals unanswered, every id is answered once, and the session still serves."""
    stream = Stream(cluster, "nn1")
    metrics = cluster.server("nn1").metrics
    try:
        sent = [stream.send(get_file_info=namenode_pb2.GetFileInfoRequest(
            header=header(), path="/")) for _ in range(10_000)]
        peak = 0.0
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # the client reads nothing meanwhile
            peak = max(peak, metrics.value("hanamenode_session_unanswered_calls"))
            time.sleep(0.005)
        answers = stream.answers(len(sent))
        after = stream.send(mkdirs=namenode_pb2.MkdirsRequest(header=header(), path="/after"))
        (last,) = stream.answers(1)
    finally:
        stream.close()
    assert sorted(a.id for a in answers) == sent
    refused = [a for a in answers if a.WhichOneof("answer") == "error"]
    served = [a for a in answers if a.WhichOneof("answer") == "get_file_info"]
    assert refused and served and len(refused) + len(served) == len(sent)
    code, message, _ = error_of(refused[0])
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"already holds {LIMIT} unanswered calls" in message
    print(f"served {len(served)}, refused {len(refused)}, peak unanswered {peak}")
    assert peak <= 2 * LIMIT + 256  # calls, refusals, and one batch being written
    assert last.id == after and last.mkdirs.created


def test_a_step_down_ends_the_session_and_the_client_resends_there(
    cluster: NameNodeCluster,
) -> None:
    stream = Stream(cluster, "nn1")
    stream.send(mkdirs=namenode_pb2.MkdirsRequest(header=header(), path="/s"))
    stream.answers(1)
    cluster.transition_to_standby("nn1")
    with pytest.raises(grpc.RpcError) as info:
        stream.answers(1)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "NameNode nn1 left the active state" in (info.value.details() or "")
    assert "the new active is not known yet" in (info.value.details() or "")
    stream.close()
    cluster.transition_to_active("nn2")

    # Writers on one shared client across a failover back to nn1: nothing lost, nothing
    # run twice (a second run of a mkdir without -p would be PathExistsError).
    assert cluster.settings is not None
    acked: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    with HaFsClient(cluster.settings) as fs:
        assert fs.proxy.sessions

        def write(index: int) -> None:
            for n in itertools.count():
                if stop.is_set():
                    return
                path = f"/s/w{index}-{n}"
                try:
                    fs.mkdirs(path)
                except BaseException as exc:
                    errors.append(exc)
                    return
                acked.append(path)

        writers = [threading.Thread(target=write, args=(i,)) for i in range(6)]
        for t in writers:
            t.start()
        time.sleep(0.5)
        cluster.transition_to_standby("nn2")
        cluster.transition_to_active("nn1")
        time.sleep(0.5)
        stop.set()
        for t in writers:
            t.join(timeout=60)
        assert not errors, errors
        assert fs.proxy.current.nn_id == "nn1"
    namespace = cluster.fsn("nn1").namespace
    assert len(acked) > 20
    missing = [p for p in acked if not namespace.exists(p)]
    assert not missing, missing[:5]


def test_closing_the_client_leaves_no_session_thread_behind(cluster: NameNodeCluster) -> None:
    """A short-lived command (``hafs rm``) closes its client and exits: when ``close``
    returns, the session's reader thread has seen the cancelled stream and ended, so no
    thread of ours is inside gRPC while the channel closes or the interpreter exits (CI saw
    one ``hafs rm`` print its error and then hang until it was killed)."""
    assert cluster.settings is not None
    for _ in range(20):
        with HaFsClient(cluster.settings) as fs:
            fs.mkdirs("/closing", parents=True)
            calls = [weakref.ref(s._stream) for s in fs.proxy._sessions.values()]
            assert calls
        readers = [t for t in threading.enumerate() if t.name.startswith("session-")]
        assert not readers, readers
        # The call object is gone too: its finalizer ran here, not at the interpreter's
        # exit, where a daemon thread frozen holding the call's lock would hang it.
        assert [ref() for ref in calls] == [None] * len(calls)


# -- multi --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sessions", [True, False], ids=["session", "unary"])
def test_a_multi_applies_all_or_nothing_and_the_standby_sees_it_whole(
    cluster: NameNodeCluster, sessions: bool
) -> None:
    assert cluster.settings is not None
    with HaFsClient(cluster.settings, sessions=sessions) as fs:
        results = fs.multi([
            MkdirsOp("/x"), CreateOp("/x/f", length=3), RenameOp("/x/f", "/x/g"),
            MkdirsOp("/x", parents=True),
        ])
        assert results[0] is True and results[2] == "/x/g" and results[3] is False
        before = cluster.fsn("nn1").last_applied_txid
        with pytest.raises(PathExistsError, match=r"^multi op 2 of 3 refused: ") as info:
            fs.multi([DeleteOp("/x/g"), CreateOp("/x/h"), MkdirsOp("/x")])
        assert info.value.multi_index == 2  # type: ignore[attr-defined]
        with pytest.raises(PathNotFoundError) as info:
            fs.multi([CreateOp("/x/k"), DeleteOp("/nope")])
        assert info.value.multi_index == 1  # type: ignore[attr-defined]
        with pytest.raises(InvalidArgumentError, match="at least one op"):
            fs.multi([])
        assert cluster.fsn("nn1").last_applied_txid == before  # nothing logged
        assert [s.path for s in fs.list("/x")] == ["/x/g"]
    cluster.wait_caught_up("nn2", before)
    assert cluster.fsn("nn2").namespace.digest() == cluster.fsn("nn1").namespace.digest()


def test_a_multi_is_retry_cached_as_one_call(cluster: NameNodeCluster) -> None:
    stub = cluster.client("nn1")
    same = header()
    request = namenode_pb2.MultiRequest(header=same, ops=[
        namenode_pb2.MultiOp(mkdirs=namenode_pb2.MkdirsRequest(path="/r")),
        namenode_pb2.MultiOp(create=namenode_pb2.CreateRequest(path="/r/f")),
    ])
    first = stub.Multi(request, timeout=10)
    applied = cluster.fsn("nn1").last_applied_txid
    assert first.txid == applied
    # The same call again, on the session this time: the first answer, nothing logged.
    stream = Stream(cluster, "nn1")
    try:
        stream.send(multi=request)
        (again,) = stream.answers(1)
    finally:
        stream.close()
    assert again.multi == first
    assert cluster.fsn("nn1").last_applied_txid == applied
    # After a failover the new active answers it from the entry it tailed.
    cluster.transition_to_standby("nn1")
    cluster.transition_to_active("nn2")
    assert cluster.client("nn2").Multi(request, timeout=10) == first


def test_a_refused_multi_names_its_index_in_a_trailer(cluster: NameNodeCluster) -> None:
    stub = cluster.client("nn1")
    request = namenode_pb2.MultiRequest(header=header(), ops=[
        namenode_pb2.MultiOp(mkdirs=namenode_pb2.MkdirsRequest(path="/t")),
        namenode_pb2.MultiOp(),
    ])
    code, message, trailers = unary_refusal(stub.Multi, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert trailers[MULTI_INDEX_KEY] == "1"
    assert "multi op 1 holds no mkdirs, create, delete or rename" in message


def test_a_large_directory_is_listed_page_by_page(tmp_path: Path) -> None:
    """With dfs.ls.limit 100, one GetListing answers 100 entries and says more follow; the
    client library lists all 250 children, on sessions and on unary calls alike."""
    with NameNodeCluster(tmp_path, conf={"dfs.ls.limit": 100}) as c:
        c.transition_to_active("nn1")
        assert c.settings is not None
        with HaFsClient(c.settings) as fs:
            fs.multi([MkdirsOp("/big")] + [CreateOp(f"/big/f{i:03d}") for i in range(250)])
        first = c.client("nn1").GetListing(
            namenode_pb2.GetListingRequest(header=header(), path="/big", limit=1000), timeout=10
        )
        assert len(first.entries) == 100 and first.has_more
        assert first.entries[-1].path == "/big/f099"
        for sessions in (True, False):
            with HaFsClient(c.settings, sessions=sessions) as fs:
                names = [s.path for s in fs.list("/big")]
                assert names == [f"/big/f{i:03d}" for i in range(250)]
                assert [len(p) for p in fs.list_pages("/big", limit=40)] == [40] * 6 + [10]
