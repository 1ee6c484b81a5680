"""``qjm.recovery`` against HDFS-3077's examples (§2.9-§2.10) and HDFS-3845.

The examples are rows of ``tests.recovery_examples.RECOVERY_EXAMPLES``; each test id names the
document section the row comes from.
"""

from __future__ import annotations

import functools
import itertools
import random

import pytest

from conf.mutants import Mutant, planted
from proto.values import PrepareRecoveryResult, SegmentState
from qjm.errors import RecoveryError
from qjm.recovery import (
    RecoveryCandidate,
    SegmentRecoveryComparator,
    check_recovery_sanity,
    choose_recovery_source,
    plan_recovery,
)
from tests.recovery_examples import RECOVERY_EXAMPLES, RecoveryExample

EXAMPLE_IDS = [e.id for e in RECOVERY_EXAMPLES]
BUGGY_EXAMPLES = [e for e in RECOVERY_EXAMPLES if e.pre_hdfs_3845_sources is not None]
SOUND_EXAMPLES = [e for e in RECOVERY_EXAMPLES if e.pre_hdfs_3845_sources is None]


def candidate(
    logger: str,
    segment: tuple[int, int, bool] | None,
    *,
    accepted: int | None = None,
    lwe: int = 1,
    committed: int = 0,
) -> RecoveryCandidate:
    """``segment`` is ``(start, end, finalized)``."""
    state = SegmentState(segment[0], segment[1], not segment[2]) if segment else None
    return RecoveryCandidate(logger, PrepareRecoveryResult(state, accepted, lwe, committed))


# ----------------------------------------------------------------------------- the doc's table


def test_table_is_consistent() -> None:
    assert len(set(EXAMPLE_IDS)) == len(EXAMPLE_IDS)
    for e in RECOVERY_EXAMPLES:
        names = {j.name for j in e.jns}
        assert e.responders <= names, e.id
        assert e.expected_sources <= e.responders, e.id
        assert (not e.expected_sources) == (e.expected_end_txid is None), e.id
        assert e.recovery_epoch > max(
            max(j.last_writer_epoch, j.accepted_in_epoch or 0) for j in e.jns
        ), e.id
    sections = {e.section for e in RECOVERY_EXAMPLES}
    assert sections == {f"2.10.{i}" for i in range(1, 8)} | {"HDFS-3845"}


@pytest.mark.parametrize("example", RECOVERY_EXAMPLES, ids=EXAMPLE_IDS)
def test_choose_recovery_source_follows_design_doc(example: RecoveryExample) -> None:
    chosen = choose_recovery_source(example.candidates())
    if not example.expected_sources:
        assert chosen is None
        return
    assert chosen is not None
    assert chosen.logger in example.expected_sources
    assert chosen.segment is not None
    assert chosen.segment.end_txid == example.expected_end_txid


@pytest.mark.parametrize("example", RECOVERY_EXAMPLES, ids=EXAMPLE_IDS)
def test_plan_recovery_follows_design_doc(example: RecoveryExample) -> None:
    plan = plan_recovery(example.segment_txid, example.candidates())
    if not example.expected_sources:
        assert plan is None
        return
    assert plan is not None
    assert plan.source in example.expected_sources
    assert plan.end_txid == example.expected_end_txid
    assert plan.segment_state == example.jn(plan.source).segment_state
    assert plan.source in plan.already_synced
    assert plan.already_synced | plan.needs_sync == example.responders
    assert not plan.already_synced & plan.needs_sync


@pytest.mark.parametrize("example", RECOVERY_EXAMPLES, ids=EXAMPLE_IDS)
def test_decision_does_not_depend_on_response_order(example: RecoveryExample) -> None:
    expected = choose_recovery_source(example.candidates())
    for order in itertools.permutations(example.candidates()):
        chosen = choose_recovery_source(order)
        assert chosen == expected


# ------------------------------------------------------------ the pre-HDFS-3845 mutant (tests only)


def test_pre_hdfs_3845_rows_cover_the_known_bug() -> None:
    assert {e.section for e in BUGGY_EXAMPLES} == {"2.10.6", "HDFS-3845"}


@pytest.mark.parametrize("example", BUGGY_EXAMPLES, ids=[e.id for e in BUGGY_EXAMPLES])
def test_ignore_writer_epoch_chooses_the_stale_replica(example: RecoveryExample) -> None:
    with planted(Mutant.IGNORE_WRITER_EPOCH):
        chosen = choose_recovery_source(example.candidates())
    assert chosen is not None and chosen.segment is not None
    assert example.pre_hdfs_3845_sources is not None
    assert chosen.logger in example.pre_hdfs_3845_sources
    assert chosen.logger not in example.expected_sources
    assert chosen.segment.end_txid == example.pre_hdfs_3845_end_txid
    assert chosen.segment.end_txid != example.expected_end_txid
    # The stale replica is the one with the lower writer epoch: in 2.10.6 it is the longer
    # one (153 would replace the committed 151), in HDFS-3845 it truncates 101-150 to 101.
    correct = choose_recovery_source(example.candidates())
    assert correct is not None
    assert chosen.response.last_writer_epoch < correct.response.last_writer_epoch


@pytest.mark.parametrize("example", SOUND_EXAMPLES, ids=[e.id for e in SOUND_EXAMPLES])
def test_ignore_writer_epoch_changes_nothing_else(example: RecoveryExample) -> None:
    with planted(Mutant.IGNORE_WRITER_EPOCH):
        mutated = choose_recovery_source(example.candidates())
    assert mutated == choose_recovery_source(example.candidates())


# --------------------------------------------------------------------------- comparator rules

COMPARE_CASES = [
    # (id, a, b, sign of compare(a, b))
    ("rule1-none-vs-none", candidate("a", None), candidate("b", None), 0),
    ("rule1-segment-beats-none", candidate("a", (101, 101, False)), candidate("b", None), 1),
    ("rule1-none-loses", candidate("a", None), candidate("b", (101, 150, True)), -1),
    (
        "rule2-finalized-beats-longer-inprogress",
        candidate("a", (101, 150, True)),
        candidate("b", (101, 153, False), lwe=9, accepted=9),
        1,
    ),
    (
        "rule2-equal-finalized",
        candidate("a", (101, 150, True)),
        candidate("b", (101, 150, True)),
        0,
    ),
    (
        "rule3b-writer-epoch-beats-length",
        candidate("a", (101, 101, False), lwe=3),
        candidate("b", (101, 150, False), lwe=1, accepted=2),
        1,
    ),
    (
        "rule3b-accepted-epoch-beats-length",
        candidate("a", (101, 150, False), lwe=1, accepted=2),
        candidate("b", (101, 153, False), lwe=1),
        1,
    ),
    (
        "rule3c-longer-wins-on-equal-epochs",
        candidate("a", (101, 150, False), lwe=2),
        candidate("b", (101, 153, False), lwe=1, accepted=2),
        -1,
    ),
    ("rule3c-equal", candidate("a", (101, 150, False)), candidate("b", (101, 150, False)), 0),
]


@pytest.mark.parametrize(
    ("a", "b", "sign"), [c[1:] for c in COMPARE_CASES], ids=[c[0] for c in COMPARE_CASES]
)
def test_comparator_rules(a: RecoveryCandidate, b: RecoveryCandidate, sign: int) -> None:
    comparator = SegmentRecoveryComparator()
    assert _sign(comparator.compare(a, b)) == sign
    assert _sign(comparator(b, a)) == -sign  # antisymmetric


def test_max_seen_epoch() -> None:
    response = PrepareRecoveryResult(SegmentState(101, 150, True), 2, 3, 0)
    assert SegmentRecoveryComparator().max_seen_epoch(response) == 3
    no_accepted = PrepareRecoveryResult(SegmentState(101, 150, True), None, 3, 0)
    with planted(Mutant.IGNORE_WRITER_EPOCH):
        assert SegmentRecoveryComparator().max_seen_epoch(response) == 2
        assert SegmentRecoveryComparator().max_seen_epoch(no_accepted) == 0


def test_comparator_sorts_with_cmp_to_key() -> None:
    example = next(e for e in RECOVERY_EXAMPLES if e.id == "2.10.2-all-three")
    ordered = sorted(example.candidates(), key=functools.cmp_to_key(SegmentRecoveryComparator()))
    assert [c.logger for c in ordered] == ["JN3", "JN1", "JN2"]


def test_ties_break_by_logger_name() -> None:
    jns = [candidate(name, (101, 150, True)) for name in ["jn-c", "jn-a", "jn-b"]]
    random.Random(7).shuffle(jns)
    chosen = choose_recovery_source(jns)
    assert chosen is not None and chosen.logger == "jn-a"


# ------------------------------------------------------------------------------ error cases


@pytest.mark.parametrize("extra_in_progress", [False, True], ids=["finalized-only", "mixed"])
def test_finalized_copies_of_different_length_raise(extra_in_progress: bool) -> None:
    jns = [candidate("JN1", (101, 150, True)), candidate("JN3", (101, 153, True))]
    if extra_in_progress:
        jns.insert(1, candidate("JN2", (101, 160, False), lwe=5))
    with pytest.raises(RecoveryError, match=r"finalized .*JN1.*JN3|finalized .*JN3.*JN1"):
        choose_recovery_source(jns)
    with pytest.raises(RecoveryError):
        plan_recovery(101, jns)


def test_no_segment_anywhere_means_nothing_to_recover() -> None:
    assert choose_recovery_source([]) is None
    assert choose_recovery_source([candidate("JN1", None), candidate("JN2", None)]) is None
    assert plan_recovery(101, [candidate("JN1", None), candidate("JN2", None)]) is None


def test_sanity_check_catches_committed_txid_past_chosen_end() -> None:
    jn1 = candidate("JN1", (101, 150, False))
    jn3 = candidate("JN3", (101, 125, False), committed=152)
    with pytest.raises(RecoveryError, match="JN3 had seen txid 152 committed"):
        check_recovery_sanity(jn1, [jn1, jn3])
    with pytest.raises(RecoveryError, match="txid 151 was committed"):
        check_recovery_sanity(jn1, [jn1], committed_txid=151)
    with pytest.raises(RecoveryError):
        plan_recovery(101, [jn1, jn3])
    # Committed exactly up to the chosen end is fine.
    jn3_ok = candidate("JN3", (101, 125, False), committed=150)
    check_recovery_sanity(jn1, [jn1, jn3_ok], committed_txid=150)


def test_sanity_check_is_the_second_line_of_defence_for_hdfs_3845() -> None:
    # Had JN1 heard that txid 140 was committed, the pre-HDFS-3845 choice (truncate to 101)
    # would be refused by the sanity check even though the comparator got it wrong.
    jn0 = candidate("JN0", (101, 101, False), lwe=1, accepted=2, committed=100)
    jn1 = candidate("JN1", (101, 150, False), lwe=3, committed=140)
    with (
        planted(Mutant.IGNORE_WRITER_EPOCH),
        pytest.raises(RecoveryError, match="JN1 had seen txid 140 committed"),
    ):
        plan_recovery(101, [jn0, jn1])
    plan = plan_recovery(101, [jn0, jn1])
    assert plan is not None and plan.source == "JN1" and plan.end_txid == 150


def test_sanity_check_catches_finalized_length_disagreement() -> None:
    chosen = candidate("JN2", (101, 153, False))
    finalized = candidate("JN3", (101, 150, True))
    with pytest.raises(RecoveryError, match="JN3 has finalized"):
        check_recovery_sanity(chosen, [chosen, finalized])


def test_sanity_check_refuses_a_source_without_segment() -> None:
    with pytest.raises(RecoveryError):
        check_recovery_sanity(candidate("JN1", None), [])


def test_plan_recovery_refuses_answers_for_another_segment() -> None:
    with pytest.raises(RecoveryError, match="JN2 answered"):
        plan_recovery(
            101, [candidate("JN1", (101, 150, False)), candidate("JN2", (151, 160, False))]
        )


def test_same_logger_twice_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="twice"):
        choose_recovery_source([candidate("JN1", None), candidate("JN1", (101, 150, False))])


# ----------------------------------------------------------------------------- the plan itself


def test_plan_for_finalized_source_keeps_finalized_state() -> None:
    example = next(e for e in RECOVERY_EXAMPLES if e.id == "2.10.3-finalized-wins")
    plan = plan_recovery(101, example.candidates())
    assert plan is not None
    assert plan.segment_state == SegmentState(101, 150, is_in_progress=False)
    assert plan.already_synced == {"JN1", "JN2"}
    assert plan.needs_sync == {"JN3"}


def test_plan_skips_download_only_for_same_epoch_copies() -> None:
    quorum_wrote = next(e for e in RECOVERY_EXAMPLES if e.id == "2.10.1-quorum-wrote-153")
    plan = plan_recovery(101, quorum_wrote.candidates())
    assert plan is not None
    assert plan.segment_state == SegmentState(101, 153, is_in_progress=True)
    assert plan.already_synced == {"JN2", "JN3"} and plan.needs_sync == {"JN1"}
    # Same length, different writer: the stale copy could hold other edits, so it downloads.
    stale = candidate("JN1", (151, 151, False), lwe=1)
    fresh = candidate("JN2", (151, 151, False), lwe=2)
    plan = plan_recovery(151, [stale, fresh])
    assert plan is not None
    assert plan.source == "JN2"
    assert plan.already_synced == {"JN2"} and plan.needs_sync == {"JN1"}


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def with_md5(c: RecoveryCandidate, md5: bytes) -> RecoveryCandidate:
    assert c.segment is not None
    response = c.response
    return RecoveryCandidate(
        c.logger,
        PrepareRecoveryResult(
            c.segment.with_md5(md5),
            response.accepted_in_epoch,
            response.last_writer_epoch,
            response.last_committed_txid,
        ),
    )


def test_md5_digests_decide_identity_when_both_are_known() -> None:
    source = with_md5(candidate("JN2", (151, 151, False), lwe=2), b"\x01" * 16)
    # Different epochs but the same digest: an identical copy after all.
    same = with_md5(candidate("JN1", (151, 151, False), lwe=1, accepted=1), b"\x01" * 16)
    # Same epoch and length but another digest: must download.
    other = with_md5(candidate("JN3", (151, 151, False), lwe=2), b"\x02" * 16)
    plan = plan_recovery(151, [source, same, other])
    assert plan is not None
    assert plan.source == "JN2"
    assert plan.already_synced == {"JN1", "JN2"} and plan.needs_sync == {"JN3"}


def test_finalized_copies_with_other_contents_fail_the_sanity_check() -> None:
    jn1 = with_md5(candidate("JN1", (101, 150, True)), b"\x01" * 16)
    jn2 = with_md5(candidate("JN2", (101, 150, True)), b"\x02" * 16)
    with pytest.raises(RecoveryError, match="JN2 has a finalized copy with other contents"):
        plan_recovery(101, [jn1, jn2])
