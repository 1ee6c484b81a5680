"""The dev cluster with every JournalNode's and NameNode's storage on a crash filesystem of
its own (``hadev.crashfs``), and the power cut of any set of its daemons::

    with PowerCutCluster(tmp_path) as cluster:
        reports = cluster.cut(["jn1", "nn2"], torn=True, seed=5)   # SIGKILL, lose the unsynced
        refusals = cluster.power_on(["jn1", "nn2"])                 # remount, restart

A daemon that refuses to start after a cut is recorded (``Refusal``: its one line and
whether its output since that start held a traceback) and then repaired the way an operator
would, so that the series goes on: a JournalNode is emptied and formats itself from its
peers (docs/protocol.md §10.3), a NameNode is emptied and bootstrapped from the active.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from conf.rpc import make_channel
from conf.xmlconf import ConfigValue
from durable.version import parse_properties
from hadev.crashfs import CrashMount, CutReport, cut_power, fuse_available
from hadev.daemon import DaemonStartError, child_environment
from hadev.devcluster import JOURNAL_ID, DevCluster
from hadev.journalnodes import JournalNodeProcess
from hadev.namenodes import NameNodeProcess, run_hanamenode
from hadev.zookeeper import ZooKeeperServer
from hanamenode.ha import HAState
from proto import journal_pb2, journal_pb2_grpc
from tests.powerloss.acknowledged import Acknowledgements
from tests.powerloss.warm import WarmStarts

SESSION_TIMEOUT = 1.0
RESTART_TIMEOUT = 40.0
PORT_RETRY_PAUSE = 0.5

POWER_CUT_CONF: dict[str, ConfigValue] = {
    # The standby checkpoints every few hundred edits and uploads the image to the active,
    # so that cuts land in image writes as well as in edit appends and rolls.
    "dfs.namenode.checkpoint.txns": 300,
    "dfs.namenode.num.checkpoints.retained": 2,
}


@dataclass(frozen=True)
class Refusal:
    """A daemon that did not start after a cut: its last line, and whether its output of
    that start held a traceback (it must not: one clear line is the rule)."""

    cut: int
    daemon: str
    line: str
    traceback: bool


class PowerCutCluster:
    """A ``DevCluster`` (plaintext RPC, 1 s ZooKeeper sessions, 4 s quorum waits) whose
    daemons' storage directories are ``CrashMount``s over ``<base>/disks/<daemon>``."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.dev = DevCluster(
            base_dir / "dev", session_timeout=SESSION_TIMEOUT, quorum_timeout="4s",
            extra_conf=POWER_CUT_CONF,
            tls=False,  # plaintext: the power cuts, not the transport, are under test
        )
        disks = base_dir / "disks"
        self.mounts: dict[str, CrashMount] = {}
        for jn in self.dev.journalnodes:
            self.mounts[jn.jn_id] = CrashMount(disks / jn.jn_id, jn.edits_dir)
        for nn in self.dev.namenode_ids:
            self.mounts[nn] = CrashMount(disks / nn, self.dev.nodes.name_dir(nn))
        self.cuts = 0
        self.restarts = 0
        self.port_retries = 0
        self._count_lock = threading.Lock()  # starts run in threads (power_on)
        self.refusals: list[Refusal] = []
        # Restarts skip the imports: each daemon's next process waits, warmed up, for its
        # start (tests/powerloss/warm.py).
        self.warm = WarmStarts()
        for name in self.mounts:
            self._daemon(name).popen = self.warm.popen_for(name)

    @property
    def journalnode_ids(self) -> list[str]:
        return [jn.jn_id for jn in self.dev.journalnodes]

    def disk(self, name: str) -> Path:
        """What daemon ``name``'s disk holds now, read beside the mount (no daemon sees it)."""
        return self.mounts[name].backing

    def journal_disk(self, jn_id: str) -> Path:
        """JournalNode ``jn_id``'s ``<journal>/current`` as its disk holds it."""
        return self.disk(jn_id) / JOURNAL_ID / "current"

    def storage_dir(self, name: str) -> Path:
        """Where daemon ``name`` sees its storage (its mount point): the paths its errors
        name."""
        return self.mounts[name].mountpoint

    def acknowledgements(self) -> Acknowledgements:
        """A reader of the promises and accepted recoveries acknowledged from now on
        (``tests/powerloss/acknowledged.py``)."""
        acks = Acknowledgements(
            [self.dev.process(nn).log_path for nn in self.dev.namenode_ids],
            {jn.jn_id: jn.log_path for jn in self.dev.journalnodes},
            {jn.address: jn.jn_id for jn in self.dev.journalnodes},
        )
        return acks

    def where_blocked(self) -> str:
        """Each running daemon's threads by the kernel function they wait in (``wchan``):
        what a failure prints when the cluster stops making progress (a thread waiting on
        its crash filesystem shows ``request_wait_answer``)."""
        parts = []
        for name in [*self.journalnode_ids, *self.dev.namenode_ids]:
            process = self.dev.process(name)
            if not process.running:
                parts.append(f"{name}: not running")
                continue
            waits: Counter[str] = Counter()
            for task in Path(f"/proc/{process.pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    waits[(task / "wchan").read_text().strip() or "running"] += 1
            parts.append(f"{name}: {dict(waits)}")
        parts.append(f"this process: {len(threading.enumerate())} threads")
        return "; ".join(parts)

    def promised_epoch(self, jn_id: str) -> int:
        """The last promised epoch JournalNode ``jn_id`` answers (GetJournalState). It sets
        it in memory only once it is on disk, so a cut must never take it lower."""
        version = self.dev.journal_dir(jn_id) / "VERSION"
        cluster_id = parse_properties(version.read_bytes(), str(version))["clusterID"]
        address = next(jn.address for jn in self.dev.journalnodes if jn.jn_id == jn_id)
        channel = make_channel(address, None)
        try:
            reply = journal_pb2_grpc.QJournalServiceStub(channel).GetJournalState(
                journal_pb2.GetJournalStateRequest(journal_id=JOURNAL_ID, cluster_id=cluster_id),
                timeout=10,
                # A restarted node's first connection attempt may time out while it syncs
                # from its peers (the channels' connect timeout is 100 ms): wait for it.
                wait_for_ready=True,
            )
            return int(reply.last_promised_epoch)
        finally:
            channel.close()

    def __enter__(self) -> PowerCutCluster:
        why = fuse_available()
        assert why is None, f"cannot mount FUSE here: {why}"
        try:
            for mount in self.mounts.values():
                mount.mount()
            self.dev.start()
            self.prepare_starts(self.mounts)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.dev.stop()
        finally:
            self.warm.close()
            for mount in self.mounts.values():
                mount.unmount()

    def _daemon(self, name: str) -> JournalNodeProcess | NameNodeProcess:
        process = self.dev.process(name)
        assert not isinstance(process, ZooKeeperServer), "ZooKeeper has no disk here"
        return process

    def prepare_starts(self, names: Iterable[str]) -> None:
        """Have a warmed-up process wait for the next start of each of ``names``."""
        for name in names:
            process = self._daemon(name)
            module = "journalnode" if name.startswith("jn") else "namenoded"
            self.warm.prepare(name, module, process.workdir, process.log_path,
                              child_environment())

    def cut(self, names: list[str], *, torn: bool, seed: int) -> list[CutReport]:
        """The power cut of ``names`` at one instant: SIGKILL every one of them, then lose
        what their disks did not hold (a torn write on each when ``torn``)."""
        self.cuts += 1
        self.prepare_starts(names)  # a no-op for those prepared before
        pids = [self.dev.process(name).pid for name in names if self.dev.process(name).running]
        reports = cut_power([self.mounts[name] for name in names], pids, torn=torn, seed=seed)
        for name in names:
            self.dev.kill(name)  # reaps the killed process, removes its pid file
        return reports

    def power_on(self, names: list[str]) -> list[Refusal]:
        """Remount ``names`` and restart them, the JournalNodes together, then the NameNodes
        together (each start is a process that imports for a second: they overlap); a
        refusal is recorded and repaired (module docstring). Returns this cut's refusals."""
        self.restarts += len(names)
        with ThreadPoolExecutor(len(names), thread_name_prefix="power-on") as pool:
            list(pool.map(lambda name: self.mounts[name].remount(), names))
            refusals: list[Refusal] = []
            for group in ([n for n in names if n.startswith("jn")],
                          [n for n in names if not n.startswith("jn")]):
                for refusal in pool.map(self._start, sorted(group)):
                    if refusal is not None:
                        refusals.append(refusal)
        # The next starts' processes import while the cluster recovers and the next cut
        # waits: by the next power-on they are ready.
        self.prepare_starts(names)
        self.refusals += refusals
        return refusals

    def _start(self, name: str) -> Refusal | None:
        deadline = time.monotonic() + RESTART_TIMEOUT
        while True:
            try:
                self.dev.restart(name, RESTART_TIMEOUT)
            except DaemonStartError as exc:
                if exc.port_in_use and time.monotonic() < deadline:
                    # Not about its disk: while the daemon was down, another process on
                    # this shared machine got its port (an outgoing connection's local
                    # port, once: cut 157 of a long run). It must come back on the same
                    # port (the configuration names it): wait until that one lets go.
                    with self._count_lock:
                        self.port_retries += 1
                    time.sleep(PORT_RETRY_PAUSE)
                    continue
                refusal = self._refusal(name, exc)
                self._repair(name)
                return refusal
            return None

    def _refusal(self, name: str, exc: DaemonStartError) -> Refusal:
        process = self.dev.process(name)
        text = process.log_text() if not isinstance(process, type(self.dev.zookeeper)) else ""
        marker = f"--- start {getattr(process, 'starts', 0)} ---"
        this_start = text.rsplit(marker, 1)[-1]
        lines = [line for line in this_start.strip().splitlines() if line.strip()]
        return Refusal(self.cuts, name, lines[-1] if lines else str(exc),
                       "Traceback (most recent call last)" in this_start)

    def _repair(self, name: str) -> None:
        mountpoint = self.mounts[name].mountpoint
        if name.startswith("jn"):
            self.dev.wipe_journalnode(name, RESTART_TIMEOUT)
            # It formats itself from its peers a moment after it serves: until then it has
            # no journal directory, which the next check lists (cut 95 of a long run
            # failed there). Wait for it, as an operator would before calling it repaired.
            version = self.dev.journal_dir(name) / "VERSION"
            deadline = time.monotonic() + RESTART_TIMEOUT
            while not version.exists():
                assert time.monotonic() < deadline, f"{name} did not format from its peers"
                time.sleep(0.05)
            return
        for child in mountpoint.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        # bootstrap-standby copies the active's image: wait for one (the other NameNode may be
        # starting beside this one).
        self.dev.wait_active(RESTART_TIMEOUT, exclude=name)
        result = run_hanamenode(
            ["bootstrap-standby", "--conf", str(self.dev.conf_path), "--id", name,
             "--non-interactive"]
        )
        assert result.returncode == 0, f"bootstrap-standby {name}: {result.stderr.strip()}"
        self.dev.restart(name, RESTART_TIMEOUT)
        self.dev.wait_state(name, HAState.STANDBY, RESTART_TIMEOUT)
