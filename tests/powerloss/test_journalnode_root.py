"""A JournalNode that creates its storage directory makes that directory durable: a power
cut after it answered Format must not take the whole journal with it (issue 26, found by
the power cut below; docs/protocol.md §14.1)."""

from __future__ import annotations

from pathlib import Path

from hadev.crashfs import CrashMount, cut_power
from hadev.journalnodes import JournalNodeProcess, start_journalnode
from proto.values import NamespaceInfo
from qjm.channel import GrpcJournalChannel

JID = "ns1"
NS = NamespaceInfo("CID-powerloss", 4343)
RPC_TIMEOUT = 10.0


def is_formatted(jn: JournalNodeProcess) -> tuple[bool, NamespaceInfo | None]:
    channel = GrpcJournalChannel(jn.address, jn.harness_tls)
    try:
        return channel.is_formatted(JID, RPC_TIMEOUT)
    finally:
        channel.close()


def test_a_journal_in_a_storage_directory_the_journalnode_made_survives_a_cut(
    mount: CrashMount, tmp_path: Path
) -> None:
    edits = mount.mountpoint / "disk" / "edits"  # neither exists: the JournalNode makes both
    jn = start_journalnode(tmp_path / "jn", edits_dir=edits, probe_journal=JID)
    try:
        channel = GrpcJournalChannel(jn.address, jn.harness_tls)
        try:
            channel.format(JID, NS, False, RPC_TIMEOUT)
        finally:
            channel.close()
        cut_power([mount], [jn.pid])
        jn.kill()
        mount.remount()
        jn.start(fresh_ports=False)
        assert is_formatted(jn) == (True, NS)
    finally:
        jn.stop()
