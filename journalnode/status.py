"""The JournalNode's status page and ``/status.json`` (docs/operations.md §13): its id and
state, per journal its epochs, committed and last written txids, current segment, its sync
with its peers and whether it is rejoining (docs/protocol.md §10), the segments on disk and
the edit cache. ``collect`` reads the live journals once into a JSON-able dict; ``render``
turns it into HTML; ``journal_state`` is the one decision.
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

__all__ = ["SCHEMA_VERSION", "collect", "journal_facts", "journal_state", "render"]

SCHEMA_VERSION = 1


def journal_state(formatted: bool, rejoining: bool, segments_lacking: int) -> str:
    """What the page says of one journal here: ``not formatted``; ``rejoining`` (it formatted
    itself from its peers and does not vote until it holds their segments through its rejoin
    point, docs/protocol.md §10.3); ``syncing`` (it lacks finalized segments its peers hold);
    else ``serving``."""
    if not formatted:
        return "not formatted"
    if rejoining:
        return "rejoining"
    return "syncing" if segments_lacking else "serving"


def journal_facts(journal: Journal) -> dict[str, Any]:
    """One journal's part of ``/status.json`` (``journals[]``, docs/operations.md §13.2)."""
    ns = journal.namespace_info
    cached = journal.edits_cache.txid_range
    stats = journal.stats
    # Not ``journal.rejoining``: that mark is cleared only by the next vote asked of it.
    rejoining = journal.rejoin_pending
    return {
        "journal_id": journal.journal_id,
        "state": journal_state(ns is not None, rejoining, stats.segments_lacking),
        "rejoining": rejoining,
        "rejoin_txid": journal.rejoin_txid if rejoining else 0,
        "sync": {
            "segments_lacking": stats.segments_lacking,
            "segments_synced": stats.segments_synced,
            "bytes_synced": stats.bytes_synced,
            "failures": stats.sync_failures,
            "corrupt_segments": stats.corrupt_segments,
            "digest_mismatches": stats.digest_mismatches,
        },
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
    syncer = server.syncer
    sync = None if syncer is None else syncer.status()
    return {
        "schema": SCHEMA_VERSION,
        "kind": "journalnode",
        "journalnode_id": server.node_id or None,
        # The sync thread (null when sync is off); its journal is the shared edits URI's.
        "sync": None if sync is None else {
            "journal_id": syncer.config.journal_id if syncer is not None else None,
            "interval_seconds": sync["interval_seconds"],
            "format_from_peers": sync["format_from_peers"],
            "rounds": sync["rounds"],
            "last_round_time": sync["last_round_time"],
            "note": sync["note"],
            "peers": [
                {"id": sync["names"].get(a), "address": a, "error": sync["peer_errors"].get(a)}
                for a in sync["peers"]
            ],
        },
        "rpc_address": server.address,
        # The edits wire (docs/protocol.md §13.8); null when it is off.
        "edits_wire": None if server.edits_wire is None else {
            "port": server.edits_port,
            "connections": len(server.edits_wire.connections),
            "refused": server.edits_wire.refused,
        },
        "storage": str(server.root),
        "time": time.time(),
        # Mutants switched on in this process (conf.mutants): empty outside the tests.
        "planted_bugs": planted_status(),
        "journals": [journal_facts(j) for _, j in sorted(server.journals().items())],
    }


def _num(value: object) -> str:
    return f"<td class='num'>{esc(value)}</td>"


SEGMENTS_SHOWN = 10


_STATE_CLASS = {"serving": "good", "syncing": "warn", "rejoining": "warn"}


def own_state(status: Status) -> str:
    """The one state the page heads with: that of the journal it syncs (the shared edits
    URI's), else of its only journal; ``no journal`` when it stores none."""
    journals = {j["journal_id"]: j for j in status["journals"]}
    sync = status["sync"]
    if sync is not None and sync["journal_id"] in journals:
        return str(journals[sync["journal_id"]]["state"])
    if sync is not None:
        return "not formatted"
    if len(journals) == 1:
        return str(next(iter(journals.values()))["state"])
    return "no journal" if not journals else "serving"


def _render_sync(status: Status) -> list[str]:
    sync = status["sync"]
    journals = status["journals"]
    parts = ["<h2>Sync with the other JournalNodes</h2>"]
    if sync is None:
        parts.append("<p id='sync-off'>Sync is off (dfs.journalnode.enable.sync).</p>")
    else:
        last = sync["last_round_time"]
        parts.append(
            f"<p id='sync-summary'>Journal {esc(sync['journal_id'])}: {sync['rounds']} "
            f"round(s), every {sync['interval_seconds']:g} s, the last at "
            f"{esc(_when(last) if last is not None else 'none yet')}; "
            f"{esc(sync['note'] or 'no round yet')}"
            + ("; formats itself from its peers when empty" if sync["format_from_peers"]
               else "")
            + ".</p>"
        )
        parts.append(table(
            ["peer", "address", "last answer"],
            [[esc(p["id"]), esc(p["address"]), esc(p["error"] or "answered")]
             for p in sync["peers"]],
            id_="sync-peers",
        ))
    parts.append(table(
        ["journal", "state", "rejoin point (txid)", "segments lacking", "segments synced",
         "bytes synced", "failures", "corrupt copies", "md5 mismatches"],
        [
            [
                esc(j["journal_id"]), f"<td><span class='state'>{esc(j['state'])}</span></td>",
                _num(j["rejoin_txid"] if j["rejoining"] else None),
                _num(j["sync"]["segments_lacking"]), _num(j["sync"]["segments_synced"]),
                _num(j["sync"]["bytes_synced"]), _num(j["sync"]["failures"]),
                _num(j["sync"]["corrupt_segments"]), _num(j["sync"]["digest_mismatches"]),
            ]
            for j in journals
        ],
        id_="journal-sync",
    ))
    return parts


def _render_wire(wire: dict[str, Any] | None) -> str:
    if wire is None:
        return "no edits wire"
    return (
        f"edits wire on port <span id='edits-wire-port'>{wire['port']}</span> "
        f"(<span id='edits-wire-connections'>{wire['connections']}</span> connection(s), "
        f"{wire['refused']} refused)"
    )


def _when(epoch_seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_seconds))


def render(status: Status) -> str:
    """The HTML of ``<main>``."""
    journals = status["journals"]
    state = own_state(status)
    name = status["journalnode_id"]
    parts = [
        planted_banner(status),
        f"<p>JournalNode {'<b>' + esc(name) + '</b> ' if name else ''}at "
        f"{esc(status['rpc_address'])} is <span id='jn-state' class='state "
        f"{_STATE_CLASS.get(state, 'bad')}' data-self>{esc(state)}</span>; storage "
        f"{esc(status['storage'])}, <span id='journal-count'>{len(journals)}</span> "
        f"journal(s); {_render_wire(status['edits_wire'])}.</p>",
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
        *_render_sync(status),
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
                id_=f"segments-{j['journal_id']}",
            )
        )
    parts.append(f"<p>As of {esc(_when(status['time']))}.</p>")
    return "".join(parts)
