"""A new active never waits on the old one's roll (issue 25 item 4), on a dev cluster of real
processes: the active is frozen with SIGSTOP, so a call to it hangs until its deadline
instead of being refused. The standby's tailer asks the active to roll its log every second
(the dev cluster's ``dfs.ha.log-roll.period``), so when the standby wins the election a roll
request to the frozen NameNode is in flight. The transition to active must not wait for it:
the survivor logs ``now active`` before that roll request fails (before, it stopped its
tailer only once the roll had failed, about 4 s of a 5 s failover). Nor does it wait for the
graceful fence: with a graceful-fence deadline of 60 s, the failover still completes well
within it, since a frozen old active does not answer the status call that comes first. Then
the frozen NameNode is resumed (SIGCONT), steps down, and every acknowledged write is there.

How long the failover takes is measured by ``python -m bench.failover --freeze``, not here.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from hadev.devcluster import DevCluster
from hanamenode.ha import HAState

pytestmark = pytest.mark.timeout(240)

ROLL_FAILED = "could not ask the active to roll its log"
ROLL_PERIOD = 1.0  # the dev cluster's dfs.ha.log-roll.period


def test_the_new_active_does_not_wait_for_a_roll_asked_of_the_frozen_one(
    tmp_path: Path,
) -> None:
    graceful = {"ha.failover-controller.graceful-fence.rpc-timeout.ms": 60_000}
    with DevCluster(
        tmp_path, session_timeout=1.0, quorum_timeout="4s", extra_conf=graceful
    ) as dev:
        frozen = dev.wait_active()
        survivor = next(nn for nn in dev.namenode_ids if nn != frozen)
        dev.wait_state(survivor, HAState.STANDBY, timeout=30)
        with dev.client() as fs:
            fs.mkdirs("/before-freeze", parents=True)
        # A few rolls asked and answered: the survivor's channel to the active is connected,
        # so its next roll request is sent and then hangs, rather than failing to connect.
        time.sleep(3 * ROLL_PERIOD)
        log_path = dev.log_path(survivor)
        offset = log_path.stat().st_size
        dev.kill(frozen, signal.SIGSTOP)
        try:
            # Well below the graceful fence's 60 s: not waited for.
            assert dev.wait_active(exclude=frozen, timeout=30) == survivor
            with dev.client() as fs:
                fs.mkdirs("/after-freeze", parents=True)
        finally:
            dev.kill(frozen, signal.SIGCONT)
        lines = log_path.read_bytes()[offset:].decode(errors="replace").splitlines()
        began = next(i for i, line in enumerate(lines) if "transitioning to active" in line)
        active_at = next(i for i, line in enumerate(lines) if "now active" in line)
        waited = [line for line in lines[began:active_at] if ROLL_FAILED in line]
        shown = "\n".join(lines[began : active_at + 1])
        assert not waited, f"the transition waited for a roll of the frozen active:\n{shown}"
        dev.wait_state(frozen, HAState.STANDBY, timeout=60)
        assert dev.active() == survivor
        with dev.client() as fs:
            assert fs.stat("/before-freeze").is_dir and fs.stat("/after-freeze").is_dir
