"""Two (or three) real NameNodes on three real JournalNodes, driven through their gRPC
services: writes on the active, the standby following, manual failover, the retry cache across
a failover, fencing of an old active, and group commit."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from hanamenode.errors import (
    AccessControlError,
    EditLogError,
    NamenodeError,
    PathExistsError,
    StandbyError,
    from_rpc_error,
)
from hanamenode.ha import HAState
from journalnode.journal import Journal
from proto import namenode_pb2
from tests.namenode.cluster import CLIENT_ID, NameNodeCluster, header, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NameNodeCluster]:
    with NameNodeCluster(tmp_path) as c:
        c.transition_to_active("nn1")
        yield c


def rpc_error(call: object) -> NamenodeError:
    """The NamenodeError a failing gRPC call raised, rebuilt as the client would."""
    assert callable(call)
    with pytest.raises(grpc.RpcError) as info:
        call()
    return from_rpc_error(info.value)


def stat(c: NameNodeCluster, nn: str, path: str) -> namenode_pb2.FileStatus:
    request = namenode_pb2.GetFileInfoRequest(header=header(stale=True), path=path)
    return c.client(nn).GetFileInfo(request, timeout=10).status


def test_standby_follows_the_active_after_a_roll(cluster: NameNodeCluster) -> None:
    acked = []
    for i in range(20):
        reply = cluster.mkdir("nn1", f"/dir{i}/sub", create_parent=True)
        assert reply.created
        acked.append((f"/dir{i}/sub", reply.txid))
    client = cluster.client("nn1")
    created = client.Create(
        namenode_pb2.CreateRequest(header=header(), path="/dir0/f", length=42), timeout=10
    )
    assert created.status.length == 42 and created.status.replication == 3
    renamed = client.Rename(
        namenode_pb2.RenameRequest(header=header(), src="/dir0/f", dst="/dir1"), timeout=10
    )
    assert renamed.final_path == "/dir1/f"
    deleted = client.Delete(
        namenode_pb2.DeleteRequest(header=header(), path="/dir2", recursive=True), timeout=10
    )
    assert deleted.deleted
    # The standby sees finalized segments only: the tailer's periodic roll request finalizes
    # the active's segment within the roll period (0.5 s).
    cluster.wait_caught_up("nn2", deleted.txid)
    for path, _ in acked[3:]:
        assert stat(cluster, "nn2", path).is_dir
    assert stat(cluster, "nn2", "/dir1/f").length == 42
    # Segment markers aside, the standby now holds the active's namespace.
    assert cluster.fsn("nn2").namespace.snapshot() == cluster.fsn("nn1").namespace.snapshot()
    listing = cluster.client("nn2").GetListing(
        namenode_pb2.GetListingRequest(header=header(stale=True), path="/"), timeout=10
    )
    assert [e.path for e in listing.entries][:2] == ["/dir0", "/dir1"]
    assert cluster.server("nn2").metrics.value("hanamenode_tailer_txns_applied_total") > 0
    # Prometheus scrapes the same registry over HTTP.
    port = cluster.server("nn1").metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    assert 'hanamenode_ha_state{state="active"} 1.0' in text
    assert "hanamenode_edit_log_sync_seconds_bucket" in text
    assert "hanamenode_last_applied_txid" in text


def test_standby_refuses_writes_and_fresh_reads(cluster: NameNodeCluster) -> None:
    standby = cluster.client("nn2")
    error = rpc_error(
        lambda: standby.Mkdirs(namenode_pb2.MkdirsRequest(header=header(), path="/x"), timeout=5)
    )
    assert isinstance(error, StandbyError)
    assert "Operation category WRITE is not supported in state standby" in str(error)
    error = rpc_error(
        lambda: standby.GetFileInfo(
            namenode_pb2.GetFileInfoRequest(header=header(), path="/"), timeout=5
        )
    )
    assert isinstance(error, StandbyError) and "READ" in str(error)
    assert stat(cluster, "nn2", "/").is_dir  # a stale read is allowed
    status = cluster.ha("nn2").GetServiceStatus(namenode_pb2.HAEmpty(), timeout=5)
    assert status.state == namenode_pb2.STANDBY and status.namenode_id == "nn2"
    status = cluster.ha("nn1").GetServiceStatus(namenode_pb2.HAEmpty(), timeout=5)
    assert status.state == namenode_pb2.ACTIVE and status.epoch >= 1
    cluster.ha("nn1").MonitorHealth(namenode_pb2.HAEmpty(), timeout=5)
    cluster.ha("nn2").MonitorHealth(namenode_pb2.HAEmpty(), timeout=5)


def test_manual_failover_keeps_every_acknowledged_edit(cluster: NameNodeCluster) -> None:
    acked = [cluster.mkdir("nn1", f"/before{i}").txid for i in range(30)]
    cluster.transition_to_standby("nn1")
    cluster.transition_to_standby("nn1")  # idempotent
    cluster.transition_to_active("nn2")
    cluster.transition_to_active("nn2")  # idempotent
    assert cluster.fsn("nn1").state is HAState.STANDBY
    assert cluster.fsn("nn2").state is HAState.ACTIVE
    for i in range(30):
        assert stat(cluster, "nn2", f"/before{i}").is_dir
    after = cluster.mkdir("nn2", "/after")
    assert after.txid > max(acked)
    # The old active follows the new one like any standby.
    cluster.wait_caught_up("nn1", after.txid)
    assert stat(cluster, "nn1", "/after").is_dir
    assert cluster.server("nn2").metrics.value(
        "hanamenode_ha_transitions_total", {"to_state": "active"}
    ) == 1


def test_retry_after_failover_gets_the_first_answer(cluster: NameNodeCluster) -> None:
    client = cluster.client("nn1")
    cluster.mkdir("nn1", "/d")
    create = namenode_pb2.CreateRequest(header=header(CLIENT_ID, 1001), path="/d/f", length=7)
    first_create = client.Create(create, timeout=10)
    delete = namenode_pb2.DeleteRequest(header=header(CLIENT_ID, 1002), path="/d/f")
    mkdir = namenode_pb2.MkdirsRequest(header=header(CLIENT_ID, 1003), path="/e")
    # A retry on the same active is answered from the cache, not executed again.
    assert client.Create(create, timeout=10) == first_create
    first_mkdir = client.Mkdirs(mkdir, timeout=10)
    first_delete = client.Delete(delete, timeout=10)
    last_txid = cluster.fsn("nn1").last_applied_txid

    cluster.transition_to_standby("nn1")
    cluster.transition_to_active("nn2")
    new_active = cluster.client("nn2")
    applied = cluster.fsn("nn2").last_applied_txid
    assert applied > last_txid  # the end marker and the new segment's start marker
    # The same (client_id, call_id) on the new active: the first answers, nothing executed.
    assert new_active.Create(create, timeout=10) == first_create
    assert new_active.Delete(delete, timeout=10) == first_delete
    assert new_active.Mkdirs(mkdir, timeout=10) == first_mkdir
    assert cluster.fsn("nn2").last_applied_txid == applied
    # A new call id is a new call: the file is gone, the directory exists.
    error = rpc_error(
        lambda: new_active.Mkdirs(namenode_pb2.MkdirsRequest(header=header(), path="/e"))
    )
    assert isinstance(error, PathExistsError)


def test_old_active_that_was_not_told_is_fenced_and_steps_down(
    cluster: NameNodeCluster,
) -> None:
    acked = [cluster.mkdir("nn1", f"/a{i}").txid for i in range(5)]
    # nn2 becomes active without nn1 being told (a partitioned old active): the new epoch
    # fences nn1 on the JournalNodes.
    cluster.fsn("nn2").transition_to_active()
    # nn1 learns it from its next heartbeat or write, whichever comes first (issue 11), and
    # refuses the write either way.
    error = rpc_error(lambda: cluster.mkdir("nn1", "/from-the-old-active"))
    assert isinstance(error, EditLogError | StandbyError), error
    assert "fenced" in str(error) or "sync" in str(error) or "standby" in str(error)
    wait_for(lambda: cluster.fsn("nn1").state is HAState.STANDBY, what="nn1 to step down")
    assert cluster.server("nn1").metrics.value("hanamenode_edit_log_failures_total") == 1
    for i in range(5):
        assert stat(cluster, "nn2", f"/a{i}").is_dir
    new = cluster.mkdir("nn2", "/b")
    assert new.txid > max(acked)
    cluster.wait_caught_up("nn1", new.txid)
    assert stat(cluster, "nn1", "/b").is_dir
    # The old active reloaded from its image and replayed the durable log: it matches.
    wait_for(
        lambda: cluster.fsn("nn1").namespace.snapshot() == cluster.fsn("nn2").namespace.snapshot(),
        what="equal namespaces",
    )


def test_group_commit_batches_concurrent_mkdirs(cluster: NameNodeCluster) -> None:
    metrics = cluster.server("nn1").metrics
    syncs_before = metrics.value("hanamenode_edit_log_syncs_total")
    txns_before = metrics.value("hanamenode_edit_log_txns_synced_total")
    threads, per_thread = 16, 25
    acked: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def worker(t: int) -> None:
        start.wait(timeout=10)
        try:
            for i in range(per_thread):
                path = f"/t{t}-{i}"
                cluster.mkdir("nn1", path)
                with lock:
                    acked.append(path)
        except BaseException as exc:
            errors.append(exc)

    pool = [
        threading.Thread(target=worker, args=(t,), name=f"mkdir-{t}") for t in range(threads)
    ]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=30)
    assert not errors
    ops = threads * per_thread
    assert len(acked) == ops
    syncs = metrics.value("hanamenode_edit_log_syncs_total") - syncs_before
    synced = metrics.value("hanamenode_edit_log_txns_synced_total") - txns_before
    assert synced >= ops
    assert syncs < ops, f"{syncs} syncs for {ops} ops: no group commit"
    # Every acknowledged mkdir is durable: the next active has them all.
    cluster.transition_to_standby("nn1")
    cluster.transition_to_active("nn2")
    listing = cluster.client("nn2").GetListing(
        namenode_pb2.GetListingRequest(header=header(), path="/"), timeout=10
    )
    assert {e.path for e in listing.entries} >= set(acked)


def test_three_namenodes_one_active_two_standbys(tmp_path: Path) -> None:
    with NameNodeCluster(tmp_path, namenodes=3) as c:
        c.transition_to_active("nn1")
        first = c.mkdir("nn1", "/one")
        c.wait_caught_up("nn2", first.txid)
        c.wait_caught_up("nn3", first.txid)
        c.transition_to_standby("nn1")
        c.transition_to_active("nn3")
        assert [c.fsn(nn).state for nn in c.ids] == [
            HAState.STANDBY, HAState.STANDBY, HAState.ACTIVE
        ]
        second = c.mkdir("nn3", "/three")
        for nn in ("nn1", "nn2"):
            c.wait_caught_up(nn, second.txid)
            assert stat(c, nn, "/one").is_dir and stat(c, nn, "/three").is_dir
        # The standbys' roll requests find the new active among the others.
        wait_for(
            lambda: c.server("nn2").metrics.value(
                "hanamenode_tailer_roll_requests_total", {"outcome": "ok"}
            ) > 0,
            what="nn2's roll request answered by nn3",
        )


def test_manual_transitions_need_forcemanual_with_automatic_failover(tmp_path: Path) -> None:
    conf = {"dfs.ha.automatic-failover.enabled": "true", "ha.zookeeper.quorum": "127.0.0.1:1"}
    with NameNodeCluster(tmp_path, conf=conf) as c:
        by_user = namenode_pb2.TransitionRequest(source=namenode_pb2.REQUEST_BY_USER)
        error = rpc_error(lambda: c.ha("nn1").TransitionToActive(by_user, timeout=10))
        assert isinstance(error, AccessControlError) and "--forcemanual" in str(error)
        assert c.fsn("nn1").state is HAState.STANDBY
        for source in (namenode_pb2.REQUEST_BY_USER_FORCED, namenode_pb2.REQUEST_BY_ZKFC):
            request = namenode_pb2.TransitionRequest(source=source)
            c.ha("nn1").TransitionToActive(request, timeout=10)
            assert c.fsn("nn1").state is HAState.ACTIVE
            c.ha("nn1").TransitionToStandby(request, timeout=10)
            assert c.fsn("nn1").state is HAState.STANDBY


def test_in_progress_tailing_shows_edits_before_any_roll(tmp_path: Path) -> None:
    """dfs.ha.tail-edits.in-progress: with rolls an hour apart the standby still follows the
    active's open segment (edits a majority of JournalNodes hold), and a failover to it loses
    nothing and applies nothing twice."""
    conf = {"dfs.ha.tail-edits.in-progress": "true", "dfs.ha.log-roll.period": "3600"}
    with NameNodeCluster(tmp_path, conf=conf) as c:
        c.transition_to_active("nn1")
        acked = [c.mkdir("nn1", f"/open{i}").txid for i in range(25)]
        c.wait_caught_up("nn2", max(acked))
        for i in range(25):
            assert stat(c, "nn2", f"/open{i}").is_dir
        # Nothing was finalized: every edit came out of the open segment.
        for jn_dir in c.journal.dirs:
            names = [p.name for p in (jn_dir / "ns1" / "current").iterdir()]
            assert not [n for n in names if n.startswith("edits_") and "inprogress" not in n]
        assert c.fsn("nn2").namespace.snapshot() == c.fsn("nn1").namespace.snapshot()
        c.transition_to_standby("nn1")
        c.transition_to_active("nn2")
        after = c.mkdir("nn2", "/after")
        assert after.txid > max(acked)
        for i in range(25):
            assert stat(c, "nn2", f"/open{i}").is_dir
        c.wait_caught_up("nn1", after.txid)
        assert c.fsn("nn1").namespace.snapshot() == c.fsn("nn2").namespace.snapshot()


def test_a_roll_whose_caller_goes_away_still_ends_in_a_new_segment(
    cluster: NameNodeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower asks the active to roll and is killed (or its deadline passes) while the
    JournalNodes finalize: gRPC cancels the call's coroutine. The roll must not stop
    half-way, between the finalized segment and the next one, where the active would refuse
    every write ("no active segment") until it stepped down."""
    assert cluster.mkdir("nn1", "/before-roll").created
    finalize = Journal.finalize_log_segment
    finalizing, caller_gone = threading.Event(), threading.Event()

    def slow_finalize(self: Journal, *args: Any, **kwargs: Any) -> Any:
        finalizing.set()
        caller_gone.wait(10)  # held until the caller's deadline has passed, however slow
        return finalize(self, *args, **kwargs)

    monkeypatch.setattr(Journal, "finalize_log_segment", slow_finalize)
    # A deadline long enough for the roll to reach the finalize on a loaded machine (0.2 s
    # failed a fresh run beside a power-cut soak), short enough that it passes there.
    with pytest.raises(grpc.RpcError) as info:
        cluster.namenode("nn1").RollEditLog(namenode_pb2.HAEmpty(), timeout=2.0)
    assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert finalizing.is_set()
    caller_gone.set()
    monkeypatch.setattr(Journal, "finalize_log_segment", finalize)
    time.sleep(1.0)  # the roll, if it goes on, is done by now
    assert cluster.mkdir("nn1", "/after-roll").created
    assert cluster.fsn("nn1").state is HAState.ACTIVE


def test_rolls_asked_together_under_writes_end_each_segment_where_it_was_written(
    cluster: NameNodeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The standby and an observer both ask the active to roll, while clients write. Only
    one roll may pass the write gate at a time: a roll that waited for another must not
    start while the gate is open, or the writes logged after its end marker make the
    JournalNodes refuse the finalize ('only written up to txid ...') and the active fails
    (bench/namenode_ops.py --observers-only met it)."""
    assert cluster.mkdir("nn1", "/before").created
    finalize = Journal.finalize_log_segment

    def slow_finalize(self: Journal, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)  # the other rolls and the writers queue up meanwhile
        return finalize(self, *args, **kwargs)

    monkeypatch.setattr(Journal, "finalize_log_segment", slow_finalize)
    stop = threading.Event()
    written: list[int] = []
    errors: list[BaseException] = []

    def write(who: int) -> None:
        try:
            while not stop.is_set():
                written.append(cluster.mkdir("nn1", f"/w{who}-{len(written)}").txid)
        except BaseException as exc:  # the assertion below reports it
            errors.append(exc)

    def roll() -> None:
        try:
            cluster.namenode("nn1").RollEditLog(namenode_pb2.HAEmpty(), timeout=20)
        except BaseException as exc:  # the assertion below reports it
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for w in writers:
        w.start()
    wait_for(lambda: len(written) >= 5, timeout=10, what="writes before the rolls")
    for _ in range(2):  # two rounds: the interleaving is likely, not certain, in one
        rollers = [threading.Thread(target=roll) for _ in range(5)]
        for r in rollers:
            r.start()
        for r in rollers:
            r.join(timeout=30)
    stop.set()
    for w in writers:
        w.join(timeout=30)
    assert errors == []
    assert cluster.fsn("nn1").state is HAState.ACTIVE
    assert cluster.mkdir("nn1", "/after").created


@pytest.mark.parametrize("observers_roll", [False, True], ids=["default", "observers-roll"])
def test_an_observer_asks_for_rolls_only_when_configured_to(
    tmp_path: Path, observers_roll: bool
) -> None:
    """An observer that tails the in-progress segment sees every edit without rolls, so by
    default it does not ask the active for one (each would cost the active's writes two
    JournalNode round trips; HDFS-16513). ``dfs.ha.log-roll.observers`` brings its rolls
    back. The standby asks in either case."""
    conf = {
        "dfs.ha.tail-edits.in-progress": True,
        "dfs.ha.tail-edits.period": "0.1",
        "dfs.ha.log-roll.period": "0.2",
        "dfs.ha.log-roll.observers": observers_roll,
        "dfs.namenode.observer.ns1.nn3": True,  # an observer from its start, never a standby
    }
    with NameNodeCluster(tmp_path, namenodes=3, conf=conf) as c:
        assert c.fsn("nn3").state is HAState.OBSERVER
        c.transition_to_active("nn1")
        last = 0
        for i in range(10):
            last = c.mkdir("nn1", f"/o{i}").txid
            time.sleep(0.1)
        wait_for(
            lambda: c.fsn("nn3").namespace.last_applied_txid >= last,
            what="the observer to apply every edit",
        )

        def asked(nn: str) -> float:
            return c.server(nn).metrics.value(
                "hanamenode_tailer_roll_requests_total", {"outcome": "ok"}
            )

        def tried(nn: str) -> float:
            return asked(nn) + c.server(nn).metrics.value(
                "hanamenode_tailer_roll_requests_total", {"outcome": "failed"}
            )

        # With pushed edits a tailer's round (and its roll check) comes once a second, and
        # its first ask may come before nn1 is active (a failed ask): wait for two answered
        # asks rather than look at one moment. The observer had the same chances meanwhile.
        wait_for(lambda: asked("nn2") >= 2, timeout=30, what="the standby's rolls")
        if observers_roll:
            wait_for(lambda: asked("nn3") >= 1, timeout=30, what="the observer's rolls")
        else:
            assert tried("nn3") == 0, "the observer asked for a roll"


def autoroll_conf(txns: int, multiplier: float, interval_ms: int) -> dict[str, Any]:
    """Auto-roll at ``multiplier`` x ``txns`` edits, checked every ``interval_ms``; nobody
    asks for rolls (the standby's period is an hour)."""
    return {
        "dfs.ha.log-roll.period": "1h",
        "dfs.namenode.checkpoint.txns": txns,
        "dfs.namenode.edit.log.autoroll.multiplier.threshold": multiplier,
        "dfs.namenode.edit.log.autoroll.check.interval.ms": interval_ms,
    }


def test_the_active_rolls_a_grown_segment_by_itself(tmp_path: Path) -> None:
    """With nobody asking for rolls (no standby asks within the test; observers do not ask),
    the active still rolls a segment that has grown past its threshold
    (dfs.namenode.edit.log.autoroll.*, as HDFS's autoroll), so the log does not grow as one
    segment for ever; a segment below it is left alone."""
    conf = autoroll_conf(txns=20, multiplier=0.5, interval_ms=100)  # 10 txns
    with NameNodeCluster(tmp_path, conf=conf) as c:
        c.transition_to_active("nn1")
        fsn = c.fsn("nn1")

        def rolls() -> float:
            return c.server("nn1").metrics.value("hanamenode_edit_log_rolls_total")

        for i in range(5):
            c.mkdir("nn1", f"/small{i}")
        time.sleep(0.5)  # five intervals: 6 txns in the segment, below the threshold
        assert rolls() == 0
        for i in range(10):
            c.mkdir("nn1", f"/grown{i}")
        wait_for(lambda: rolls() >= 1, timeout=10, what="the active's own roll")
        assert c.mkdir("nn1", "/after").created
        assert fsn.state is HAState.ACTIVE


def test_the_active_rolls_by_itself_again_after_an_unexpected_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error that is not the edit log's (a bug) is logged and the next check tries again:
    the loop does not end silently and leave the segment to grow."""
    conf = autoroll_conf(txns=4, multiplier=1, interval_ms=100)
    with NameNodeCluster(tmp_path, conf=conf) as c:
        c.transition_to_active("nn1")
        fsn = c.fsn("nn1")
        real = fsn.roll_edit_log_async
        calls = []

        async def fails_once() -> int:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("planted: the first roll raises")
            return await real()

        monkeypatch.setattr(fsn, "roll_edit_log_async", fails_once)
        for i in range(6):
            c.mkdir("nn1", f"/d{i}")
        wait_for(
            lambda: c.server("nn1").metrics.value("hanamenode_edit_log_rolls_total") >= 1,
            timeout=10,
            what="a roll after the one that raised",
        )
        assert len(calls) >= 2 and fsn.state is HAState.ACTIVE


def test_autoroll_off_never_rolls(tmp_path: Path) -> None:
    conf = autoroll_conf(txns=2, multiplier=0, interval_ms=50)
    with NameNodeCluster(tmp_path, conf=conf) as c:
        c.transition_to_active("nn1")
        for i in range(10):
            c.mkdir("nn1", f"/d{i}")
        time.sleep(0.5)
        assert c.server("nn1").metrics.value("hanamenode_edit_log_rolls_total") == 0
