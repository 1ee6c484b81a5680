"""Finding 1 of issue 11, judged by the hachaos checker on real processes.

Two NameNode processes and three JournalNodes on loopback. A client of nn1 makes a directory;
nn2 is made active (as ``hactl transition-to-active --forcemanual`` would, without asking
nn1 to step down), which fences nn1 at the JournalNodes; a client of nn2 deletes the
directory; then nn1 is asked whether it exists. The three calls are recorded as a hachaos
history and checked for linearizability.

With the fixes off (``fenced-heartbeat-refusal-ignored``: nn1 only logs its refused
heartbeats and stays ACTIVE; ``read-without-quorum-confirmation``: it answers reads without a
read-index round), nn1 says the deleted directory is there, and the checker must flag it.
With the code as shipped, nn1 refuses the read and the history is linearizable. The hachaos
runs (``tests/chaos/test_hachaos_mutants.py``) need partitions to show this and mask it more
often than not; here it is shown every time.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from conf.mutants import MUTANTS_ENV, Mutant
from hadev.namenodes import NameNodeProcessCluster
from hanamenode.errors import StandbyError
from hanamenode.ha import HAState
from tests.namenode.cluster import wait_for
from tests.process.checker_cases import PATH, assert_verdict, old_and_new

pytestmark = pytest.mark.timeout(120)

FAST_CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    "dfs.qjournal.heartbeat.interval.ms": "200",
}
FINDING_1 = (Mutant.FENCED_HEARTBEAT_REFUSAL_IGNORED, Mutant.READ_WITHOUT_QUORUM_CONFIRMATION)


@pytest.mark.parametrize("planted", [(), FINDING_1], ids=["shipped", "finding-1-fixes-off"])
def test_the_checker_flags_a_fenced_active_only_when_its_fixes_are_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: tuple[Mutant, ...]
) -> None:
    if planted:
        monkeypatch.setenv(MUTANTS_ENV, ",".join(m.switch for m in planted))
    history_path = tmp_path / "history.jsonl"
    with NameNodeProcessCluster(tmp_path / "cluster", extra_conf=FAST_CONF) as cluster:
        cluster.transition_to_active("nn1")
        with old_and_new(cluster, history_path) as (history, old, new):
            # A quorum acknowledged nn1's edits; a third JournalNode may still be writing them.
            # Refused there after nn2's newEpoch, that write would fence nn1 whatever the
            # mutants: the premise is a fenced active that has nothing left to send.
            wait_for(
                lambda: _every_journalnode_acked(cluster),
                timeout=20,
                what="every JournalNode to acknowledge nn1's edits",
            )
            cluster.transition_to_active("nn2")  # newEpoch: nn1 is fenced at the JournalNodes
            gone = history.record(1, "k", "delete", lambda: new.delete(PATH), parents=False)
            assert gone[:2] == ("ok", "deleted")
            answer = history.record(0, "k", "stat", lambda: old.stat(PATH), parents=False)
            nn1_state = cluster.state("nn1")
            nn1_log = cluster["nn1"].log_path
        if planted:
            # The fenced active stayed ACTIVE and answered from its frozen namespace.
            assert nn1_state is HAState.ACTIVE, _why_it_left(nn1_log)
            assert answer[:2] == ("ok", "dir"), answer
        else:
            assert answer[0] == "info" and StandbyError.__name__ in str(answer[2]), answer
            wait_for(
                lambda: cluster.state("nn1") is not HAState.ACTIVE,
                timeout=10,
                what="the fenced nn1 to leave ACTIVE",
            )
    assert_verdict(history_path, flagged=bool(planted))


def _why_it_left(log_path: Path) -> str:
    """The lines of nn1's log that tell why it left ACTIVE: the failure's message."""
    wanted = ("leaving active", "fenced", "failed", "now standby", "refused")
    lines = log_path.read_text(errors="replace").splitlines()
    return "nn1 left ACTIVE; its log says:\n" + "\n".join(
        line for line in lines if any(w in line for w in wanted)
    )


def _every_journalnode_acked(cluster: NameNodeProcessCluster) -> bool:
    """nn1's status page: every JournalNode acknowledged each edit nn1 wrote, none queued."""
    address = cluster["nn1"].http_address
    with urllib.request.urlopen(f"http://{address}/status.json", timeout=5) as answer:
        status = json.loads(answer.read())
    written = int(status["namespace"]["last_written_txid"])
    journals = status["journals"]
    return len(journals) == 3 and all(
        j["acked_txid"] == written and j["queued_bytes"] == 0 for j in journals
    )
