"""Pushed edits in a NameNode HA cluster (NameNodeServers and JournalNodes of this process,
real gRPC and files): what the standby applies by push, through a writer change in the
middle of a segment, and when its subscriptions are dropped for falling behind. Processes
and signals: tests/process/test_push_tailing.py."""

from __future__ import annotations

from pathlib import Path

from hanamenode.ha import HAState
from tests.namenode.cluster import NameNodeCluster, wait_for

PUSH = {
    "dfs.ha.tail-edits.in-progress": "true",
    "dfs.ha.tail-edits.push": "true",
    "dfs.ha.log-roll.period": "3600",  # no roll: every edit stays in the open segment
}


def fallbacks(c: NameNodeCluster, nn: str) -> dict[str, float]:
    return {
        s.labels["reason"]: s.value
        for family in c.fsn(nn).metrics.push_fallbacks.collect()
        for s in family.samples
        if s.name.endswith("_total")
    }


def test_the_standby_applies_pushed_edits_through_a_writer_change_mid_segment(
    tmp_path: Path,
) -> None:
    """nn1 writes, nn3 follows by push; nn2 takes over while nn1's segment is open (a new
    epoch, nn1 fenced, the segment recovered); nn3 follows nn2 by push again and ends with
    nn2's namespace, nothing applied twice or lost."""
    with NameNodeCluster(tmp_path, namenodes=3, conf=PUSH) as c:
        c.transition_to_active("nn1")
        tailer = c.fsn("nn3").tailer
        assert tailer is not None
        wait_for(lambda: tailer.subscriptions == 3, what="nn3 subscribed to every JournalNode")
        first = [c.mkdir("nn1", f"/one{i}").txid for i in range(20)]
        c.wait_caught_up("nn3", max(first))
        pushed_before = tailer.pushed_txns_applied
        assert pushed_before > 0
        c.transition_to_active("nn2")  # nn1 still believes it is active: it gets fenced
        wait_for(lambda: c.fsn("nn2").state is HAState.ACTIVE, what="nn2 active")
        wait_for(lambda: tailer.subscriptions == 3, what="nn3 subscribed again")
        second = [c.mkdir("nn2", f"/two{i}").txid for i in range(20)]
        assert min(second) > max(first)
        c.wait_caught_up("nn3", max(second))
        assert tailer.pushed_txns_applied > pushed_before  # push again in the new epoch
        assert fallbacks(c, "nn3").get("epoch_changed", 0) > 0
        assert c.fsn("nn3").namespace.snapshot() == c.fsn("nn2").namespace.snapshot()
        assert tailer.last_exception is None


def test_a_standby_dropped_for_falling_behind_falls_back_and_misses_nothing(
    tmp_path: Path,
) -> None:
    """With a per-subscriber bound smaller than one batch, every JournalNode drops the
    standby at its first push (fell behind); the standby reads by the fallback instead and
    still applies every edit once."""
    with NameNodeCluster(tmp_path, conf=PUSH) as c:
        for index in range(len(c.journal)):
            journal = c.journal.node(index).existing_journal("ns1")
            assert journal is not None
            journal.subscriber_queue_bytes = 1
        c.transition_to_active("nn1")
        tailer = c.fsn("nn2").tailer
        assert tailer is not None
        # Every JournalNode must have the subscription when the edits come, or it has nobody
        # to drop (a loaded machine can open the last one after the writes).
        wait_for(lambda: tailer.subscriptions == 3, what="nn2 subscribed to every JournalNode")
        acked = [c.mkdir("nn1", f"/d{i}").txid for i in range(30)]
        c.wait_caught_up("nn2", max(acked))
        assert fallbacks(c, "nn2").get("fell_behind", 0) > 0
        assert c.fsn("nn2").namespace.snapshot() == c.fsn("nn1").namespace.snapshot()
        ended = [
            c.journal.node(i).registry.get_sample_value(
                "journalnode_edit_subscriptions_ended_total",
                {"journal": "ns1", "reason": "fell_behind"},
            )
            for i in range(len(c.journal))
        ]
        assert all(n and n > 0 for n in ended), ended
