"""What an operator reads from a live dev cluster (issue 10, row 6).

The README's metric table is checked against a real ``/metrics`` scrape of each daemon: a
JournalNode, and the active and standby NameNodes of a dev cluster (ZooKeeper, three
JournalNodes, two NameNodes with automatic failover); every documented metric is served, and
every served metric of the project is documented. Then a JournalNode is killed: the active's
log names that JournalNode and the cause, and ``qjm_logger_out_of_sync`` says it too.
"""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hadev.devcluster import DevCluster
from hanamenode.client import HaFsClient

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
OURS = re.compile(r"\b(?:journalnode|hanamenode|qjm)_[a-z_]+\b")


def documented() -> dict[str, set[str]]:
    """README's Metrics table: metric names by daemon (JournalNode, NameNode)."""
    section = (ROOT / "README.md").read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
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
            assert not unserved, f"README lists {daemon} metrics never served: {unserved}"
            undocumented = sorted(served - table[daemon])
            assert not undocumented, f"{daemon} serves metrics README lacks: {undocumented}"

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
        assert sample(
            active_url, "qjm_logger_out_of_sync", {"journalnode": victim.address}
        ) == 1.0
