"""Reading finalized segments from several JournalNodes (HDFS-3077 §3).

``chain_segments`` merges every JournalNode's manifest into one chain of segments starting at
a txid; each link is a ``RedundantEditLogInputStream`` that reads the segment from one
JournalNode and, if that one fails mid-read, goes on from another that has the same segment,
skipping what it already returned.

A finalized segment is read only from JournalNodes in a majority of the cluster that report
the same md5 for it, and its bytes are checked against that md5 before any of its ops is
returned (docs/protocol.md §8.7): a copy changed on one JournalNode's disk, checksums and all,
is never applied, whatever the address order.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import structlog

from conf.mutants import Mutant, active
from journalnode.edits_cache import CachedEdits
from proto import edits_pb2, records
from proto.values import RemoteEditLog
from qjm.errors import QJMError
from qjm.quorum import majority

log = structlog.get_logger(__name__)

K = TypeVar("K")


class SegmentSource(Protocol):
    address: str

    def get_segment(self, start: int, end: int | None) -> Iterator[bytes]: ...


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one pass over the log did: ``applied`` ops, the last txid applied (0 if none),
    and the highest txid the journal knows of (in-progress segments included). Either
    backend's reader returns it (``hanamenode.journal.EditSource``)."""

    applied: int
    last_txid: int
    highest_known_txid: int


class EditLogReadError(QJMError):
    """No JournalNode could serve a segment, or what one served was not that segment."""


def iter_segment_ops(
    chunks: Iterator[bytes], start: int, end: int, what: str
) -> Iterator[edits_pb2.EditOp]:
    """Parse a streamed segment (header + records) into EditOps, checking txids start..end."""
    buf = bytearray()
    header_seen = False
    expect = start
    for chunk in chunks:
        buf += chunk
        if not header_seen:
            if len(buf) < records.HEADER_LEN:
                continue
            if bytes(buf[: records.HEADER_LEN]) != records.SEGMENT_HEADER:
                raise EditLogReadError(f"{what}: bad segment header")
            del buf[: records.HEADER_LEN]
            header_seen = True
        pos = 0
        while len(buf) - pos >= records.FRAME_LEN:
            length = int.from_bytes(buf[pos : pos + 4], "big")
            if len(buf) - pos < records.FRAME_LEN + length:
                break
            # One whole record: let records.iter_records validate its frame and checksum.
            record = bytes(buf[pos : pos + records.FRAME_LEN + length])
            for _, body in records.iter_records(record):
                op = edits_pb2.EditOp.FromString(body)
                if op.txid != expect:
                    raise EditLogReadError(f"{what}: txid {op.txid} where {expect} was expected")
                expect += 1
                yield op
            pos += records.FRAME_LEN + length
        del buf[:pos]
    if not header_seen or buf:
        raise EditLogReadError(f"{what}: truncated ({len(buf)} stray bytes at the end)")
    if expect != end + 1:
        raise EditLogReadError(f"{what}: ended at txid {expect - 1}, expected {end}")


class RedundantEditLogInputStream:
    """One finalized segment, readable from any of several JournalNodes.

    With ``md5`` (what a majority of JournalNodes recorded for it), each source's bytes are
    read whole and checked against it before any op is returned; a source serving other
    bytes counts as failed and the next one is read. With ``refused`` (no md5 has a
    majority), reading raises EditLogReadError with that reason and reads nothing."""

    def __init__(
        self,
        sources: Sequence[SegmentSource],
        start_txid: int,
        end_txid: int,
        md5: bytes = b"",
        *,
        refused: str = "",
        vote: SegmentVote | None = None,
    ) -> None:
        if not sources:
            raise QJMError(f"segment {start_txid}-{end_txid} has no source")
        self.sources = list(sources)
        self.start_txid = start_txid
        self.end_txid = end_txid
        self.md5 = md5
        self.refused = refused
        self.vote = vote

    def __repr__(self) -> str:
        names = ",".join(s.address for s in self.sources)
        return f"RedundantEditLogInputStream({self.start_txid}-{self.end_txid} from {names})"

    def __iter__(self) -> Iterator[edits_pb2.EditOp]:
        return self.read(self.start_txid)

    def read(self, from_txid: int) -> Iterator[edits_pb2.EditOp]:
        """Ops with txid >= from_txid, switching JournalNode on any failure."""
        if self.refused and self.vote is not None:
            decided = self.vote.decide(self.start_txid, self.end_txid)
            if decided is not None:
                self.md5, self.sources, self.refused = decided, self.vote.holders[decided], ""
                self.vote = None
        if self.refused:
            raise EditLogReadError(self.refused)
        next_txid = from_txid
        failures: list[str] = []
        for source in self.sources:
            what = f"segment {self.start_txid}-{self.end_txid} from {source.address}"
            try:
                chunks = source.get_segment(self.start_txid, None)
                if self.md5:
                    chunks = iter([self._checked(b"".join(chunks), what)])
                for op in iter_segment_ops(chunks, self.start_txid, self.end_txid, what):
                    if op.txid < next_txid:
                        continue
                    yield op
                    next_txid = op.txid + 1
                return
            except Exception as exc:  # any failure of one source: try the next one
                failures.append(f"{source.address}: {type(exc).__name__}: {exc}")
                log.warning(
                    "edit log source failed, trying the next",
                    segment=self.start_txid,
                    source=source.address,
                    resume_at=next_txid,
                    error=str(exc),
                )
        raise EditLogReadError(
            f"no JournalNode could serve segment {self.start_txid}-{self.end_txid} from txid "
            f"{next_txid}: " + "; ".join(failures)
        )

    def _checked(self, data: bytes, what: str) -> bytes:
        """``data`` if its records have the majority's md5; EditLogReadError otherwise."""
        got = hashlib.md5(memoryview(data)[records.HEADER_LEN :]).digest()
        if got != self.md5:
            raise EditLogReadError(
                f"{what}: served records with md5 {got.hex()}, not the md5 {self.md5.hex()} a "
                "majority of JournalNodes recorded"
            )
        return data


class SegmentVote:
    """The finalized copies of one segment that no majority lists with one md5, and the
    JournalNodes holding the same txids in an in-progress segment of the same first txid (a
    writer that stopped before it finalized there). Those copies are read up to the
    segment's end and their records' md5 counts as that node's vote: a finalized segment on
    one node and in progress on another is held by both, and is read once a majority of the
    cluster holds the same records (docs/protocol.md §8.7)."""

    def __init__(
        self,
        holders: Mapping[bytes, Sequence[SegmentSource]],
        witnesses: Sequence[SegmentSource],
        cluster_size: int,
    ) -> None:
        self.holders = {md5: sorted(srcs, key=lambda s: s.address) for md5, srcs in holders.items()}
        self.witnesses = sorted(witnesses, key=lambda s: s.address)
        self.cluster_size = cluster_size

    def decide(self, start: int, end: int) -> bytes | None:
        """The md5 that the finalized copies and the in-progress witnesses together hold on a
        majority of the cluster, or None (every witness's answer is logged)."""
        votes = {md5: len(srcs) for md5, srcs in self.holders.items()}
        for witness in self.witnesses:
            try:
                data = b"".join(witness.get_segment(start, end))
            except Exception as exc:  # an unreachable witness is no vote
                log.info(
                    "in-progress copy not read for a vote", segment=f"{start}-{end}",
                    source=witness.address, error=f"{type(exc).__name__}: {exc}",
                )
                continue
            got = hashlib.md5(memoryview(data)[records.HEADER_LEN :]).digest()
            votes[got] = votes.get(got, 0) + 1
            log.info(
                "in-progress copy read for a vote", segment=f"{start}-{end}",
                source=witness.address, md5=got.hex(),
            )
        need = majority(self.cluster_size)
        for md5, count in votes.items():
            if count >= need and md5 in self.holders:
                return md5
        return None


def majority_digest(
    holders: Mapping[bytes, Sequence[SegmentSource]], cluster_size: int
) -> bytes | None:
    """The md5 that at least a majority of all ``cluster_size`` JournalNodes recorded for one
    finalized segment (b"" when that majority are older JournalNodes that report none), or
    None when no md5 has such a majority (docs/protocol.md §8.7)."""
    need = majority(cluster_size)
    agreed = [md5 for md5, sources in holders.items() if len(sources) >= need]
    return agreed[0] if agreed else None


def _who_holds(holders: Mapping[bytes, Sequence[SegmentSource]]) -> dict[str, list[str]]:
    """Each md5 in hex ("none" from older JournalNodes) with the addresses holding it."""
    return {(m.hex() or "none"): sorted(s.address for s in srcs) for m, srcs in holders.items()}


def chain_segments(
    manifests: Mapping[SegmentSource, Sequence[RemoteEditLog]],
    since_txid: int,
    *,
    cluster_size: int,
) -> list[RedundantEditLogInputStream]:
    """Finalized segments covering since_txid onward without gaps, each with the sources that
    hold the md5 a majority of all ``cluster_size`` JournalNodes recorded for it (§8.7).

    Two JournalNodes reporting the same first txid with different ends is a broken
    invariant (HDFS-3077 §2.7) and an error naming both. A segment whose md5 no majority
    shares among the answers ends the chain: its stream raises EditLogReadError naming every
    md5 and who holds it (logged with them) when it is read, after the segments before it.
    The caller asks again (more JournalNodes may answer, or the disagreeing one may have
    repaired its copy) rather than trust any single copy."""
    if len(manifests) > cluster_size:
        raise ValueError(f"{len(manifests)} manifests from a cluster of {cluster_size}")
    by_start: dict[int, tuple[int, dict[bytes, list[SegmentSource]], str]] = {}
    in_progress: dict[int, list[tuple[SegmentSource, int]]] = {}
    for source, logs in manifests.items():
        for entry in logs:
            if entry.is_in_progress:
                in_progress.setdefault(entry.start_txid, []).append((source, entry.end_txid))
                continue
            known = by_start.get(entry.start_txid)
            if known is None:
                by_start[entry.start_txid] = (
                    entry.end_txid, {entry.md5: [source]}, source.address
                )
            elif known[0] != entry.end_txid:
                raise EditLogReadError(
                    f"finalized segments disagree: {known[2]} has {entry.start_txid}-{known[0]}, "
                    f"{source.address} has {entry.start_txid}-{entry.end_txid}"
                )
            else:
                known[1].setdefault(entry.md5, []).append(source)
    chain: list[RedundantEditLogInputStream] = []
    txid = since_txid
    for start in sorted(by_start):
        end, holders, _ = by_start[start]
        if end < txid:
            continue
        if start > txid and (chain or since_txid > 0):
            raise EditLogReadError(
                f"gap in the edit log: txids {txid}-{start - 1} are on no JournalNode"
            )
        md5 = majority_digest(holders, cluster_size)
        if md5 is None:
            listed = _who_holds(holders)
            witnesses = [s for s, last in in_progress.get(start, []) if last >= end]
            log.log(
                logging.INFO if witnesses else logging.ERROR,
                "finalized segment: no majority of JournalNodes lists the same md5; "
                + ("their in-progress copies vote" if witnesses else "not read"),
                segment=f"{start}-{end}",
                md5s=listed,
                in_progress=sorted(s.address for s in witnesses),
                cluster_size=cluster_size,
            )
            everyone = sorted((s for ss in holders.values() for s in ss), key=lambda s: s.address)
            if len(holders) > 1:
                why = f"finalized copies of segment {start}-{end} disagree: no md5 is held by"
            else:  # the others that answered lack it (lagging, or their copy moved aside)
                why = f"finalized segment {start}-{end} is listed by fewer than"
            refused = (
                f"{why} a majority of the {cluster_size} JournalNodes ({listed}); not read "
                "from fewer copies than a majority"
            )
            # In-progress copies of the same txids may make the majority (a writer that
            # finalized on fewer nodes than it started the segment on): decided when read.
            vote = SegmentVote(holders, witnesses, cluster_size) if witnesses else None
            chain.append(
                RedundantEditLogInputStream(everyone, start, end, refused=refused, vote=vote)
            )
            if vote is None:
                break
            txid = end + 1
            continue
        if len(holders) > 1:
            log.warning(
                "finalized segment: a JournalNode holds a copy the majority does not; "
                "reading from the majority",
                segment=f"{start}-{end}",
                majority_md5=md5.hex(),
                md5s=_who_holds(holders),
            )
        sources = sorted(holders[md5], key=lambda s: s.address)
        chain.append(RedundantEditLogInputStream(sources, start, end, md5))
        txid = end + 1
    return chain


# ---------------------------------------------------------------------------------------------
# In-progress edits from the JournalNodes' caches (GetJournaledEdits).
# ---------------------------------------------------------------------------------------------


def holders_needed(answers: int, cluster_size: int) -> int:
    """How many of ``answers`` must hold a txid (in one writer epoch) before a reader may
    apply it: a majority of the whole cluster (``journaled_edits_quorum``)."""
    if active(Mutant.TAIL_SINGLE_JOURNALNODE):
        return 1
    return majority(answers if active(Mutant.TAIL_MAJORITY_OF_ANSWERS) else cluster_size)


def journaled_edits_quorum(
    responses: Mapping[K, CachedEdits], *, cluster_size: int
) -> tuple[K, int] | None:
    """Which answer to read, and how many of its records, so that a reader applies only edits
    no recovery can take back.

    Every answer starts at the same txid. A txid is safe once a majority of all
    ``cluster_size`` JournalNodes (not of those that answered) hold it written in the same
    writer epoch: a writer writes each txid once, so those copies are
    the same, and a txid on a majority in its writer's epoch is one HDFS-3077's recovery
    keeps (it is what acknowledging a write means). Per epoch, the safe count is the
    majority-th largest count among the answers (a node of another epoch counts 0); the
    best epoch wins. None when nothing is safe yet. A stale node (say one that was away while
    another writer recovered the segment) cannot make up a majority on its own.
    """
    if len(responses) > cluster_size:
        raise ValueError(f"{len(responses)} answers from a cluster of {cluster_size}")
    need = holders_needed(len(responses), cluster_size)
    best: tuple[K, int] | None = None
    any_epoch = active(Mutant.TAIL_ANY_EPOCH)
    if len(responses) < need:
        return None
    for epoch in sorted({r.epoch for r in responses.values() if r.count > 0}):
        counts = sorted(
            (r.count if r.epoch == epoch or any_epoch else 0 for r in responses.values()),
            reverse=True,
        )
        safe = counts[need - 1]
        if safe > 0 and (best is None or safe > best[1]):
            source = next(
                k
                for k, r in responses.items()
                if (r.epoch == epoch or any_epoch) and r.count >= safe
            )
            best = (source, safe)
    return best


def safe_journaled_ops(
    responses: Mapping[K, CachedEdits],
    *,
    cluster_size: int,
    since_txid: int,
    what: Callable[[K], str],
) -> list[edits_pb2.EditOp]:
    """The ops from ``since_txid`` on that ``journaled_edits_quorum`` finds safe among the
    answers (each starting at ``since_txid``): decoded from the chosen answer and checked to
    be those txids in order; ``what(source)`` names the answer in errors. Both the polling
    reader (GetJournaledEdits) and the pushed edits (``qjm.subscriber``) go through here."""
    choice = journaled_edits_quorum(responses, cluster_size=cluster_size)
    if choice is None:
        return []
    source, count = choice
    try:
        ops = records.decode_ops(responses[source].framed)[:count]
    except records.RecordError as exc:
        raise EditLogReadError(f"{what(source)}: {exc}") from None
    for expected, op in enumerate(ops, start=since_txid):
        if op.txid != expected:
            raise EditLogReadError(
                f"{what(source)} returned txid {op.txid} where {expected} was due"
            )
    if len(ops) != count:
        raise EditLogReadError(f"{what(source)} announced {count} edits and carried {len(ops)}")
    return ops
