"""The client side: ``FailoverProxy`` and ``HaFsClient`` against real NameNodes on three
real JournalNodes (``tests.namenode.cluster``): finding the active, manual failovers between
and during calls, at-most-once retries across a failover (the same ``(client_id, call_id)``
on every attempt), unreachable NameNodes skipped, bounded backoff, and every refusal raised
at once as its own exception class.

The tests that count attempts with ``Recorder`` (a unary-call interceptor) run the client on
unary calls; the others on sessions, the default. tests/namenode/test_sessions.py covers what
is particular to sessions."""

from __future__ import annotations

import os
import random
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from conf import ConfigError, Settings
from conf.rpc import make_channel
from hanamenode.client import FailoverProxy, HaFsClient, NameNodeAddress, RetryPolicy
from hanamenode.client.failover_proxy import classify
from hanamenode.errors import (
    DirectoryNotEmptyError,
    InvalidArgumentError,
    InvalidOperationError,
    InvalidPathError,
    InvalidRenameError,
    NamenodeError,
    NamenodeUnavailableError,
    ParentNotDirectoryError,
    PathExistsError,
    PathIsDirectoryError,
    PathNotFoundError,
    RetryCallMismatchError,
    StandbyError,
)
from hanamenode.namespace import StatInfo
from proto import namenode_pb2
from tests.namenode.cluster import NameNodeCluster, free_port

pytestmark = pytest.mark.timeout(60)

FAST = RetryPolicy(max_attempts=20, sleep_base=0.01, sleep_max=0.2, rpc_timeout=10.0)


# -- helpers ----------------------------------------------------------------------------------


class LostResponse(grpc.RpcError, grpc.Call):
    """What the client sees when the connection breaks after the server answered."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection reset after the request was sent (injected)"

    def initial_metadata(self) -> tuple[()]:
        return ()

    def trailing_metadata(self) -> tuple[()]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Any) -> bool:
        return False

    def result(self, timeout: float | None = None) -> Any:
        # As grpc's own failed calls do, for an interceptor further out (the proxy's txid
        # interceptor) that hands this outcome on.
        raise self


@dataclass(frozen=True)
class Attempt:
    address: str
    method: str
    client_id: bytes
    call_id: int


Hook = Callable[[str, str, Any, Any], Any]


@dataclass
class Recorder:
    """A channel factory for the proxy that records every attempt (address, method, ids)
    and lets a test replace an attempt's outcome (``hook``)."""

    attempts: list[Attempt] = field(default_factory=list)
    hook: Hook | None = None

    def __call__(self, address: str) -> grpc.Channel:
        return grpc.intercept_channel(make_channel(address), _Interceptor(self, address))

    def methods(self) -> list[str]:
        return [a.method for a in self.attempts]


class _Interceptor(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, recorder: Recorder, address: str) -> None:
        self.recorder = recorder
        self.address = address

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = details.method.rsplit("/", 1)[-1]
        header = request.header
        self.recorder.attempts.append(
            Attempt(self.address, method, header.client_id, header.call_id)
        )
        outcome = continuation(details, request)
        hook = self.recorder.hook
        return outcome if hook is None else hook(self.address, method, request, outcome)


class NoJitter(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return 1.0


def address(c: NameNodeCluster, nn: str) -> str:
    assert c.settings is not None
    return c.settings.namenode(nn).rpc_address


def namenodes(c: NameNodeCluster, *ids: str) -> list[NameNodeAddress]:
    return [NameNodeAddress(nn, address(c, nn)) for nn in ids]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NameNodeCluster]:
    """nn1 and nn2, both standby: each test chooses the active."""
    with NameNodeCluster(tmp_path) as c:
        yield c


# -- pure policy --------------------------------------------------------------------------------


def test_backoff_is_immediate_then_doubles_up_to_the_cap_with_jitter() -> None:
    policy = RetryPolicy(sleep_base=0.5, sleep_max=15.0)  # HDFS's numbers
    assert [policy.sleep_before(k) for k in range(1, 9)] == [
        0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0,
    ]
    assert policy.sleep_before(9, jitter=1.5) == 22.5
    assert policy.sleep_before(3, jitter=0.5) == 0.5
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


def test_policy_and_namenodes_come_from_the_configuration() -> None:
    base = {
        "dfs.nameservices": "ns1",
        "dfs.ha.namenodes.ns1": "nn2,nn1",
        "dfs.namenode.rpc-address.ns1.nn1": "0.0.0.0:8020",
        "dfs.namenode.rpc-address.ns1.nn2": "10.0.0.2:8020",
    }
    defaults = FailoverProxy.from_settings(Settings.from_mapping(base))
    assert defaults.policy == RetryPolicy(15, 0.05, 1.0, 20.0)
    assert [str(nn) for nn in defaults.namenodes] == [
        "nn2 (10.0.0.2:8020)", "nn1 (127.0.0.1:8020)",  # a wildcard listen address: loopback
    ]
    tuned = Settings.from_mapping(
        {
            **base,
            "dfs.client.failover.max.attempts": "3",
            "dfs.client.failover.sleep.base.millis": "500",
            "dfs.client.failover.sleep.max.millis": "15s",
            "dfs.client.rpc-timeout.ms": "2000",
        }
    )
    assert FailoverProxy.from_settings(tuned).policy == RetryPolicy(3, 0.5, 15.0, 2.0)
    with pytest.raises(ConfigError, match="no NameNodes configured"):
        FailoverProxy.from_settings(Settings.from_mapping({"dfs.nameservices": "ns1"}))


def test_failures_without_an_error_class_are_not_retried_unless_unreachable() -> None:
    class Failed(LostResponse):
        def __init__(self, code: grpc.StatusCode) -> None:
            self._code = code

        def code(self) -> grpc.StatusCode:
            return self._code

    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        error, retriable = classify(Failed(code))
        assert type(error) is NamenodeUnavailableError and retriable
    for code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNIMPLEMENTED):
        error, retriable = classify(Failed(code))
        assert type(error) is NamenodeError and not retriable
        assert code.name in str(error)


# -- finding the active -------------------------------------------------------------------------


def test_finds_the_active_when_nn1_is_standby_and_remembers_it(cluster: NameNodeCluster) -> None:
    cluster.transition_to_active("nn2")
    recorder = Recorder()
    assert cluster.settings is not None
    with HaFsClient(cluster.settings, channel_factory=recorder, sessions=False) as fs:
        assert fs.proxy.current.nn_id == "nn1"  # configured order
        assert fs.mkdirs("/a") is True
        assert [a.address for a in recorder.attempts] == [address(cluster, "nn1"),
                                                          address(cluster, "nn2")]
        assert fs.proxy.current.nn_id == "nn2"
        recorder.attempts.clear()
        assert fs.stat("/a").is_dir
        assert fs.create("/a/f", length=5).length == 5
        # The remembered active is asked first: no attempt on nn1 any more.
        assert {a.address for a in recorder.attempts} == {address(cluster, "nn2")}
        assert recorder.methods() == ["GetFileInfo", "Create"]


def test_manual_failover_between_two_calls_is_transparent(cluster: NameNodeCluster) -> None:
    cluster.transition_to_active("nn1")
    assert cluster.settings is not None
    with HaFsClient(cluster.settings) as fs:
        fs.mkdirs("/before/sub", parents=True)
        before = fs.create("/before/f", length=3)
        cluster.transition_to_standby("nn1")
        cluster.transition_to_active("nn2")
        assert fs.stat("/before/f") == before  # a read after the failover...
        fs.mkdirs("/after")  # ...and a write
        assert fs.proxy.current.nn_id == "nn2"
        assert [s.path for s in fs.list("/")] == ["/after", "/before"]
        assert fs.rename("/before/f", "/after") == "/after/f"
        assert fs.delete("/before", recursive=True) is True
        assert [s.path for s in fs.list("/after")] == ["/after/f"]
        assert fs.mkdirs("/after", parents=True) is False


def test_failover_under_concurrent_writers_loses_no_acknowledged_call(
    cluster: NameNodeCluster,
) -> None:
    cluster.transition_to_active("nn1")
    assert cluster.settings is not None
    stop = threading.Event()
    acked: list[str] = []
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        with HaFsClient(cluster.settings, policy=FAST) as fs:  # type: ignore[arg-type]
            i = 0
            while not stop.is_set():
                path = f"/w{n}-{i}"
                try:
                    fs.mkdirs(path)
                except BaseException as exc:
                    errors.append(exc)
                    return
                acked.append(path)
                i += 1

    threads = [threading.Thread(target=writer, args=(n,), name=f"writer-{n}") for n in range(4)]
    for t in threads:
        t.start()
    try:
        threading.Event().wait(0.3)
        cluster.transition_to_standby("nn1")
        cluster.transition_to_active("nn2")
        threading.Event().wait(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not errors, errors
    listed = {s.path for s in cluster.fsn("nn2").namespace.list("/")}
    assert set(acked) <= listed
    assert len(acked) > 20


# -- at most once -------------------------------------------------------------------------------


def test_retry_after_a_lost_response_and_a_failover_runs_once(cluster: NameNodeCluster) -> None:
    """The first attempt of a create runs on nn1, but its answer is lost and nn1 is failed
    over to nn2 meanwhile; the retry on nn2 carries the same ids and gets the first answer
    (a second execution would be refused: the file exists and overwrite is off)."""
    cluster.transition_to_active("nn1")
    first: list[namenode_pb2.CreateResponse] = []

    def lose_first_create(addr: str, method: str, request: Any, outcome: Any) -> Any:
        if method != "Create" or first:
            return outcome
        first.append(outcome.result())  # the server has run it and made it durable
        cluster.transition_to_standby("nn1")
        cluster.transition_to_active("nn2")
        raise LostResponse()

    recorder = Recorder(hook=lose_first_create)
    with HaFsClient(
        namenodes(cluster, "nn1", "nn2"), policy=FAST, channel_factory=recorder, sessions=False
    ) as fs:
        fs.mkdirs("/d")
        status = fs.create("/d/f", length=42)
        creates = [a for a in recorder.attempts if a.method == "Create"]
        # nn1 (answer lost), then nn2: one logical call, one (client_id, call_id).
        assert [a.address for a in creates] == [address(cluster, "nn1"),
                                                address(cluster, "nn2")]
        assert len({(a.client_id, a.call_id) for a in creates}) == 1
        assert creates[0].client_id == fs.proxy.client_id and len(fs.proxy.client_id) == 16
        assert status.length == 42 and status.mtime_ms == first[0].status.mtime_ms
        assert cluster.fsn("nn2").namespace.file_count == 1
        # A new call is a new execution: now the file exists.
        with pytest.raises(PathExistsError):
            fs.create("/d/f")


def test_a_pinned_call_id_is_answered_from_the_new_actives_retry_cache(
    cluster: NameNodeCluster,
) -> None:
    cluster.transition_to_active("nn1")
    client_id = os.urandom(16)
    done = cluster.fsn("nn1").create(
        "/g", overwrite=True, length=1, client_id=client_id, call_id=41
    )
    cluster.transition_to_standby("nn1")
    cluster.transition_to_active("nn2")

    def create(stub: Any, header: Any, timeout: float) -> namenode_pb2.CreateResponse:
        request = namenode_pb2.CreateRequest(header=header, path="/g", overwrite=True, length=2)
        return stub.Create(request, timeout=timeout)

    with FailoverProxy(namenodes(cluster, "nn1", "nn2"), FAST, client_id=client_id) as proxy:
        applied = cluster.fsn("nn2").last_applied_txid
        retry = proxy.call("create", create, call_id=41)
        # The first answer, and nothing logged: overwrite=True would have re-executed.
        assert retry.txid == done.txid
        assert retry.status.length == 1 and retry.status.mtime_ms == done.result.mtime_ms
        assert cluster.fsn("nn2").last_applied_txid == applied
        fresh = proxy.call("create", create)
        assert fresh.txid > applied and fresh.status.length == 2


def test_a_call_id_reused_for_another_call_is_refused_on_the_new_active(
    cluster: NameNodeCluster,
) -> None:
    """A mkdir's retry-cache entry is no answer to a create with the same ids: over gRPC the
    client gets RetryCallMismatchError (INVALID_ARGUMENT) naming the first call, nothing is
    logged, and the real retry still gets its first answer. Before, the server answered
    INTERNAL (AttributeError: 'bool' object has no attribute 'path'), found by the fuzzer."""
    cluster.transition_to_active("nn1")
    client_id = os.urandom(16)
    cluster.fsn("nn1").mkdirs("/m", client_id=client_id, call_id=7)
    cluster.transition_to_standby("nn1")
    cluster.transition_to_active("nn2")  # the entry came to nn2 by tailing the edit

    def create(stub: Any, header: Any, timeout: float) -> namenode_pb2.CreateResponse:
        return stub.Create(namenode_pb2.CreateRequest(header=header, path="/m2"), timeout=timeout)

    def mkdirs(stub: Any, header: Any, timeout: float) -> namenode_pb2.MkdirsResponse:
        return stub.Mkdirs(namenode_pb2.MkdirsRequest(header=header, path="/m"), timeout=timeout)

    with FailoverProxy(namenodes(cluster, "nn1", "nn2"), FAST, client_id=client_id) as proxy:
        applied = cluster.fsn("nn2").last_applied_txid
        with pytest.raises(RetryCallMismatchError, match=r"call id 7 of client .* was a mkdir"):
            proxy.call("create", create, call_id=7)
        assert cluster.fsn("nn2").last_applied_txid == applied
        assert not cluster.fsn("nn2").namespace.exists("/m2")
        assert proxy.call("mkdirs", mkdirs, call_id=7).created is True


# -- unreachable NameNodes, giving up -----------------------------------------------------------


def test_unreachable_namenodes_are_skipped(cluster: NameNodeCluster) -> None:
    cluster.transition_to_active("nn1")
    refused = NameNodeAddress("dead", f"127.0.0.1:{free_port()}")  # nothing listens
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as mute:
        # Accepts connections (the kernel does) but never speaks HTTP/2: a paused process.
        mute.bind(("127.0.0.1", 0))
        mute.listen(16)
        silent = NameNodeAddress("silent", f"127.0.0.1:{mute.getsockname()[1]}")
        policy = RetryPolicy(max_attempts=8, sleep_base=0.01, sleep_max=0.05, rpc_timeout=0.5)
        recorder = Recorder()
        targets = [refused, silent, *namenodes(cluster, "nn2", "nn1")]
        with HaFsClient(
            targets, policy=policy, channel_factory=recorder, sessions=False
        ) as fs:
            assert fs.mkdirs("/x") is True
            assert [a.address for a in recorder.attempts] == [t.address for t in targets]
            assert fs.proxy.current.nn_id == "nn1"
            # The active goes away for good: the client moves to the other one.
            cluster.transition_to_active("nn2")  # nn1 is fenced at its next write
            cluster.stop_nn("nn1")
            assert fs.stat("/x").is_dir
            assert fs.proxy.current.nn_id == "nn2"


def test_no_active_namenode_gives_up_after_bounded_backoff(cluster: NameNodeCluster) -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=6, sleep_base=0.01, sleep_max=0.04, rpc_timeout=5.0)
    recorder = Recorder()
    proxy = FailoverProxy(
        namenodes(cluster, "nn1", "nn2"),
        policy,
        channel_factory=recorder,
        sleep=sleeps.append,
        rng=NoJitter(),
        sessions=False,
    )
    with HaFsClient(proxy) as fs, pytest.raises(NamenodeUnavailableError) as info:
        fs.mkdirs("/nowhere")
    assert isinstance(info.value.__cause__, StandbyError)
    message = str(info.value)
    assert "no active NameNode answered in 6 attempt(s)" in message
    assert "nn1 (" in message and "nn2 (" in message
    assert "Operation category WRITE is not supported in state standby" in message
    assert [a.address for a in recorder.attempts] == [address(cluster, nn) for nn in
                                                      ("nn1", "nn2") * 3]
    assert len({(a.client_id, a.call_id) for a in recorder.attempts}) == 1
    assert sleeps == [0.01, 0.02, 0.04, 0.04]  # first failover immediate, none after the last


# -- refusals -----------------------------------------------------------------------------------


def test_every_refusal_is_raised_at_once_as_its_named_exception(
    cluster: NameNodeCluster,
) -> None:
    cluster.transition_to_active("nn2")
    sleeps: list[float] = []
    recorder = Recorder()
    proxy = FailoverProxy(
        namenodes(cluster, "nn2", "nn1"), FAST, channel_factory=recorder, sleep=sleeps.append,
        sessions=False,
    )
    with HaFsClient(proxy) as fs:
        fs.mkdirs("/a/b", parents=True)
        fs.create("/a/f")
        fs.create("/a/g")
        cases: list[tuple[type[NamenodeError], Callable[[], object]]] = [
            (PathExistsError, lambda: fs.mkdirs("/a")),
            (PathExistsError, lambda: fs.mkdirs("/a/f")),
            (PathExistsError, lambda: fs.create("/a/f")),
            (PathExistsError, lambda: fs.rename("/a/f", "/a/g")),
            (PathNotFoundError, lambda: fs.mkdirs("/x/y")),
            (PathNotFoundError, lambda: fs.stat("/nope")),
            (PathNotFoundError, lambda: fs.list("/nope")),
            (PathNotFoundError, lambda: fs.delete("/nope")),
            (PathNotFoundError, lambda: fs.rename("/nope", "/z")),
            (PathNotFoundError, lambda: fs.create("/x/y")),
            (ParentNotDirectoryError, lambda: fs.mkdirs("/a/f/g", parents=True)),
            (ParentNotDirectoryError, lambda: fs.create("/a/f/g")),
            (PathIsDirectoryError, lambda: fs.create("/a", overwrite=True)),
            (DirectoryNotEmptyError, lambda: fs.delete("/a")),
            (InvalidOperationError, lambda: fs.delete("/", recursive=True)),
            (InvalidRenameError, lambda: fs.rename("/a", "/a/b/c")),
            (InvalidRenameError, lambda: fs.rename("/", "/r")),
            (InvalidPathError, lambda: fs.mkdirs("relative")),
            (InvalidPathError, lambda: fs.mkdirs("/a//b")),
            (InvalidPathError, lambda: fs.stat("/a/../b")),
            (InvalidArgumentError, lambda: fs.create("/r", replication=100_000)),
            (InvalidArgumentError, lambda: fs.mkdirs("/p", permission=0o77777)),
        ]
        for expected, call in cases:
            before = len(recorder.attempts)
            with pytest.raises(NamenodeError) as info:
                call()
            assert type(info.value) is expected, (expected, info.value)
            assert len(recorder.attempts) == before + 1
        assert not sleeps
        assert {a.address for a in recorder.attempts} == {address(cluster, "nn2")}
        # Nothing refused changed anything.
        assert [s.path for s in fs.list("/a")] == ["/a/b", "/a/f", "/a/g"]
        assert isinstance(fs.stat("/a/f"), StatInfo)
