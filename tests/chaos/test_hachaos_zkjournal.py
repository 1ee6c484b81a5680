"""``hachaos run --journal zookeeper`` (issue 29 item 3): the dev cluster on the ZooKeeper
journal (docs/architecture.md §9.2: no JournalNode, the live log in ZooKeeper), every
daemon in a network namespace of its own, 8 clients, ``kill -9`` of the active and the
active cut from ZooKeeper (which is now also its journal), and every checker passing:
linearizability per key, reads pinned to each NameNode included, acknowledged marks
present, the NameNodes' packed segments agreeing txid by txid, the standby equal to the
active. The real command, as in ``test_hachaos.py``; its
seed is printed and ``CHAOS_SEED`` replays it. One run (about 40 s) by default;
``--chaos-rounds N`` runs N // 10 seeds, one after the other.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hachaos.nemesis import Fault, applicable_faults
from tests.chaos.test_hachaos import _base_seed, covering_seed, hachaos_run

pytestmark = pytest.mark.timeout(600)

RUN_SECONDS = 30.0
FAULTS = (Fault.KILL, Fault.PARTITION_ZK)


def _left_active(log: Path) -> list[str]:
    """The reasons a NameNode's JSON log gives for leaving ACTIVE, other than its shutdown."""
    reasons = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            reason = str(record.get("reason", ""))
            if record.get("event") == "leaving active state" and reason != "shutting down":
                reasons.append(reason)
    return reasons


def test_every_checker_passes_on_the_zookeeper_journal(
    tmp_path: Path, chaos_rounds: int
) -> None:
    rounds = max(1, chaos_rounds // 10)  # the default of 10 rounds: one run
    seed = _base_seed()
    for round_ in range(rounds):
        seed = covering_seed(FAULTS, seed, RUN_SECONDS)
        print(f"round {round_ + 1}/{rounds}: seed {seed} (CHAOS_SEED={seed} replays it)")
        run_dir = tmp_path / f"run{round_}"
        result, summary, history = hachaos_run(
            run_dir, FAULTS, seed, "--time", f"{RUN_SECONDS:g}", "--journal", "zookeeper"
        )
        # The cluster ran on the ZooKeeper journal, with no JournalNode.
        conf = (run_dir / "cluster" / "conf" / "ha-site.xml").read_text()
        assert "<value>zookeeper://" in conf, conf
        assert not list((run_dir / "cluster" / "logs").glob("jn*.log"))
        assert history[0]["journal"] == "zookeeper" and "--journal zookeeper" in summary["replay"]

        started = [e for e in history if e["type"] == "nemesis" and e["phase"] == "start"]
        assert {e["fault"] for e in started} >= {f.value for f in FAULTS}, started
        # Each fault hit the NameNode active then, so the NameNodes failed over: both were hit.
        assert {e["target"].split(" ")[0] for e in started} == {"nn1", "nn2"}, started
        # An active cut from ZooKeeper is cut from its journal too: its appends fail and it
        # leaves ACTIVE (with the QJM it would stay until fenced, docs/consistency.md §6).
        for cut in {e["target"].split(" ")[0] for e in started if e["fault"] == "partition-zk"}:
            log = run_dir / "cluster" / "logs" / f"{cut}.log"
            assert _left_active(log), f"{cut} never left ACTIVE after being cut from ZooKeeper"

        assert summary["answered"] > 500, summary  # the clients got through between faults
        assert summary["pinned_answered"] > 0, summary
        assert summary["nemesis_errors"] == 0, result.stdout[-4000:]
        assert summary["ok"] and result.returncode == 0, result.stdout[-6000:]
        assert not summary["anomalies"] and not summary["findings"] and not summary["unknown"]
        assert summary["seed"] == seed and f"--seed {seed}" in summary["replay"]
        # The NameNodes' packed segments were read and compared (hachaos.final.check_packed).
        checked = re.search(r"finalized segments checked (\d+)", result.stdout)
        assert checked is not None and int(checked.group(1)) > 0, result.stdout[-2000:]
        seed += 1


ALL_SECONDS = 60.0


@pytest.mark.slow
def test_every_checker_passes_under_every_nemesis_that_applies(tmp_path: Path) -> None:
    """Opt-in (``--soak``, about 70 s): ``--nemesis all`` on the ZooKeeper journal, on a seed
    whose schedule begins with each fault that applies (``applicable_faults``) once."""
    faults = applicable_faults("zookeeper")
    seed = covering_seed(faults, _base_seed(), ALL_SECONDS)
    print(f"seed {seed} (CHAOS_SEED={seed} replays it)")
    result, summary, history = hachaos_run(
        tmp_path, faults, seed, "--time", f"{ALL_SECONDS:g}", "--journal", "zookeeper"
    )
    started = {e["fault"] for e in history if e["type"] == "nemesis" and e["phase"] == "start"}
    assert started == {f.value for f in faults}, started
    assert "--nemesis all " in summary["replay"]
    assert summary["nemesis_errors"] == 0, result.stdout[-4000:]
    assert summary["ok"] and result.returncode == 0, result.stdout[-6000:]
    assert not summary["anomalies"] and not summary["findings"] and not summary["unknown"]
