"""What a JournalNode that missed segments does about it, as pure decisions (HDFS-4025,
HDFS-16690; docs/protocol.md §10).

A JournalNode that was down while its peers finalized segments, or whose disk was replaced,
fetches the finalized segments it lacks from its peers in the background
(``journalnode.syncer`` is the shell: RPCs, downloads, the thread). The decisions live here,
values in and a frozen plan out, each rule numbered and a row of
``tests/unit/test_jn_sync_plan.py``:

* ``plan_sync``: which finalized segments to fetch, from whom, which local files they
  replace, and which local finalized copies a majority disagrees with (§8.7);
* ``decide_format``: whether a JournalNode with empty storage formats itself with its
  peers' namespace info (opt-in, ``dfs.journalnode.enable.sync.format``);
* ``rejoin_point`` and ``covers``: a JournalNode that formatted itself lost what it had
  acknowledged before, so it does not vote in an election or a recovery until it holds
  finalized segments through every txid its peers held when it rejoined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from proto.values import NamespaceInfo, RemoteEditLog, SegmentState


@dataclass(frozen=True, slots=True)
class SegmentToSync:
    """A finalized segment to fetch: from any of ``sources`` (peer addresses, sorted), and
    whether it replaces a stale in-progress copy of the same segment here."""

    start_txid: int
    end_txid: int
    sources: tuple[str, ...]
    replaces_in_progress: bool = False

    def __str__(self) -> str:
        return f"{self.start_txid}-{self.end_txid}"


@dataclass(frozen=True, slots=True)
class SyncConflict:
    """A segment that peers, or this node and a peer, hold differently: a broken invariant
    (finalized copies are identical everywhere), reported and never resolved by a fetch."""

    start_txid: int
    detail: str


@dataclass(frozen=True, slots=True)
class DigestRepair:
    """A finalized copy here whose md5 (``mine``) differs from the md5 a majority of all the
    configured JournalNodes recorded for the same segment (``majority``, held by the peers
    ``holders``): it is moved aside and the majority's copy fetched (docs/protocol.md §8.7)."""

    start_txid: int
    end_txid: int
    mine: bytes
    majority: bytes
    holders: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.start_txid}-{self.end_txid}"


@dataclass(frozen=True, slots=True)
class SyncPlan:
    fetch: tuple[SegmentToSync, ...] = ()
    conflicts: tuple[SyncConflict, ...] = ()
    waiting: tuple[int, ...] = ()
    """Segments this node must replace but may not yet: the writer is appending to them."""
    repair: tuple[DigestRepair, ...] = ()
    """Finalized copies here that a majority of JournalNodes hold with another md5."""

    @property
    def in_sync(self) -> bool:
        return not (self.fetch or self.conflicts or self.waiting or self.repair)


def plan_sync(
    local: Sequence[SegmentState],
    peers: Mapping[str, Sequence[RemoteEditLog]],
    *,
    open_segment: int | None = None,
    purged_below: int = 0,
    configured: int = 0,
) -> SyncPlan:
    """The finalized segments of ``peers``' manifests that this node lacks, oldest first.

    1. Only finalized peer segments are fetched (an in-progress one is the writer's or a
       recovery's business).
    2. Peers listing different ends for one first txid: a conflict, nothing fetched.
    3. A local finalized segment with the same first txid and end: nothing to do; with another
       end: a conflict.
    4. A segment ending below ``purged_below`` (this node was told to purge it) is not
       fetched again.
    5. A local in-progress copy with the same first txid is stale: the quorum finalized the
       segment, and a finalized copy always wins (docs/protocol.md §5.2 rule 2). It is
       replaced, unless the writer is appending to it here (``open_segment``): then wait.
    6. A local segment with another first txid that overlaps the peer's: a conflict.
    7. A local finalized segment with the peers' end whose recorded md5 differs from one
       that a majority of the ``configured`` JournalNodes (this one included; 0 skips the
       rule) recorded: repaired, that is moved aside and fetched again. Peers reporting no
       md5 (older JournalNodes) do not count; no majority, no repair.

    >>> plan_sync([], {"jn1": [RemoteEditLog(1, 10, False)]}).fetch
    (SegmentToSync(start_txid=1, end_txid=10, sources=('jn1',), replaces_in_progress=False),)
    """
    ends: dict[int, dict[int, list[str]]] = {}
    digests: dict[int, dict[bytes, list[str]]] = {}
    for peer, logs in peers.items():
        for entry in logs:
            if entry.is_in_progress:  # rule 1
                continue
            ends.setdefault(entry.start_txid, {}).setdefault(entry.end_txid, []).append(peer)
            if entry.md5:
                digests.setdefault(entry.start_txid, {}).setdefault(entry.md5, []).append(peer)
    mine = {s.start_txid: s for s in local if s.num_txns > 0}
    fetch: list[SegmentToSync] = []
    conflicts: list[SyncConflict] = []
    waiting: list[int] = []
    repair: list[DigestRepair] = []
    for start in sorted(ends):
        by_end = ends[start]
        if len(by_end) > 1:  # rule 2
            listed = "; ".join(
                f"{', '.join(sorted(by_end[end]))}: {start}-{end}" for end in sorted(by_end)
            )
            conflicts.append(SyncConflict(start, f"peers hold different finalized ends ({listed})"))
            continue
        ((end, holders),) = by_end.items()
        have = mine.get(start)
        if have is not None and not have.is_in_progress:  # rule 3
            if have.end_txid != end:
                conflicts.append(
                    SyncConflict(
                        start,
                        f"finalized here as {have}, but {', '.join(sorted(holders))} "
                        f"finalized it as {start}-{end}",
                    )
                )
            elif configured and have.md5:  # rule 7
                for md5, holders_of in sorted(digests.get(start, {}).items()):
                    if md5 != have.md5 and len(holders_of) >= majority(configured):
                        repair.append(
                            DigestRepair(start, end, have.md5, md5, tuple(sorted(holders_of)))
                        )
            continue
        if end < purged_below:  # rule 4
            continue
        overlapping = [
            s for s in mine.values()
            if s.start_txid != start and s.start_txid <= end and start <= s.end_txid
        ]
        if overlapping:  # rule 6
            conflicts.append(
                SyncConflict(
                    start,
                    f"{', '.join(sorted(holders))} finalized {start}-{end}, which overlaps "
                    f"{', '.join(str(s) for s in sorted(overlapping, key=lambda s: s.start_txid))}"
                    " here",
                )
            )
            continue
        if have is not None and start == open_segment:  # rule 5: the writer appends to it
            waiting.append(start)
            continue
        fetch.append(SegmentToSync(start, end, tuple(sorted(holders)), have is not None))
    return SyncPlan(tuple(fetch), tuple(conflicts), tuple(waiting), tuple(repair))


class FormatVerdict(Enum):
    FORMAT = "format"
    """A majority of the configured JournalNodes answered with one namespace: take it."""
    WAIT = "wait"
    """Not enough formatted peers answered (no majority); try again later, format nothing."""
    REFUSE = "refuse"
    """Peers answered with different namespaces: an operator must look; format nothing."""


@dataclass(frozen=True, slots=True)
class FormatDecision:
    verdict: FormatVerdict
    reason: str
    namespace_info: NamespaceInfo | None = None
    peers: tuple[str, ...] = ()
    """The formatted peers the namespace came from (FORMAT)."""


def majority(configured: int) -> int:
    """A quorum of ``configured`` JournalNodes (docs/protocol.md §1)."""
    return configured // 2 + 1


def decide_format(
    configured: int, answers: Mapping[str, NamespaceInfo | None]
) -> FormatDecision:
    """Whether a JournalNode with empty storage formats itself (HDFS-16690).

    ``configured`` counts every JournalNode of the shared edits URI, this one included;
    ``answers`` holds the peers that answered IsFormatted: their namespace, or None when not
    formatted. Unreachable peers are absent.

    1. Formatted peers with different namespaces: REFUSE, naming them.
    2. Fewer formatted peers than a majority of ``configured``: WAIT. A majority is needed so
       that the epochs this node adopts from them cover every promise a quorum made.
    3. Otherwise FORMAT with their namespace.

    >>> ns = NamespaceInfo("CID-1", 7)
    >>> decide_format(3, {"jn1": ns, "jn2": ns}).verdict
    <FormatVerdict.FORMAT: 'format'>
    >>> decide_format(3, {"jn1": ns, "jn2": None}).verdict
    <FormatVerdict.WAIT: 'wait'>
    """
    formatted = {peer: ns for peer, ns in answers.items() if ns is not None}
    distinct = sorted(set(formatted.values()), key=repr)
    if len(distinct) > 1:  # rule 1
        listed = "; ".join(
            f"{', '.join(sorted(p for p, ns in formatted.items() if ns == one))}: cluster "
            f"{one.cluster_id!r} namespace {one.namespace_id}"
            for one in distinct
        )
        return FormatDecision(FormatVerdict.REFUSE, f"peers are formatted differently ({listed})")
    need = majority(configured)
    if len(formatted) < need:  # rule 2
        return FormatDecision(
            FormatVerdict.WAIT,
            f"{len(formatted)} formatted peer(s) answered of the {need} needed (a majority of "
            f"{configured} JournalNodes); {len(answers)} answered, "
            f"{len(answers) - len(formatted)} not formatted",
        )
    return FormatDecision(  # rule 3
        FormatVerdict.FORMAT,
        f"{len(formatted)} of {configured} JournalNodes agree",
        distinct[0],
        tuple(sorted(formatted)),
    )


def rejoin_point(peers: Mapping[str, Sequence[RemoteEditLog]]) -> int:
    """The highest txid any peer holds (in progress or finalized) when a JournalNode
    rejoins with empty storage. Any txid that node acknowledged before it was wiped is on a
    quorum, so on one of a majority of peers, so at or below this point."""
    return max((e.end_txid for logs in peers.values() for e in logs), default=0)


def covers(local: Sequence[SegmentState], txid: int) -> bool:
    """Whether this node's finalized segments run without a gap from its first one through
    ``txid`` (0: nothing to cover). A rejoined node votes again once this holds for its
    rejoin point: every txid it may have acknowledged before is here, in a finalized copy.

    >>> covers([SegmentState(1, 5, False), SegmentState(6, 9, False)], 8)
    True
    >>> covers([SegmentState(1, 5, False), SegmentState(8, 9, False)], 8)
    False
    """
    if txid <= 0:
        return True
    expected: int | None = None
    for seg in sorted(local, key=lambda s: s.start_txid):
        if seg.is_in_progress:
            return False
        if expected is not None and seg.start_txid != expected:
            return False
        if seg.end_txid >= txid:
            return True
        expected = seg.end_txid + 1
    return False
