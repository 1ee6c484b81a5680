"""Every row of ``tests.recovery_examples.RECOVERY_EXAMPLES``, end to end on real JournalNodes.

tests/unit/test_recovery_comparator.py checks the table of HDFS-3077 §2.10 (and the
HDFS-3845 example) against the pure recovery decision. Here each row is played for real on a
``MiniJournalCluster``: the JournalNode states of the row are produced by the RPC sequences
the document narrates, sent by real QuorumJournalManagers whose channels to some JournalNodes
drop calls (the "crash" or "partition" of the story); then a new writer recovers with only the
row's responders reachable, through ``QuorumJournalManager.recover_unfinalized_segments()``.

For every row the test checks, in this order:

* before recovery, each JournalNode's durable state is the row's: the segment (start, last
  txid, finalized or in progress, or absent/empty), acceptedInEpoch (paxos/ file),
  lastWriterEpoch, and the committed txid the writers told it (the narratives below say why
  that one is, faithfully, sometimes higher than the row's number);
* the recovering writer gets the row's epoch, chooses a source among the row's expected
  sources (the ``from_url`` of its acceptRecovery calls) and recovers to the row's end txid;
* the responders then hold exactly that segment, finalized (see ``check_recovered_log`` for
  the one responder that may keep it in progress), byte-identical on every JournalNode that
  has it, made of the edits of the writer the row says must win (each payload names its
  writer epoch and txid); the whole log reads back; and the writer can start the next
  segment right after the recovered end on every responder.

Rows are parametrized with the same ids as the pure test. JournalNode names (JN1..JN3, or
JN0..JN2 for HDFS-3845) map to the cluster's nodes in the row's order.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hadev.minicluster import MiniJournalCluster
from qjm.errors import QuorumException
from qjm.recovery import RecoveryCandidate, plan_recovery
from tests.cluster.test_qjm_cluster import (
    JID,
    Writer,
    accepted_in_epoch,
    assert_ops,
    file_ops,
    finalized_path,
    finalized_segments,
    inprogress_path,
    write_batch,
)
from tests.recovery_examples import RECOVERY_EXAMPLES, JnState, RecoveryExample

EXAMPLE_IDS = [e.id for e in RECOVERY_EXAMPLES]


class Scenario:
    """A 3-node cluster named after a row's JournalNodes, and writers over it."""

    def __init__(self, cluster: MiniJournalCluster, example: RecoveryExample) -> None:
        self.cluster = cluster
        self.example = example
        self.names = [j.name for j in example.jns]

    def index(self, name: str) -> int:
        return self.names.index(name)

    def writer(self, *reachable: str) -> Writer:
        """A new writer (QJM) that reaches only ``reachable`` (default: every JournalNode)."""
        w = Writer(self.cluster, self.names)
        if reachable:
            w.reach_only(*reachable)
        return w

    def moved_aside_empty(self, name: str, segment_txid: int) -> bool:
        path = inprogress_path(self.cluster, self.index(name), segment_txid)
        return path.with_name(path.name + ".empty").exists()


def epoch1_writes_prior_segments(w: Writer, segments: tuple[tuple[int, int], ...]) -> None:
    """Writer epoch 1 formats the journal, then writes and finalizes ``segments`` on every
    JournalNode (each as one batch)."""
    w.qjm.format()
    assert w.qjm.recover_unfinalized_segments() is None
    assert w.qjm.epoch == 1
    for start, end in segments:
        out = w.qjm.start_log_segment(start)
        write_batch(out, 1, start, end)
        w.qjm.finalize_log_segment(start, end)


# ------------------------------------------------------------------ the doc's narratives
#
# Each builder produces the JournalNode states of one section through real RPCs and returns
# the committed txid each JournalNode was told. A real writer stamps every call with the
# highest txid a quorum has acknowledged so far, so a JournalNode that received a later
# batch knows a later committed txid than the row's conservative ``start - 1``. The
# test checks the real value and that it lies between the row's value and the recovered end
# (a committed txid beyond it would make recovery refuse, see qjm.recovery).


def narrate_2_10_1(s: Scenario) -> dict[str, int]:
    """The prior writer sent a batch of 3 txns (151-153) to JN2 and JN3, then crashed before
    sending to JN1."""
    with s.writer() as w:
        epoch1_writes_prior_segments(w, ((1, 100),))
        out = w.qjm.start_log_segment(101)
        write_batch(out, 1, 101, 150)
        w.reach_only("JN2", "JN3")
        write_batch(out, 1, 151, 153)  # a quorum acknowledges it
    return {"JN1": 100, "JN2": 150, "JN3": 150}


def epoch1_leaves_2_10_2(w: Writer) -> None:
    epoch1_writes_prior_segments(w, ((1, 100),))
    out = w.qjm.start_log_segment(101)
    write_batch(out, 1, 101, 125)
    w.reach_only("JN1", "JN2")  # JN3 is "slow": it stops at 125
    write_batch(out, 1, 126, 150)
    w.reach_only("JN2")
    with pytest.raises(QuorumException):
        write_batch(out, 1, 151, 153)


def narrate_2_10_2(s: Scenario) -> dict[str, int]:
    """The prior writer sent 151-153 to JN2 only, then crashed; JN3 lags far behind (125)."""
    with s.writer() as w:
        epoch1_leaves_2_10_2(w)
    return {"JN1": 125, "JN2": 150, "JN3": 100}


def narrate_2_10_3(s: Scenario) -> dict[str, int]:
    """The prior writer sent finalizeLogSegment(101, 150) to JN1 and JN2, then crashed before
    sending it to JN3, which lags behind at 145."""
    with s.writer() as w:
        epoch1_writes_prior_segments(w, ((1, 100),))
        out = w.qjm.start_log_segment(101)
        write_batch(out, 1, 101, 145)
        w.reach_only("JN1", "JN2")
        write_batch(out, 1, 146, 150)
        w.qjm.finalize_log_segment(101, 150)  # a quorum finalized it
    return {"JN1": 150, "JN2": 150, "JN3": 100}


def narrate_2_10_4(s: Scenario) -> dict[str, int]:
    """The prior writer sent finalizeLogSegment(101, 150) to JN1 only, then crashed; JN2 has
    all of 101-150 in progress, JN3 lags at 125."""
    with s.writer() as w:
        epoch1_writes_prior_segments(w, ((1, 100),))
        out = w.qjm.start_log_segment(101)
        write_batch(out, 1, 101, 125)
        w.reach_only("JN1", "JN2")
        write_batch(out, 1, 126, 150)
        w.reach_only("JN1")
        with pytest.raises(QuorumException):
            w.qjm.finalize_log_segment(101, 150)
    return {"JN1": 150, "JN2": 125, "JN3": 100}


def narrate_2_10_5(s: Scenario) -> dict[str, int]:
    """101-150 was finalized everywhere; startLogSegment(151) reached JN1 only before the
    writer crashed (no transaction of segment 151 was written anywhere)."""
    with s.writer() as w:
        epoch1_writes_prior_segments(w, ((1, 100), (101, 150)))
        w.reach_only("JN1")
        with pytest.raises(QuorumException):
            w.qjm.start_log_segment(151)
    return {"JN1": 150, "JN2": 150, "JN3": 150}


def narrate_2_10_6(s: Scenario) -> dict[str, int]:
    """Epoch 1 finalized 101-150, started 151 everywhere, and its first batch 151-153 reached
    JN1 only. Epoch 2 recovered with JN2 and JN3 alone (their empty 151 is moved aside, so the
    log ends at 150), started 151 there and committed txid 151, then crashed."""
    with s.writer() as w1:
        epoch1_writes_prior_segments(w1, ((1, 100), (101, 150)))
        out = w1.qjm.start_log_segment(151)
        w1.reach_only("JN1")
        with pytest.raises(QuorumException):
            write_batch(out, 1, 151, 153)
    with s.writer("JN2", "JN3") as w2:
        assert w2.qjm.recover_unfinalized_segments() == 150
        assert w2.qjm.epoch == 2
        # "even though edits_inprogress_151 had been created on JN2 and JN3, it is removed"
        assert s.moved_aside_empty("JN2", 151) and s.moved_aside_empty("JN3", 151)
        out = w2.qjm.start_log_segment(151)
        write_batch(out, 2, 151, 151)
    return {"JN1": 150, "JN2": 150, "JN3": 150}


def narrate_2_10_7(s: Scenario) -> dict[str, int]:
    """From the 2.10.2 state, epoch 2 recovered with JN1 and JN3 only: it chose JN1's 150,
    acceptRecovery reached JN1 and JN3, and finalizeLogSegment(101-150) reached JN3 but not
    JN1 before the writer crashed."""
    with s.writer() as w1:
        epoch1_leaves_2_10_2(w1)
    with s.writer("JN1", "JN3") as w2:
        w2.channels["JN1"].drop("finalize_log_segment")
        with pytest.raises(QuorumException):
            w2.qjm.recover_unfinalized_segments()
        assert w2.qjm.epoch == 2
        assert w2.channels["JN1"].count("accept_recovery") == 1
    return {"JN1": 125, "JN2": 150, "JN3": 100}


def narrate_hdfs_3845(s: Scenario) -> dict[str, int]:
    """HDFS-3845: 1-100 finalized; the first txn of segment 101 reached JN0 only. Epoch 2 talked
    to all three, decided 101-101 and sent acceptRecovery to JN0 only before crashing (JN1's
    and JN2's empty 101 were moved aside). Epoch 3 then wrote to JN1 and JN2 only: it found no
    segment 101 there, started 101 and wrote 101-150 before crashing."""
    with s.writer() as w1:
        epoch1_writes_prior_segments(w1, ((1, 100),))
        out = w1.qjm.start_log_segment(101)
        w1.reach_only("JN0")
        with pytest.raises(QuorumException):
            write_batch(out, 1, 101, 101)
    with s.writer() as w2:
        # Driven step by step: recover_unfinalized_segments decides on the first majority of
        # answers, and "talks to all three" needs JN0's answers in both phases.
        w2.qjm.create_new_unique_epoch()
        w2.settle()  # newEpoch reached all three: JN1's and JN2's empty 101 are moved aside
        assert w2.qjm.epoch == 2
        assert s.moved_aside_empty("JN1", 101) and s.moved_aside_empty("JN2", 101)
        prepared = w2.qjm.loggers.prepare_recovery(101)
        prepared.wait_for(3, 3, -1, 5.0)
        answers = prepared.successes()
        assert len(answers) == 3
        plan = plan_recovery(
            101, [RecoveryCandidate(w2.name_of(lg.address), a) for lg, a in answers.items()]
        )
        assert plan is not None and plan.source == "JN0" and plan.end_txid == 101
        w2.reach_only("JN0")
        accepted = w2.qjm.loggers.accept_recovery(plan.segment_state, w2.loggers["JN0"].from_url)
        accepted.wait_for(3, 3, -1, 5.0)
        assert [w2.name_of(lg.address) for lg in accepted.successes()] == ["JN0"]
        # ... and the writer crashes before finalizing.
    with s.writer("JN1", "JN2") as w3:
        assert w3.qjm.recover_unfinalized_segments() == 100
        assert w3.qjm.epoch == 3
        out = w3.qjm.start_log_segment(101)
        write_batch(out, 3, 101, 150)
    return {"JN0": 100, "JN1": 100, "JN2": 100}


NARRATIVES: dict[str, Callable[[Scenario], dict[str, int]]] = {
    "2.10.1": narrate_2_10_1,
    "2.10.2": narrate_2_10_2,
    "2.10.3": narrate_2_10_3,
    "2.10.4": narrate_2_10_4,
    "2.10.5": narrate_2_10_5,
    "2.10.6": narrate_2_10_6,
    "2.10.7": narrate_2_10_7,
    "HDFS-3845": narrate_hdfs_3845,
}


# ------------------------------------------------------------------ observing a JournalNode


def observed_state(s: Scenario, name: str) -> JnState:
    """A JournalNode's state for the row's segment, as a ``JnState``, read from its files
    (segments, paxos/) and its Journal (epochs, committed txid)."""
    i, seg = s.index(name), s.example.segment_txid
    journal = s.cluster.node(i).journal(JID)
    finalized = [end for start, end in finalized_segments(s.cluster, i) if start == seg]
    inprogress = inprogress_path(s.cluster, i, seg)
    start: int | None = seg
    if finalized:
        [last] = finalized
    elif inprogress.exists():
        ops = file_ops(inprogress)
        last = ops[-1].txid if ops else seg - 1
    else:
        start = None
        last = max(end for _, end in finalized_segments(s.cluster, i))
    return JnState(
        name,
        start,
        last,
        bool(finalized),
        accepted_in_epoch(s.cluster, i, seg),
        journal.last_writer_epoch,
        journal.committed_txid,
    )


def test_every_section_has_a_narrative() -> None:
    assert {e.section for e in RECOVERY_EXAMPLES} == set(NARRATIVES)


def produce_row_state(s: Scenario) -> None:
    """Play the row's narrative and check every JournalNode's durable state against the row."""
    example = s.example
    committed = NARRATIVES[example.section](s)
    for row in example.jns:
        seen = observed_state(s, row.name)
        assert dataclasses.replace(seen, committed_txid=row.committed_txid) == row, row.name
        assert seen.committed_txid == committed[row.name], row.name
        assert row.committed_txid <= seen.committed_txid <= log_end(example), row.name


def log_end(example: RecoveryExample) -> int:
    """Where the recovered log ends: the row's end, or (nothing to recover) just before the
    segment."""
    end = example.expected_end_txid
    return end if end is not None else example.segment_txid - 1


def recovery_decision(r: Writer, segment_txid: int) -> tuple[str, int] | None:
    """(source, end txid) of the recovery of ``segment_txid``, read from the acceptRecovery
    calls the writer sent (every JournalNode gets the same state and source address)."""
    accepts = {
        (r.name_of(args[2]), args[1].end_txid)
        for ch in r.channels.values()
        for method, args in ch.calls
        if method == "accept_recovery" and args[1].start_txid == segment_txid
    }
    assert len(accepts) <= 1, accepts
    return accepts.pop() if accepts else None


def check_recovered_log(
    s: Scenario, r: Writer, source: str | None, end: int, may_lag: frozenset[str] = frozenset()
) -> None:
    """After recovery to ``end`` from ``source``: a majority of JournalNodes, and every
    responder not in ``may_lag``, holds the finalized segment; every copy (finalized, or
    accepted in this epoch) is byte-identical and holds the edits of the writer that wrote
    ``source``'s copy; the whole log reads back; the next segment starts at ``end + 1`` on
    every responder.

    ``may_lag``: responders whose acceptRecovery may land after the writer reached its quorum.
    The writer finalizes only where acceptRecovery had succeeded by then (qjm.journal_manager), so
    such a JournalNode may keep the recovered copy in progress, with the decision persisted
    (acceptedInEpoch = the writer's epoch).
    """
    example, cluster, seg = s.example, s.cluster, s.example.segment_txid
    winner = 1
    if source is None:
        # 2.10.5: the empty segment was moved aside, "no recovery will be necessary".
        assert s.moved_aside_empty("JN1", seg)
        for i in range(len(s.names)):
            assert not inprogress_path(cluster, i, seg).exists()
            assert all(start != seg for start, _ in finalized_segments(cluster, i))
    else:
        winner = example.jn(source).last_writer_epoch
        copies, finalized_on = set(), set()
        for name in s.names:
            i = s.index(name)
            for start, end_txid in finalized_segments(cluster, i):
                if start == seg:
                    assert end_txid == end, name
                    copies.add(finalized_path(cluster, i, seg, end).read_bytes())
                    finalized_on.add(name)
        assert example.responders - may_lag <= finalized_on
        assert len(finalized_on) > len(s.names) // 2
        for name in example.responders - finalized_on:
            i = s.index(name)
            copies.add(inprogress_path(cluster, i, seg).read_bytes())
            assert observed_state(s, name).accepted_in_epoch == r.qjm.epoch, name
        assert len(copies) == 1
        ops = file_ops(finalized_path(cluster, s.index(min(finalized_on)), seg, end))
        assert_ops(ops, seg, lambda _: winner)
        assert ops[-1].txid == end
    streams = r.qjm.select_input_streams(1)
    assert_ops([op for st in streams for op in st], 1, lambda t: 1 if t < seg else winner)
    assert streams[-1].end_txid == end

    call = r.qjm.loggers.start_log_segment(end + 1)
    call.wait_for(len(s.names), len(s.names), -1, 5.0)
    assert {r.name_of(lg.address) for lg in call.successes()} == example.responders


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(3, tmp_path) as c:
        yield c


@pytest.mark.parametrize("example", RECOVERY_EXAMPLES, ids=EXAMPLE_IDS)
def test_recovery_example_end_to_end(cluster: MiniJournalCluster, example: RecoveryExample) -> None:
    """The row, played for real, recovers exactly as the document says.

    The QJM decides on the first majority of prepareRecovery answers (as Hadoop's
    waitForWriteQuorum does), so with every JournalNode reachable which answers it decides on
    is a matter of timing. To make the row's decision deterministic, the answers of one
    JournalNode that is not an expected source reach the writer only after it decided
    (it still takes part: it gets acceptRecovery, and may keep the recovered copy in progress,
    see ``check_recovered_log``). ``test_recovery_with_every_node_reachable_unpinned`` runs the
    same rows without pinning.
    """
    s = Scenario(cluster, example)
    produce_row_state(s)
    with s.writer(*example.responders) as r:
        late = None
        if len(example.responders) == len(s.names):
            late = min(set(s.names) - example.expected_sources)
            r.channels[late].delay_answers("prepare_recovery")
        end = r.qjm.recover_unfinalized_segments()
        if late is not None:
            r.channels[late].heal()
        r.settle()  # recovery returns once a quorum finalized; let the others land too
        assert r.qjm.epoch == example.recovery_epoch
        assert end == log_end(example)
        decision = recovery_decision(r, example.segment_txid)
        if example.expected_sources:
            assert decision is not None
            assert decision[0] in example.expected_sources
            assert decision[1] == example.expected_end_txid
        else:
            assert decision is None
        lagging = frozenset([late] if late else [])
        check_recovered_log(s, r, decision[0] if decision else None, end, lagging)


EVERY_NODE_RESPONDS = [e for e in RECOVERY_EXAMPLES if len(e.responders) == len(e.jns)]


@pytest.mark.parametrize("example", EVERY_NODE_RESPONDS, ids=[e.id for e in EVERY_NODE_RESPONDS])
def test_recovery_with_every_node_reachable_unpinned(
    cluster: MiniJournalCluster, example: RecoveryExample
) -> None:
    """With every JournalNode reachable and no answer held back, the writer decides on
    whichever majority answers first: its decision must be the pure decision for one such
    majority (in 2.10.2 that may be 150 from JN1 instead of the row's 153 from JN2, which the
    document also calls correct), and the recovered log must be sound either way."""
    s = Scenario(cluster, example)
    produce_row_state(s)

    def outcome(source: str, end: int) -> tuple[int, int]:
        """What a decision means for the log: its end, and whose edits fill the segment."""
        return end, example.jn(source).last_writer_epoch

    candidates = example.candidates()
    allowed = set()
    for size in range(len(candidates) // 2 + 1, len(candidates) + 1):
        for subset in itertools.combinations(candidates, size):
            plan = plan_recovery(example.segment_txid, subset)
            allowed.add(outcome(plan.source, plan.end_txid) if plan else None)
    with s.writer() as r:
        end = r.qjm.recover_unfinalized_segments()
        r.settle()
        decision = recovery_decision(r, example.segment_txid)
        print(f"{example.id}: decided {decision}, allowed (end, writer epoch): {allowed}")
        assert (outcome(*decision) if decision else None) in allowed
        assert end == (decision[1] if decision else example.segment_txid - 1)
        check_recovered_log(s, r, decision[0] if decision else None, end, example.responders)
