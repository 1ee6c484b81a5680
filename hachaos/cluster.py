"""The dev cluster of ``hadev`` (``hadev.devcluster.DevCluster``: ZooKeeper, three
JournalNodes, two NameNodes with automatic failover), each daemon on a host of its own: its
own network namespace of a ``ChaosNetwork``, its own address, the well-known ports. The
launchers are the dev cluster's; this module only gives them ``hosts`` (an address and an
``ip netns exec`` prefix per daemon) and adds what a nemesis needs: which NameNode is
active, kill and restart, partitions, a JournalNode disk that can be filled, and, with
``crash_disks``, every JournalNode's and NameNode's storage on a crash filesystem
(``hadev.crashfs``) whose power can be cut (the ``power-cut`` nemesis). With
``journal="zookeeper"`` the cluster has no JournalNode: ZooKeeper keeps the edit log too.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Sequence
from pathlib import Path

import structlog

from hachaos.nemesis import fill
from hachaos.netns import ChaosNetwork
from hadev.crashfs import CrashMount, cut_power, fuse_available
from hadev.daemon import DaemonHost
from hadev.devcluster import DevCluster
from hanamenode.journal import PACKED_DIR

__all__ = ["DAEMONS", "DISK_MB", "ChaosCluster", "daemons"]

log = structlog.get_logger(__name__)

DAEMONS = ("zk", "jn1", "jn2", "jn3", "nn1", "nn2")


def daemons(journal: str) -> tuple[str, ...]:
    """The hosts of a run on ``journal``: with the ZooKeeper journal, no JournalNode."""
    return DAEMONS if journal == "qjm" else tuple(d for d in DAEMONS if not d.startswith("jn"))

DISK_MB = 128
"""Size of the tmpfs under the JournalNode whose disk the ``disk-full`` nemesis fills."""
BALLAST = "hachaos-ballast"


class ChaosCluster:
    """A ``DevCluster`` in ``base_dir`` whose daemons live in ``network``'s namespaces; a
    context manager that starts it (after mounting the small disk of ``disk_jn``, if any)
    and always stops it. The network itself belongs to the caller."""

    def __init__(
        self,
        base_dir: Path,
        network: ChaosNetwork,
        *,
        session_timeout: float,
        quorum_timeout: str,
        disk_jn: str | None = None,
        crash_disks: bool = False,
        journal: str = "qjm",
    ) -> None:
        hosts = {
            name: DaemonHost(network.address(name), network.command_prefix(name))
            for name in network.hosts
        }
        self.network = network
        self.dev = DevCluster(
            base_dir,
            session_timeout=session_timeout,
            quorum_timeout=quorum_timeout,
            hosts=hosts,
            log_format="json",
            journal=journal,
        )
        self.disk_jn = disk_jn
        self.namenode_ids = self.dev.namenode_ids
        self.journalnode_ids = [jn.jn_id for jn in self.dev.journalnodes]
        # Every daemon's storage on a crash filesystem of its own, its disk in
        # <base_dir>/disks/<name>; not the small tmpfs disk of ``disk_jn`` (its fill would
        # go to the crash filesystem's backing directory instead).
        self.mounts: dict[str, CrashMount] = {}
        if crash_disks:
            for jn in self.dev.journalnodes:
                if jn.jn_id != disk_jn:
                    self.mounts[jn.jn_id] = CrashMount(base_dir / "disks" / jn.jn_id, jn.edits_dir)
            for nn in self.namenode_ids:
                self.mounts[nn] = CrashMount(
                    base_dir / "disks" / nn, self.dev.nodes.name_dir(nn))
        self.crash_mounted = list(self.mounts)
        self._cut: set[str] = set()  # daemons whose power is off

    def edits_dir(self, jn_id: str) -> Path:
        """JournalNode ``jn_id``'s storage root (``dfs.journalnode.edits.dir``)."""
        return next(jn.edits_dir for jn in self.dev.journalnodes if jn.jn_id == jn_id)

    def disk_dir(self, jn_id: str) -> Path:
        """Where JournalNode ``jn_id``'s storage root is kept: its crash filesystem's
        backing directory (what the checks read once the mounts are gone), or its storage
        root itself."""
        mount = self.mounts.get(jn_id)
        return mount.backing if mount is not None else self.edits_dir(jn_id)

    def packed_dir(self, nn_id: str) -> Path:
        """Where NameNode ``nn_id``'s packed segments of the ZooKeeper journal are kept
        (``<name dir>/zkjournal``, docs/architecture.md §9.3): under its crash filesystem's
        backing directory when it has one, as ``disk_dir`` for JournalNodes."""
        mount = self.mounts.get(nn_id)
        root = mount.backing if mount is not None else self.dev.nodes.name_dir(nn_id)
        return root / PACKED_DIR

    def start(self) -> ChaosCluster:
        if self.disk_jn is not None:
            self.network.add_mount(self.edits_dir(self.disk_jn), DISK_MB)
        if self.mounts:
            why = fuse_available()
            if why is not None:
                raise RuntimeError(f"the power-cut nemesis needs FUSE: {why}")
        try:
            # Mounted before any daemon starts: ``ip netns exec`` gives each daemon a copy
            # of the mount table as it is then (the root mount is private here).
            for mount in self.mounts.values():
                mount.mount()
            self.dev.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            self.dev.stop()
        finally:
            for mount in self.mounts.values():
                mount.unmount()

    def __enter__(self) -> ChaosCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what the nemesis needs (hachaos.nemesis.ClusterControl) ---------------------------------

    def active(self) -> str | None:
        return self.dev.active()

    def kill(self, name: str, sig: int) -> None:
        self.dev.kill(name, signal.Signals(sig))

    def restart(self, name: str) -> None:
        if name in self._cut:  # a daemon whose power is off comes back with the power
            self.power_on([name])
            return
        self.dev.restart(name)

    def power_cut(self, names: Sequence[str], *, torn: bool, seed: int) -> str:
        """Cut the power of ``names`` at one instant (``hadev.crashfs.cut_power``): what
        their disks lost, in a few words."""
        pids = [self.dev.process(n).pid for n in names if self.dev.process(n).running]
        reports = cut_power([self.mounts[n] for n in names], pids, torn=torn, seed=seed)
        self._cut.update(names)
        for name in names:
            self.dev.kill(name)  # reaps the killed process
        return "; ".join(report.describe() for report in reports)

    def power_on(self, names: Sequence[str]) -> None:
        """Remount the disks of ``names`` and restart them, JournalNodes first. A daemon that
        refuses to start raises (the nemesis records the failed heal)."""
        for name in names:
            self.mounts[name].remount()
            self._cut.discard(name)
        for name in sorted(names, key=lambda n: (n not in self.journalnode_ids, n)):
            self.dev.restart(name)

    def running(self, name: str) -> bool:
        return self.dev.process(name).running

    def partition(self, groups: Iterable[Iterable[str]]) -> None:
        self.network.partition(groups)

    def heal_network(self) -> None:
        self.network.heal()

    def fill_disk(self, jn_id: str) -> None:
        written = fill(self.edits_dir(jn_id) / BALLAST)
        log.info("disk filled", jn=jn_id, bytes=written)

    def free_disk(self, jn_id: str) -> None:
        path = self.edits_dir(jn_id) / BALLAST
        if path.exists():
            os.unlink(path)
