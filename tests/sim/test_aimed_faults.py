"""The simulator's aimed fault scheduling (``qjm.sim.faults.Buggify``, ``qjm.sim.runner``):
each aim puts the cluster into the situation it is named after, from one seed.

* ``stale_journalnode``: the one JournalNode holding an abandoned writer's longer tail is cut
  off while the next writer takes over, so it comes back holding txids the others rewrote;
* ``slow_journalnode``: the JournalNode that alone finalized the newest segment answers the
  next prepareRecovery after the others, so that recovery decides without the finalized copy;
* ``flaky_downloads``: acceptRecovery's downloads fail often, writers die in a segment's first
  batch, and the JournalNode alone holding it misses the next take-over for a step or two;
* waiting for a quorum: with no live writer and no reachable majority, downtimes run out
  instead of the step going to a writer that can only fail getJournalState.
"""

from __future__ import annotations

import dataclasses

import pytest

from journalnode.errors import JournalUnavailableError
from proto import records
from proto.values import RequestInfo
from qjm.sim.faults import DEFAULT_FAULT_PLAN, Buggify
from qjm.sim.runner import Simulation, make_op

SEED = 7


def _framed(epoch: int, first: int, last: int) -> bytes:
    return records.frame_ops(make_op(epoch, t) for t in range(first, last + 1))


def _simulation(
    *, isolate_longest: float = 0.0, read_on_heal: float = 0.0, late_answer: float = 0.0
) -> Simulation:
    print(f"seed={SEED}")
    plan = dataclasses.replace(
        DEFAULT_FAULT_PLAN,
        isolate_longest=isolate_longest,
        read_on_heal=read_on_heal,
        late_answer=late_answer,
    )
    sim = Simulation(SEED, 0, plan=plan, buggify=False)
    sim._format()
    return sim


def test_stale_journalnode_sets_its_probabilities_and_nothing_else() -> None:
    aimed = Buggify(stale_journalnode=True).apply(DEFAULT_FAULT_PLAN)
    assert (aimed.isolate_longest, aimed.read_on_heal) == (0.5, 0.5)
    assert dataclasses.replace(aimed, isolate_longest=0.0, read_on_heal=0.0) == DEFAULT_FAULT_PLAN
    assert Buggify().apply(DEFAULT_FAULT_PLAN) == DEFAULT_FAULT_PLAN


def test_slow_journalnode_and_flaky_downloads_set_their_probabilities() -> None:
    slow = Buggify(slow_journalnode=True).apply(DEFAULT_FAULT_PLAN)
    assert (slow.late_answer, slow.jn_crash_recovery_finalize, slow.isolate_longest) == (
        0.75,
        0.25,
        0.5,
    )
    flaky = Buggify(flaky_downloads=True).apply(DEFAULT_FAULT_PLAN)
    assert (flaky.fetch_fail, flaky.writer_crash_first_batch, flaky.partition_steps) == (
        0.5,
        0.2,
        (1, 1, 2),
    )
    assert DEFAULT_FAULT_PLAN.late_answer == 0.0


def test_flaky_downloads_gives_each_writer_its_own_first_transaction() -> None:
    sim = Simulation(SEED, 0, buggify=False)
    sim.buggify = Buggify(flaky_downloads=True)
    sim._format()
    sim.faults.enabled = False
    writer = sim._new_writer()
    sim._act(writer)
    storage = sim.net.nodes[0].storage
    (start,) = storage.segments
    data = bytes(storage.segments[start][0][records.HEADER_LEN :])
    (op,) = records.decode_ops(data)
    assert op.noop.payload == b"e%d:t%d" % (writer.qjm.epoch, start), (
        "the segment's first transaction is the writer's own, not OP_START_LOG_SEGMENT"
    )


@pytest.mark.parametrize(
    ("segments", "last"),
    [
        ({}, 0),
        ({1: (5, True)}, 5),  # finalized 1-5
        ({1: (5, True), 6: (9, False)}, 9),  # and 6-9 in progress
        ({1: (5, True), 6: (5, False)}, 5),  # an empty in-progress segment holds nothing
    ],
)
def test_last_txid_of_a_disk(segments: dict[int, tuple[int, bool]], last: int) -> None:
    storage = _simulation().net.nodes[0].storage
    for start, (end, finalized) in segments.items():
        storage.start_segment(start)
        if end >= start:
            storage.append(start, _framed(1, start, end))
        if finalized:
            storage.finalize_segment(start, end)
    assert storage.last_txid() == last


def test_last_txid_reads_a_torn_tail_without_repairing_it() -> None:
    storage = _simulation().net.nodes[0].storage
    storage.start_segment(1)
    whole = _framed(1, 1, 3)
    storage.append(1, whole + _framed(1, 4, 4)[:-2])
    before = bytes(storage.segments[1][0])
    assert storage.last_txid() == 3
    assert bytes(storage.segments[1][0]) == before


def _writer_left_a_longer_tail_on_jn0(sim: Simulation) -> None:
    """Segment 1: txids 1-3 on every JournalNode, 4-6 on jn0 alone (a writer died there)."""
    for node in sim.net.nodes:
        node.storage.start_segment(1)
        node.storage.append(1, _framed(1, 1, 3))
    sim.net.nodes[0].storage.append(1, _framed(1, 4, 6))


def test_the_journalnode_alone_holding_the_highest_txid_is_cut_off_for_the_take_over() -> None:
    sim = _simulation(isolate_longest=1.0)
    _writer_left_a_longer_tail_on_jn0(sim)
    writer = sim._new_writer()
    sim._isolate_longest_copy(writer)
    assert list(sim.net.partitioned) == ["jn0"]
    assert sim.net.partitioned["jn0"] in DEFAULT_FAULT_PLAN.partition_steps
    assert any("jn0 PARTITIONED" in line and "txid 6" in line for line in sim.trace.tail())


def test_nothing_is_cut_off_when_no_journalnode_is_alone_ahead() -> None:
    sim = _simulation(isolate_longest=1.0)
    _writer_left_a_longer_tail_on_jn0(sim)
    sim.net.nodes[1].storage.append(1, _framed(1, 4, 6))
    sim._isolate_longest_copy(sim._new_writer())
    assert sim.net.partitioned == {}


def test_a_reader_reads_as_the_partition_heals() -> None:
    sim = _simulation(read_on_heal=1.0)
    sim.net.partitioned["jn2"] = 1
    sim._heal()
    assert sim.net.partitioned == {}
    lines = sim.trace.tail()
    assert "jn2 reachable again" in lines
    assert "  >> reader reads as the partition heals" in lines
    assert any(line.startswith("reader reads from") for line in lines)


def test_with_no_reachable_majority_time_passes_until_there_is_one() -> None:
    sim = _simulation()
    sim.net.crash_node(sim.net.nodes[0], "test")
    sim.net.nodes[0].down_steps = 3
    sim.net.partitioned["jn1"] = 2
    sim._wait_for_a_quorum()
    reachable = [n for n in sim.net.nodes if n.up and n.address not in sim.net.partitioned]
    assert len(reachable) >= 2
    # The partition (2 steps) runs out before the downtime (3 more steps).
    assert "jn1" not in sim.net.partitioned and not sim.net.nodes[0].up
    assert sim.trace.tail().count("  no quorum reachable: time passes") == 2


def test_with_a_reachable_majority_no_time_passes() -> None:
    sim = _simulation()
    sim.net.partitioned["jn1"] = 2
    sim._wait_for_a_quorum()
    assert sim.net.partitioned == {"jn1": 2}



def _recovery_finalized_on_jn2_alone(sim: Simulation) -> None:
    """Segment 1: txids 1-3 in progress on jn0 and jn1, finalized on jn2 (a recovery's
    finalize reached jn2 and not the others)."""
    for node in sim.net.nodes:
        node.storage.start_segment(1)
        node.storage.append(1, _framed(1, 1, 3))
    sim.net.nodes[2].storage.finalize_segment(1, 3)
    for node in sim.net.nodes:
        node.restart()


def test_the_journalnode_that_alone_finalized_answers_prepare_recovery_late() -> None:
    sim = _simulation(late_answer=1.0)
    _recovery_finalized_on_jn2_alone(sim)
    writer = sim._new_writer()
    sim._late_answer(writer)
    assert sim.net.late == {writer.name: "jn2"}
    # jn2 acts (it promised the epoch, it saw prepareRecovery) but the writer decides without
    # its answer: the recovery chooses the copies in progress.
    sim.faults.enabled = False  # only the late answer
    writer.client.taking_over = True
    writer.qjm.create_new_unique_epoch()
    with pytest.raises(JournalUnavailableError, match="after a majority"):
        sim.net.channels(writer.client)[2].prepare_recovery(
            RequestInfo("simjournal", "CID-sim", writer.qjm.epoch, 1), 1, 1.0
        )
    assert "jn2" not in sim.net.prepared.get(writer.name, {})
    assert any("answer late" in line for line in sim.trace.tail())


def test_no_late_answer_when_no_journalnode_alone_finalized() -> None:
    sim = _simulation(late_answer=1.0)
    _writer_left_a_longer_tail_on_jn0(sim)
    writer = sim._new_writer()
    sim._late_answer(writer)
    assert sim.net.late == {}
