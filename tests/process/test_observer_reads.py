"""Observer NameNodes on real processes (issue 14 §1, docs/consistency.md §9): an observer held
far behind refuses a client's read with ``ObserverBehindError`` and serves it once it has
caught up; read-your-writes across two clients with ``msync``; the HA transitions between
standby and observer, and their refusals.

nn1 is active, nn2 standby, nn3 an observer (``dfs.namenode.observer.ns1.nn3``). In-progress
tailing is off and nobody asks for a roll (the roll period is an hour), so the observer
applies nothing new until the test itself rolls the active's log (``RollEditLog``): that holds
it behind as long as a test needs, with no pause or planted switch, and a roll lets it catch
up.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

from conf.rpc import make_channel
from hadev.namenodes import NameNodeProcessCluster, get_service_status, transition
from hadev.pki import CLIENT
from hadev.scrape import metric_value
from hanamenode.client import HaFsClient, RetryPolicy
from hanamenode.errors import (
    NamenodeError,
    ObserverBehindError,
    PathNotFoundError,
    ServiceFailedError,
    StandbyError,
    from_rpc_error,
)
from hanamenode.ha import SEEN_TXID_KEY, STATE_TXID_KEY, HAState
from proto import namenode_pb2, namenode_pb2_grpc
from tests.namenode.cluster import header, wait_for
from tests.status_schema import schema_problems

pytestmark = pytest.mark.timeout(180)

CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    "dfs.ha.tail-edits.in-progress": False,
    "dfs.ha.log-roll.period": "1h",
    "dfs.namenode.observer.read.max-wait.ms": 300,
    "dfs.qjournal.heartbeat.interval.ms": "200",
}
POLICY = RetryPolicy(max_attempts=10, sleep_base=0.01, sleep_max=0.1, rpc_timeout=10.0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NameNodeProcessCluster]:
    with NameNodeProcessCluster(
        tmp_path_factory.mktemp("observer"), namenodes=3, observers=1, extra_conf=CONF
    ) as c:
        c.transition_to_active("nn1")
        yield c


def stub(c: NameNodeProcessCluster, nn: str) -> namenode_pb2_grpc.ClientProtocolStub:
    return namenode_pb2_grpc.ClientProtocolStub(make_channel(c[nn].address, c.tls_for(CLIENT)))


def metric(c: NameNodeProcessCluster, nn: str, name: str, **labels: str) -> float:
    return metric_value(c[nn].metrics_url, name, **labels)


def observer_reads(c: NameNodeProcessCluster, outcome: str) -> float:
    return metric(c, "nn3", "hanamenode_observer_reads_total", outcome=outcome)


def applied(c: NameNodeProcessCluster, nn: str) -> int:
    return int(get_service_status(c[nn].address, c[nn].tls, timeout=20).last_applied_txid)


def roll(c: NameNodeProcessCluster) -> None:
    """Finalize the active's segment: the observer's tailer then reads it within a period."""
    channel = make_channel(c["nn1"].address, c.tls_for("nn2"))  # RollEditLog: a NameNode
    try:
        namenode_pb2_grpc.NamenodeProtocolStub(channel).RollEditLog(
            namenode_pb2.HAEmpty(), timeout=10
        )
    finally:
        channel.close()


def stat_on(
    c: NameNodeProcessCluster, nn: str, path: str, seen: int
) -> tuple[namenode_pb2.GetFileInfoResponse, int]:
    """GetFileInfo sent to ``nn`` alone with ``hn-seen-txid`` = ``seen``: the answer and its
    ``hn-state-txid``."""
    request = namenode_pb2.GetFileInfoRequest(header=header(), path=path)
    reply, call = stub(c, nn).GetFileInfo.with_call(
        request, timeout=10, metadata=((SEEN_TXID_KEY, str(seen)),)
    )
    state = dict(call.trailing_metadata() or ())
    return reply, int(state[STATE_TXID_KEY])


def refused(call: object) -> NamenodeError:
    assert callable(call)
    with pytest.raises(grpc.RpcError) as info:
        call()
    return from_rpc_error(info.value)


def test_a_lagging_observer_refuses_then_serves_once_caught_up(
    cluster: NameNodeProcessCluster,
) -> None:
    with HaFsClient(cluster.settings(), policy=POLICY) as fs:
        assert fs.proxy.observer_reads  # from the configuration: nn3 is an observer
        fs.mkdirs("/lag")
        txid = fs.proxy.seen_txid
        assert txid > applied(cluster, "nn3"), "the observer must be behind the write"
        behind = observer_reads(cluster, "behind")

        # Sent to the observer alone: refused with the retriable error, after the wait.
        error = refused(lambda: stat_on(cluster, "nn3", "/lag", txid))
        assert isinstance(error, ObserverBehindError) and isinstance(error, StandbyError)
        assert f"behind txid {txid}" in str(error)
        # Through the proxy: the observer refuses, the active answers; no error reaches us.
        assert fs.stat("/lag").is_dir
        assert observer_reads(cluster, "behind") >= behind + 2

        roll(cluster)
        wait_for(lambda: applied(cluster, "nn3") >= txid, 20, "the observer to catch up")
        reply, state = stat_on(cluster, "nn3", "/lag", txid)
        assert reply.status.is_dir and state >= txid
        served = observer_reads(cluster, "served")
        assert fs.stat("/lag").is_dir
        assert observer_reads(cluster, "served") == served + 1  # answered by the observer


def test_read_your_writes_across_clients_with_msync(cluster: NameNodeProcessCluster) -> None:
    settings = cluster.settings()
    with HaFsClient(settings, policy=POLICY) as writer, HaFsClient(
        settings, policy=POLICY
    ) as reader:
        reader.mkdirs("/ryw", parents=True)
        assert reader.list("/ryw") == []  # the first read: msync; the observer is behind it
        roll(cluster)
        wait_for(
            lambda: applied(cluster, "nn3") >= reader.proxy.seen_txid, 20, "observer catch-up"
        )
        served = observer_reads(cluster, "served")
        assert reader.list("/ryw") == []
        assert observer_reads(cluster, "served") == served + 1  # the observer answered
        start = reader.proxy.seen_txid

        writer.mkdirs("/ryw/new")
        # Without msync the reader has not seen the write: the observer, behind it, answers
        # from the state the reader had seen (monotonic, but not linearizable).
        served = observer_reads(cluster, "served")
        with pytest.raises(PathNotFoundError):
            reader.stat("/ryw/new")
        assert observer_reads(cluster, "served") == served + 1
        assert reader.proxy.seen_txid == start

        # msync makes the active's latest txid the reader's: now it sees the write (from the
        # active, since the observer is behind it), and never again reads older.
        assert reader.msync() >= writer.proxy.seen_txid
        assert reader.stat("/ryw/new").is_dir
        roll(cluster)
        wait_for(
            lambda: applied(cluster, "nn3") >= reader.proxy.seen_txid, 20, "observer catch-up"
        )
        served = observer_reads(cluster, "served")
        assert [s.path for s in reader.list("/ryw")] == ["/ryw/new"]
        assert observer_reads(cluster, "served") == served + 1


def test_an_observer_refuses_mutations_and_msync_as_a_standby(
    cluster: NameNodeProcessCluster,
) -> None:
    mkdir = namenode_pb2.MkdirsRequest(header=header(), path="/on-observer")
    error = refused(lambda: stub(cluster, "nn3").Mkdirs(mkdir, timeout=10))
    assert type(error) is StandbyError and "state observer" in str(error)
    msync = namenode_pb2.MsyncRequest(header=header())
    assert type(refused(lambda: stub(cluster, "nn3").Msync(msync, timeout=10))) is StandbyError
    bad = namenode_pb2.GetFileInfoRequest(header=header(), path="/")
    error = refused(
        lambda: stub(cluster, "nn3").GetFileInfo(
            bad, timeout=10, metadata=((SEEN_TXID_KEY, "-1"),)
        )
    )
    assert "hn-seen-txid" in str(error) and "'-1'" in str(error)


def test_transitions_between_standby_and_observer(cluster: NameNodeProcessCluster) -> None:
    nn1, nn3 = cluster["nn1"], cluster["nn3"]
    status = get_service_status(nn3.address, nn3.tls)
    assert status.state == namenode_pb2.OBSERVER and not status.ready_to_become_active
    assert "observer" in status.not_ready_reason

    error = refused_transition(lambda: transition(nn3.address, HAState.ACTIVE, tls=nn3.tls))
    assert isinstance(error, ServiceFailedError) and "is an observer" in str(error)
    error = refused_transition(lambda: transition(nn1.address, HAState.OBSERVER, tls=nn1.tls))
    assert isinstance(error, ServiceFailedError) and "is active" in str(error)
    assert nn1.state() is HAState.ACTIVE

    transition(nn3.address, HAState.STANDBY, tls=nn3.tls)
    assert nn3.state() is HAState.STANDBY
    transition(nn3.address, HAState.OBSERVER, tls=nn3.tls)
    assert nn3.state() is HAState.OBSERVER


def refused_transition(call: object) -> NamenodeError:
    assert callable(call)
    with pytest.raises(NamenodeError) as info:
        call()
    return info.value


def test_the_status_pages_and_metrics_show_the_observer(cluster: NameNodeProcessCluster) -> None:
    documents = []
    for nn in ("nn1", "nn2", "nn3"):
        url = cluster[nn].status_url
        assert url is not None
        with urllib.request.urlopen(url + ".json", timeout=10) as answer:
            documents.append(json.load(answer))
    assert [d["ha_state"] for d in documents] == ["active", "standby", "observer"]
    assert schema_problems("NameNode", documents) == []
    observer = documents[2]["observer"]
    assert observer["max_wait_seconds"] == 0.3 and observer["reads_served"] >= 1
    assert documents[0]["observer"] is None and documents[2]["tailer"] is not None
    url = cluster["nn3"].status_url
    assert url is not None
    with urllib.request.urlopen(url, timeout=10) as answer:
        page = answer.read().decode()
    assert re.search(r"<span id='ha-state' class='state warn'[^>]*>observer</span>", page), page
    assert "id='observer'" in page
    assert metric(cluster, "nn3", "hanamenode_ha_state", state="observer") == 1
    assert metric(cluster, "nn1", "hanamenode_ha_state", state="observer") == 0

