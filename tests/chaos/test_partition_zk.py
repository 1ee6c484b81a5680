"""The active cut from ZooKeeper only, while the standby still reaches it (issue 16; neutral
mode, docs/consistency.md §6), with the harness and checker of the linearizability issue
(``hachaos``: every daemon in a network namespace of its own, partitions by dropped
packets, a history checked per key, pinned readers that keep asking one NameNode).

The cut active keeps serving (neutral); the standby's session outlives it, wins the lock and
fences it through the breadcrumb; the old active steps down; and no answer is stale: the
history is linearizable, reads pinned to the old active included. ``hachaos run`` needs
root (network namespaces), as every test of ``tests/chaos`` that partitions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hadev.daemon import CODE_ROOT, child_environment

pytestmark = pytest.mark.timeout(600)

# Long enough for three cuts by construction: a fault lasts at most 6 s after at most 3 s of
# quiet, and the schedule starts after 2 s of warm-up (hachaos.nemesis.schedule).
RUN_SECONDS = 30


def events(log: Path, names: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(timestamp, event, reason) of the JSON log lines of ``log`` whose event is one of
    ``names``."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if record.get("event") in names:
            found.append((record["timestamp"], record["event"], str(record.get("reason", ""))))
    return found


def test_active_cut_from_zookeeper_is_fenced_and_no_answer_is_stale(tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or time.time_ns() % 1_000_000_007)
    print(f"seed {seed} (CHAOS_SEED={seed} replays it)")
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "hachaos", "run", "--nemesis", "partition-zk",
         "--time", str(RUN_SECONDS), "--seed", str(seed), "--dir", str(run_dir)],
        capture_output=True, text=True, cwd=CODE_ROOT, env=child_environment(), timeout=500,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"] and not report["anomalies"] and not report["findings"]
    assert report["faults"] >= 3 and report["nemesis_errors"] == 0
    assert report["pinned_answered"] > 0
    # Each cut active stayed active (neutral: no step-down of its own) until the other
    # NameNode won the lock and fenced it through the breadcrumb, which made it leave ACTIVE.
    logs = run_dir / "cluster" / "logs"
    names = ("now active", "leaving active state", "fenced gracefully", "stepping down",
             "ZooKeeper unreachable: automatic failover suspended")
    timeline = sorted(
        (ts, nn, event, reason)
        for nn in ("nn1", "nn2")
        for ts, event, reason in events(logs / f"{nn}.log", names)
    )
    shown = "\n".join(map(str, timeline))
    fences = [entry for entry in timeline if entry[2] == "fenced gracefully"]
    assert len(fences) >= 2, shown
    for ts, fencer, _, _ in fences:
        fenced = [e for e in timeline if e[1] != fencer]
        became_active = max(e[0] for e in fenced if e[0] < ts and e[2] == "now active")
        # Its namesystem starts leaving ACTIVE when the fence asks it to (its elector, which
        # watches the state, logs the step-down just after).
        leaving = min(e[0] for e in fenced
                      if e[0] > became_active and e[2] == "leaving active state")
        assert leaving <= ts, f"{fencer}'s fence at {ts} returned before the step-down"
        cut = [e for e in fenced if became_active < e[0] < leaving]
        assert any(e[2].startswith("ZooKeeper unreachable") for e in cut), (ts, shown)
        assert not any(e[2] == "stepping down" for e in cut), (
            f"the cut active stepped down by itself before {fencer} fenced it at {ts}\n{shown}")
