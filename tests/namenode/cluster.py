"""A NameNode HA cluster in this process, on loopback: a MiniJournalCluster of real
JournalNodes and n real ``NameNodeServer``s (nn1 formatted, the others bootstrapped from it),
with tail/roll/checkpoint periods small enough for tests::

    with NameNodeCluster(tmp_path) as c:
        c.transition_to_active("nn1")
        c.client("nn1").Mkdirs(mkdirs("/a"))
        c.wait_for(lambda: c.fsn("nn2").last_applied_txid >= ...)

Every NameNode talks to the others through the configured addresses (fixed free ports picked
at start), exactly as daemons do.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc

from conf import Settings
from conf.rpc import make_channel
from failover.elector import ActiveStandbyElector
from hadev.daemon import free_ports
from hadev.minicluster import MiniJournalCluster
from hanamenode.bootstrap import bootstrap_standby, format_namenode
from hanamenode.namesystem import FSNamesystem
from hanamenode.server import NameNodeServer
from proto import namenode_pb2, namenode_pb2_grpc

JOURNAL_ID = "ns1"

FAST_CONF: dict[str, object] = {
    "dfs.ha.tail-edits.period": "0.05",
    "dfs.ha.log-roll.period": "0.5",
    "dfs.namenode.checkpoint.txns": "1000000",
    "dfs.namenode.checkpoint.period": "3600",
    "dfs.namenode.num.checkpoints.retained": "2",
    "dfs.qjournal.write-txns.timeout.ms": "3000",
    "dfs.qjournal.start-segment.timeout.ms": "3000",
    "dfs.qjournal.finalize-segment.timeout.ms": "3000",
    "dfs.qjournal.new-epoch.timeout.ms": "3000",
    "dfs.qjournal.get-journal-state.timeout.ms": "3000",
    "dfs.qjournal.prepare-recovery.timeout.ms": "3000",
    "dfs.qjournal.accept-recovery.timeout.ms": "3000",
    "dfs.qjournal.select-input-streams.timeout.ms": "3000",
    "dfs.qjournal.format.timeout.ms": "3000",
    "dfs.qjournal.heartbeat.interval.ms": "200",
    "hanamenode.rpc.handler.count": "32",
}

_call_ids = itertools.count(1)
CLIENT_ID = os.urandom(16)


def free_port() -> int:
    return free_ports(1)[0]  # outside the ephemeral range (hadev.daemon.daemon_port_range)


def header(
    client_id: bytes = CLIENT_ID, call_id: int | None = None, *, stale: bool = False
) -> namenode_pb2.RpcHeader:
    """A fresh call (a new call id) unless ``call_id`` is given (a retry)."""
    return namenode_pb2.RpcHeader(
        client_id=client_id,
        call_id=next(_call_ids) if call_id is None else call_id,
        allow_stale_read=stale,
    )


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.02)


def namenode_conf(
    base_dir: Path,
    journal_addresses: list[str],
    ids: list[str],
    extra: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The configuration of a nameservice ``ns1`` with NameNodes ``ids`` on free loopback
    ports (metrics on any port), name dirs under ``base_dir``, and the fast periods."""
    mapping: dict[str, object] = {
        "dfs.nameservices": "ns1",
        "dfs.ha.namenodes.ns1": ",".join(ids),
        "dfs.namenode.shared.edits.dir": f"qjournal://{';'.join(journal_addresses)}/{JOURNAL_ID}",
        **FAST_CONF,
    }
    for nn in ids:
        mapping[f"dfs.namenode.rpc-address.ns1.{nn}"] = f"127.0.0.1:{free_port()}"
        mapping[f"dfs.namenode.http-address.ns1.{nn}"] = "127.0.0.1:0"
        mapping[f"dfs.namenode.name.dir.ns1.{nn}"] = str(base_dir / nn)
    mapping.update(extra or {})
    return mapping


class NameNodeCluster:
    def __init__(
        self,
        base_dir: Path,
        namenodes: int = 2,
        *,
        journal_nodes: int = 3,
        conf: Mapping[str, object] | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.ids = [f"nn{i}" for i in range(1, namenodes + 1)]
        self.journal = MiniJournalCluster(journal_nodes, self.base_dir / "journal")
        self.extra_conf = dict(conf or {})
        self.servers: dict[str, NameNodeServer | None] = dict.fromkeys(self.ids)
        self._channels: dict[str, grpc.Channel] = {}
        self.settings: Settings | None = None
        self.mapping: dict[str, object] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    def make_settings(self) -> Settings:
        self.mapping = namenode_conf(
            self.base_dir, self.journal.addresses, self.ids, self.extra_conf
        )
        return Settings.from_mapping(self.mapping)

    def __enter__(self) -> NameNodeCluster:
        self.journal.start()
        try:
            self.settings = self.make_settings()
            format_namenode(self.settings, self.ids[0])
            self.start_nn(self.ids[0])
            for nn in self.ids[1:]:
                bootstrap_standby(self.settings, nn)
                self.start_nn(nn)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        for nn in self.ids:
            self.stop_nn(nn)
        self.journal.stop()

    def start_nn(self, nn: str, **kwargs: Any) -> NameNodeServer:
        assert self.settings is not None
        kwargs.setdefault("elector_factory", ActiveStandbyElector)
        server = NameNodeServer(self.settings, nn, **kwargs)
        server.start()
        self.servers[nn] = server
        return server

    def stop_nn(self, nn: str) -> None:
        server = self.servers.get(nn)
        if server is not None:
            server.stop(grace=None)
            self.servers[nn] = None
        channel = self._channels.pop(nn, None)
        if channel is not None:
            channel.close()

    # -- access --------------------------------------------------------------------------------

    def server(self, nn: str) -> NameNodeServer:
        server = self.servers[nn]
        assert server is not None, f"{nn} is stopped"
        return server

    def fsn(self, nn: str) -> FSNamesystem:
        return self.server(nn).namesystem

    def _channel(self, nn: str) -> grpc.Channel:
        channel = self._channels.get(nn)
        if channel is None:
            assert self.settings is not None
            channel = make_channel(self.settings.namenode(nn).rpc_address)
            self._channels[nn] = channel
        return channel

    def client(self, nn: str) -> namenode_pb2_grpc.ClientProtocolStub:
        return namenode_pb2_grpc.ClientProtocolStub(self._channel(nn))

    def ha(self, nn: str) -> namenode_pb2_grpc.HAServiceProtocolStub:
        return namenode_pb2_grpc.HAServiceProtocolStub(self._channel(nn))

    def namenode(self, nn: str) -> namenode_pb2_grpc.NamenodeProtocolStub:
        return namenode_pb2_grpc.NamenodeProtocolStub(self._channel(nn))

    # -- actions -------------------------------------------------------------------------------

    def transition_to_active(self, nn: str) -> None:
        self.ha(nn).TransitionToActive(namenode_pb2.TransitionRequest(), timeout=30)

    def transition_to_standby(self, nn: str) -> None:
        self.ha(nn).TransitionToStandby(namenode_pb2.TransitionRequest(), timeout=30)

    def roll(self, nn: str) -> int:
        return int(self.namenode(nn).RollEditLog(namenode_pb2.HAEmpty(), timeout=10).segment_txid)

    def mkdir(self, nn: str, path: str, **kwargs: Any) -> namenode_pb2.MkdirsResponse:
        request = namenode_pb2.MkdirsRequest(header=header(), path=path, **kwargs)
        return self.client(nn).Mkdirs(request, timeout=10)

    def wait_caught_up(self, standby: str, txid: int, timeout: float = 10.0) -> None:
        """Wait until ``standby`` applied ``txid`` (the roll period finalizes it)."""
        wait_for(
            lambda: self.fsn(standby).last_applied_txid >= txid,
            timeout,
            f"{standby} to apply txid {txid}",
        )
