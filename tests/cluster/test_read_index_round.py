"""The read-index round is its own quorum call (issue 12): ``GetJournalState`` to every
JournalNode, sent beside each logger's queue, so a NameNode's confirmed read is not queued
behind the edits waiting for a slow JournalNode. Each round is counted and timed
(``qjm_read_index_rounds_total``, ``qjm_read_index_round_seconds``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hadev.minicluster import MiniJournalCluster
from proto import records
from qjm.metrics import QJM_REGISTRY
from tests.cluster.test_qjm_cluster import JID, Writer, make_op, start_writer, write_batch

pytestmark = pytest.mark.timeout(60)

QUEUED = 100


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(3, tmp_path) as c:
        yield c


def rounds(outcome: str) -> float:
    value = QJM_REGISTRY.get_sample_value(
        "qjm_read_index_rounds_total", {"journal": JID, "outcome": outcome}
    )
    return value or 0.0


def timed_rounds() -> float:
    value = QJM_REGISTRY.get_sample_value("qjm_read_index_round_seconds_count", {"journal": JID})
    return value or 0.0


def test_a_read_index_round_is_answered_while_edits_queue_behind_a_slow_answer(
    cluster: MiniJournalCluster,
) -> None:
    with Writer(cluster) as w:
        epoch = start_writer(w)
        out = w.qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 1)
        # Every JournalNode now holds its answer to the next batch until heal(): each
        # logger's first batch waits for it, and QUEUED more batches queue behind it.
        for channel in w.channels.values():
            channel.delay_answers("journal")
        calls = [
            w.qjm.loggers.send_edits(
                1, txid, 1, records.frame(make_op(epoch, txid).SerializeToString())
            )
            for txid in range(2, QUEUED + 2)
        ]
        confirmed, timed = rounds("confirmed"), timed_rounds()
        w.qjm.confirm_epoch()  # a thread's read, through the shared rounds
        w.qjm.run_on_loop(w.qjm.aconfirm_epoch())  # a coroutine's read
        assert rounds("confirmed") == confirmed + 2
        assert timed_rounds() == timed + 2
        assert all(call.count_responses() == 0 for call in calls)  # still queued
        assert all(ch.count("get_journal_state") >= 3 for ch in w.channels.values())
        for channel in w.channels.values():
            channel.heal()
        # The queued edits then go out and are acknowledged, in order, on every JournalNode.
        for call in calls:
            call.wait_for(3, 3, 0, 10.0)
            assert call.count_successes() == 3
        assert all(lg.highest_acked_txid == QUEUED + 1 for lg in w.loggers.values())
        assert w.qjm.fenced is None


def test_a_failed_round_is_counted_as_failed(cluster: MiniJournalCluster) -> None:
    with Writer(cluster) as w:
        start_writer(w)
        w.reach_only("JN0")
        failed = rounds("failed")
        with pytest.raises(Exception, match="confirmEpoch"):
            w.qjm.run_on_loop(w.qjm.aconfirm_epoch())
        assert rounds("failed") == failed + 1
