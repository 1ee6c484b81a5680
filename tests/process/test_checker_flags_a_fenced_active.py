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

from pathlib import Path

import pytest

from conf.mutants import MUTANTS_ENV, Mutant
from hachaos.checker import check_history, format_ops, read_history
from hachaos.history import History
from hachaos.workload import ROOT, key_path
from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient, RetryPolicy
from hanamenode.errors import StandbyError
from hanamenode.ha import HAState
from tests.namenode.cluster import wait_for

pytestmark = pytest.mark.timeout(120)

FAST_CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    "dfs.qjournal.heartbeat.interval.ms": "200",
}
ONE_TRY = RetryPolicy(max_attempts=1, rpc_timeout=5.0)
FINDING_1 = (Mutant.FENCED_HEARTBEAT_REFUSAL_IGNORED, Mutant.READ_WITHOUT_QUORUM_CONFIRMATION)


@pytest.mark.parametrize("planted", [(), FINDING_1], ids=["shipped", "finding-1-fixes-off"])
def test_the_checker_flags_a_fenced_active_only_when_its_fixes_are_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: tuple[Mutant, ...]
) -> None:
    if planted:
        monkeypatch.setenv(MUTANTS_ENV, ",".join(m.switch for m in planted))
    path = key_path("k")
    history_path = tmp_path / "history.jsonl"
    with NameNodeProcessCluster(tmp_path / "cluster", extra_conf=FAST_CONF) as cluster:
        cluster.transition_to_active("nn1")
        with (
            History(history_path, {"keys": ["k"]}) as history,
            HaFsClient([cluster["nn1"].address], policy=ONE_TRY) as old,
            HaFsClient([cluster["nn2"].address], policy=ONE_TRY) as new,
        ):
            old.mkdirs(ROOT, parents=True)
            made = history.record(0, "k", "mkdir", lambda: old.mkdirs(path), parents=False)
            assert made[:2] == ("ok", "created")
            cluster.transition_to_active("nn2")  # newEpoch: nn1 is fenced at the JournalNodes
            gone = history.record(1, "k", "delete", lambda: new.delete(path), parents=False)
            assert gone[:2] == ("ok", "deleted")
            answer = history.record(0, "k", "stat", lambda: old.stat(path), parents=False)
            nn1_state = cluster.state("nn1")
        if planted:
            # The fenced active stayed ACTIVE and answered from its frozen namespace.
            assert nn1_state is HAState.ACTIVE
            assert answer[:2] == ("ok", "dir"), answer
        else:
            assert answer[0] == "info" and StandbyError.__name__ in str(answer[2]), answer
            wait_for(
                lambda: cluster.state("nn1") is not HAState.ACTIVE,
                timeout=10,
                what="the fenced nn1 to leave ACTIVE",
            )
    result = check_history(read_history(str(history_path)))
    if planted:
        assert not result.ok and set(result.anomalies) == {"k"}, result
        anomaly = format_ops(result.anomalies["k"])
        print(anomaly)
        assert "delete k -> deleted" in anomaly and "stat k -> dir" in anomaly
    else:
        assert result.ok and not result.anomalies, result
