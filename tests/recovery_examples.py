"""HDFS-3077's recovery examples (§2.10.1-§2.10.7) and HDFS-3845's, as data.

Each ``RecoveryExample`` is one row: the state of every JournalNode for the segment under
recovery, which of them answered ``prepareRecovery``, and the expected decision (the acceptable
sources and the recovered end txid). A reader can check every row against the document:
``docs`` quotes the sentence each row encodes. The unit test feeds the rows to
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
        docs="Since all copies have the same maxSeenEpoch, we follow Rule 3c and decide to "
        "synchronize from either JN2 or JN3.",
    ),
    _example(
        "2.10.1-jn1-jn2", "2.10.1", 101, _S_2_10_1, "JN1 JN2", "JN2", 153,
        recovery_epoch=2,
        docs="we must be sure to recover through txid 153 (any quorum holds JN2 or JN3)",
    ),
    _example(
        "2.10.1-jn1-jn3", "2.10.1", 101, _S_2_10_1, "JN1 JN3", "JN3", 153,
        recovery_epoch=2,
        docs="we must be sure to recover through txid 153 (any quorum holds JN2 or JN3)",
    ),
    _example(
        "2.10.2-all-three", "2.10.2", 101, _S_2_10_2, "JN1 JN2 JN3", "JN2", 153,
        recovery_epoch=2,
        docs="it would be correct to decide either txid 150 or txid 153 (Rule 3c: the longest)",
    ),
    _example(
        "2.10.2-jn1-jn2-153", "2.10.2", 101, _S_2_10_2, "JN1 JN2", "JN2", 153,
        recovery_epoch=2,
        docs="If during recovery we saw only JN1 and JN2, we will recover to txn 153.",
    ),
    _example(
        "2.10.2-jn1-jn3-150", "2.10.2", 101, _S_2_10_2, "JN1 JN3", "JN1", 150,
        recovery_epoch=2,
        docs="If we saw only JN1 and JN3, we would recover to 150.",
    ),
    _example(
        "2.10.2-jn2-jn3-153", "2.10.2", 101, _S_2_10_2, "JN2 JN3", "JN2", 153,
        recovery_epoch=2,
        docs="If we saw JN2 and JN3 we would recover to 153.",
    ),
    _example(
        "2.10.3-finalized-wins", "2.10.3", 101, _S_2_10_3, "JN1 JN2 JN3", "JN1 JN2", 150,
        recovery_epoch=2,
        docs="Any quorum during recovery would see at least one finalized segment and thus "
        "decide to recover from JN1 or JN2 by Rule 2.",
    ),
    _example(
        "2.10.3-jn1-jn3", "2.10.3", 101, _S_2_10_3, "JN1 JN3", "JN1", 150,
        recovery_epoch=2,
        docs="Any quorum ... would see at least one finalized segment (Rule 2)",
    ),
    _example(
        "2.10.3-jn2-jn3", "2.10.3", 101, _S_2_10_3, "JN2 JN3", "JN2", 150,
        recovery_epoch=2,
        docs="Any quorum ... would see at least one finalized segment (Rule 2)",
    ),
    _example(
        "2.10.4-all-three-finalized-wins", "2.10.4", 101, _S_2_10_4, "JN1 JN2 JN3", "JN1", 150,
        recovery_epoch=2,
        docs="If, during recovery, we receive a response from JN1, then it will win by Rule 2.",
    ),
    _example(
        "2.10.4-jn1-jn2-finalized-wins", "2.10.4", 101, _S_2_10_4, "JN1 JN2", "JN1", 150,
        recovery_epoch=2,
        docs="If, during recovery, we receive a response from JN1, then it will win by Rule 2.",
    ),
    _example(
        "2.10.4-jn1-jn3-finalized-wins", "2.10.4", 101, _S_2_10_4, "JN1 JN3", "JN1", 150,
        recovery_epoch=2,
        docs="If, during recovery, we receive a response from JN1, then it will win by Rule 2.",
    ),
    _example(
        "2.10.4-jn2-jn3-longest-wins", "2.10.4", 101, _S_2_10_4, "JN2 JN3", "JN2", 150,
        recovery_epoch=2,
        docs="If instead, we receive a response from only JN2 and JN3, then JN2 will win by "
        "Rule 3c.",
    ),
    _example(
        "2.10.5-empty-segment-nothing-to-recover", "2.10.5", 151, _S_2_10_5, "JN1 JN2 JN3", "",
        None,
        recovery_epoch=2,
        prior=((1, 100), (101, 150)),
        docs="if, during recovery, the segment itself is entirely empty, then we move aside "
        "that segment and pretend it never existed ... no recovery will be necessary.",
    ),
    _example(
        "2.10.6-writer-epoch-wins", "2.10.6", 151, _S_2_10_6, "JN1 JN2 JN3", "JN2 JN3", 151,
        recovery_epoch=3,
        prior=((1, 100), (101, 150)),
        docs="it is important to recover the log to txid 151 rather than txid 153 ... because "
        "JN2 and JN3 have a higher writer epoch, they win over JN1 due to Rule 3b.",
        pre_hdfs_3845=("JN1", 153),
    ),
    _example(
        "2.10.6-jn1-jn2-writer-epoch-wins", "2.10.6", 151, _S_2_10_6, "JN1 JN2", "JN2", 151,
        recovery_epoch=3,
        prior=((1, 100), (101, 150)),
        docs="JN2 and JN3 have a higher writer epoch, they win over JN1 due to Rule 3b.",
        pre_hdfs_3845=("JN1", 153),
    ),
    _example(
        "2.10.6-jn2-jn3", "2.10.6", 151, _S_2_10_6, "JN2 JN3", "JN2 JN3", 151,
        recovery_epoch=3,
        prior=((1, 100), (101, 150)),
        docs="JN1's log is properly removed and replaced with the correctly committed data "
        "from JN2 or JN3.",
    ),
    _example(
        "2.10.7-accepted-epoch-wins", "2.10.7", 101, _S_2_10_7, "JN1 JN2", "JN1", 150,
        recovery_epoch=3,
        docs="assume it talks only to JN1 and JN2 ... Because of Rule 3b it will instead "
        "choose JN1 again as the recovery source, and properly finalize JN1 and JN2 to txid 150",
    ),
    _example(
        "2.10.7-all-three-finalized-wins", "2.10.7", 101, _S_2_10_7, "JN1 JN2 JN3", "JN3", 150,
        recovery_epoch=3,
        docs="(Rule 2: JN3's finalized copy) ... which match the now-crashed JN3",
    ),
    _example(
        "2.10.7-jn2-jn3-finalized-wins", "2.10.7", 101, _S_2_10_7, "JN2 JN3", "JN3", 150,
        recovery_epoch=3,
        docs="(Rule 2: JN3's finalized copy beats JN2's longer in-progress one)",
    ),
    _example(
        "HDFS-3845-writer-epoch-wins", "HDFS-3845", 101, _S_HDFS_3845, "JN0 JN1 JN2",
        "JN1 JN2", 150,
        recovery_epoch=4,
        docs="A recovery at this point, with the old protocol, would incorrectly truncate the "
        "log to transaction ID 101. ... JN1 and JN2 have a higher 'writer epoch'",
        pre_hdfs_3845=("JN0", 101),
    ),
    _example(
        "HDFS-3845-jn0-jn1-writer-epoch-wins", "HDFS-3845", 101, _S_HDFS_3845, "JN0 JN1", "JN1",
        150,
        recovery_epoch=4,
        docs="uses the fact that JN1 and JN2 have a higher 'writer epoch' to distinguish JN0's "
        "replica as stale",
        pre_hdfs_3845=("JN0", 101),
    ),
)
