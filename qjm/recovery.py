"""Choosing how to recover an unfinalized segment (HDFS-3077 §2.8-§2.10, HDFS-3845).

After ``newEpoch``, the new writer sends ``prepareRecovery(segment_txid)`` to every JournalNode
(Paxos phase 1), picks one answer as the recovery *source* with ``SegmentRecoveryComparator``,
checks that the choice cannot lose a committed txid, and then sends ``acceptRecovery(source's
segment state, source's address)`` to every JournalNode (phase 2) and finalizes.

Everything here is a decision over ``proto.values.PrepareRecoveryResult`` values: no RPCs, no
files. ``plan_recovery`` is the whole decision; the QJM shell only sends what it says.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from conf.mutants import Mutant, active
from proto.values import PrepareRecoveryResult, SegmentState
from qjm.errors import RecoveryError


@dataclass(frozen=True, slots=True)
class RecoveryCandidate:
    """One logger's answer to ``prepareRecovery``: a candidate recovery source."""

    logger: str
    response: PrepareRecoveryResult

    @property
    def segment(self) -> SegmentState | None:
        return self.response.segment_state

    def __str__(self) -> str:
        r = self.response
        return (
            f"{self.logger} {r.segment_state or '[no segment]'} "
            f"acceptedInEpoch={r.accepted_in_epoch} lastWriterEpoch={r.last_writer_epoch}"
        )


class SegmentRecoveryComparator:
    """Orders recovery candidates by how good a recovery source each is (HDFS-3077 §2.9).

    ``compare(a, b)`` is negative, zero or positive as ``a`` is a worse, equal or better source:

    1. a logger without the segment is worse than any logger with it;
    2. a finalized segment beats an in-progress one; two finalized copies must have the same
       end txid, otherwise ``RecoveryError`` naming both loggers (a finalized segment is never
       changed, so a disagreement is an invariant violation, not a choice to make);
    3. between two in-progress segments, (a) each logger's ``maxSeenEpoch`` is the greater of
       its ``lastWriterEpoch`` and its ``acceptedInEpoch``; (b) the higher ``maxSeenEpoch``
       wins; (c) if equal, the one with more transactions wins.

    Rule 3a's ``lastWriterEpoch`` is HDFS-3845's fix: a stale replica that is longer than what
    a later writer committed must lose to it (HDFS-3077 §2.10.6, and HDFS-3845).

    The mutant ``Mutant.IGNORE_WRITER_EPOCH`` (``conf.mutants``, tests only) restores the
    pre-HDFS-3845 rule 3, which compares ``acceptedInEpoch`` alone and so can truncate or
    replace committed edits; the simulator and the unit tests prove that they detect it.

    Usage: prefer ``choose_recovery_source``, which adds deterministic tie-breaking; the
    comparator itself also works as ``functools.cmp_to_key(SegmentRecoveryComparator())``.
    """

    def max_seen_epoch(self, response: PrepareRecoveryResult) -> int:
        """Rule 3a: the newest epoch whose writer or recovery touched this replica."""
        accepted = response.accepted_in_epoch or 0
        if active(Mutant.IGNORE_WRITER_EPOCH):
            return accepted
        return max(response.last_writer_epoch, accepted)

    def compare(self, a: RecoveryCandidate, b: RecoveryCandidate) -> int:
        sa, sb = a.segment, b.segment
        # Rule 1: no segment is never a source.
        if sa is None or sb is None:
            return (sa is not None) - (sb is not None)
        if sa.start_txid != sb.start_txid:
            raise RecoveryError(
                f"candidates answer for different segments: {a.logger} has {sa}, "
                f"{b.logger} has {sb}"
            )
        # Rule 2: finalized beats in-progress.
        if sa.is_in_progress != sb.is_in_progress:
            return 1 if not sa.is_in_progress else -1
        if not sa.is_in_progress:
            if sa.end_txid != sb.end_txid:
                raise RecoveryError(
                    f"finalized segments disagree in length: {a.logger} has {sa} but "
                    f"{b.logger} has {sb}"
                )
            return 0
        # Rule 3b, then 3c.
        ea, eb = self.max_seen_epoch(a.response), self.max_seen_epoch(b.response)
        if ea != eb:
            return 1 if ea > eb else -1
        return (sa.end_txid > sb.end_txid) - (sa.end_txid < sb.end_txid)

    __call__ = compare


def choose_recovery_source(candidates: Iterable[RecoveryCandidate]) -> RecoveryCandidate | None:
    """The best recovery source by ``SegmentRecoveryComparator``, or None when no candidate
    has the segment (nothing to recover: HDFS-3077 §2.10.5).

    Among equally good sources the one with the smallest logger name wins, so a decision never
    depends on the order in which responses arrived (the simulator replays runs by seed).
    Raises ``RecoveryError`` if two finalized copies disagree in length or the candidates
    answer for different segments.
    """
    comparator = SegmentRecoveryComparator()
    ordered = sorted(candidates, key=lambda c: c.logger)
    _check_unique_loggers(ordered)
    best: RecoveryCandidate | None = None
    for candidate in ordered:
        if candidate.segment is None:
            continue
        # Every candidate with a segment is compared with the current best; once a finalized
        # copy is best it stays best (ties never replace it), so every other finalized copy is
        # compared with it and a length disagreement cannot slip through.
        if best is None or comparator.compare(candidate, best) > 0:
            best = candidate
    return best


def check_recovery_sanity(
    chosen: RecoveryCandidate, candidates: Iterable[RecoveryCandidate], committed_txid: int = 0
) -> None:
    """Refuse a recovery decision that would break an invariant (HDFS-3077 §2.8-§2.9).

    * Nothing committed past the chosen end: no candidate's ``last_committed_txid`` (what the
      last writer told it was committed), nor ``committed_txid`` (what the caller itself knows
      was committed), may exceed the chosen segment's end txid.
    * Every finalized copy of the segment has the chosen length, and the chosen contents where
      both md5 digests are known.

    Raises ``RecoveryError``; returns None when the decision is sane.
    """
    chosen_seg = chosen.segment
    if chosen_seg is None:
        raise RecoveryError(f"recovery source {chosen.logger} has no segment to recover from")
    end = chosen_seg.end_txid
    if active(Mutant.NO_COMMITTED_SANITY_CHECK):
        committed_txid = 0
    if committed_txid > end:
        raise RecoveryError(
            f"decided to synchronize log to {chosen_seg} from {chosen.logger} but the writer "
            f"knows txid {committed_txid} was committed"
        )
    for c in candidates:
        if c.response.last_committed_txid > end and not active(Mutant.NO_COMMITTED_SANITY_CHECK):
            raise RecoveryError(
                f"decided to synchronize log to {chosen_seg} from {chosen.logger} but logger "
                f"{c.logger} had seen txid {c.response.last_committed_txid} committed"
            )
        seg = c.segment
        if seg is None or seg.is_in_progress:
            continue
        if seg.end_txid != end:
            raise RecoveryError(
                f"decided to synchronize log to {chosen_seg} from {chosen.logger} but logger "
                f"{c.logger} has finalized {seg}"
            )
        if _same_digest(seg, chosen_seg) is False:
            raise RecoveryError(
                f"decided to synchronize log to {chosen_seg} from {chosen.logger} but logger "
                f"{c.logger} has a finalized copy with other contents (md5 {seg.md5.hex()} vs "
                f"{chosen_seg.md5.hex()})"
            )


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What the writer does next for one segment: accept ``segment_state`` from ``source``.

    ``segment_state`` is the source's state as it reported it (in-progress or already
    finalized); the writer sends it in ``acceptRecovery`` to every logger, then finalizes
    ``start_txid..end_txid``. ``already_synced`` are the responders (the source included) that
    hold an identical copy (same start, end and state, and the same md5 or, without digests,
    the same writer epoch) and need not download; ``needs_sync`` are the other responders.
    Every logger still gets ``acceptRecovery``: it persists the decision (Paxos phase 2), which
    is what makes a later recovery reach the same result (HDFS-3077 §2.10.7).
    """

    segment_txid: int
    source: str
    segment_state: SegmentState
    already_synced: frozenset[str]
    needs_sync: frozenset[str]

    @property
    def end_txid(self) -> int:
        return self.segment_state.end_txid


def plan_recovery(
    segment_txid: int,
    candidates: Iterable[RecoveryCandidate],
    *,
    committed_txid: int = 0,
) -> RecoveryPlan | None:
    """Decide the recovery of segment ``segment_txid`` from the ``prepareRecovery`` answers.

    None when no responder has the segment. A JournalNode moves an empty in-progress segment
    aside and reports no segment (HDFS-3077 §2.10.5), so empty segments never reach here.
    Raises ``RecoveryError`` when a sanity check fails (see ``check_recovery_sanity``).
    """
    answers = list(candidates)
    for c in answers:
        if c.segment is not None and c.segment.start_txid != segment_txid:
            raise RecoveryError(
                f"asked to recover segment {segment_txid} but {c.logger} answered with {c.segment}"
            )
    chosen = choose_recovery_source(answers)
    if chosen is None:
        return None
    check_recovery_sanity(chosen, answers, committed_txid)
    assert chosen.segment is not None  # choose_recovery_source only returns holders
    comparator = SegmentRecoveryComparator()
    synced = frozenset(
        c.logger for c in answers if _holds_identical_copy(c, chosen, comparator)
    )
    return RecoveryPlan(
        segment_txid=segment_txid,
        source=chosen.logger,
        segment_state=chosen.segment,
        already_synced=synced,
        needs_sync=frozenset(c.logger for c in answers) - synced,
    )


def _holds_identical_copy(
    c: RecoveryCandidate, source: RecoveryCandidate, comparator: SegmentRecoveryComparator
) -> bool:
    # Same start, end and state, and then the md5 digests when both JNs sent one. Without
    # digests: two finalized copies of equal length are identical by invariant (HDFS-3077
    # §2.8), but two in-progress copies of equal length are only known to be identical when the
    # same epoch wrote them: had JN1 in 2.10.6 received only txid 151 from writer 1, it would
    # have the length of JN2's copy from writer 2 but different edits.
    seg, src = c.segment, source.segment
    if seg is None or src is None or seg != src:
        return False
    same = _same_digest(seg, src)
    if same is not None:
        return same
    if not seg.is_in_progress:
        return True
    return comparator.max_seen_epoch(c.response) == comparator.max_seen_epoch(source.response)


def _same_digest(a: SegmentState, b: SegmentState) -> bool | None:
    """Whether two copies hold the same records by md5; None when either digest is unknown."""
    if not a.md5 or not b.md5:
        return None
    return a.md5 == b.md5


def _check_unique_loggers(candidates: list[RecoveryCandidate]) -> None:
    seen: set[str] = set()
    for c in candidates:
        if c.logger in seen:
            raise ValueError(f"logger {c.logger} answered twice")
        seen.add(c.logger)
