"""``hachaos`` flags the anomalies of issue 11 when their fixes are switched off (planted
switches of ``conf.mutants``, passed to the daemons in ``$HANAMENODE_MUTANTS`` by
``hachaos run --mutants``).

The fixes defend one another, so a single switch is often masked end to end: a read that
skips the read-index round (``read-without-quorum-confirmation``) still waits for the edits
it observed to be durable, and that wait meets the newer epoch or the lost quorum and
refuses; an answer that skips that wait (``answer-without-durability``) still has to pass
the read-index round. With both off, the active cut from its JournalNodes answers reads from
edits that never become durable (finding 3 of issue 11), and the checker flags it.

Not shown here, and why (measured with ``CHAOS_SEED=100``): ``read-without-quorum-
confirmation`` alone and with ``fenced-heartbeat-refusal-ignored`` under ``pause`` passed
every checker (the resumed active's first read waits for the edits in flight at the pause,
whose sync meets the newer epoch); ``step-down-serves-during-io`` needs a step-down whose
I/O stalls while the edit log has not failed, which none of these nemeses causes (every
step-down they cause begins with a failed edit log, and such an active refuses reads).
``tests/process/test_linearizable_answers.py`` shows those fixes directly, and
``tests/process/test_checker_flags_a_stalled_step_down.py`` makes that step-down with a
paused TCP relay and has this checker flag finding 2;
``tests/process/test_checker_flags_a_fenced_active.py`` has this checker flag finding 1 on
real processes every time its two fixes are off.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hachaos.nemesis import Fault
from tests.chaos.test_hachaos import covering_seed, hachaos_run

pytestmark = pytest.mark.timeout(600)

ATTEMPTS = 3
"""Runs on successive seeds before the test concludes the checker missed the planted bug."""

CASES = [
    (("answer-without-durability", "read-without-quorum-confirmation"), Fault.PARTITION_JNS),
]


@pytest.mark.parametrize(
    ("mutants", "fault"), CASES, ids=lambda v: "+".join(v) if isinstance(v, tuple) else v.value
)
def test_the_checker_flags_the_planted_bug(
    tmp_path: Path, mutants: tuple[str, ...], fault: Fault
) -> None:
    # The anomaly needs a write in flight when the partition begins and a read of it before
    # the sync fails; a run on a loaded machine can miss that. Up to ATTEMPTS runs on
    # successive schedules (each seed printed): the planted bug must be flagged in one.
    start = int(os.environ.get("CHAOS_SEED") or time.time_ns() % 1_000_000)
    for attempt in range(ATTEMPTS):
        seed = covering_seed((fault,), start)
        print(f"attempt {attempt + 1}: seed {seed} (CHAOS_SEED={seed} replays it)")
        result, summary, history = hachaos_run(
            tmp_path / f"run{attempt}", (fault,), seed, "--mutants", ",".join(mutants)
        )
        assert any(e["type"] == "nemesis" and e["phase"] == "start" for e in history)
        assert summary["nemesis_errors"] == 0, result.stdout[-4000:]
        if result.returncode != 0:
            break
        start = seed + 1
    assert result.returncode == 1, result.stdout[-6000:]
    assert summary["anomalies"], summary  # found by the linearizability checker
    assert "smallest anomalous sub-history" in result.stdout
    assert f"--mutants {','.join(mutants)}" in summary["replay"]
