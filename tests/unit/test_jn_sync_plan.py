"""JournalNode sync (HDFS-4025) and rejoin (HDFS-16690) as pure decisions, one row per case
(``journalnode.sync``, docs/protocol.md §10), then the Journal's side of them over
MemoryJournalStorage: what it installs, what it refuses, and when a rejoined node votes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pytest

from journalnode.errors import (
    JournalNotEmptyError,
    JournalOutOfSyncError,
    JournalStateError,
    JournalSyncingError,
)
from journalnode.journal import Journal
from journalnode.storage import MemoryJournalStorage
from journalnode.sync import (
    FormatVerdict,
    SegmentToSync,
    covers,
    decide_format,
    plan_sync,
    rejoin_point,
)
from proto import records
from proto.values import NamespaceInfo, RemoteEditLog, SegmentState
from tests.unit.test_journal import JID, NS, Writer, formatted, ops


def fin(start: int, end: int, md5: bytes = b"") -> RemoteEditLog:
    return RemoteEditLog(start, end, False, md5)


def inprog(start: int, end: int) -> RemoteEditLog:
    return RemoteEditLog(start, end, True)


def seg(start: int, end: int, in_progress: bool = False, md5: bytes = b"") -> SegmentState:
    return SegmentState(start, end, in_progress, md5)


# Three md5s of one segment's records: the quorum's, a tampered copy's, a third one's.
A, B, C = b"\xaa" * 16, b"\xbb" * 16, b"\xcc" * 16


@dataclass(frozen=True)
class PlanRow:
    name: str
    why: str
    local: tuple[SegmentState, ...]
    peers: dict[str, list[RemoteEditLog]]
    fetch: tuple[tuple[int, int, tuple[str, ...], bool], ...] = ()
    conflicts: tuple[int, ...] = ()
    waiting: tuple[int, ...] = ()
    open_segment: int | None = None
    purged_below: int = 0
    configured: int = 0
    repair: tuple[tuple[int, bytes, bytes, tuple[str, ...]], ...] = ()
    """(start, md5 here, majority md5, its holders) of each copy to repair (rule 7)."""


PLAN_ROWS = [
    PlanRow(
        "down-across-rolls",
        "a node down while three segments were finalized fetches all three, oldest first",
        (seg(1, 10),),
        {"jn1": [fin(1, 10), fin(11, 20), fin(21, 30), fin(31, 40), inprog(41, 45)],
         "jn2": [fin(1, 10), fin(11, 20), fin(21, 30), fin(31, 40)]},
        fetch=((11, 20, ("jn1", "jn2"), False), (21, 30, ("jn1", "jn2"), False),
               (31, 40, ("jn1", "jn2"), False)),
    ),
    PlanRow(
        "wiped",
        "an empty node fetches every finalized segment; rule 1: never an in-progress one",
        (),
        {"jn1": [fin(1, 10), inprog(11, 15)], "jn2": [fin(1, 10)]},
        fetch=((1, 10, ("jn1", "jn2"), False),),
    ),
    PlanRow(
        "only-one-peer-has-it",
        "a segment one peer holds is fetched from that peer alone",
        (seg(1, 10),),
        {"jn1": [fin(1, 10), fin(11, 20)], "jn2": [fin(1, 10)]},
        fetch=((11, 20, ("jn1",), False),),
    ),
    PlanRow(
        "in-sync",
        "rule 3: a finalized copy here with the same end needs nothing",
        (seg(1, 10), seg(11, 20), seg(21, 25, True)),
        {"jn1": [fin(1, 10), fin(11, 20), inprog(21, 25)]},
    ),
    PlanRow(
        "stale-in-progress",
        "rule 5: an in-progress copy of a segment the quorum finalized is replaced",
        (seg(1, 10), seg(11, 17, True)),
        {"jn1": [fin(1, 10), fin(11, 20)], "jn2": [fin(11, 20)]},
        fetch=((11, 20, ("jn1", "jn2"), True),),
    ),
    PlanRow(
        "stale-in-progress-longer",
        "rule 5: a longer in-progress tail (an old writer's) loses to the finalized copy",
        (seg(11, 24, True),),
        {"jn1": [fin(11, 20)]},
        fetch=((11, 20, ("jn1",), True),),
    ),
    PlanRow(
        "open-segment-waits",
        "rule 5: the segment the writer appends to here is not replaced under it",
        (seg(11, 17, True),),
        {"jn1": [fin(11, 20)]},
        waiting=(11,),
        open_segment=11,
    ),
    PlanRow(
        "peers-disagree-on-end",
        "rule 2: two finalized ends for one segment are a conflict; the next one still comes",
        (),
        {"jn1": [fin(1, 10), fin(11, 20)], "jn2": [fin(1, 12), fin(11, 20)]},
        fetch=((11, 20, ("jn1", "jn2"), False),),
        conflicts=(1,),
    ),
    PlanRow(
        "local-finalized-differs",
        "rule 3: finalized here with another end is a conflict, never replaced",
        (seg(1, 9),),
        {"jn1": [fin(1, 10)]},
        conflicts=(1,),
    ),
    PlanRow(
        "overlap",
        "rule 6: a peer's segment overlapping a local one of another start is a conflict",
        (seg(1, 10),),
        {"jn1": [fin(5, 20)]},
        conflicts=(5,),
    ),
    PlanRow(
        "purged-here",
        "rule 4: a segment this node was told to purge is not fetched back",
        (seg(21, 30),),
        {"jn1": [fin(1, 10), fin(11, 20), fin(21, 30), fin(31, 40)]},
        fetch=((31, 40, ("jn1",), False),),
        purged_below=21,
    ),
    PlanRow(
        "no-peer-answered",
        "no manifest, nothing to do",
        (seg(1, 10),),
        {},
    ),
    PlanRow(
        "copy-disagrees-with-majority",
        "rule 7: both peers recorded another md5 than this copy's: two of three, repaired",
        (seg(1, 10, md5=B), seg(11, 20, md5=A)),
        {"jn1": [fin(1, 10, A), fin(11, 20, A)], "jn2": [fin(1, 10, A), fin(11, 20, A)]},
        configured=3,
        repair=((1, B, A, ("jn1", "jn2")),),
    ),
    PlanRow(
        "one-peer-disagrees",
        "rule 7: one peer's other md5 is no majority; that peer repairs its own copy",
        (seg(1, 10, md5=A),),
        {"jn1": [fin(1, 10, A)], "jn2": [fin(1, 10, B)]},
        configured=3,
    ),
    PlanRow(
        "no-majority-of-five",
        "rule 7: two of five holding another md5 is no majority of the configured nodes",
        (seg(1, 10, md5=A),),
        {"jn1": [fin(1, 10, B)], "jn2": [fin(1, 10, B)], "jn3": [fin(1, 10, C)]},
        configured=5,
    ),
    PlanRow(
        "older-peers-report-no-md5",
        "rule 7: peers that list no md5 (older JournalNodes) do not count",
        (seg(1, 10, md5=A),),
        {"jn1": [fin(1, 10)], "jn2": [fin(1, 10)]},
        configured=3,
    ),
    PlanRow(
        "no-digest-here-yet",
        "rule 7: a copy without a recorded md5 is not judged (ensure_digests records it first)",
        (seg(1, 10),),
        {"jn1": [fin(1, 10, A)], "jn2": [fin(1, 10, A)]},
        configured=3,
    ),
]


@pytest.mark.parametrize("row", PLAN_ROWS, ids=[r.name for r in PLAN_ROWS])
def test_plan_sync(row: PlanRow) -> None:
    plan = plan_sync(
        row.local,
        row.peers,
        open_segment=row.open_segment,
        purged_below=row.purged_below,
        configured=row.configured,
    )
    assert plan.fetch == tuple(SegmentToSync(*f) for f in row.fetch), row.why
    assert tuple(c.start_txid for c in plan.conflicts) == row.conflicts, row.why
    assert plan.waiting == row.waiting, row.why
    assert [(r.start_txid, r.mine, r.majority, r.holders) for r in plan.repair] == list(
        row.repair
    ), row.why
    assert plan.in_sync == (not (row.fetch or row.conflicts or row.waiting or row.repair))


OTHER = NamespaceInfo("CID-other", 7)

FORMAT_ROWS = [
    # (name, configured, answers, verdict, why)
    ("majority-agrees", 3, {"jn1": NS, "jn2": NS}, FormatVerdict.FORMAT,
     "both peers of three agree: a majority of the configured JournalNodes"),
    ("one-peer-down", 3, {"jn1": NS}, FormatVerdict.WAIT,
     "one formatted peer of three is no majority: its promise may not cover a quorum's"),
    ("peer-not-formatted", 3, {"jn1": NS, "jn2": None}, FormatVerdict.WAIT,
     "a fresh peer counts for nothing"),
    ("fresh-cluster", 3, {"jn1": None, "jn2": None}, FormatVerdict.WAIT,
     "nobody is formatted: the operator formats, not the JournalNode"),
    ("disagree", 3, {"jn1": NS, "jn2": OTHER}, FormatVerdict.REFUSE,
     "two namespaces: an operator must look"),
    ("five-three-agree", 5, {"jn1": NS, "jn2": NS, "jn3": NS}, FormatVerdict.FORMAT,
     "three of five is a majority"),
    ("five-two-agree", 5, {"jn1": NS, "jn2": NS, "jn3": None}, FormatVerdict.WAIT,
     "two of five is not"),
    ("five-one-disagrees", 5, {"jn1": NS, "jn2": NS, "jn3": NS, "jn4": OTHER},
     FormatVerdict.REFUSE, "any disagreement refuses, even beside a majority"),
]


@pytest.mark.parametrize(
    ("configured", "answers", "verdict", "why"),
    [row[1:] for row in FORMAT_ROWS],
    ids=[row[0] for row in FORMAT_ROWS],
)
def test_decide_format(
    configured: int,
    answers: dict[str, NamespaceInfo | None],
    verdict: FormatVerdict,
    why: str,
) -> None:
    decision = decide_format(configured, answers)
    assert decision.verdict is verdict, why
    if verdict is FormatVerdict.FORMAT:
        assert decision.namespace_info == NS
        assert decision.peers == tuple(sorted(p for p, ns in answers.items() if ns))
    else:
        assert decision.namespace_info is None
        assert decision.reason  # says why, for the log
    if verdict is FormatVerdict.REFUSE:
        assert "CID-other" in decision.reason and "CID-test" in decision.reason


def test_rejoin_point_is_the_highest_txid_any_peer_holds() -> None:
    assert rejoin_point({}) == 0
    assert rejoin_point({"jn1": [fin(1, 10), inprog(11, 14)], "jn2": [fin(1, 10)]}) == 14


@pytest.mark.parametrize(
    ("local", "txid", "expected"),
    [
        ((), 0, True),
        ((), 5, False),
        ((seg(1, 10),), 10, True),
        ((seg(1, 10), seg(11, 20)), 15, True),
        ((seg(1, 10), seg(12, 20)), 15, False),  # a gap
        ((seg(1, 10), seg(11, 20, True)), 15, False),  # only in progress through 15
        ((seg(11, 20), seg(21, 22, True)), 15, True),  # purged before 11: from the first
    ],
)
def test_covers(local: tuple[SegmentState, ...], txid: int, expected: bool) -> None:
    assert covers(local, txid) is expected


# ------------------------------------------------------------------- the Journal's side


def segment_bytes(first: int, n: int, payload: bytes = b"x") -> bytes:
    return records.SEGMENT_HEADER + ops(first, n, payload)


def md5_of(data: bytes) -> bytes:
    return hashlib.md5(data[records.HEADER_LEN :]).digest()


def test_install_synced_segment_checks_md5_and_installs_nothing_on_mismatch() -> None:
    journal = formatted()
    data = segment_bytes(1, 5)
    wanted = SegmentToSync(1, 5, ("jn1",))
    with pytest.raises(JournalStateError, match="md5"):
        journal.install_synced_segment(wanted, md5_of(segment_bytes(1, 5, b"y")), [data])
    assert journal.segments() == []
    with pytest.raises(JournalStateError, match="expected up to 6"):
        journal.install_synced_segment(SegmentToSync(1, 6, ("jn1",)), md5_of(data), [data])
    assert journal.segments() == []
    assert journal.install_synced_segment(wanted, md5_of(data), [data]) == len(data)
    assert journal.segments() == [seg(1, 5)]
    assert journal.stats.segments_synced == 1 and journal.stats.bytes_synced == len(data)
    assert b"".join(journal.storage.read_segment(1)) == data
    # Finalized here meanwhile (a race with the writer): nothing to do, nothing counted.
    assert journal.install_synced_segment(wanted, md5_of(data), [data]) == 0
    assert journal.stats.segments_synced == 1
    longer = segment_bytes(1, 6)
    with pytest.raises(JournalStateError, match="never replaced"):
        journal.install_synced_segment(SegmentToSync(1, 6, ("jn1",)), md5_of(longer), [longer])
    assert b"".join(journal.storage.read_segment(1)) == data


def test_stale_in_progress_copy_is_replaced_by_the_finalized_one() -> None:
    storage = MemoryJournalStorage()
    journal = formatted(storage)
    w = Writer(journal, 1)
    w.new_epoch()
    w.start(1)
    w.write(1, 1, 3)
    # The writer finalized 1-5 on the other JournalNodes and went on; this one holds 1-3.
    with pytest.raises(JournalOutOfSyncError, match="appending"):
        journal.install_synced_segment(
            SegmentToSync(1, 5, ("jn1",), True), md5_of(segment_bytes(1, 5)), [segment_bytes(1, 5)]
        )
    reloaded = Journal(JID, storage)  # a restart: no segment open any more
    plan = reloaded.plan_sync({"jn1": [fin(1, 5)]})
    assert plan.fetch == (SegmentToSync(1, 5, ("jn1",), True),)
    data = segment_bytes(1, 5)
    reloaded.install_synced_segment(plan.fetch[0], md5_of(data), [data])
    assert reloaded.segments() == [seg(1, 5)]
    assert [(start, reason) for start, reason, _ in storage.moved_aside] == [(1, "stale")]
    assert reloaded.plan_sync({"jn1": [fin(1, 5)]}).in_sync


def test_a_rejoined_journal_votes_only_once_it_holds_the_rejoin_point() -> None:
    storage = MemoryJournalStorage()
    journal = Journal(JID, storage)
    journal.format_to_rejoin(NS, promised_epoch=4, sync_until=7)
    assert journal.last_promised_epoch == 4 and journal.rejoining
    with pytest.raises(JournalSyncingError, match="through txid 7"):
        journal.new_epoch(NS, 5)
    with pytest.raises(JournalSyncingError):
        journal.prepare_recovery(Writer(journal, 5).req(), 1)
    # The promise it adopted fences writers a quorum fenced before it was wiped.
    assert Journal(JID, storage).rejoining  # the mark is durable
    for first, n in ((1, 5), (6, 3)):
        data = segment_bytes(first, n)
        journal.install_synced_segment(
            SegmentToSync(first, first + n - 1, ("jn1",)), md5_of(data), [data]
        )
    assert journal.new_epoch(NS, 5) == 6
    assert not journal.rejoining and storage.sync_until == 0


def test_format_to_rejoin_refuses_a_journal_that_holds_data() -> None:
    journal = formatted()
    with pytest.raises(JournalNotEmptyError, match="empty"):
        journal.format_to_rejoin(NS, promised_epoch=1, sync_until=0)
