"""What the real-process cases of issue 11's findings share: a client pinned to each of two
NameNodes, the directory ``k`` the old active made, recorded in a hachaos history, and the
checker's verdict on that history (``test_checker_flags_a_fenced_active.py``,
``test_checker_flags_a_stalled_step_down.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hachaos.checker import check_history, format_ops, read_history
from hachaos.history import History
from hachaos.workload import ROOT, key_path
from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient, RetryPolicy

ONE_TRY = RetryPolicy(max_attempts=1, rpc_timeout=5.0)
PATH = key_path("k")


@contextmanager
def old_and_new(
    cluster: NameNodeProcessCluster, history_path: Path
) -> Iterator[tuple[History, HaFsClient, HaFsClient]]:
    """The history, a client of nn1 (the old active) and one of nn2, once nn1 has made ``k``
    (process 0 of the history is nn1's client, process 1 nn2's)."""
    tls = cluster.settings().tls
    with (
        History(history_path, {"keys": ["k"]}) as history,
        HaFsClient([cluster["nn1"].address], policy=ONE_TRY, tls=tls) as old,
        HaFsClient([cluster["nn2"].address], policy=ONE_TRY, tls=tls) as new,
    ):
        old.mkdirs(ROOT, parents=True)
        made = history.record(0, "k", "mkdir", lambda: old.mkdirs(PATH), parents=False)
        assert made[:2] == ("ok", "created")
        yield history, old, new


def assert_verdict(history_path: Path, flagged: bool) -> None:
    """The checker flags ``k`` (the old active's ``stat k -> dir`` after the new one's
    ``delete k -> deleted``) when ``flagged``; otherwise the history is linearizable."""
    result = check_history(read_history(str(history_path)))
    if flagged:
        assert not result.ok and set(result.anomalies) == {"k"}, result
        anomaly = format_ops(result.anomalies["k"])
        print(anomaly)
        assert "delete k -> deleted" in anomaly and "stat k -> dir" in anomaly
    else:
        assert result.ok and not result.anomalies, result
