"""The ZooKeeper journal (docs/architecture.md §9.2) on real processes: NameNode processes
with mutual TLS, a real ZooKeeper, no JournalNode, real signals (issue 29 item 3).

- a deposed active frozen with SIGSTOP, then resumed: it cannot append (the live log holds
  no batch of its epoch after the new epoch's first) and leaves ACTIVE, fenced;
- kill -9 of the active under a write load, then a manual transition of the standby: every
  acknowledged mkdir is there;
- a NameNode wiped and bootstrapped again catches up from the image and the live log.

One cluster runs the three in turn, under one write load, to keep the default run short.
"""

from __future__ import annotations

import random
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from hadev.namenodes import NameNodeProcessCluster, get_service_status, run_hanamenode
from hadev.zookeeper import ZooKeeperServer
from hanamenode.client import HaFsClient
from hanamenode.errors import NamenodeError
from hanamenode.ha import HAState
from hanamenode.storage import NameDirectory
from zkjournal.manager import ZKJournalManager, read_live_log

pytestmark = pytest.mark.timeout(180)

JOURNAL_PATH = "/hanamenode/journal/ns1"
WINDOW_BYTES = 32 * 1024

FAST_CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    "dfs.ha.tail-edits.in-progress": True,
    "dfs.ha.log-roll.period": "0.5",
    "dfs.client.failover.max.attempts": 6,
    "dfs.client.failover.sleep.max.millis": 200,
    "dfs.client.rpc-timeout.ms": 3000,
    # A small window, published often: the NameNode that is down and then wiped misses
    # batches the publisher deleted, and must fetch them from the other's packed segments.
    "dfs.namenode.zookeeper-journal.window.bytes": WINDOW_BYTES,
    "dfs.namenode.zookeeper-journal.publish.period": "200ms",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[NameNodeProcessCluster, ZooKeeperServer]]:
    # Sessions of up to 20 s: a NameNode paused for a few seconds keeps its session, so what
    # refuses its appends after it resumes is the epoch check, not an expired session.
    with ZooKeeperServer(tmp_path / "zk", tick_time_ms=1000) as zk:
        conf = {
            **FAST_CONF,
            "ha.zookeeper.session-timeout.ms": 15000,
            "dfs.namenode.shared.edits.dir": f"zookeeper://{zk.connect_string}{JOURNAL_PATH}",
        }
        with NameNodeProcessCluster(
            tmp_path / "cluster", journal_nodes=0, extra_conf=conf
        ) as nns:
            yield nns, zk


class Load:
    """``threads`` writers, each with its own client, making directories until ``stop``; a
    path is recorded only once a NameNode acknowledged it."""

    def __init__(self, nns: NameNodeProcessCluster, threads: int = 4) -> None:
        self.acked: list[list[str]] = [[] for _ in range(threads)]
        self.clients = [HaFsClient(nns.settings()) for _ in self.acked]
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._write, args=(i,), name=f"writer-{i}")
            for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def _write(self, index: int) -> None:
        client, acked = self.clients[index], self.acked[index]
        while not self._stop.is_set():
            path = f"/load/w{index}/d{len(acked)}"
            try:
                client.mkdirs(path, parents=True)
                acked.append(path)
            except NamenodeError:
                time.sleep(0.05)  # no active NameNode right now

    @property
    def count(self) -> int:
        return sum(len(a) for a in self.acked)

    def stop(self) -> list[str]:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        for c in self.clients:
            c.close()
        return [p for a in self.acked for p in a]


def missing(nns: NameNodeProcessCluster, paths: list[str]) -> list[str]:
    """The acknowledged ``paths`` the active does not list (one listing per directory)."""
    with HaFsClient(nns.settings()) as check:
        listed = {
            f"{parent}/{s.path.rsplit('/', 1)[-1]}"
            for parent in {p.rsplit("/", 1)[0] for p in paths}
            for s in check.list(parent)
        }
    return [p for p in paths if p not in listed]


def live_log(nns: NameNodeProcessCluster, zk: ZooKeeperServer) -> tuple[list[int], int]:
    """The writer epoch of every batch znode ZooKeeper holds, in append order, and their
    bytes."""
    ns_info = NameDirectory(nns.name_dir("nn1")).read_version()
    reader = ZKJournalManager(
        lambda: KazooClient(zk.connect_string, timeout=5.0),
        f"zookeeper://{zk.connect_string}{JOURNAL_PATH}", JOURNAL_PATH, ns_info,
    )
    try:
        _, batches = read_live_log(reader, 1)
    finally:
        reader.close()
    return [b.header.epoch for b in batches], sum(len(b.framed) for b in batches)


def wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:g}s: {what}")


def test_a_paused_writer_is_fenced_a_killed_one_loses_nothing_a_wiped_one_catches_up(
    cluster: tuple[NameNodeProcessCluster, ZooKeeperServer],
) -> None:
    """One cluster, three phases, one write load throughout (4 clients):

    1. nn1 active; SIGSTOP nn1; nn2 made active (no fencing method: the epoch znode
       fences); SIGCONT nn1: it leaves ACTIVE, told it was fenced, and the live log holds
       no batch of epoch 1 after the first of epoch 2;
    2. kill -9 of nn2, the active; nn1 made active again;
    3. nn2's name dir wiped, bootstrap-standby, started: it catches up from the image, the
       txids the publisher deleted meanwhile (fetched from nn1's packed segments) and the
       live log, is made active, and answers every mkdir acknowledged in any phase; all
       along, ZooKeeper held about the window (``dfs.namenode.zookeeper-journal.window.bytes``).
    """
    nns, zk = cluster
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    print(f"seed={seed}")
    nns.transition_to_active("nn1")
    load = Load(nns)
    try:
        # 1. The paused writer.
        wait_for(lambda: load.count > 20, 30, "writes acknowledged by nn1")
        nns["nn1"].kill(signal.SIGSTOP)  # calls in flight to it wait in its sockets
        try:
            nns.transition_to_active("nn2")
            at_takeover = load.count
            wait_for(lambda: load.count > at_takeover + 20, 30, "writes acknowledged by nn2")
        finally:
            nns["nn1"].kill(signal.SIGCONT)
        wait_for(lambda: nns.state("nn1") is not HAState.ACTIVE, 30, "nn1 leaving ACTIVE")
        assert "writer fenced" in nns["nn1"].log_text(), "nn1 was not told it was fenced"
        epochs, _ = live_log(nns, zk)
        assert epochs == sorted(epochs), f"a batch of an older epoch after a newer one: {epochs}"
        assert epochs[-1] == 2, epochs  # (epoch 1's may be packed and deleted already)

        # 2. kill -9 of the active under the load.
        time.sleep(rng.uniform(0.3, 1.0))
        before_kill = load.count
        nns["nn2"].kill(signal.SIGKILL)
        nns.transition_to_active("nn1")
        wait_for(lambda: load.count > before_kill + 20, 30, "writes acknowledged by nn1 again")

        # 3. nn2 wiped, bootstrapped from nn1, started: it catches up.
        shutil.rmtree(nns.name_dir("nn2"))
        result = run_hanamenode([
            "bootstrap-standby", "--conf", str(nns.admin_conf_path), "--id", "nn2",
            "--non-interactive",
        ])
        assert result.returncode == 0, result.stdout + result.stderr
        nns["nn2"].start()
    finally:
        acked = load.stop()
    with HaFsClient(nns.settings()) as client:
        active_txid = client.msync()
    nn2 = nns["nn2"]
    wait_for(
        lambda: get_service_status(nn2.address, nn2.tls).last_applied_txid >= active_txid,
        30, f"the rejoined nn2 applying txid {active_txid}",
    )
    # The window held: nn2 was down, so only the window bounded what ZooKeeper kept; a
    # publisher period of appends may come on top of it.
    _, held = live_log(nns, zk)
    assert held <= 4 * WINDOW_BYTES, f"ZooKeeper holds {held} bytes of batches"
    assert "fetched packed segments" in nn2.log_text(), "nn2 fetched nothing from nn1"
    nns.transition_to_standby("nn1")
    nns.transition_to_active("nn2")
    lost = missing(nns, acked)
    assert not lost, f"seed={seed}: {len(lost)} acknowledged mkdirs lost, e.g. {lost[:5]}"
    assert len(acked) > before_kill + 20


SOAK_ROUNDS = 6
SOAK_ROUND_SECONDS = 8.0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_soak_kill_rounds_under_load_hold_the_window_and_lose_nothing(
    cluster: tuple[NameNodeProcessCluster, ZooKeeperServer],
) -> None:
    """The long variant (``--soak``): a write load for ``SOAK_ROUNDS`` rounds; each round
    kill -9s the active after a random while, makes the other active, and starts the killed
    one again (it catches up, fetching what the publisher deleted meanwhile). ZooKeeper's
    batch bytes are sampled throughout and stay within a small multiple of the window; at
    the end every acknowledged mkdir is there, and the live log is in epoch order."""
    nns, zk = cluster
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    print(f"seed={seed}")
    nns.transition_to_active("nn1")
    active, other = "nn1", "nn2"
    load = Load(nns)
    peak = 0
    try:
        for _ in range(SOAK_ROUNDS):
            until = time.monotonic() + rng.uniform(0.5, 1.0) * SOAK_ROUND_SECONDS
            while time.monotonic() < until:
                peak = max(peak, live_log(nns, zk)[1])
                time.sleep(0.5)
            before = load.count
            nns[active].kill(signal.SIGKILL)
            nns.transition_to_active(other)
            wait_for(lambda b=before: load.count > b + 20, 30, f"writes acknowledged by {other}")
            nns[active].start()
            active, other = other, active
    finally:
        acked = load.stop()
    epochs, _ = live_log(nns, zk)
    assert epochs == sorted(epochs), f"seed={seed}: epochs out of order: {epochs}"
    assert peak <= 4 * WINDOW_BYTES, f"seed={seed}: ZooKeeper held {peak} bytes of batches"
    lost = missing(nns, acked)
    assert not lost, f"seed={seed}: {len(lost)} acknowledged mkdirs lost, e.g. {lost[:5]}"
