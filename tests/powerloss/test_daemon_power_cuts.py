"""Power cuts of the real daemons under write load (issue 26, docs/protocol.md §12).

Every JournalNode and NameNode of a dev cluster keeps its storage on a crash filesystem
(``tests/powerloss/cluster.py``). Three writers make directories through the client library
while the test cuts the power of one JournalNode, of two at once, of the whole rack (three
JournalNodes and both NameNodes at once), of the active NameNode alone, of the active
NameNode while an image is being written into its name directory (a checkpoint upload), or
of the rack while a JournalNode opens a new segment (a roll), at random points,
``--power-cuts`` times (each kind once, in that order, then drawn at random); half of the
cuts leave a torn write. After each cut it restarts what was cut and checks:

- every daemon starts, or refuses with one line and no traceback;
- no JournalNode answers a lower promised epoch than it answered before the cut;
- a NameNode becomes active and the writers make progress again;
- every acknowledged mkdir is present on the active;
- the finalized segments of all JournalNodes agree: the same name holds the same bytes on
  every node, no txid is finalized in two segments (``tests/chaos/journal_audit.py``), no
  mkdir is logged twice. (Gaps between finalized segments are not checked: a node that was
  down when the others purged keeps older segments, and a gap opens below them.)

The seed is printed; ``POWERCUT_SEED`` replays the same choices (kinds, victims, pauses,
torn writes), though not the same interleaving of real processes.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hadev.devcluster import LOAD_POLICY, MkdirLoad
from tests.chaos.journal_audit import JournalAudit
from tests.powerloss.cluster import RESTART_TIMEOUT, PowerCutCluster

pytestmark = pytest.mark.timeout(3600)

KINDS = (
    "one JournalNode",
    "two JournalNodes",
    "rack",
    "active NameNode",
    "active NameNode in a checkpoint upload",
    "rack in a roll",
)
WRITERS = 3
MOMENT_TIMEOUT = 8.0
"""How long a cut waits for its moment (an image being written, a segment opened) before it
cuts anyway: the checkpoints and rolls of the load come every second or two."""
_IMAGE_TEMP = re.compile(r"fsimage_\d+\.db\.tmp")
_IN_PROGRESS = re.compile(r"edits_inprogress_(\d+)")


def victims(kind: str, cluster: PowerCutCluster, rng: random.Random) -> list[str]:
    jns = cluster.journalnode_ids
    if kind == "one JournalNode":
        return [rng.choice(jns)]
    if kind == "two JournalNodes":
        return sorted(rng.sample(jns, 2))
    if kind.startswith("rack"):
        return [*jns, *cluster.dev.namenode_ids]
    return [cluster.dev.wait_active(RESTART_TIMEOUT)]


def wait_for_moment(kind: str, cluster: PowerCutCluster, names: list[str]) -> Callable[[], bool]:
    """A function that waits (at most MOMENT_TIMEOUT) for the moment ``kind`` cuts at, and
    says whether it came."""

    def newest_segment(jn: str) -> int:
        current = cluster.disk(jn) / "ns1" / "current"
        found = [int(m.group(1)) for n in os.listdir(current) if (m := _IN_PROGRESS.fullmatch(n))]
        return max(found, default=0)

    def poll(ready: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + MOMENT_TIMEOUT
        while time.monotonic() < deadline:
            if ready():
                return True
            time.sleep(0.002)
        return False

    if kind.endswith("checkpoint upload"):
        disk = cluster.disk(names[0])
        return lambda: poll(lambda: any(_IMAGE_TEMP.fullmatch(n) for n in os.listdir(disk)))
    if kind.endswith("roll"):
        jn = cluster.journalnode_ids[0]
        def rolled() -> bool:
            before = newest_segment(jn)
            return poll(lambda: newest_segment(jn) > before)
        return rolled
    return lambda: True


def test_power_cuts_under_load(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    cuts = int(request.config.getoption("--power-cuts"))
    assert cuts >= 1, "--power-cuts must be at least 1"
    seed = int(os.environ.get("POWERCUT_SEED") or time.time_ns() % 1_000_000_007)
    print(f"power cuts: seed {seed} (POWERCUT_SEED={seed} replays the choices)")
    rng = random.Random(seed)
    log: list[str] = [f"seed {seed}"]
    started = time.monotonic()

    def note(line: str) -> None:
        log.append(f"{time.monotonic() - started:7.2f}s {line}")

    with PowerCutCluster(tmp_path) as cluster:
        dev = cluster.dev
        try:
            with MkdirLoad(dev.settings(), "/cut", writers=WRITERS, pause=0.01) as load:
                assert load.wait_acks(30, 30), "the load got no acknowledgements"
                for cut_no in range(1, cuts + 1):
                    kind = KINDS[cut_no - 1] if cut_no <= len(KINDS) else rng.choice(KINDS)
                    names = victims(kind, cluster, rng)
                    pause = rng.uniform(0.05, 1.0)
                    torn = rng.random() < 0.5
                    cut_seed = rng.randrange(1 << 30)
                    promised = {n: cluster.promised_epoch(n) for n in names if n.startswith("jn")}
                    time.sleep(pause)
                    moment = wait_for_moment(kind, cluster, names)()
                    reports = cluster.cut(names, torn=torn, seed=cut_seed)
                    note(f"cut {cut_no} ({kind}{'' if moment else ', moment not seen'}: "
                         f"{', '.join(names)}), {load.ack_count} acks: "
                         + "; ".join(r.describe() for r in reports))
                    refusals = cluster.power_on(names)
                    for refusal in refusals:
                        note(f"cut {cut_no}: {refusal.daemon} refused: {refusal.line}")
                        assert not refusal.traceback, f"{refusal.daemon} refused with a traceback"
                    for jn, before in promised.items():
                        after = cluster.promised_epoch(jn)
                        assert after >= before, f"cut {cut_no}: {jn} promised {before}, now {after}"
                    active = dev.wait_active(RESTART_TIMEOUT)
                    if not load.wait_acks(10, RESTART_TIMEOUT):
                        note(f"cut {cut_no}: no progress; {dev.states()}; "
                             f"threads wait in {cluster.where_blocked()}")
                        pytest.fail(f"cut {cut_no}: no progress after the cut")
                    with dev.client(LOAD_POLICY) as fs:
                        missing = load.missing(fs)
                    assert not missing, f"cut {cut_no}: acknowledged mkdirs lost: {missing[:10]}"
                    audit = JournalAudit(dev).check()
                    note(f"cut {cut_no}: {active} active; audit {audit.describe()}")
                    if audit.mismatches or audit.overlaps or audit.corrupt or audit.repeated_mkdirs:
                        for jn in cluster.journalnode_ids:
                            note(f"{jn}: {sorted(os.listdir(dev.journal_dir(jn)))}")
                        pytest.fail(f"cut {cut_no}: {audit.describe()}")
                load.stop()
                with dev.client(LOAD_POLICY) as fs:
                    assert not load.missing(fs)
            note(f"{cuts} cuts, {load.ack_count} acknowledged mkdirs, {cluster.restarts} "
                 f"restarts, {len(cluster.refusals)} refusals, {len(load.failures)} calls "
                 "with unknown outcome, 0 lost")
        finally:
            print("\n".join(log))
