"""Power cuts of the real daemons under write load (issue 26, docs/protocol.md §14).

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

import contextlib
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conf.mutants import MUTANTS_ENV, Mutant
from hadev.devcluster import LOAD_POLICY, MkdirLoad
from hanamenode.client import HaFsClient
from hanamenode.errors import PathNotFoundError
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
SLOW_PROGRESS = 10.0
MOMENT_TIMEOUT = 8.0
"""How long a cut waits for its moment (an image being written, a segment opened) before it
cuts anyway: the checkpoints and rolls of the load come every second or two."""
_IMAGE_TEMP = re.compile(r"fsimage_\d+\.db\.tmp")
_IN_PROGRESS = re.compile(r"edits_inprogress_(\d+)")


def stat_exists(fs: HaFsClient, path: str) -> bool:
    try:
        fs.stat(path)
    except PathNotFoundError:
        return False
    return True


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


class Series:
    """One run of cuts against a ``PowerCutCluster`` under a ``MkdirLoad``: ``cut`` cuts and
    restarts, ``check`` asserts the rules of the module docstring; ``log`` is what a run
    prints, seed first."""

    def __init__(self, cluster: PowerCutCluster, load: MkdirLoad, seed: int) -> None:
        self.cluster = cluster
        self.load = load
        self.rng = random.Random(seed)
        self.started = time.monotonic()
        self.log: list[str] = [f"seed {seed} (POWERCUT_SEED={seed} replays the choices)"]

    def note(self, line: str) -> None:
        self.log.append(f"{time.monotonic() - self.started:7.2f}s {line}")

    def cut(self, cut_no: int, kind: str) -> None:
        """Cut ``kind`` at a random point (or at its moment), then restart what was cut."""
        cluster, rng = self.cluster, self.rng
        names = victims(kind, cluster, rng)
        pause = rng.uniform(0.05, 1.0)
        torn = rng.random() < 0.5
        cut_seed = rng.randrange(1 << 30)
        promised = {n: cluster.promised_epoch(n) for n in names if n.startswith("jn")}
        time.sleep(pause)
        moment = wait_for_moment(kind, cluster, names)()
        reports = cluster.cut(names, torn=torn, seed=cut_seed)
        self.note(f"cut {cut_no} ({kind}{'' if moment else ', moment not seen'}: "
                  f"{', '.join(names)}), {self.load.ack_count} acks: "
                  + "; ".join(r.describe() for r in reports))
        refusals = cluster.power_on(names)
        for refusal in refusals:
            self.note(f"cut {cut_no}: {refusal.daemon} refused: {refusal.line}")
            assert not refusal.traceback, f"{refusal.daemon} refused with a traceback"
        for jn, before in promised.items():
            after = cluster.promised_epoch(jn)
            assert after >= before, f"cut {cut_no}: {jn} promised {before}, now {after}"

    def missing(self) -> list[str]:
        """Acknowledged mkdirs the active lacks, once a NameNode is active again (all of a
        writer's when its directory itself is gone)."""
        self.cluster.dev.wait_active(RESTART_TIMEOUT)
        acked = self.load.acked_paths()  # before listing: later ones may not be listed yet
        present: set[str] = set()
        with self.cluster.dev.client(LOAD_POLICY) as fs:
            for index in range(self.load.writers):
                with contextlib.suppress(PathNotFoundError):
                    present.update(status.path for status in fs.list(self.load.writer_dir(index)))
        return [path for path in acked if path not in present]

    def check(self, cut_no: int) -> None:
        cluster, dev = self.cluster, self.cluster.dev
        active = dev.wait_active(RESTART_TIMEOUT)
        if not self.load.wait_acks(10, SLOW_PROGRESS):
            # Slow, not yet failed: say where everyone waits now, while it is still slow.
            self.note(f"cut {cut_no}: no progress in {SLOW_PROGRESS:g}s; {dev.states()}; "
                      f"threads wait in {cluster.where_blocked()}")
        if not self.load.wait_acks(10, RESTART_TIMEOUT):
            self.note(f"cut {cut_no}: no progress; {dev.states()}; "
                      f"threads wait in {cluster.where_blocked()}")
            pytest.fail(f"cut {cut_no}: no progress after the cut")
        missing = self.missing()
        if missing:
            # Lost, or only left out of the listing? stat says which. (A long run once saw
            # only the first 1,000 names: daemons restarted from a checkout that had just
            # gained paged listings answered a test process still on the unpaged client.)
            with dev.client(LOAD_POLICY) as fs:
                found = [p for p in missing[:200] if stat_exists(fs, p)]
            pytest.fail(
                f"cut {cut_no}: {len(missing)} acknowledged mkdirs absent from the listing "
                f"({missing[:5]}...); stat finds {len(found)} of the first "
                f"{min(len(missing), 200)} ({found[:5]})"
            )
        audit = JournalAudit(dev).check()
        self.note(f"cut {cut_no}: {active} active; audit {audit.describe()}")
        if audit.mismatches or audit.overlaps or audit.corrupt or audit.repeated_mkdirs:
            for jn in cluster.journalnode_ids:
                self.note(f"{jn}: {sorted(os.listdir(dev.journal_dir(jn)))}")
            pytest.fail(f"cut {cut_no}: {audit.describe()}")


@contextlib.contextmanager
def power_cut_series(tmp_path: Path) -> Iterator[Series]:
    """A ``PowerCutCluster`` under a ``MkdirLoad`` that has had its first acknowledgements;
    the series' log is printed when the block ends, however it ends."""
    seed = int(os.environ.get("POWERCUT_SEED") or time.time_ns() % 1_000_000_007)
    print(f"power cuts: seed {seed} (POWERCUT_SEED={seed} replays the choices)")
    with PowerCutCluster(tmp_path) as cluster, MkdirLoad(
        cluster.dev.settings(), "/cut", writers=WRITERS, pause=0.01
    ) as load:
        series = Series(cluster, load, seed)
        try:
            assert load.wait_acks(30, 30), "the load got no acknowledgements"
            yield series
        finally:
            print("\n".join(series.log))


def test_power_cuts_under_load(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    cuts = int(request.config.getoption("--power-cuts"))
    assert cuts >= 1, "--power-cuts must be at least 1"
    with power_cut_series(tmp_path) as series:
        for cut_no in range(1, cuts + 1):
            kind = KINDS[cut_no - 1] if cut_no <= len(KINDS) else series.rng.choice(KINDS)
            series.cut(cut_no, kind)
            series.check(cut_no)
        series.load.stop()
        assert not series.missing()
        series.note(
            f"{cuts} cuts, {series.load.ack_count} acknowledged mkdirs, "
            f"{series.cluster.restarts} restarts, {len(series.cluster.refusals)} refusals, "
            f"{len(series.load.failures)} calls with unknown outcome, 0 lost"
        )


def test_power_cuts_catch_an_append_acknowledged_before_fdatasync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the planted bug ``append-without-fdatasync`` every JournalNode acknowledges
    edits its disk does not hold: ``kill -9`` cannot see that (the page cache survives), a
    rack's power cut loses acknowledged mkdirs, and the check of the series says so."""
    monkeypatch.setenv(MUTANTS_ENV, Mutant.APPEND_WITHOUT_FDATASYNC.switch)
    with power_cut_series(tmp_path) as series:
        lost: list[str] = []
        for cut_no in range(1, 4):
            series.cut(cut_no, "rack")
            lost = series.missing()
            series.note(f"cut {cut_no}: {len(lost)} acknowledged mkdirs lost")
            if lost:
                break
            assert series.load.wait_acks(30, RESTART_TIMEOUT), f"cut {cut_no}: no progress"
        assert lost, "three rack cuts lost nothing though no JournalNode syncs its appends"
