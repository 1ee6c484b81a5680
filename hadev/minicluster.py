"""MiniJournalCluster: n real JournalNode gRPC servers in this process, on loopback.

The test fixture of HDFS-3077 §7.2. Each node keeps its storage directory and port
across ``stop``/``start``/``restart``, so a restarted node is the same JournalNode to its
writers (as a restarted daemon would be)::

    with MiniJournalCluster(3, base_dir) as cluster:
        qjm = cluster.qjm("ns1", ns_info)
        cluster.restart(0)
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from conf import TLSSettings
from journalnode.journal import DEFAULT_WRITER_HOLD_SECONDS
from journalnode.server import JournalNodeServer
from proto.values import NamespaceInfo


class MiniJournalCluster:
    def __init__(
        self,
        n: int = 3,
        base_dir: Path | None = None,
        *,
        tls: TLSSettings | None = None,
        writer_hold_seconds: float = DEFAULT_WRITER_HOLD_SECONDS,
    ) -> None:
        if n < 1:
            raise ValueError(f"a journal cluster needs at least one node, got {n}")
        self._own_dir = base_dir is None
        self.base_dir = (
            Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="minijn-"))
        )
        self.tls = tls
        self.writer_hold_seconds = writer_hold_seconds
        self.dirs = [self.base_dir / f"jn{i}" for i in range(n)]
        self.ports = [0] * n
        self.nodes: list[JournalNodeServer | None] = [None] * n

    def __len__(self) -> int:
        return len(self.dirs)

    @property
    def addresses(self) -> list[str]:
        if any(port == 0 for port in self.ports):
            raise RuntimeError("start the cluster before asking for its addresses")
        return [f"127.0.0.1:{port}" for port in self.ports]

    def start(self, index: int | None = None) -> None:
        for i in range(len(self)) if index is None else [index]:
            if self.nodes[i] is not None:
                continue
            node = JournalNodeServer(
                self.dirs[i],
                f"127.0.0.1:{self.ports[i]}",
                tls=self.tls,
                writer_hold_seconds=self.writer_hold_seconds,
            )
            node.start()
            self.ports[i] = node.port
            self.nodes[i] = node

    def stop(self, index: int | None = None) -> None:
        for i in range(len(self)) if index is None else [index]:
            node = self.nodes[i]
            if node is not None:
                node.stop(grace=None)
                self.nodes[i] = None

    def restart(self, index: int) -> None:
        self.stop(index)
        self.start(index)

    def node(self, index: int) -> JournalNodeServer:
        node = self.nodes[index]
        if node is None:
            raise RuntimeError(f"journal node {index} is stopped")
        return node

    def qjm(
        self, journal_id: str, namespace_info: NamespaceInfo, timeouts: Any = None, **kwargs: Any
    ) -> Any:
        from qjm.journal_manager import QuorumJournalManager

        return QuorumJournalManager.connect(
            self.addresses, journal_id, namespace_info, timeouts, tls=self.tls, **kwargs
        )

    def journal_dir(self, index: int, journal_id: str) -> Path:
        return self.dirs[index] / journal_id / "current"

    def __enter__(self) -> MiniJournalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
