"""HDFS-3077's recovery examples (§2.10.1-§2.10.7) and HDFS-3845's, as data.

Each ``RecoveryExample`` is one row: the state of every JournalNode for the segment under
recovery, which of them answered ``prepareRecovery``, and the expected decision (the acceptable
sources and the recovered end txid). A reader can check every row against the document:
``docs`` says in a sentence why the row decides as it does. The unit test feeds the rows to
``qjm.recovery``; an end-to-end test can rebuild each JournalNode's state through real RPCs,
which is why a row is declarative (segment start, last txid, finalized?, acceptedInEpoch,
lastWriterEpoch, committed txid, the finalized segments before it, and the epoch of the writer
that recovers). Use::

    from tests.recovery_examples import RECOVERY_EXAMPLES
"""

from __future__ import annotations

from dataclasses import dataclass

from proto.values import PrepareRecoveryResult, SegmentState
from qjm.recovery import RecoveryCandidate


@dataclass(frozen=True)
class JnState:
    """One JournalNode's state, as the doc's tables give it.

    ``segment_start`` is None when the JN never had the segment; an in-progress segment with
    ``last_txid < segment_start`` exists on disk but is empty, and the JN moves it aside and
    answers "no segment" (HDFS-3077 §2.10.5). ``last_txid`` is the last txid the JN holds,
    in this segment or, without one, in the previous segment. ``committed_txid`` is the
    committed txid the last writer told it (``RequestInfo.committed_txid``).
    """

    name: str
    segment_start: int | None
    last_txid: int
    finalized: bool
    accepted_in_epoch: int | None
    last_writer_epoch: int
    committed_txid: int

    @property
    def segment_state(self) -> SegmentState | None:
        """The segment as ``prepareRecovery`` reports it: None when absent or empty."""
        if self.segment_start is None or self.last_txid < self.segment_start:
            return None
        return SegmentState(self.segment_start, self.last_txid, not self.finalized)

    def prepare_recovery_result(self) -> PrepareRecoveryResult:
        return PrepareRecoveryResult(
            segment_state=self.segment_state,
            accepted_in_epoch=self.accepted_in_epoch,
            last_writer_epoch=self.last_writer_epoch,
            last_committed_txid=self.committed_txid,
        )


def inprogress(
    name: str, start: int, last: int, *, lwe: int, accepted: int | None = None
) -> JnState:
    """``edits_inprogress_<start>`` holding txids up to ``last`` (empty if ``last < start``)."""
    return JnState(name, start, last, False, accepted, lwe, committed_txid=start - 1)


def finalized(
    name: str, start: int, last: int, *, lwe: int, accepted: int | None = None
) -> JnState:
    """``edits_<start>-<last>``."""
    return JnState(name, start, last, True, accepted, lwe, committed_txid=start - 1)


def no_segment(name: str, last: int, *, lwe: int) -> JnState:
    """No segment at the recovered txid; ``last`` ends the previous, finalized, segment."""
    return JnState(name, None, last, False, None, lwe, committed_txid=last)


@dataclass(frozen=True)
class RecoveryExample:
    """One recovery decision: JN states + responders -> acceptable sources and end txid.

    ``expected_sources`` empty (and ``expected_end_txid`` None) means nothing to recover.
    ``pre_hdfs_3845_sources``/``pre_hdfs_3845_end_txid`` are set only on rows where the
    pre-HDFS-3845 comparator (mutant ``ignore-writer-epoch``) decides differently, and say what
    it wrongly decides. ``prior_segments`` are finalized on every JN before ``segment_txid``;
    ``recovery_epoch`` is the epoch of the writer running this recovery.
    """

    id: str
    section: str
    segment_txid: int
    jns: tuple[JnState, ...]
    responders: frozenset[str]
    expected_sources: frozenset[str]
    expected_end_txid: int | None
    recovery_epoch: int
    prior_segments: tuple[tuple[int, int], ...]
    docs: str
    pre_hdfs_3845_sources: frozenset[str] | None = None
    pre_hdfs_3845_end_txid: int | None = None

    def jn(self, name: str) -> JnState:
        return next(j for j in self.jns if j.name == name)

    def candidates(self) -> list[RecoveryCandidate]:
        """The ``prepareRecovery`` answers of the responders, in JN order."""
        return [
            RecoveryCandidate(j.name, j.prepare_recovery_result())
            for j in self.jns
            if j.name in self.responders
        ]


def _example(
    id: str,
    section: str,
    segment_txid: int,
    jns: tuple[JnState, ...],
    responders: str,
    sources: str,
    end_txid: int | None,
    *,
    recovery_epoch: int,
    docs: str,
    prior: tuple[tuple[int, int], ...] = ((1, 100),),
    pre_hdfs_3845: tuple[str, int] | None = None,
) -> RecoveryExample:
    # "JN1 JN3" strings keep the table below as close to the document's wording as possible.
    return RecoveryExample(
        id=id,
        section=section,
        segment_txid=segment_txid,
        jns=jns,
        responders=frozenset(responders.split()),
        expected_sources=frozenset(sources.split()),
        expected_end_txid=end_txid,
        recovery_epoch=recovery_epoch,
        prior_segments=prior,
        docs=docs,
        pre_hdfs_3845_sources=frozenset(pre_hdfs_3845[0].split()) if pre_hdfs_3845 else None,
        pre_hdfs_3845_end_txid=pre_hdfs_3845[1] if pre_hdfs_3845 else None,
    )


# 2.10.1: the prior writer sent 151-153 to JN2 and JN3 (a quorum), then crashed.
_S_2_10_1 = (
    inprogress("JN1", 101, 150, lwe=1),
    inprogress("JN2", 101, 153, lwe=1),
    inprogress("JN3", 101, 153, lwe=1),
)
# 2.10.2: 151-153 reached JN2 only; JN3 lags far behind.
_S_2_10_2 = (
    inprogress("JN1", 101, 150, lwe=1),
    inprogress("JN2", 101, 153, lwe=1),
    inprogress("JN3", 101, 125, lwe=1),
)
# 2.10.3: finalize(101, 150) reached JN1 and JN2.
_S_2_10_3 = (
    finalized("JN1", 101, 150, lwe=1),
    finalized("JN2", 101, 150, lwe=1),
    inprogress("JN3", 101, 145, lwe=1),
)
# 2.10.4: finalize(101, 150) reached JN1 only.
_S_2_10_4 = (
    finalized("JN1", 101, 150, lwe=1),
    inprogress("JN2", 101, 150, lwe=1),
    inprogress("JN3", 101, 125, lwe=1),
)
# 2.10.5: startLogSegment(151) reached JN1 only; the segment holds nothing.
_S_2_10_5 = (
    inprogress("JN1", 151, 150, lwe=1),
    no_segment("JN2", 150, lwe=1),
    no_segment("JN3", 150, lwe=1),
)
# 2.10.6: 151-153 of epoch 1 reached JN1 only; epoch 2 recovered with JN2+JN3 (whose empty
# 151 was moved aside), restarted segment 151 there and committed 151.
_S_2_10_6 = (
    inprogress("JN1", 151, 153, lwe=1),
    inprogress("JN2", 151, 151, lwe=2),
    inprogress("JN3", 151, 151, lwe=2),
)
# 2.10.7: from the 2.10.2 state, epoch 2 recovered with JN1+JN3, accepted 150 on both, and
# finalized JN3 only before crashing (finalizing dropped JN3's accepted-recovery record).
_S_2_10_7 = (
    inprogress("JN1", 101, 150, lwe=1, accepted=2),
    inprogress("JN2", 101, 153, lwe=1),
    finalized("JN3", 101, 150, lwe=1),
)
# HDFS-3845: 101 of epoch 1 reached JN0 only; epoch 2 accepted recovery 101-101 on JN0 only
# and crashed; epoch 3 found no segment 101 on JN1+JN2 (empty, moved aside), started 101
# there and wrote 101-150 before crashing.
_S_HDFS_3845 = (
    inprogress("JN0", 101, 101, lwe=1, accepted=2),
    inprogress("JN1", 101, 150, lwe=3),
    inprogress("JN2", 101, 150, lwe=3),
)

RECOVERY_EXAMPLES: tuple[RecoveryExample, ...] = (
    _example(
        "2.10.1-quorum-wrote-153", "2.10.1", 101, _S_2_10_1, "JN1 JN2 JN3", "JN2 JN3", 153,
        recovery_epoch=2,
        docs="Every copy has max seen epoch 1, so rule 3c picks the longest: JN2 or JN3, "
        "through 153.",
    ),
    _example(
        "2.10.1-jn1-jn2", "2.10.1", 101, _S_2_10_1, "JN1 JN2", "JN2", 153,
        recovery_epoch=2,
        docs="153 reached a quorum, so it must survive; JN2 is in this quorum and is the "
        "longest.",
    ),
    _example(
        "2.10.1-jn1-jn3", "2.10.1", 101, _S_2_10_1, "JN1 JN3", "JN3", 153,
        recovery_epoch=2,
        docs="153 reached a quorum, so it must survive; JN3 is in this quorum and is the "
        "longest.",
    ),
    _example(
        "2.10.2-all-three", "2.10.2", 101, _S_2_10_2, "JN1 JN2 JN3", "JN2", 153,
        recovery_epoch=2,
        docs="153 never reached a quorum, so 150 and 153 are both correct; rule 3c takes "
        "JN2's 153.",
    ),
    _example(
        "2.10.2-jn1-jn2-153", "2.10.2", 101, _S_2_10_2, "JN1 JN2", "JN2", 153,
        recovery_epoch=2,
        docs="JN1 and JN2 answer: rule 3c takes JN2's longer copy, through 153.",
    ),
    _example(
        "2.10.2-jn1-jn3-150", "2.10.2", 101, _S_2_10_2, "JN1 JN3", "JN1", 150,
        recovery_epoch=2,
        docs="JN1 and JN3 answer: rule 3c takes JN1's copy, through 150, never JN3's 125.",
    ),
    _example(
        "2.10.2-jn2-jn3-153", "2.10.2", 101, _S_2_10_2, "JN2 JN3", "JN2", 153,
        recovery_epoch=2,
        docs="JN2 and JN3 answer: rule 3c takes JN2's copy, through 153.",
    ),
    _example(
        "2.10.3-finalized-wins", "2.10.3", 101, _S_2_10_3, "JN1 JN2 JN3", "JN1 JN2", 150,
        recovery_epoch=2,
        docs="Two JournalNodes finalized 150, so every quorum sees a finalized copy and rule "
        "2 picks it.",
    ),
    _example(
        "2.10.3-jn1-jn3", "2.10.3", 101, _S_2_10_3, "JN1 JN3", "JN1", 150,
        recovery_epoch=2,
        docs="JN1's finalized copy wins over JN3's in-progress one by rule 2.",
    ),
    _example(
        "2.10.3-jn2-jn3", "2.10.3", 101, _S_2_10_3, "JN2 JN3", "JN2", 150,
        recovery_epoch=2,
        docs="JN2's finalized copy wins over JN3's in-progress one by rule 2.",
    ),
    _example(
        "2.10.4-all-three-finalized-wins", "2.10.4", 101, _S_2_10_4, "JN1 JN2 JN3", "JN1", 150,
        recovery_epoch=2,
        docs="JN1 answers with its finalized copy, which wins by rule 2.",
    ),
    _example(
        "2.10.4-jn1-jn2-finalized-wins", "2.10.4", 101, _S_2_10_4, "JN1 JN2", "JN1", 150,
        recovery_epoch=2,
        docs="JN1 answers with its finalized copy, which wins by rule 2.",
    ),
    _example(
        "2.10.4-jn1-jn3-finalized-wins", "2.10.4", 101, _S_2_10_4, "JN1 JN3", "JN1", 150,
        recovery_epoch=2,
        docs="JN1 answers with its finalized copy, which wins by rule 2.",
    ),
    _example(
        "2.10.4-jn2-jn3-longest-wins", "2.10.4", 101, _S_2_10_4, "JN2 JN3", "JN2", 150,
        recovery_epoch=2,
        docs="Without JN1, rule 3c takes JN2's longer in-progress copy, which already ends "
        "at 150.",
    ),
    _example(
        "2.10.5-empty-segment-nothing-to-recover", "2.10.5", 151, _S_2_10_5, "JN1 JN2 JN3", "",
        None,
        recovery_epoch=2,
        prior=((1, 100), (101, 150)),
        docs="JN1's segment 151 holds no transaction: it is moved aside, every JournalNode "
        "then looks the same, and there is nothing to recover.",
    ),
    _example(
        "2.10.6-writer-epoch-wins", "2.10.6", 151, _S_2_10_6, "JN1 JN2 JN3", "JN2 JN3", 151,
        recovery_epoch=3,
        prior=((1, 100), (101, 150)),
        docs="JN2 and JN3 were last written by epoch 2, JN1 by epoch 1: rule 3b picks JN2 or "
        "JN3 and the log ends at 151, not at JN1's 153.",
        pre_hdfs_3845=("JN1", 153),
    ),
    _example(
        "2.10.6-jn1-jn2-writer-epoch-wins", "2.10.6", 151, _S_2_10_6, "JN1 JN2", "JN2", 151,
        recovery_epoch=3,
        prior=((1, 100), (101, 150)),
        docs="JN2's last writer epoch (2) beats JN1's (1) by rule 3b, although JN1's copy is "
        "longer.",
        pre_hdfs_3845=("JN1", 153),
    ),
    _example(
        "2.10.6-jn2-jn3", "2.10.6", 151, _S_2_10_6, "JN2 JN3", "JN2 JN3", 151,
        recovery_epoch=3,
        prior=((1, 100), (101, 150)),
        docs="JN2 and JN3 agree; JN1 will get their copy through acceptRecovery.",
    ),
    _example(
        "2.10.7-accepted-epoch-wins", "2.10.7", 101, _S_2_10_7, "JN1 JN2", "JN1", 150,
        recovery_epoch=3,
        docs="JN1 accepted 150 in epoch 2, which beats JN2's last writer epoch 1 by rule 3b: "
        "the log is finalized at 150 again, as JN3 already has it.",
    ),
    _example(
        "2.10.7-all-three-finalized-wins", "2.10.7", 101, _S_2_10_7, "JN1 JN2 JN3", "JN3", 150,
        recovery_epoch=3,
        docs="JN3's finalized copy wins by rule 2.",
    ),
    _example(
        "2.10.7-jn2-jn3-finalized-wins", "2.10.7", 101, _S_2_10_7, "JN2 JN3", "JN3", 150,
        recovery_epoch=3,
        docs="JN3's finalized copy wins by rule 2 over JN2's longer in-progress copy.",
    ),
    _example(
        "HDFS-3845-writer-epoch-wins", "HDFS-3845", 101, _S_HDFS_3845, "JN0 JN1 JN2",
        "JN1 JN2", 150,
        recovery_epoch=4,
        docs="JN1 and JN2 were last written by epoch 3, after JN0's recovery accepted in "
        "epoch 2: rule 3 with writer epochs keeps 101-150; comparing accepted epochs "
        "alone would cut the log to 101.",
        pre_hdfs_3845=("JN0", 101),
    ),
    _example(
        "HDFS-3845-jn0-jn1-writer-epoch-wins", "HDFS-3845", 101, _S_HDFS_3845, "JN0 JN1", "JN1",
        150,
        recovery_epoch=4,
        docs="JN1's last writer epoch (3) beats JN0's accepted epoch (2), so JN0's copy is "
        "recognized as stale.",
        pre_hdfs_3845=("JN0", 101),
    ),
)
