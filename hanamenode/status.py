"""The NameNode's status page and ``/status.json`` (docs/operations.md §13), after the
overview of HDFS's NameNode web UI: the HA state, the namespace, the "NameNode Journal
Status" table, the edit log and its current segment, the tailer on a standby, the
elector's view, and the startup progress (``hanamenode.startup``).

``collect`` reads the live objects once into a JSON-able dict (schema in docs/operations.md
§13.2); ``render`` turns that dict into HTML; ``journal_contact`` and ``current_attempt`` are
the decisions, pure functions of plain values. The failover history (``transitions``) is the
namesystem's (``hanamenode.transitions``); the cluster page is ``hanamenode.cluster_page``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from conf.mutants import planted_status
from conf.web import esc, planted_banner, table
from hanamenode.ha import TAILING_STATES, HAState
from qjm.journal_manager import QuorumJournalManager
from qjm.metrics import contact_threshold  # the same rule as qjm_logger_out_of_sync's

if TYPE_CHECKING:
    from conf.web import Status
    from hanamenode.server import NameNodeServer
    from qjm.async_logger import AsyncLogger

__all__ = [
    "SCHEMA_VERSION", "collect", "contact_threshold", "current_attempt", "duration",
    "journal_contact", "nav_links", "phase_figures", "render",
]

log = structlog.get_logger(__name__)

SCHEMA_VERSION = 1


def journal_contact(out_of_sync: bool, contact_age: float | None, threshold: float) -> str:
    """What the journal status table says of one JournalNode of the active's writer:
    ``out of contact`` when it has not answered for ``threshold`` seconds (or never has),
    else ``out of sync`` when the writer stopped sending it edits until the next segment,
    else ``in sync``."""
    if contact_age is None or contact_age > threshold:
        return "out of contact"
    if out_of_sync:
        return "out of sync"
    return "in sync"


def current_attempt(attempt_time: float, newest_transition_time: float | None) -> bool:
    """Whether the elector's last attempt to become active is still news: not when a
    transition began after it ended (its "became active in 0.054s" would outlive a later
    step-down otherwise)."""
    return newest_transition_time is None or attempt_time >= newest_transition_time


def duration(seconds: float) -> str:
    """``seconds`` in words of at most two units.

    >>> duration(4.2), duration(185), duration(7260), duration(90000)
    ('4 s', '3 min 5 s', '2 h 1 min', '1 d 1 h')
    """
    s = int(seconds)
    for unit, size, small, small_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60),
                                          ("min", 60, "s", 1)):
        if s >= size:
            return f"{s // size} {unit} {s % size // small_size} {small}"
    return f"{s} s"


def nav_links(nn_id: str) -> str:
    """The links between a NameNode's pages (escaped HTML)."""
    return f"<a href='status'>NameNode {esc(nn_id)}</a> · <a href='cluster'>cluster</a>"


def _journal_row(lg: AsyncLogger, quorum_txid: int, threshold: float, now: float) -> dict[str, Any]:
    age = None if lg.last_contact is None else max(0.0, now - lg.last_contact)
    return {
        "journalnode_id": lg.node_id,
        "address": lg.address,
        "journal_id": lg.journal_id,
        "status": journal_contact(lg.out_of_sync, age, threshold),
        "in_sync": not lg.out_of_sync,
        "lag_txns": max(0, quorum_txid - lg.highest_acked_txid),
        "acked_txid": lg.highest_acked_txid,
        "queued_bytes": lg.queued_bytes,
        "last_contact_seconds_ago": None if age is None else round(age, 3),
        "last_contact_time": lg.last_contact_wall,
    }


def collect(server: NameNodeServer) -> dict[str, Any]:
    """Every fact of the page, read once from the running NameNode."""
    fsn = server.namesystem
    now = time.monotonic()
    settings = server.settings
    namespace = fsn.namespace
    edit_log = fsn.edit_log
    newest = fsn.name_dir.newest_image()
    checkpoint: dict[str, Any] | None = None
    if newest is not None:
        txid, path = newest
        try:
            mtime: float | None = path.stat().st_mtime
        except OSError:  # purged between the listing and the stat
            mtime = None
        checkpoint = {"txid": txid, "time": mtime}
    wall = time.time()
    history = fsn.history
    state = fsn.state
    status: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "kind": "namenode",
        "namenode_id": server.nn_id,
        "nameservice": settings.nameservice,
        "rpc_address": server.address,
        "time": wall,
        "ha_state": state.value,
        "started_time": history.started,
        "uptime_seconds": round(wall - history.started, 3),
        "state_since": history.state_since,
        "active_since": history.state_since if state is HAState.ACTIVE else None,
        "transition_history_size": settings.ha.transition_history,
        # The failover history, newest first (docs/operations.md §13.1).
        "transitions": [t.to_json() for t in history.entries()],
        # Mutants switched on in this process (conf.mutants): empty outside the tests.
        "planted_bugs": planted_status(),
        # Why automatic failover is suspended, if it is (docs/consistency.md §6): the same
        # words as `hactl get-service-state`.
        "failover_note": server.elector.failover_note if server.elector is not None else "",
        # An observer's reads held for the clients' txids (docs/consistency.md §9).
        "observer": {
            "max_wait_seconds": settings.ha.observer_read_max_wait,
            "reads_served": int(server.metrics.value(
                "hanamenode_observer_reads_total", {"outcome": "served"}
            )),
            "reads_behind": int(server.metrics.value(
                "hanamenode_observer_reads_total", {"outcome": "behind"}
            )),
        } if fsn.state is HAState.OBSERVER else None,
        "namespace": {
            "directories": namespace.dir_count,
            "files": namespace.file_count,
            "last_applied_txid": fsn.last_applied_txid,
            "last_written_txid": edit_log.last_written_txid if edit_log is not None else None,
            "last_checkpoint": checkpoint,
        },
        "edit_log": None,
        "journals": [],
        "tailer": None,
        "elector": None,
        "startup": fsn.startup_status(),
    }
    threshold = contact_threshold(settings.qjm.heartbeat_interval)
    if edit_log is not None:
        qjm = edit_log.qjm
        status["edit_log"] = {
            "writer_epoch": qjm.epoch,
            "current_segment_txid": edit_log.segment_txid,
            "last_written_txid": edit_log.last_written_txid,
            "synced_txid": edit_log.synced_txid,
            "syncs": int(server.metrics.value("hanamenode_edit_log_syncs_total")),
            "txns_synced": int(server.metrics.value("hanamenode_edit_log_txns_synced_total")),
            "rolls": int(server.metrics.value("hanamenode_edit_log_rolls_total")),
            "failure": edit_log.failure,
            "out_of_contact_after_seconds": threshold,
        }
        if isinstance(qjm, QuorumJournalManager):  # the ZooKeeper journal has no JournalNodes
            status["journals"] = [
                _journal_row(lg, edit_log.synced_txid, threshold, now)
                for lg in qjm.loggers.loggers
            ]
    tailer = fsn.tailer
    if tailer is not None and fsn.state in TAILING_STATES:
        error = tailer.last_exception
        # Before the first round that read the log to its end (the startup's replay), the
        # tailer knows no lag: null, not 0.
        replaying = any(
            p["name"] == "loading_edits" and p["status"] == "running"
            for p in status["startup"]["phases"]
        )
        status["tailer"] = {
            "lag_txns": None if replaying else tailer.lag_txns,
            "seconds_since_last_load": round(tailer.seconds_since_last_load(), 3),
            "last_error": None if error is None else f"{type(error).__name__}: {error}",
        }
    elector = server.elector
    if elector is not None:
        holder: str | None = None
        holder_error: str | None = None
        try:
            holder = elector.lock_holder()
        except Exception as exc:  # ZooKeeper away: the page says so, the rest still shows
            holder_error = f"{type(exc).__name__}: {exc}"
            log.warning("status page: cannot read the lock holder", error=holder_error)
        attempt = elector.last_attempt
        latest = history.newest
        if attempt is not None and not current_attempt(
            attempt.time, None if latest is None else latest.time
        ):
            attempt = None  # a later transition says more, in the history
        fencing = elector.last_fencing
        status["elector"] = {
            "state": elector.state.value,
            "zk_state": elector.zk_state,
            "healthy": elector.healthy,
            "lock_holder": holder,
            "lock_holder_error": holder_error,
            "last_attempt": None if attempt is None else attempt.message,
            "last_attempt_time": None if attempt is None else attempt.time,
            "last_fencing": (
                None if fencing is None else {"time": fencing[0], "outcome": fencing[1]}
            ),
        }
    return status


def _when(epoch_seconds: float | None) -> str:
    if epoch_seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_seconds))


def _render_history(status: Status) -> list[str]:
    """The state's age, the uptime, and the failover history table."""
    now, since = status["time"], status["state_since"]
    state = status["ha_state"]
    head = (
        "<p id='state-since' class='when-reachable'>"
        f"{esc(state.capitalize())} since {esc(_when(since))} "
        f"(for {esc(duration(now - since))}); up {esc(duration(status['uptime_seconds']))}, "
        f"started {esc(_when(status['started_time']))}.</p>"
    )
    transitions = status["transitions"]
    rows = [
        [
            esc(_when(t["time"])), esc(t["from"]), esc(t["to"]), esc(t["cause"]),
            _num(f"{t['duration_seconds']:.3f} s"), esc(t["detail"] or "-"),
        ]
        for t in transitions
    ]
    return [
        head,
        f"<h2>Failover history (the last {status['transition_history_size']})</h2>",
        table(["when", "from", "to", "cause", "took", "detail"], rows, id_="transitions")
        if rows else "<p id='transitions-none'>No transition since the NameNode started.</p>",
    ]


def _num(value: object) -> str:
    return f"<td class='num'>{esc(value)}</td>"


_STATUS_CLASS = {"in sync": "good", "out of sync": "warn", "out of contact": "bad"}


_PHASE_CLASS = {"complete": "good", "running": "warn", "failed": "bad"}


def phase_figures(name: str, d: Mapping[str, Any], *, running: bool = False) -> str:
    """One line of figures for a phase, in words."""
    if name == "loading_fsimage":
        return f"{d['image'] or '-'}: txid {_n(d['txid'])}, {_n(d['inodes'])} inodes"
    if name == "loading_edits":
        target = "" if d["target_txid"] is None else f" (log end {_n(d['target_txid'])})"
        start, last = d["from_txid"], d["last_txid"]
        if running:
            return (
                f"from txid {_n(start)}{target}: {_n(d['applied'])} edits applied so far, "
                f"by the {d['by'] or '-'}"
            )
        span = (
            f"no edits after txid {_n(start - 1)}"
            if isinstance(start, int) and isinstance(last, int) and last < start
            else f"txid {_n(start)} to {_n(last)}"
        )
        return f"{span}{target}: {_n(d['applied'])} edits applied, by the {d['by'] or '-'}"
    if name == "becoming_active":
        recovered = d["recovered_txid"]
        return (
            f"epoch {_n(d['epoch'])}, "
            + ("an empty log" if recovered is None else f"log recovered to txid {_n(recovered)}")
            + f", new segment at txid {_n(d['first_txid'])}"
        )
    if name == "becoming_standby":
        return "reading the edit log: tailer and checkpointer started"
    return ""


def _n(value: object) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _render_startup(startup: Mapping[str, Any]) -> list[str]:
    done = "complete" if startup["complete"] else "in progress"
    elapsed = startup["elapsed_seconds"]
    head = (
        f"<p id='startup-summary'>Startup {done}"
        + ("" if elapsed is None else f" after {elapsed:.3f} s")
        + ".</p>"
    )
    rows = [
        [
            esc(p["title"]),
            f"<td class='{_PHASE_CLASS[p['status']]}'>{esc(p['status'])}</td>",
            _num(f"{p['elapsed_seconds']:.3f} s"),
            esc(phase_figures(p["name"], p["details"], running=p["status"] == "running")
                + (f" ({p['error']})" if p["error"] else "")),
        ]
        for p in startup["phases"]
    ]
    return [
        "<h2>Startup progress</h2>",
        head,
        table(["phase", "status", "elapsed", "figures"], rows, id_="startup"),
    ]


def render(status: Status) -> str:
    """The HTML of ``<main>``."""
    state = status["ha_state"]
    state_class = {"active": "good", "standby": "warn", "observer": "warn"}.get(state, "bad")
    ns = status["namespace"]
    checkpoint = ns["last_checkpoint"]
    parts = [
        planted_banner(status),
        f"<p>NameNode <b>{esc(status['namenode_id'])}</b> of nameservice "
        f"<b>{esc(status['nameservice'])}</b> at {esc(status['rpc_address'])} is "
        f"<span id='ha-state' class='state {state_class}' data-self>{esc(state)}</span>"
        + (
            f" <span id='failover-note' class='bad'>({esc(status['failover_note'])})</span>"
            if status["failover_note"]
            else ""
        )
        + ".</p>",
        *(
            [
                f"<p id='observer'>Observer: {_num(observer['reads_served'])} reads served, "
                f"{_num(observer['reads_behind'])} refused as behind the client's txid "
                f"(waited {observer['max_wait_seconds']:g} s each).</p>"
            ]
            if (observer := status.get("observer"))
            else []
        ),
        *_render_history(status),
        "<h2>Namespace</h2>",
        table(
            ["directories", "files", "last applied txid", "last written txid",
             "last checkpoint txid", "last checkpoint"],
            [[
                _num(ns["directories"]), _num(ns["files"]), _num(ns["last_applied_txid"]),
                _num(ns["last_written_txid"]),
                _num(checkpoint["txid"] if checkpoint else None),
                esc(_when(checkpoint["time"]) if checkpoint else None),
            ]],
            id_="namespace",
        ),
    ]
    edit_log = status["edit_log"]
    journal_ids = sorted({j["journal_id"] for j in status["journals"]})
    parts.append(
        "<h2>NameNode Journal Status"
        + (f" (journal {esc(', '.join(journal_ids))})" if journal_ids else "") + "</h2>"
    )
    if edit_log is None:
        parts.append("<p>Not writing: only the active NameNode writes the edit log.</p>")
    else:
        parts.append(
            table(
                ["journalnode", "address", "status", "lag (txids)", "acknowledged txid",
                 "queued bytes", "last contact"],
                [
                    [
                        esc(j["journalnode_id"]), esc(j["address"]),
                        f"<td class='{_STATUS_CLASS[j['status']]}'><span class='state'>"
                        f"{esc(j['status'])}</span></td>",
                        _num(j["lag_txns"]), _num(j["acked_txid"]), _num(j["queued_bytes"]),
                        esc("never" if j["last_contact_seconds_ago"] is None
                            else f"{j['last_contact_seconds_ago']:.1f} s ago"),
                    ]
                    for j in status["journals"]
                ],
                id_="journals",
            )
        )
        parts.append("<h2>Edit log</h2>")
        parts.append(
            table(
                ["writer epoch", "current segment", "last written txid", "synced txid",
                 "syncs", "txids synced", "rolls", "failure"],
                [[
                    _num(edit_log["writer_epoch"]),
                    _num(edit_log["current_segment_txid"]),
                    _num(edit_log["last_written_txid"]), _num(edit_log["synced_txid"]),
                    _num(edit_log["syncs"]), _num(edit_log["txns_synced"]),
                    _num(edit_log["rolls"]), esc(edit_log["failure"] or "none"),
                ]],
                id_="edit-log",
            )
        )
    tailer = status["tailer"]
    if tailer is not None:
        parts.append("<h2>Edit log tailer</h2>")
        parts.append(
            table(
                ["lag (txids)", "seconds since last load", "last error"],
                [[_num(tailer["lag_txns"]), _num(tailer["seconds_since_last_load"]),
                  esc(tailer["last_error"] or "none")]],
                id_="tailer",
            )
        )
    elector = status["elector"]
    parts.append("<h2>Failover elector</h2>")
    if elector is None:
        parts.append("<p>Automatic failover is off: <code>hactl</code> decides.</p>")
    else:
        fencing = elector["last_fencing"]
        holder = elector["lock_holder"] or (
            f"unknown ({elector['lock_holder_error']})" if elector["lock_holder_error"]
            else "nobody"
        )
        parts.append(
            table(
                ["elector state", "ZooKeeper", "healthy", "lock holder", "last attempt",
                 "last fencing"],
                [[
                    f"<td><span class='state'>{esc(elector['state'])}</span></td>",
                    esc(elector["zk_state"]),
                    esc("yes" if elector["healthy"] else "no"), esc(holder),
                    esc(elector["last_attempt"] or "none"),
                    esc(f"{_when(fencing['time'])}: {fencing['outcome']}" if fencing else "none"),
                ]],
                id_="elector",
            )
        )
    parts.extend(_render_startup(status["startup"]))
    parts.append(f"<p>As of {esc(_when(status['time']))}.</p>")
    return "".join(parts)
