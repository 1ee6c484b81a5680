"""What an operator reads from a live dev cluster, and who may call what (issue 10).

The table of metrics in docs/operations.md §5 is checked against a real ``/metrics`` scrape
of each daemon: a JournalNode, and the active and standby NameNodes of a dev cluster
(ZooKeeper, three JournalNodes, two NameNodes with automatic failover); every documented
metric is served, and every served metric of the project is documented; the same both ways
for each key of ``/status.json`` against its table in docs/operations.md §13.2. Then a
JournalNode is killed: the active's log names that JournalNode and the cause, and
``qjm_logger_out_of_sync`` says it too.

The dev cluster runs mutual TLS with a certificate per role (``hadev.pki``): a caller whose
certificate lacks the role a method needs is refused with PERMISSION_DENIED naming both.
"""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conf import TLSSettings
from conf.guard import Role
from conf.rpc import make_channel
from hadev.devcluster import DevCluster
from hadev.pki import make_pki
from hanamenode.client import HaFsClient
from proto import journal_pb2, journal_pb2_grpc, namenode_pb2, namenode_pb2_grpc
from tests.status_schema import schema_problems

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
OURS = re.compile(r"\b(?:journalnode|hanamenode|qjm|python_gc)_[a-z_]+\b")


def documented() -> dict[str, set[str]]:
    """docs/operations.md §5's table of metrics: metric names by daemon (JournalNode, NameNode)."""
    ops = (ROOT / "docs" / "operations.md").read_text()
    section = ops.split("\n## 5. ", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {"JournalNode": set(), "NameNode": set()}
    for line in section.splitlines():
        if line.startswith("| JournalNode") or line.startswith("| NameNode"):
            daemon = "JournalNode" if line.startswith("| JournalNode") else "NameNode"
            table[daemon] |= set(OURS.findall(line.split("|")[2]))
    return table


def scrape(url: str) -> dict[str, str]:
    """Metric families served at ``url``: name (counters without ``_total``) -> text."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    # A counter's or histogram's ``_created`` timestamp parses as a family of its own.
    return {
        f.name: text
        for f in text_string_to_metric_families(text)
        if OURS.fullmatch(f.name) and not f.name.endswith("_created")
    }


def sample(url: str, name: str, labels: dict[str, str]) -> float | None:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def test_metrics_table_matches_live_scrapes_and_a_lost_journalnode_is_named(
    tmp_path: Path,
) -> None:
    table = documented()
    assert len(table["JournalNode"]) > 10 and len(table["NameNode"]) > 30, table
    with DevCluster(tmp_path, session_timeout=1.0, quorum_timeout="4s") as dev:
        active = dev.wait_active()
        standby = next(nn for nn in dev.namenode_ids if nn != active)
        with HaFsClient(dev.settings()) as fs:
            for i in range(30):
                fs.mkdirs(f"/m/d{i}", parents=True)
            fs.list("/m")
        time.sleep(2.5)  # a roll (1 s) and a few tails (0.1 s) on the standby
        jn_served = scrape(dev.journalnodes[0].metrics_url)
        nn_served: set[str] = set()
        for nn in (active, standby):
            url = dev.namenode(nn).metrics_url
            assert url is not None
            nn_served |= set(scrape(url))
        print(f"served: {len(jn_served)} JournalNode, {len(nn_served)} NameNode metrics")
        for daemon, served in (("JournalNode", set(jn_served)), ("NameNode", nn_served)):
            unserved = sorted(table[daemon] - served)
            assert not unserved, (
                f"docs/operations.md §5 lists {daemon} metrics never served: {unserved}"
            )
            undocumented = sorted(served - table[daemon])
            assert not undocumented, (
                f"{daemon} serves metrics docs/operations.md §5 lacks: {undocumented}"
            )

        # Each daemon froze what it made at start after one full collection, and times
        # every collection since (conf/gcpauses.py).
        for url in (dev.journalnodes[0].metrics_url, dev.namenode(active).metrics_url):
            assert url is not None
            full = sample(url, "python_gc_pause_seconds_count", {"generation": "2"})
            assert full is not None and full >= 1, url
        assert "garbage collector settled" in dev.log_path(active).read_text()

        # /status.json against its documented schema, both ways (docs/operations.md §13.2).
        def status_json(url: str | None) -> dict[str, object]:
            assert url is not None
            with urllib.request.urlopen(url + ".json", timeout=10) as response:
                return dict(json.load(response))

        namenodes = [status_json(dev.namenode(nn).status_url) for nn in (active, standby)]
        assert schema_problems("NameNode", namenodes) == []
        journalnodes = [status_json(jn.status_url) for jn in dev.journalnodes]
        assert schema_problems("JournalNode", journalnodes) == []
        # The active writes, and the standby follows, on every JournalNode's edits wire
        # (docs/protocol.md §13.8): its writer's and its reader's connections at least.
        for page in journalnodes:
            wire = page["edits_wire"]
            assert isinstance(wire, dict) and wire["port"] > 0, page
            assert wire["connections"] >= 2 and wire["refused"] == 0, wire
        clusters = [
            status_json((dev.namenode(nn).status_url or "").removesuffix("/status") + "/cluster")
            for nn in (active, standby)
        ]
        assert schema_problems("Cluster", clusters) == []

        # A JournalNode dies: the active names it, with the cause, in its log and metrics.
        victim = dev.journalnodes[2]
        dev.kill(victim.jn_id, signal.SIGKILL)
        with HaFsClient(dev.settings()) as fs:
            for i in range(10):
                fs.mkdirs(f"/after-kill/d{i}", parents=True)
        active_url = dev.namenode(active).metrics_url
        assert active_url is not None
        deadline = time.monotonic() + 20
        lines: list[str] = []
        while time.monotonic() < deadline:
            lines = [
                line for line in dev.log_path(active).read_text().splitlines()
                if "JournalNode out of sync" in line
            ]
            if lines:
                break
            time.sleep(0.2)
        assert lines, "the active did not log the lost JournalNode"
        print(lines[0])
        assert f"journalnode={victim.address}" in lines[0], lines[0]
        assert re.search(r"cause=\S+Error", lines[0]), lines[0]
        # Labelled by the configured id, the address beside it (issue 28 item 2).
        assert sample(
            active_url, "qjm_logger_out_of_sync",
            {"journalnode": victim.jn_id, "address": victim.address},
        ) == 1.0


def test_each_rpc_checks_the_role_in_the_callers_certificate(tmp_path: Path) -> None:
    with DevCluster(tmp_path, session_timeout=1.0, quorum_timeout="4s") as dev:
        active = dev.namenode(dev.wait_active())
        jn = dev.journalnodes[0]
        pki = make_pki(dev.tls_dir, {"someclient": {Role.CLIENT}})

        def tls(name: str) -> TLSSettings:
            return TLSSettings(True, pki.ca, pki.cert(name), pki.key(name))

        def refused(call: object, *args: object) -> str:
            with pytest.raises(grpc.RpcError) as info:
                call(*args, timeout=10)  # type: ignore[operator]
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, info.value
            return info.value.details() or ""

        fmt = journal_pb2.FormatRequest(journal_id="ns1", force=True)
        with make_channel(jn.address, tls("someclient")) as channel:
            details = refused(journal_pb2_grpc.QJournalServiceStub(channel).Format, fmt)
            assert details == (
                "Format needs the role admin; the caller's certificate presents client"
            )
        with make_channel(jn.address, tls("nn1")) as channel:
            stub = journal_pb2_grpc.QJournalServiceStub(channel)
            assert "presents namenode" in refused(stub.Format, fmt)
        with make_channel(active.address, tls("jn1")) as channel:
            stub = namenode_pb2_grpc.ClientProtocolStub(channel)
            details = refused(stub.Mkdirs, namenode_pb2.MkdirsRequest(path="/x"))
            assert details == (
                "Mkdirs needs the role client; the caller's certificate presents journalnode"
            )
            # A session is refused when it opens, before any call it carries is read.
            session = stub.Session(iter([namenode_pb2.SessionRequest(
                id=1, mkdirs=namenode_pb2.MkdirsRequest(path="/x")
            )]), timeout=10)
            with pytest.raises(grpc.RpcError) as info:
                list(session)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert info.value.details() == (
                "Session needs the role client; the caller's certificate presents journalnode"
            )
            details = refused(stub.Multi, namenode_pb2.MultiRequest(ops=[
                namenode_pb2.MultiOp(mkdirs=namenode_pb2.MkdirsRequest(path="/x"))
            ]))
            assert "Multi needs the role client" in details
        with make_channel(active.address, tls("someclient")) as channel:
            ha = namenode_pb2_grpc.HAServiceProtocolStub(channel)
            request = namenode_pb2.TransitionRequest(source=namenode_pb2.REQUEST_BY_ZKFC)
            assert "needs the role namenode" in refused(ha.TransitionToStandby, request)
            client = namenode_pb2_grpc.ClientProtocolStub(channel)
            client.Mkdirs(namenode_pb2.MkdirsRequest(path="/by-client"), timeout=10)
            (answers,) = list(client.Session(iter([namenode_pb2.SessionRequest(
                id=7, mkdirs=namenode_pb2.MkdirsRequest(path="/by-client-session")
            )]), timeout=10))
            assert [(a.id, a.mkdirs.created) for a in answers.responses] == [(7, True)]
        with make_channel(active.address) as plaintext:
            with pytest.raises(grpc.RpcError) as info:
                namenode_pb2_grpc.HAServiceProtocolStub(plaintext).GetServiceStatus(
                    namenode_pb2.HAEmpty(), timeout=5
                )
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        # Nothing refused changed anything: the journal still holds the namespace.
        with HaFsClient(dev.settings()) as fs:
            assert fs.stat("/by-client").is_dir
        assert any(dev.journal_dir("jn1").glob("edits_*"))
