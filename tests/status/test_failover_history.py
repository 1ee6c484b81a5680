"""The failover history of a NameNode without ZooKeeper (docs/operations.md §13.1): manual
transitions (``hactl`` sends them as ``REQUEST_BY_USER``), a new active's graceful fence
(``REQUEST_BY_ZKFC``), and an active that the JournalNodes fence when another NameNode takes
a higher epoch without telling it, each recorded with its cause, newest first, no more than
``hanamenode.ha.transition-history`` of them, and served in ``/status.json``. Real
JournalNodes and NameNodes in this process (``NameNodeCluster``), real gRPC and HTTP."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from hanamenode.ha import HAState
from proto import namenode_pb2
from tests.namenode.cluster import NameNodeCluster


def status(c: NameNodeCluster, nn: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{c.server(nn).metrics_port}/status.json"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return dict(json.load(answer))


def steps(c: NameNodeCluster, nn: str) -> list[tuple[str, str, str, str]]:
    return [(t["from"], t["to"], t["cause"], t["detail"]) for t in status(c, nn)["transitions"]]


def test_manual_transitions_a_graceful_fence_and_a_fenced_writer(tmp_path: Path) -> None:
    with NameNodeCluster(tmp_path, conf={"hanamenode.ha.transition-history": "3"}) as c:
        assert status(c, "nn1")["transitions"] == []
        c.transition_to_active("nn1")
        c.transition_to_standby("nn1")
        c.transition_to_active("nn2")
        # A new active's graceful fence of the old one (the elector sends it as the ZKFC).
        c.ha("nn2").TransitionToStandby(
            namenode_pb2.TransitionRequest(source=namenode_pb2.REQUEST_BY_ZKFC), timeout=30
        )
        assert steps(c, "nn1") == [
            ("active", "standby", "manual", "hactl"), ("standby", "active", "manual", "hactl"),
        ]
        assert steps(c, "nn2") == [
            ("active", "standby", "fencing",
             "asked to step down by the new active (graceful fence)"),
            ("standby", "active", "manual", "hactl"),
        ]

        # nn2 takes a new epoch while nn1 believes it is active: nn1's next heartbeat is
        # refused, it leaves the active state by itself, and says why.
        c.transition_to_active("nn1")
        c.transition_to_active("nn2")
        deadline = time.monotonic() + 20
        while c.fsn("nn1").state is not HAState.STANDBY:
            assert time.monotonic() < deadline, steps(c, "nn1")
            time.sleep(0.05)
        page = status(c, "nn1")
        causes = [(t["from"], t["to"], t["cause"]) for t in page["transitions"]]
        assert causes == [  # three kept: the first of four is gone
            ("active", "standby", "fencing"), ("standby", "active", "manual"),
            ("active", "standby", "manual"),
        ], page["transitions"]
        assert page["transition_history_size"] == 3
        assert page["active_since"] is None
        newest = page["transitions"][0]
        assert newest["detail"].startswith("edit log failed"), newest
        assert page["state_since"] >= newest["time"] + newest["duration_seconds"] - 1e-6
        active = status(c, "nn2")
        assert active["active_since"] == active["state_since"]
        assert active["active_since"] >= active["transitions"][0]["time"]
        assert active["uptime_seconds"] > 0
