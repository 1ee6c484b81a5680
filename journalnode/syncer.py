"""The JournalNode's sync thread: it fetches the finalized segments this node lacks from its
peers (HDFS-4025) and, when asked to, formats an empty journal from them (HDFS-16690).

docs/protocol.md §10. The decisions are pure (``journalnode.sync``); the checks before a
segment goes in place are the Journal's (``Journal.install_synced_segment``). This is the
shell around them: one thread, ``journal-sync``, that every ``interval`` asks each peer of
the shared edits URI for its manifest, moves aside a copy here whose md5 a majority does not
share (§8.7), plans, asks every peer holding a missing segment for its md5, refuses a segment
the peers disagree on, downloads it from one that agrees and hands the bytes to the Journal::

    syncer = JournalSyncer(SyncConfig("ns1", ("h2:8485", "h3:8485"), 3, 120.0), server)
    syncer.start()      # a round at once, then one per interval
    syncer.stop()

A peer that fails is skipped for the round; its failure is logged when it starts and when
the peer answers again, not every round.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import structlog

from journalnode.errors import (
    CorruptSegmentError,
    JournalError,
    JournalStateError,
    from_rpc_error,
)
from journalnode.journal import Journal
from journalnode.sync import (
    FormatVerdict,
    SegmentToSync,
    SyncPlan,
    decide_format,
    rejoin_point,
)
from proto import journal_pb2, journal_pb2_grpc
from proto.values import NamespaceInfo, RemoteEditLog

log = structlog.get_logger(__name__)

RPC_TIMEOUT = 5.0
"""Deadline of one small call to a peer: a frozen peer costs a round this much, no more."""
DOWNLOAD_TIMEOUT = 120.0
STOP_TIMEOUT = 2.0
"""How long ``stop`` waits for a round in progress (a call to a frozen peer, a download);
the thread is a daemon, and whatever it was installing is checked again at the next start."""


@dataclass(frozen=True, slots=True)
class SyncConfig:
    """What the sync thread needs from the configuration (``conf.JournalNodeSettings`` and
    ``dfs.namenode.shared.edits.dir``)."""

    journal_id: str
    peers: tuple[str, ...]
    """The other JournalNodes' addresses."""
    configured: int
    """Every JournalNode of the shared edits URI, this one included."""
    interval: float
    format_enabled: bool = False
    names: tuple[tuple[str, str], ...] = ()
    """(address, configured id) of the peers that have one: the status page names them."""


def sync_peers(addresses: Sequence[str], own: Sequence[str]) -> tuple[str, ...]:
    """The addresses of the shared edits URI that are not this JournalNode's. ValueError
    when none is: the node would count itself as a peer."""
    peers = tuple(a for a in addresses if a not in own)
    if len(peers) == len(addresses):
        raise ValueError(
            f"none of this JournalNode's addresses ({', '.join(own)}) is in the shared edits "
            f"URI ({';'.join(addresses)}); set dfs.journalnode.rpc-address.<id> to the address "
            "the URI lists, or dfs.journalnode.enable.sync to false"
        )
    return peers


class Journals(Protocol):
    """What the sync thread needs of the JournalNode server."""

    def existing_journal(self, journal_id: str) -> Journal | None: ...

    def journal(self, journal_id: str) -> Journal: ...

    def peer_channel(self, target: str) -> grpc.Channel: ...


class _Peer:
    """The read-only calls the sync thread makes to one peer; a failure is a JournalError."""

    def __init__(self, address: str, channel: grpc.Channel) -> None:
        self.address = address
        self._stub = journal_pb2_grpc.QJournalServiceStub(channel)

    def _call(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            return method(request, timeout=RPC_TIMEOUT)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err

    def is_formatted(self, journal_id: str) -> NamespaceInfo | None:
        request = journal_pb2.IsFormattedRequest(journal_id=journal_id)
        r = self._call(self._stub.IsFormatted, request)
        return NamespaceInfo.from_pb(r.namespace_info) if r.is_formatted else None

    def promised_epoch(self, journal_id: str, cluster_id: str) -> int:
        request = journal_pb2.GetJournalStateRequest(journal_id=journal_id, cluster_id=cluster_id)
        return int(self._call(self._stub.GetJournalState, request).last_promised_epoch)

    def manifest(
        self, journal_id: str, cluster_id: str, *, in_progress_ok: bool = False
    ) -> list[RemoteEditLog]:
        request = journal_pb2.GetEditLogManifestRequest(
            journal_id=journal_id, cluster_id=cluster_id, since_txid=0,
            in_progress_ok=in_progress_ok,
        )
        r = self._call(self._stub.GetEditLogManifest, request)
        return [RemoteEditLog.from_pb(entry) for entry in r.logs]

    def segment_md5(self, journal_id: str, cluster_id: str, start_txid: int) -> tuple[int, bytes]:
        request = journal_pb2.GetSegmentMd5Request(
            journal_id=journal_id, cluster_id=cluster_id, start_txid=start_txid
        )
        r = self._call(self._stub.GetSegmentMd5, request)
        return int(r.end_txid), bytes(r.md5)

    def segment(self, journal_id: str, cluster_id: str, start_txid: int) -> Iterator[bytes]:
        request = journal_pb2.GetSegmentRequest(
            journal_id=journal_id, cluster_id=cluster_id, start_txid=start_txid
        )
        try:
            for chunk in self._stub.GetSegment(request, timeout=DOWNLOAD_TIMEOUT):
                yield chunk.data
        except grpc.RpcError as err:
            cause = from_rpc_error(err)
            raise type(cause)(
                f"downloading segment {start_txid} from {self.address} failed: {cause}"
            ) from err


class JournalSyncer:
    """The ``journal-sync`` thread of one JournalNode, for one journal id (module docstring)."""

    def __init__(self, config: SyncConfig, journals: Journals) -> None:
        self.config = config
        self._journals = journals
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = log.bind(journal=config.journal_id)
        # What was last logged about each peer, and about the journal's state, so that a
        # lasting condition is logged when it starts and when it ends, not every round.
        self._peer_errors: dict[str, str] = {}
        self._state_note = ""
        self._reported: set[str] = set()
        self.rounds = 0
        self.last_round_time: float | None = None
        """When the last round ended (seconds since the epoch; the status page)."""

    def start(self) -> JournalSyncer:
        self._thread = threading.Thread(target=self._run, name="journal-sync", daemon=True)
        self._thread.start()
        self._log.info(
            "journal sync started",
            peers=list(self.config.peers),
            interval_seconds=self.config.interval,
            format_from_peers=self.config.format_enabled,
        )
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT)
            if self._thread.is_alive():
                self._log.warning("journal sync still running at stop", waited=STOP_TIMEOUT)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # a bug or the local disk: log it, try next round
                self._log.error("journal sync round failed", error=repr(exc), exc_info=exc)
            self.rounds += 1
            self.last_round_time = time.time()
            self._stop.wait(self.config.interval)

    # ------------------------------------------------------------------ one round

    def run_once(self) -> SyncPlan | None:
        """One round: rejoin if empty and allowed, then plan and fetch. The plan, or None
        when the journal is not formatted."""
        jid = self.config.journal_id
        journal = self._journals.existing_journal(jid)
        if journal is None or journal.namespace_info is None:
            if not self.config.format_enabled:
                self._note("journal not formatted here; sync waits for a format")
                return None
            journal = self._rejoin()
            if journal is None:
                return None
        ns = journal.namespace_info
        assert ns is not None
        manifests: dict[str, list[RemoteEditLog]] = {}
        for peer in self._peers():
            answer = self._ask(peer, lambda p: p.manifest(jid, ns.cluster_id))
            if answer is not None:
                manifests[peer.address] = answer
        # Copies already here are compared too (docs/protocol.md §8.7): one whose md5 a
        # majority does not share is moved aside, and the plan made again fetches it.
        journal.ensure_digests()
        configured = self.config.configured
        plan = journal.plan_sync(manifests, configured=configured)
        if plan.repair:
            for repair in plan.repair:
                journal.move_aside_disagreeing(repair)
            plan = journal.plan_sync(manifests, configured=configured)
        for conflict in plan.conflicts:
            if self._first_report(f"conflict:{conflict.start_txid}:{conflict.detail}"):
                journal.stats.sync_failures += 1
                self._log.error(
                    "finalized segment held differently; not synced",
                    segment=conflict.start_txid,
                    detail=conflict.detail,
                )
        if plan.in_sync:
            self._note("in sync with the peers that answered", peers=sorted(manifests))
        for segment in plan.fetch:
            if self._stop.is_set():
                break
            self._sync_segment(journal, ns.cluster_id, segment)
        return plan

    def _sync_segment(self, journal: Journal, cluster_id: str, segment: SegmentToSync) -> None:
        """Install ``segment`` if the peers holding it agree on its md5 and one of them
        serves bytes with that md5; otherwise log why, install nothing, count a failure."""
        jid = self.config.journal_id
        sources = [p for p in self._peers() if p.address in segment.sources]
        md5s: dict[str, bytes] = {}
        for peer in sources:
            try:
                end, md5 = peer.segment_md5(jid, cluster_id, segment.start_txid)
            except CorruptSegmentError as exc:
                if self._first_report(f"corrupt:{peer.address}:{segment}"):
                    self._log.error(
                        "peer holds a corrupt copy of a finalized segment; not a sync source",
                        peer=peer.address, segment=str(segment), error=str(exc),
                    )
                continue
            except JournalError as exc:
                self._log.warning(
                    "peer did not give the md5 of a segment", peer=peer.address,
                    segment=str(segment), error=f"{type(exc).__name__}: {exc}",
                )
                continue
            if end != segment.end_txid:
                self._log.error(
                    "peer's segment ends elsewhere than its manifest said", peer=peer.address,
                    segment=str(segment), end=end,
                )
                continue
            md5s[peer.address] = md5
        if len(set(md5s.values())) != 1:
            if md5s:
                listed = {p: m.hex() for p, m in sorted(md5s.items())}
                # A lasting condition: logged and counted once, until the md5s change.
                if self._first_report(f"md5:{segment}:{sorted(listed.items())}"):
                    journal.stats.sync_failures += 1
                    self._log.error(
                        "peers hold different copies of a finalized segment (md5 mismatch); "
                        "nothing installed",
                        segment=str(segment), md5s=listed,
                    )
                return
            journal.stats.sync_failures += 1
            self._log.warning(
                "no peer vouched for a segment this node lacks; nothing installed",
                segment=str(segment), sources=list(segment.sources),
            )
            return
        (expected,) = set(md5s.values())
        for peer in sources:
            if peer.address not in md5s:
                continue
            started = time.monotonic()
            try:
                size = journal.install_synced_segment(
                    segment, expected, peer.segment(jid, cluster_id, segment.start_txid)
                )
            except JournalError as exc:
                journal.stats.sync_failures += 1
                level = self._log.error if isinstance(exc, JournalStateError) else self._log.warning
                level(
                    "segment from peer refused; nothing installed", peer=peer.address,
                    segment=str(segment), error=f"{type(exc).__name__}: {exc}",
                )
                continue
            if size == 0:
                self._log.info("segment was finalized here meanwhile", segment=str(segment))
                return
            self._log.info(
                "synced segment from peer", peer=peer.address, segment=str(segment),
                bytes=size, seconds=round(time.monotonic() - started, 3),
                replaced_in_progress=segment.replaces_in_progress,
            )
            return

    def _rejoin(self) -> Journal | None:
        """Format the empty journal from a majority of peers (HDFS-16690): their namespace,
        the highest epoch they promised, and the highest txid they hold as the rejoin point.
        None (and a log line) when they do not allow it yet."""
        jid = self.config.journal_id
        answers: dict[str, NamespaceInfo | None] = {}
        peers = {p.address: p for p in self._peers()}
        for peer in peers.values():
            found = self._ask(peer, lambda p: (p.is_formatted(jid),))
            if found is not None:
                answers[peer.address] = found[0]
        decision = decide_format(self.config.configured, answers)
        if decision.verdict is FormatVerdict.REFUSE:
            self._note(f"not formatting from peers: {decision.reason}", level="error")
            return None
        if decision.verdict is FormatVerdict.WAIT:
            self._note(f"not formatting from peers yet: {decision.reason}", level="warning")
            return None
        ns = decision.namespace_info
        assert ns is not None
        epochs: list[int] = []
        manifests: dict[str, list[RemoteEditLog]] = {}
        for address in decision.peers:
            peer = peers[address]
            epoch = self._ask(peer, lambda p: p.promised_epoch(jid, ns.cluster_id))
            logs = self._ask(peer, lambda p: p.manifest(jid, ns.cluster_id, in_progress_ok=True))
            if epoch is None or logs is None:
                self._note("not formatting from peers yet: a peer of the majority went quiet")
                return None
            epochs.append(epoch)
            manifests[address] = logs
        journal = self._journals.journal(jid)
        journal.format_to_rejoin(ns, max(epochs), rejoin_point(manifests))
        return journal

    def status(self) -> dict[str, Any]:
        """The sync thread's state for the status page (docs/operations.md §13.2)."""
        return {
            "peers": list(self.config.peers),
            "names": dict(self.config.names),
            "interval_seconds": self.config.interval,
            "format_from_peers": self.config.format_enabled,
            "rounds": self.rounds,
            "last_round_time": self.last_round_time,
            "note": self._state_note,
            "peer_errors": dict(sorted(self._peer_errors.items())),
        }

    # ------------------------------------------------------------------ helpers

    def _peers(self) -> list[_Peer]:
        return [_Peer(a, self._journals.peer_channel(a)) for a in self.config.peers]

    def _ask(self, peer: _Peer, call: Callable[[_Peer], Any]) -> Any:
        """``call(peer)``, or None when it fails; a peer's failure is logged when it starts
        (or changes) and when the peer answers again."""
        try:
            answer = call(peer)
        except JournalError as exc:
            error = f"{type(exc).__name__}: {exc}"
            if self._peer_errors.get(peer.address) != error:
                self._peer_errors[peer.address] = error
                self._log.warning("sync peer failed", peer=peer.address, error=error)
            return None
        if self._peer_errors.pop(peer.address, None) is not None:
            self._log.info("sync peer answers again", peer=peer.address)
        return answer

    def _first_report(self, key: str) -> bool:
        """True the first time a lasting problem (a conflict, a corrupt or divergent copy) is
        seen, so that it is logged once rather than every round."""
        if key in self._reported:
            return False
        self._reported.add(key)
        return True

    def _note(self, message: str, level: str = "info", **fields: object) -> None:
        """Log the journal's sync state when it changes."""
        if message != self._state_note:
            self._state_note = message
            getattr(self._log, level)(message, **fields)
