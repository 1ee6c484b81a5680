"""Finding 2 of issue 11, judged by the hachaos checker on real processes.

Two NameNode processes and three JournalNodes on loopback; nn1 reaches the JournalNodes
only through a TCP relay (``dfs.namenode.shared.edits.dir.<ns>.nn1``, ``hadev.tcpproxy``),
so that its path alone can be stalled with SIGSTOP while nn2 reaches them directly. A client
of nn1 makes a directory. The relay is paused and nn1 is asked to step down: its END-op sync
stalls in the relay, with its edit log not failed (the write timeout has not run out). nn2
is made active meanwhile and a client of nn2 deletes the directory; then nn1 is asked
whether it exists. The calls are recorded as a hachaos history and checked.

The fixes defend one another, so finding 2 shows only with two others off as well:
``answer-without-durability`` (nn1's read would wait for the stalled END op) and
``read-without-quorum-confirmation`` (its read-index round would stall in the relay). With
those two off and the step-down fix on (``control``), nn1 refuses the read from the first
line of its step-down and the history is linearizable; with ``step-down-serves-during-io``
too, nn1 answers as the active from its old namespace and the checker flags it. The nemeses
of ``hachaos`` never make a step-down whose I/O stalls while the edit log is sound; here it
is made every time.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from conf.mutants import MUTANTS_ENV, Mutant
from hadev.namenodes import NameNodeProcessCluster
from hadev.tcpproxy import TcpRelay
from hanamenode.errors import StandbyError
from hanamenode.ha import HAState
from tests.namenode.cluster import wait_for
from tests.process.checker_cases import PATH, assert_verdict, old_and_new

pytestmark = pytest.mark.timeout(180)

STALL_CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    "dfs.qjournal.heartbeat.interval.ms": "200",
    # How long nn1's stalled END-op sync may wait before its edit log fails: the window
    # in which the test makes nn2 active, deletes, and asks nn1.
    "dfs.qjournal.write-txns.timeout.ms": "15000",
    # The relay forwards the JournalNodes' gRPC ports only; an edits wire (docs/protocol.md
    # §13.8) would be a second path from nn1 to them, around the relay.
    "dfs.journalnode.edits-address": "off",
}
OTHER_FIXES_OFF = (Mutant.ANSWER_WITHOUT_DURABILITY, Mutant.READ_WITHOUT_QUORUM_CONFIRMATION)
FINDING_2 = (*OTHER_FIXES_OFF, Mutant.STEP_DOWN_SERVES_DURING_IO)


@pytest.mark.parametrize(
    "planted", [(), OTHER_FIXES_OFF, FINDING_2], ids=["shipped", "control", "finding-2-fix-off"]
)
def test_the_checker_flags_a_stalled_step_down_only_when_its_fix_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: tuple[Mutant, ...]
) -> None:
    if planted:
        monkeypatch.setenv(MUTANTS_ENV, ",".join(m.switch for m in planted))
    history_path = tmp_path / "history.jsonl"
    cluster = NameNodeProcessCluster(tmp_path / "cluster", extra_conf=STALL_CONF)
    cluster.journal.start()  # the relay needs their final addresses
    with TcpRelay(cluster.journal.addresses) as relay:
        journal_id = cluster.journal.journal_id
        cluster.extra_conf[f"dfs.namenode.shared.edits.dir.{cluster.nameservice}.nn1"] = (
            f"qjournal://{';'.join(relay.addresses)}/{journal_id}"
        )
        with cluster:
            cluster.transition_to_active("nn1")
            with old_and_new(cluster, history_path) as (history, old, new):
                relay.pause()  # nn1's path to the JournalNodes stalls; nn2's does not
                errors: list[BaseException] = []

                def step_down() -> None:
                    try:
                        cluster.transition_to_standby("nn1", timeout=60)
                    except BaseException as exc:  # asserted below, in the test's thread
                        errors.append(exc)

                stepping = threading.Thread(target=step_down, name="nn1-step-down")
                stepping.start()
                wait_for(
                    lambda: "leaving active state" in cluster["nn1"].log_text(),
                    timeout=10,
                    what="nn1 to begin its step-down",
                )
                cluster.transition_to_active("nn2")  # newEpoch on the JournalNodes
                gone = history.record(1, "k", "delete", lambda: new.delete(PATH), parents=False)
                assert gone[:2] == ("ok", "deleted")
                answer = history.record(0, "k", "stat", lambda: old.stat(PATH), parents=False)
                nn1_state = cluster.state("nn1")

                relay.resume()
                stepping.join(60)
                assert not stepping.is_alive(), "nn1's step-down never ended"
                assert errors == [], errors  # the stall delays the step-down, never fails it
                wait_for(
                    lambda: cluster.state("nn1") is HAState.STANDBY,
                    timeout=30,
                    what="nn1 to finish its step-down",
                )
    if planted == FINDING_2:
        # The stalled step-down kept answering as the active, from the old namespace.
        assert nn1_state is HAState.ACTIVE
        assert answer[:2] == ("ok", "dir"), answer
    else:
        assert answer[0] == "info" and StandbyError.__name__ in str(answer[2]), answer
        assert "leaving" in str(answer[2]), answer
    assert_verdict(history_path, flagged=planted == FINDING_2)
