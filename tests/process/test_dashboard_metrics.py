"""The Grafana dashboard in ``deploy/`` reads only metrics the daemons serve, and the writer's
metrics tell a stalled JournalNode (issue 28 item 7).

On a dev cluster (ZooKeeper, three JournalNodes, two NameNodes, mutual TLS) every metric a
panel of ``deploy/grafana/hanamenode.json`` names is scraped from a live daemon (the active
and the standby NameNode, a JournalNode), ``*_build_info`` names the code they run, and
``process_*`` is there. Then a JournalNode is stopped with SIGSTOP: the active's
``qjm_logger_out_of_sync`` for it turns 1 and ``qjm_logger_seconds_since_last_contact``
grows past the contact threshold while writes go on; after SIGCONT both come back.
"""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conf.process_metrics import UNKNOWN, build_info
from hadev.devcluster import DevCluster
from hanamenode.client import HaFsClient
from qjm.metrics import contact_threshold

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "hanamenode.json"
NAMES = re.compile(r"\b(?:hanamenode|journalnode|qjm|process|python)_[a-z_]+\b")
HEARTBEAT = 0.25  # hadev's dfs.qjournal.heartbeat.interval.ms


def dashboard_metrics() -> set[str]:
    """Every metric (sample) name the dashboard's queries name."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    assert len(exprs) > 20, exprs
    return {name for expr in exprs for name in NAMES.findall(expr)}


SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def declared(url: str) -> set[str]:
    """The sample names of every metric family served at ``url``, also those of a labelled
    family without a sample yet (a counter of step-downs before the first one)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SAMPLE_SUFFIXES.get(family.type, ()))
        names.update(s.name for s in family.samples)
    return names


def samples(url: str) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [
        (s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def value(url: str, name: str, **labels: str) -> float | None:
    for sample_name, sample_labels, v in samples(url):
        if sample_name == name and all(sample_labels.get(k) == x for k, x in labels.items()):
            return v
    return None


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.2)


def test_the_dashboard_reads_live_metrics_and_a_stalled_journalnode_shows(
    tmp_path: Path,
) -> None:
    wanted = dashboard_metrics()
    assert {"qjm_logger_out_of_sync", "qjm_logger_seconds_since_last_contact",
            "hanamenode_build_info", "journalnode_build_info",
            "process_resident_memory_bytes"} <= wanted
    with DevCluster(tmp_path, session_timeout=1.0) as dev:
        active = dev.wait_active()
        standby = next(nn for nn in dev.namenode_ids if nn != active)
        with HaFsClient(dev.settings()) as fs:
            for i in range(20):
                fs.mkdirs(f"/d/{i}", parents=True)
        time.sleep(2.5)  # a roll (1 s) and a few tails on the standby: their histograms fill
        urls = [dev.namenode(nn).metrics_url for nn in (active, standby)]
        urls += [jn.metrics_url for jn in dev.journalnodes]
        served: set[str] = set()
        for url in urls:
            assert url is not None
            served |= declared(url)
        missing = sorted(wanted - served)
        assert not missing, f"{DASHBOARD.name} names metrics no daemon serves: {missing}"

        built = build_info()
        assert built.commit != UNKNOWN  # the tests run from a checkout
        active_url, jn_url = urls[0], urls[2]
        assert active_url is not None and jn_url is not None
        for url, daemon in ((active_url, "hanamenode"), (jn_url, "journalnode")):
            assert value(url, f"{daemon}_build_info", commit=built.commit,
                         version=built.version) == 1.0, url

        # A JournalNode stops (SIGSTOP): out of contact for the writer, then back.
        victim = dev.journalnodes[2]
        threshold = contact_threshold(HEARTBEAT)

        def out_of_sync() -> float | None:
            return value(active_url, "qjm_logger_out_of_sync", address=victim.address)

        def since_contact() -> float | None:
            return value(active_url, "qjm_logger_seconds_since_last_contact",
                         address=victim.address)

        # In sync to begin with (a loaded machine may have delayed an answer: wait for it).
        wait_for("the JournalNode is in sync", lambda: out_of_sync() == 0.0)
        assert (since_contact() or 0.0) < threshold
        dev.kill(victim.jn_id, signal.SIGSTOP)
        try:
            wait_for("the stopped JournalNode is out of sync", lambda: out_of_sync() == 1.0)
            assert (since_contact() or 0.0) > threshold
            with HaFsClient(dev.settings()) as fs:  # a quorum of two still writes
                fs.mkdirs("/while-stopped")
        finally:
            dev.kill(victim.jn_id, signal.SIGCONT)
        wait_for("the JournalNode is in contact again", lambda: out_of_sync() == 0.0)
        assert (since_contact() or threshold) < threshold
