"""The JournalNode's status page and ``/status.json`` (docs/operations.md §13): per journal,
its epochs, committed and last written txids, current segment, segments on disk and the edit
cache. ``collect`` reads the live journals once into a JSON-able dict; ``render`` turns it
into HTML.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from conf.mutants import planted_status
from conf.web import esc, planted_banner, table

if TYPE_CHECKING:
    from conf.web import Status
    from journalnode.journal import Journal
    from journalnode.server import JournalNodeServer

__all__ = ["SCHEMA_VERSION", "collect", "render"]

SCHEMA_VERSION = 1


def _journal(journal: Journal) -> dict[str, Any]:
    ns = journal.namespace_info
    cached = journal.edits_cache.txid_range
    return {
        "journal_id": journal.journal_id,
        "formatted": ns is not None,
        "cluster_id": None if ns is None else ns.cluster_id,
        "last_promised_epoch": journal.last_promised_epoch,
        "last_writer_epoch": journal.last_writer_epoch,
        "committed_txid": journal.committed_txid,
        "last_written_txid": journal.stats.last_written_txid,
        "lag_txns": journal.current_lag_txns,
        "current_segment_txid": journal.current_segment_txid,
        "segments": [
            {"start_txid": s.start_txid, "end_txid": s.end_txid, "in_progress": s.is_in_progress}
            for s in journal.segments()
        ],
        "edit_cache": {
            "bytes": journal.edits_cache.size_bytes,
            "first_txid": None if cached is None else cached[0],
            "last_txid": None if cached is None else cached[1],
            "txns_served": journal.stats.journaled_edits_served,
            "misses": journal.stats.journaled_edits_misses,
        },
        "txns_written": journal.stats.txns_written,
        "batches_written": journal.stats.batches_written,
    }


def collect(server: JournalNodeServer) -> dict[str, Any]:
    """Every fact of the page, read once from the running JournalNode."""
    return {
        "schema": SCHEMA_VERSION,
        "kind": "journalnode",
        "rpc_address": server.address,
        "storage": str(server.root),
        "time": time.time(),
        # Mutants switched on in this process (conf.mutants): empty outside the tests.
        "planted_bugs": planted_status(),
        "journals": [_journal(j) for _, j in sorted(server.journals().items())],
    }


def _num(value: object) -> str:
    return f"<td class='num'>{esc(value)}</td>"


SEGMENTS_SHOWN = 10


def render(status: Status) -> str:
    """The HTML of ``<main>``."""
    journals = status["journals"]
    parts = [
        planted_banner(status),
        f"<p>JournalNode at {esc(status['rpc_address'])}, storage {esc(status['storage'])}, "
        f"<span id='journal-count'>{len(journals)}</span> journal(s).</p>",
        "<h2>Journals</h2>",
        table(
            ["journal", "cluster", "promised epoch", "writer epoch", "committed txid",
             "last written txid", "lag (txids)", "current segment", "txids written"],
            [
                [
                    esc(j["journal_id"]), esc(j["cluster_id"] or "not formatted"),
                    _num(j["last_promised_epoch"]), _num(j["last_writer_epoch"]),
                    _num(j["committed_txid"]), _num(j["last_written_txid"]),
                    _num(j["lag_txns"]), _num(j["current_segment_txid"]),
                    _num(j["txns_written"]),
                ]
                for j in journals
            ],
            id_="journals",
        ),
        "<h2>Edit cache</h2>",
        table(
            ["journal", "bytes", "first txid", "last txid", "txids served", "misses"],
            [
                [
                    esc(j["journal_id"]), _num(j["edit_cache"]["bytes"]),
                    _num(j["edit_cache"]["first_txid"]), _num(j["edit_cache"]["last_txid"]),
                    _num(j["edit_cache"]["txns_served"]), _num(j["edit_cache"]["misses"]),
                ]
                for j in journals
            ],
            id_="edit-cache",
        ),
    ]
    for j in journals:
        segments = j["segments"]
        parts.append(
            f"<h2>Segments of {esc(j['journal_id'])} ({len(segments)}; the newest "
            f"{min(len(segments), SEGMENTS_SHOWN)})</h2>"
        )
        parts.append(
            table(
                ["first txid", "last txid", "state"],
                [
                    [_num(s["start_txid"]), _num(s["end_txid"]),
                     esc("in progress" if s["in_progress"] else "finalized")]
                    for s in reversed(segments[-SEGMENTS_SHOWN:])
                ],
            )
        )
    parts.append(
        f"<p>As of {esc(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(status['time'])))}."
        "</p>"
    )
    return "".join(parts)
