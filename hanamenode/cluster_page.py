"""The cluster page every NameNode serves at ``/cluster`` and ``/cluster.json``
(docs/operations.md §13.4): every NameNode and JournalNode of the configuration, by its
configured id, with its state, last txid, lag, last contact and a link to its own page.

The NameNode reads its own facts directly and its peers' from their ``/status.json``, all
at once on a small pool of threads, each with ``FETCH_SECONDS`` to answer: the page comes
back within about that long whoever is down, and nothing of it runs on the NameNode's
event loop (the HTTP server's threads call it). What a peer's answer means is decided by
pure functions (``namenode_row``, ``journalnode_row``)::

    view = ClusterView(settings, "nn1", own=lambda: status.collect(server), own_url=url)
    view.collect()          # {"kind": "cluster", "namenodes": [...], "journalnodes": [...]}
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from conf.web import esc, table
from hanamenode.peers import connect_address
from hanamenode.status import duration

if TYPE_CHECKING:
    from conf import Settings
    from conf.web import Status

__all__ = [
    "FETCH_SECONDS", "ClusterView", "Member", "journalnode_row", "members", "namenode_row",
    "render",
]

log = structlog.get_logger(__name__)

SCHEMA_VERSION = 1
FETCH_SECONDS = 1.0
"""How long a peer's ``/status.json`` has to answer before it counts as unreachable."""


@dataclass(frozen=True, slots=True)
class Member:
    """One daemon of the configuration: its kind, id, RPC address and status page URL
    (None when its HTTP port is not known: port 0 in the configuration)."""

    kind: str  # "namenode" or "journalnode"
    id: str
    rpc_address: str
    url: str | None


def _url(http_address: str) -> str | None:
    address = connect_address(http_address)
    return None if address.endswith(":0") else f"http://{address}/status"


def members(settings: Settings, own_id: str, own_url: str | None) -> list[Member]:
    """The NameNodes of the nameservice, then the JournalNodes of the shared edits URI (by
    their configured ids; an address no ``dfs.journalnode.rpc-address.<id>`` names stands
    for itself, without a page)."""
    found = [
        Member(
            "namenode", nn, connect_address(settings.namenode(nn).rpc_address),
            own_url if nn == own_id else _url(settings.namenode(nn).http_address),
        )
        for nn in settings.namenode_ids
    ]
    uri = settings.journal_uri
    if uri is not None:
        names = settings.journalnode_names()
        for address in uri.addresses:
            jn = names.get(address)
            url = None if jn is None else _url(settings.journalnode(jn).http_address)
            found.append(Member("journalnode", jn or address, address, url))
    return found


def _last_txid(status: Mapping[str, Any]) -> int:
    ns = status["namespace"]
    written = ns["last_written_txid"]
    return int(written if written is not None else ns["last_applied_txid"])


def namenode_row(m: Member, status: Mapping[str, Any] | None, error: str | None) -> dict[str, Any]:
    """A NameNode's row from its ``/status.json`` (None: unreachable, ``error`` says why);
    lag and last contact are filled in by ``ClusterView.collect``."""
    row: dict[str, Any] = {
        "id": m.id, "rpc_address": m.rpc_address, "url": m.url, "reachable": status is not None,
        "error": error, "state": "unreachable", "last_txid": None, "active_since": None,
        "failover_note": "",
    }
    if status is not None:
        row.update(
            state=status["ha_state"], last_txid=_last_txid(status),
            active_since=status.get("active_since"),
            failover_note=status.get("failover_note", ""),
        )
    return row


def journalnode_row(
    m: Member, journal_id: str | None, status: Mapping[str, Any] | None, error: str | None,
    writer: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """A JournalNode's row from its ``/status.json`` (None: unreachable) for journal
    ``journal_id``; ``writer``: the active writer's row for it (the journal status table of
    the NameNode that says it is active, None when none does)."""
    journal = None
    if status is not None:
        journal = next(
            (j for j in status["journals"] if j["journal_id"] == journal_id), None
        )
    return {
        "id": m.id, "rpc_address": m.rpc_address, "url": m.url, "reachable": status is not None,
        "error": error,
        # Its own word for its copy of the journal (journalnode.status.journal_state).
        "state": "unreachable" if status is None else (
            "no copy of the journal" if journal is None else journal["state"]
        ),
        "last_txid": None if journal is None else journal["last_written_txid"],
        "writer_status": None if writer is None else writer["status"],
    }


class ClusterView:
    """The cluster page's facts, gathered on each request (module docstring)."""

    def __init__(
        self,
        settings: Settings,
        nn_id: str,
        *,
        own: Callable[[], Status],
        own_url: Callable[[], str | None],
        fetch_seconds: float = FETCH_SECONDS,
    ) -> None:
        self.settings = settings
        self.nn_id = nn_id
        self._own = own
        self._own_url = own_url
        self.fetch_seconds = fetch_seconds
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"cluster-{nn_id}")
        self._lock = threading.Lock()
        self._last_contact: dict[str, float] = {}
        """Member id -> wall time of its last answer to this NameNode's page."""

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _fetch(self, url: str) -> dict[str, Any]:
        with urllib.request.urlopen(url + ".json", timeout=self.fetch_seconds) as answer:
            return dict(json.load(answer))

    def collect(self) -> dict[str, Any]:
        now = time.time()
        own = dict(self._own())
        everyone = members(self.settings, self.nn_id, self._own_url())
        asked: dict[str, Future[dict[str, Any]]] = {
            m.id: self._pool.submit(self._fetch, m.url)
            for m in everyone if m.id != self.nn_id and m.url is not None
        }
        wait(asked.values(), timeout=self.fetch_seconds + 0.5)
        answers: dict[str, tuple[dict[str, Any] | None, str | None]] = {self.nn_id: (own, None)}
        for member_id, future in asked.items():
            answers[member_id] = _outcome(future)
        uri = self.settings.journal_uri
        journal_id = None if uri is None else uri.journal_id
        # The active's view of each JournalNode (its journal status table), whichever
        # NameNode serves the page: its status.json was read above.
        active_status = next(
            (s for s, _ in answers.values() if s is not None and s["ha_state"] == "active"),
            None,
        )
        writer = {j["address"]: j for j in (active_status or {}).get("journals", [])}
        namenodes, journalnodes = [], []
        for m in everyone:
            status, error = answers.get(m.id, (None, "no status page address configured"))
            if m.kind == "namenode":
                namenodes.append(namenode_row(m, status, error))
            else:
                journalnodes.append(
                    journalnode_row(m, journal_id, status, error, writer.get(m.rpc_address))
                )
        rows = namenodes + journalnodes
        head = max((r["last_txid"] for r in rows if r["last_txid"] is not None), default=None)
        with self._lock:
            for r in rows:
                if r["reachable"]:
                    self._last_contact[r["id"]] = now
                contact = self._last_contact.get(r["id"])
                r["last_contact_time"] = contact
                r["last_contact_seconds_ago"] = (
                    None if contact is None else round(max(0.0, now - contact), 3)
                )
                r["lag_txns"] = (
                    None if head is None or r["last_txid"] is None else head - r["last_txid"]
                )
        active = [r["id"] for r in namenodes if r["state"] == "active"]
        return {
            "schema": SCHEMA_VERSION,
            "kind": "cluster",
            "nameservice": self.settings.nameservice,
            "namenode_id": self.nn_id,
            "journal_id": journal_id,
            "time": now,
            # Comma-separated when more than one NameNode says it is active.
            "active": ", ".join(active) or None,
            "head_txid": head,
            "namenodes": namenodes,
            "journalnodes": journalnodes,
        }


def _outcome(future: Future[dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """A peer's answer, or why there is none, in words."""
    if not future.done():
        return None, "no answer within the page's timeout"
    exc = future.exception()
    if exc is None:
        return future.result(), None
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, Exception):
        exc = exc.reason
    return None, f"{type(exc).__name__}: {exc}"


_STATE_CLASS = {"active": "good", "serving": "good", "standby": "warn", "observer": "warn",
                "syncing": "warn", "rejoining": "warn"}
_WRITER_CLASS = {"in sync": "good", "out of sync": "warn", "out of contact": "bad"}


def _state(row: Mapping[str, Any], serving: str) -> str:
    own = " data-self" if row["id"] == serving else ""
    cls = _STATE_CLASS.get(row["state"], "bad")
    title = f" title='{esc(row['error'])}'" if row["error"] else ""
    return (
        f"<td><span class='state {cls}' id='state-{esc(row['id'])}'{own}{title}>"
        f"{esc(row['state'])}</span></td>"
    )


def _link(row: Mapping[str, Any]) -> str:
    name = f"<b>{esc(row['id'])}</b>"
    return f"<a href='{esc(row['url'])}'>{name}</a>" if row["url"] else name


def _contact(row: Mapping[str, Any]) -> str:
    ago = row["last_contact_seconds_ago"]
    return "never" if ago is None else "now" if ago < 0.5 else f"{duration(ago)} ago"


def _num(value: object) -> str:
    return f"<td class='num'>{esc(value)}</td>"


def render(status: Status) -> str:
    """The HTML of ``<main>``."""
    serving = status["namenode_id"]
    active = (status["active"] or "").split(", ")
    summary = (
        "no NameNode is active" if active == [""]
        else f"{esc(active[0])} is active" if len(active) == 1
        else f"<span class='bad'>{len(active)} NameNodes say they are active: "
             f"{esc(status['active'])}</span>"
    )
    now = status["time"]
    nn_rows = [
        [
            _link(r), _state(r, serving), esc(r["rpc_address"]), _num(r["last_txid"]),
            _num(r["lag_txns"]), esc(_contact(r)),
            esc("-" if r["active_since"] is None else
                f"{time.strftime('%H:%M:%S', time.gmtime(r['active_since']))} UTC "
                f"({duration(now - r['active_since'])})"),
            esc(r["failover_note"] or r["error"] or ""),
        ]
        for r in status["namenodes"]
    ]
    jn_rows = [
        [
            _link(r), _state(r, serving), esc(r["rpc_address"]), _num(r["last_txid"]),
            _num(r["lag_txns"]), esc(_contact(r)),
            f"<td class='{_WRITER_CLASS[r['writer_status']]}'><span class='state'>"
            f"{esc(r['writer_status'])}</span></td>"
            if r["writer_status"] else esc("-"),
            esc(r["error"] or ""),
        ]
        for r in status["journalnodes"]
    ]
    return "".join([
        "<p id='cluster-summary' class='when-reachable'>"
        f"Nameservice <b>{esc(status['nameservice'])}</b>, seen from NameNode "
        f"<b>{esc(serving)}</b>: {summary}; newest txid "
        f"{esc(status['head_txid'])}. Lag is in txids behind that newest one.</p>",
        "<h2>NameNodes</h2>",
        table(["namenode", "state", "RPC address", "last txid", "lag (txids)", "last contact",
               "active since", "note"], nn_rows, id_="cluster-namenodes"),
        f"<h2>JournalNodes (journal {esc(status['journal_id'])})</h2>",
        table(["journalnode", "state", "RPC address", "last txid", "lag (txids)",
               "last contact", "the active's view", "note"], jn_rows,
              id_="cluster-journalnodes"),
        f"<p>As of {esc(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(now)))}.</p>",
    ])
