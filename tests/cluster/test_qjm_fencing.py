"""A QJM writer on real JournalNodes is fenced by whichever call first meets a newer epoch: a
heartbeat, a batch of edits, a finalize (issue 11), or a read-index round (issue 12). Its
fence listeners hear it once, with the JournalNode's refusal as the reason."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hadev.minicluster import MiniJournalCluster
from proto import edits_pb2
from proto.values import NamespaceInfo
from qjm.errors import QJMError, QuorumException
from qjm.journal_manager import QuorumJournalManager, QuorumOutputStream
from tests.namenode.cluster import wait_for

pytestmark = pytest.mark.timeout(60)

NS = NamespaceInfo("CID-fencing-test", 77)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(3, tmp_path) as cluster:
        with cluster.qjm("ns1", NS) as qjm:
            qjm.format()
        yield cluster


def noop(txid: int) -> edits_pb2.EditOp:
    return edits_pb2.EditOp(txid=txid, noop=edits_pb2.NoOp())


def heartbeat(qjm: QuorumJournalManager, out: QuorumOutputStream) -> None:
    qjm.heartbeat_idle_loggers(idle_for=0.0)


def write(qjm: QuorumJournalManager, out: QuorumOutputStream) -> None:
    out.write(noop(2))
    with pytest.raises(QuorumException, match="EpochError"):
        out.flush()


def finalize(qjm: QuorumJournalManager, out: QuorumOutputStream) -> None:
    with pytest.raises(QuorumException, match="EpochError"):
        qjm.finalize_log_segment(1, 1)


def confirm(qjm: QuorumJournalManager, out: QuorumOutputStream) -> None:
    with pytest.raises(QuorumException, match="EpochError"):
        qjm.confirm_epoch()  # a read-index round


@pytest.mark.parametrize(
    "learn", [heartbeat, write, finalize, confirm], ids=lambda f: f.__name__
)
def test_a_newer_epoch_fences_the_writer_through_any_call(
    journal: MiniJournalCluster, learn: Callable[[QuorumJournalManager, QuorumOutputStream], None]
) -> None:
    with journal.qjm("ns1", NS) as old, journal.qjm("ns1", NS) as new:
        old.recover_unfinalized_segments()
        out = old.start_log_segment(1)
        out.write(noop(1))
        out.flush()
        # A quorum acknowledged txid 1; the third JournalNode may still be writing it, and that
        # write, refused after the newer epoch, would be what tells the writer instead.
        wait_for(
            lambda: all(lg.highest_acked_txid == 1 for lg in old.loggers.loggers),
            timeout=10,
            what="every JournalNode to acknowledge txid 1",
        )
        heard: list[str] = []
        old.add_fence_listener(heard.append)
        old.confirm_epoch()  # still the writer: a quorum confirms
        assert old.fenced is None and heard == []

        new.create_new_unique_epoch()
        learn(old, out)
        wait_for(lambda: bool(heard), timeout=10, what="the fence listener")
        call = {
            "heartbeat": "heartbeat",
            "write": "sendEdits",
            "finalize": "finalizeLogSegment",
            "confirm": "confirmEpoch",
        }
        assert len(heard) == 1 and f"refused {call[learn.__name__]} in epoch 1: EpochError" in (
            heard[0]
        ), heard
        assert old.fenced == heard[0]
        with pytest.raises(QJMError, match="fenced"):
            old.confirm_epoch()
        late: list[str] = []
        old.add_fence_listener(late.append)  # told at once, with the same reason
        assert late == heard
