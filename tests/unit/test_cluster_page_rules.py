"""The decisions behind the cluster page, the failover history and the JournalNode's state
(docs/operations.md §13.1, §13.4), from plain values; and the web server's extra pages over a
real socket in this process, with a peer that does not answer."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from conf import Settings
from conf.web import Page, WebServer, page
from failover.election_rules import Reason, transition_cause
from hanamenode.cluster_page import ClusterView, Member, journalnode_row, namenode_row, render
from hanamenode.ha import HAState
from hanamenode.status import current_attempt, duration
from hanamenode.transitions import Cause, TransitionHistory, edit_log_failure_cause
from journalnode.journal import Journal
from journalnode.status import journal_facts, journal_state
from journalnode.storage import MemoryJournalStorage
from tests.unit.test_journal import JID, NS, Writer

URI = "qjournal://10.0.0.1:8485;10.0.0.2:8485;10.0.0.3:8486/ns1"


def test_journalnode_ids_by_address_of_the_shared_edits_uri() -> None:
    settings = Settings.from_mapping({
        "dfs.namenode.shared.edits.dir": URI,
        "dfs.journalnode.ids": "jn1,jn2,jn3",
        "dfs.journalnode.rpc-address.jn1": "10.0.0.1:8485",  # exactly the URI's address
        "dfs.journalnode.rpc-address.jn2": "10.0.0.9:8485",  # not in the URI
        "dfs.journalnode.rpc-address.jn3": "0.0.0.0:8486",   # a wildcard host, its port unique
    })
    assert settings.journalnode_names() == {"10.0.0.1:8485": "jn1", "10.0.0.3:8486": "jn3"}
    assert Settings.from_mapping({"dfs.namenode.shared.edits.dir": URI}).journalnode_names() == {}


def test_a_wildcard_port_shared_by_two_ids_names_nobody() -> None:
    settings = Settings.from_mapping({
        "dfs.namenode.shared.edits.dir": "qjournal://h1:8485;h2:8485;h3:8485/ns1",
        "dfs.journalnode.ids": "jn1,jn2",
        "dfs.journalnode.rpc-address": "0.0.0.0:8485",
    })
    assert settings.journalnode_names() == {}


@pytest.mark.parametrize(
    ("formatted", "rejoining", "lacking", "state"),
    [
        (False, False, 0, "not formatted"),
        (True, True, 3, "rejoining"),  # rejoining says more than lacking segments
        (True, False, 2, "syncing"),
        (True, False, 0, "serving"),
    ],
)
def test_journal_state(formatted: bool, rejoining: bool, lacking: int, state: str) -> None:
    assert journal_state(formatted, rejoining, lacking) == state


@pytest.mark.parametrize(
    ("attempt", "newest", "shown"),
    [(10.0, None, True), (10.0, 9.0, True), (10.0, 10.0, True), (10.0, 10.5, False)],
)
def test_an_attempt_older_than_the_newest_transition_is_not_shown(
    attempt: float, newest: float | None, shown: bool
) -> None:
    assert current_attempt(attempt, newest) is shown


@pytest.mark.parametrize(
    ("reason", "cause"),
    [
        (Reason.CEDED, Cause.GRACEFUL),
        (Reason.SESSION_LOST, Cause.EXPIRED_SESSION),
        (Reason.FENCED, Cause.FENCING),
        (Reason.LOCK_LOST, Cause.LOCK_LOST),
        (Reason.UNHEALTHY, Cause.UNHEALTHY),
        (Reason.STOPPING, Cause.SHUTDOWN),
    ],
)
def test_the_cause_of_an_electors_step_down(reason: Reason, cause: Cause) -> None:
    assert transition_cause(reason) is cause


def test_an_edit_log_failure_is_fencing_only_when_the_epoch_was_refused() -> None:
    assert edit_log_failure_cause("writer fenced: epoch 3 < 4") is Cause.FENCING
    assert edit_log_failure_cause("sync failed: EpochError: promised 5") is Cause.FENCING
    assert edit_log_failure_cause("no quorum: 2 of 3 failed") is Cause.EDIT_LOG_FAILURE


def test_the_history_keeps_the_newest_n_and_when_the_state_began() -> None:
    history = TransitionHistory(2, started=100.0)
    assert (history.entries(), history.state_since, history.newest) == ([], 100.0, None)
    history.entered(101.0)  # the startup ended: standby
    for i, (a, b, cause) in enumerate([
        (HAState.STANDBY, HAState.ACTIVE, Cause.ELECTION),
        (HAState.ACTIVE, HAState.STANDBY, Cause.GRACEFUL),
        (HAState.STANDBY, HAState.ACTIVE, Cause.EXPIRED_SESSION),
    ]):
        history.record(a, b, cause, "", started=200.0 + i, seconds=0.25)
    entries = history.entries()
    assert [e.cause for e in entries] == [Cause.EXPIRED_SESSION, Cause.GRACEFUL]
    assert history.state_since == 202.25 and history.newest == entries[0]
    assert entries[0].to_json() == {
        "time": 202.0, "from": "standby", "to": "active", "cause": "expired session",
        "detail": "", "duration_seconds": 0.25,
    }


def test_durations_in_words() -> None:
    assert [duration(s) for s in (0.4, 59.9, 60, 3599, 86399, 172800)] == [
        "0 s", "59 s", "1 min 0 s", "59 min 59 s", "23 h 59 min", "2 d 0 h"
    ]


def _nn_status(state: str, applied: int, written: int | None) -> dict[str, Any]:
    return {
        "ha_state": state, "active_since": 5.0 if state == "active" else None,
        "failover_note": "", "namespace": {"last_applied_txid": applied,
                                           "last_written_txid": written},
    }


def test_rows_of_answering_and_silent_daemons() -> None:
    nn1 = Member("namenode", "nn1", "h:8020", "http://h:9870/status")
    assert namenode_row(nn1, _nn_status("active", 7, 9), None) == {
        "id": "nn1", "rpc_address": "h:8020", "url": "http://h:9870/status", "reachable": True,
        "error": None, "state": "active", "last_txid": 9, "active_since": 5.0,
        "failover_note": "",
    }
    assert namenode_row(nn1, _nn_status("standby", 7, None), None)["last_txid"] == 7
    gone = namenode_row(nn1, None, "ConnectionRefusedError: refused")
    assert (gone["state"], gone["last_txid"], gone["reachable"]) == ("unreachable", None, False)

    jn1 = Member("journalnode", "jn1", "h:8485", None)
    jn_status = {"journals": [{"journal_id": "ns1", "state": "syncing", "last_written_txid": 4}]}
    row = journalnode_row(jn1, "ns1", jn_status, None, {"status": "out of sync"})
    assert (row["state"], row["last_txid"], row["writer_status"]) == ("syncing", 4, "out of sync")
    other = journalnode_row(jn1, "other", jn_status, None, None)
    assert (other["state"], other["writer_status"]) == ("no copy of the journal", None)


def test_only_the_serving_namenodes_own_state_is_marked_as_its_own() -> None:
    nn = [
        namenode_row(Member("namenode", "nn1", "a:1", "http://a:2/status"),
                     _nn_status("active", 3, 3), None),
        namenode_row(Member("namenode", "nn2", "b:1", None), None, "timed out"),
    ]
    for r in nn:
        r.update(lag_txns=0, last_contact_seconds_ago=None, last_contact_time=None)
    html = render({"namenode_id": "nn1", "nameservice": "ns", "active": "nn1", "time": 10.0,
                   "head_txid": 3, "journal_id": "ns", "namenodes": nn, "journalnodes": []})
    assert "id='state-nn1' data-self>active<" in html
    assert "id='state-nn2' title='timed out'>unreachable<" in html
    assert "<a href='http://a:2/status'><b>nn1</b></a>" in html and "<b>nn2</b></td>" in html


def test_a_failed_refresh_replaces_every_state_and_greys_the_page() -> None:
    html = page("Cluster ns", "<main/>", "cluster", "<a href='status'>x</a>")
    assert "fetch('cluster?fragment=1'" in html and "<a href='cluster.json'>" in html
    assert "el.hasAttribute('data-self') ? text : 'unknown'" in html
    assert "'unreachable since ' + since.toISOString().substring(11, 19)" in html
    assert "document.body.classList.add('unreachable')" in html
    assert "control.abort()" in html  # a daemon that does not answer counts too


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_cluster_page_is_served_and_a_silent_peer_costs_one_timeout() -> None:
    # nn2's HTTP port listens but never answers (a stopped process); jn1's refuses.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    settings = Settings.from_mapping({
        "dfs.nameservices": "ns",
        "dfs.ha.namenodes.ns": "nn1,nn2",
        "dfs.namenode.http-address.ns.nn2": f"127.0.0.1:{silent.getsockname()[1]}",
        "dfs.namenode.shared.edits.dir": "qjournal://127.0.0.1:8485/ns",
        "dfs.journalnode.ids": "jn1",
        "dfs.journalnode.rpc-address.jn1": "127.0.0.1:8485",
        "dfs.journalnode.http-address.jn1": f"127.0.0.1:{_free_port()}",
    })
    own = _nn_status("active", 1, 1) | {"journals": []}
    view = ClusterView(settings, "nn1", own=lambda: own, own_url=lambda: None,
                       fetch_seconds=0.5)
    server = WebServer("127.0.0.1:0", CollectorRegistry(), status=lambda: own,
                       render=lambda s: "", title="NameNode nn1",
                       pages={"cluster": Page(view.collect, render, "Cluster ns")}).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        started = time.monotonic()
        with urllib.request.urlopen(base + "/cluster.json", timeout=10) as answer:
            cluster = json.load(answer)
        took = time.monotonic() - started
        assert took < 3, took  # one timeout for every peer at once, not one after another
        rows = {r["id"]: r for r in cluster["namenodes"] + cluster["journalnodes"]}
        assert [r["state"] for r in rows.values()] == ["active", "unreachable", "unreachable"]
        assert "timed out" in rows["nn2"]["error"], rows["nn2"]
        assert "Connection refused" in rows["jn1"]["error"], rows["jn1"]
        assert cluster["active"] == "nn1" and rows["nn1"]["last_contact_seconds_ago"] == 0
        with urllib.request.urlopen(base + "/cluster", timeout=10) as answer:
            assert "fetch('cluster?fragment=1'" in answer.read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/nothing", timeout=10)
        assert "/cluster, /cluster.json" in missing.value.read().decode()
    finally:
        server.stop()
        view.close()
        silent.close()


def test_a_rejoined_journal_that_the_writer_brought_up_to_date_is_no_longer_rejoining() -> None:
    """The writer goes on writing to a rejoined JournalNode at its next segment; once a
    segment it finalized there covers the rejoin point, the page and ``journalnode_rejoining``
    say it votes again, although the durable mark waits for the next vote to be cleared."""
    journal = Journal(JID, MemoryJournalStorage())
    journal.format_to_rejoin(NS, promised_epoch=4, sync_until=3)
    assert journal.rejoin_pending and journal.rejoin_txid == 3
    writer = Writer(journal, 4)
    writer.start(1)
    writer.write(1, 1, 3)
    assert journal.rejoin_pending  # held, but not finalized yet
    writer.finalize(1, 3)
    assert journal.rejoining and not journal.rejoin_pending
    status = journal_facts(journal)
    assert (status["state"], status["rejoining"], status["rejoin_txid"]) == ("serving", False, 0)
