"""The dev cluster of ``hadev`` (``hadev.devcluster.DevCluster``: ZooKeeper, three
JournalNodes, two NameNodes with automatic failover), each daemon on a host of its own: its
own network namespace of a ``ChaosNetwork``, its own address, the well-known ports. The
launchers are the dev cluster's; this module only gives them ``hosts`` (an address and an
``ip netns exec`` prefix per daemon) and adds what a nemesis needs: which NameNode is
active, kill and restart, partitions, and a JournalNode disk that can be filled.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from pathlib import Path

import structlog

from hachaos.nemesis import fill
from hachaos.netns import ChaosNetwork
from hadev.daemon import DaemonHost
from hadev.devcluster import DevCluster

__all__ = ["DAEMONS", "DISK_MB", "ChaosCluster"]

log = structlog.get_logger(__name__)

DAEMONS = ("zk", "jn1", "jn2", "jn3", "nn1", "nn2")
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
        )
        self.disk_jn = disk_jn
        self.namenode_ids = self.dev.namenode_ids
        self.journalnode_ids = [jn.jn_id for jn in self.dev.journalnodes]

    def edits_dir(self, jn_id: str) -> Path:
        """JournalNode ``jn_id``'s storage root (``dfs.journalnode.edits.dir``)."""
        return next(jn.edits_dir for jn in self.dev.journalnodes if jn.jn_id == jn_id)

    def start(self) -> ChaosCluster:
        if self.disk_jn is not None:
            self.network.add_mount(self.edits_dir(self.disk_jn), DISK_MB)
        self.dev.start()
        return self

    def stop(self) -> None:
        self.dev.stop()

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
