"""Issue 11 on real processes: the active answers nothing once it may be deposed.

JournalNode and NameNode processes on loopback, real signals. A second writer that takes a
new epoch fences the active through its heartbeats alone (no client call needed), and a
step-down stalled on paused JournalNodes refuses reads at once instead of answering as the
active from a namespace it is about to give up.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from conf.rpc import make_channel
from hadev.namenodes import NameNodeProcessCluster
from hadev.pki import CLIENT
from hanamenode.errors import NamenodeError, StandbyError, from_rpc_error
from hanamenode.ha import HAState
from hanamenode.storage import NameDirectory
from journalnode.errors import JournalUnavailableError
from proto import namenode_pb2, namenode_pb2_grpc
from qjm.errors import QuorumException
from qjm.journal_manager import QuorumJournalManager
from tests.namenode.cluster import header, wait_for

pytestmark = pytest.mark.timeout(120)

FAST_CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    "dfs.ha.log-roll.period": "0.5",
    "dfs.qjournal.heartbeat.interval.ms": "200",
    # A stalled END-op sync lasts this long: far more than the reads below may wait.
    "dfs.qjournal.write-txns.timeout.ms": "6000",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NameNodeProcessCluster]:
    with NameNodeProcessCluster(tmp_path, extra_conf=FAST_CONF) as c:
        c.transition_to_active("nn1")
        yield c


def client(c: NameNodeProcessCluster, nn: str) -> namenode_pb2_grpc.ClientProtocolStub:
    return namenode_pb2_grpc.ClientProtocolStub(make_channel(c[nn].address, c.tls_for(CLIENT)))


def stat(stub: namenode_pb2_grpc.ClientProtocolStub, path: str, timeout: float = 10) -> object:
    request = namenode_pb2.GetFileInfoRequest(header=header(), path=path)
    return stub.GetFileInfo(request, timeout=timeout).status


def refusal(call: object) -> NamenodeError:
    assert callable(call)
    with pytest.raises(grpc.RpcError) as info:
        call()
    return from_rpc_error(info.value)


def test_a_newer_epoch_fences_the_idle_active_through_its_heartbeats(tmp_path: Path) -> None:
    # One NameNode: no standby asks it to roll, so only its heartbeats talk to the journal.
    with NameNodeProcessCluster(tmp_path, namenodes=1, extra_conf=FAST_CONF) as cluster:
        cluster.transition_to_active("nn1")
        _fenced_through_heartbeats(cluster)


def take_epoch(usurper: QuorumJournalManager, attempts: int = 5) -> None:
    """newEpoch as a new active would; a connection that is not up yet on a loaded machine
    (UNAVAILABLE before any JournalNode answered) is tried again, nothing else is."""
    for attempt in range(1, attempts + 1):
        try:
            usurper.create_new_unique_epoch()
            return
        except QuorumException as exc:
            unreached = all(isinstance(e, JournalUnavailableError) for e in exc.exceptions.values())
            if not unreached or attempt == attempts:
                raise
            time.sleep(0.5)


def _fenced_through_heartbeats(cluster: NameNodeProcessCluster) -> None:
    nn1 = client(cluster, "nn1")
    nn1.Mkdirs(namenode_pb2.MkdirsRequest(header=header(), path="/a"), timeout=10)
    assert stat(nn1, "/a")
    # Another writer takes a new epoch on the JournalNodes (as a new active would), and
    # nobody calls nn1: it must learn from its own heartbeats and leave ACTIVE.
    ns_info = NameDirectory(cluster.name_dir("nn1")).read_version()
    with QuorumJournalManager.connect(
        cluster.journal.addresses, "ns1", ns_info, tls=cluster.tls_for("nn1")
    ) as usurper:
        take_epoch(usurper)
        started = time.monotonic()
        wait_for(
            lambda: cluster.state("nn1") is not HAState.ACTIVE,
            timeout=10,
            what="the fenced active to leave ACTIVE without any client call",
        )
        print(f"left ACTIVE {time.monotonic() - started:.3f}s after the newer epoch")
    assert isinstance(refusal(lambda: stat(nn1, "/a")), StandbyError)
    assert "fenced" in cluster["nn1"].log_text()


def test_a_read_after_a_newer_epoch_is_refused_at_once(cluster: NameNodeProcessCluster) -> None:
    # The read-index round of the read itself meets the newer epoch, whatever the
    # heartbeats have or have not noticed yet.
    nn1 = client(cluster, "nn1")
    nn1.Mkdirs(namenode_pb2.MkdirsRequest(header=header(), path="/a"), timeout=10)
    ns_info = NameDirectory(cluster.name_dir("nn1")).read_version()
    with QuorumJournalManager.connect(
        cluster.journal.addresses, "ns1", ns_info, tls=cluster.tls_for("nn1")
    ) as usurper:
        take_epoch(usurper)
        assert isinstance(refusal(lambda: stat(nn1, "/a")), StandbyError)
        mkdir_p = namenode_pb2.MkdirsRequest(header=header(), path="/a", create_parent=True)
        assert isinstance(
            refusal(lambda: nn1.Mkdirs(mkdir_p, timeout=10)), StandbyError
        )


def test_a_stalled_step_down_refuses_reads_at_once(cluster: NameNodeProcessCluster) -> None:
    nn1 = client(cluster, "nn1")
    nn1.Mkdirs(namenode_pb2.MkdirsRequest(header=header(), path="/a"), timeout=10)
    # Pause a majority of JournalNodes: the step-down's END-op sync now waits for the write
    # timeout (6 s).
    paused = [cluster.journal[0], cluster.journal[1]]
    for jn in paused:
        jn.kill(signal.SIGSTOP)
    errors: list[BaseException] = []

    def step_down() -> None:
        try:
            cluster.transition_to_standby("nn1")
        except BaseException as exc:  # reported below
            errors.append(exc)

    stepping = threading.Thread(target=step_down, name="step-down")
    try:
        stepping.start()
        wait_for(
            lambda: "leaving active state" in cluster["nn1"].log_text(),
            timeout=10,
            what="nn1 to begin its step-down",
        )
        started = time.monotonic()
        refused = refusal(lambda: stat(nn1, "/a", timeout=3))
        # Refused, not answered and not left waiting on the paused JournalNodes.
        assert isinstance(refused, StandbyError), refused
        assert stepping.is_alive(), "the step-down ended before the read was refused"
        print(f"read refused {time.monotonic() - started:.3f}s into a stalled step-down")
    finally:
        for jn in paused:
            jn.kill(signal.SIGCONT)
        stepping.join(60)
    assert not errors, errors
    assert cluster.state("nn1") is HAState.STANDBY
