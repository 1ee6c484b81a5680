"""Power cuts of the real daemons under write load (issue 26, docs/protocol.md §14).

Every JournalNode and NameNode of a dev cluster keeps its storage on a crash filesystem
(``tests/powerloss/cluster.py``). Three writers make directories through the client library
while the test cuts the power, at random points (after a random number of acknowledged
mkdirs), of:

- one JournalNode; two at once; the whole rack (three JournalNodes and both NameNodes);
- the active NameNode alone; the active NameNode while an image is being written into its
  name directory (a checkpoint upload); the active NameNode alone, and the rack, while a
  JournalNode opens a new segment (a roll);
- the rack in a recovery: the active NameNode first, then everything else the moment the
  new active's recovery writes an accepted recovery (a paxos file) on a JournalNode;
- the rack in a write: while a JournalNode's append to its open segment waits, unanswered,
  on its disk's cache (``CrashMount.hold_next_write``), always with a torn write;
- one JournalNode, or the standby NameNode, whose disk then holds a torn VERSION or epoch
  file (a prefix cut inside a line, or zeros where the data never reached the disk): it
  must refuse to start with one line naming that file, and is repaired as an operator
  would.

``--power-cuts`` cuts (each kind but the NameNode's torn VERSION once, in that order, then
drawn at random, a torn file a quarter as often as each power cut); half of them leave a torn
write. After each cut it checks:

- no JournalNode's disk holds less than it acknowledged: its promised epoch file at least
  every promise it answered (a NameNode's ``started new epoch`` line, the test's own
  GetJournalState), each accepted recovery it answered still in its paxos file or
  superseded (``tests/powerloss/acknowledged.py``); and after the restart no JournalNode
  answers a lower promised epoch than before the cut;
- every daemon starts, or refuses with one line naming a file in its storage and no
  traceback;
- a NameNode becomes active and the writers make progress again;
- every acknowledged mkdir is present on the active;
- the finalized segments of all JournalNodes agree: the same name holds the same bytes on
  every node, no txid is finalized in two segments (``tests/chaos/journal_audit.py``), no
  mkdir is logged twice. (Gaps between finalized segments are not checked: a node that was
  down when the others purged keeps older segments, and a gap opens below them.)

The seed is printed; ``POWERCUT_SEED`` replays the same choices (kinds, victims, cut points,
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
from hadev.crashfs import CutReport
from hadev.devcluster import LOAD_POLICY, MkdirLoad
from hanamenode.client import HaFsClient
from hanamenode.errors import PathNotFoundError
from tests.chaos.journal_audit import JournalAudit
from tests.powerloss.acknowledged import forgotten
from tests.powerloss.cluster import RESTART_TIMEOUT, PowerCutCluster, Refusal

pytestmark = pytest.mark.timeout(3600)

KINDS = (
    "one JournalNode",
    "two JournalNodes",
    "rack",
    "active NameNode",
    "active NameNode in a checkpoint upload",
    "active NameNode in a roll",
    "rack in a roll",
    "rack in a recovery",
    "rack in a write",
    "one JournalNode with a torn file",
    "standby NameNode with a torn VERSION",
)
FIRST_KINDS = KINDS[:-1]
"""The first cuts of a series, in this order; then kinds are drawn (``next_kind``). The
NameNode's torn VERSION is only drawn: its repair (a bootstrap) costs 10 s, a JournalNode's
torn file shows the same refusal for 2."""
WRITERS = 3
SLOW_PROGRESS = 10.0
MOMENT_TIMEOUT = 8.0
"""How long a cut waits for its moment (an image being written, a segment opened, a
recovery accepted) before it cuts anyway: the checkpoints and rolls of the load come every
second or two, a recovery within a few seconds of the active's cut."""
MAX_ACKS_BEFORE_CUT = 60
"""A cut comes after 1 to this many acknowledged mkdirs since the last check (a fraction of
a second of the load): the cut point is drawn in acknowledgements, not in seconds slept."""
LISTED_EVERY_CUT = 20_000
"""Up to this many acknowledged mkdirs, every cut's check lists them all (``full_check_due``)."""
_IMAGE_TEMP = re.compile(r"fsimage_\d+\.db\.tmp")
_IN_PROGRESS = re.compile(r"edits_inprogress_(\d+)")


def next_kind(rng: random.Random) -> str:
    """A kind drawn at random, a torn file a quarter as often as each power cut: those test
    the refusal of a damaged disk, and a NameNode's repair costs a bootstrap (10 s)."""
    return rng.choices(KINDS, weights=[1 if "torn" in kind else 4 for kind in KINDS])[0]


def stat_exists(fs: HaFsClient, path: str) -> bool:
    try:
        fs.stat(path)
    except PathNotFoundError:
        return False
    return True


def victims(kind: str, cluster: PowerCutCluster, rng: random.Random) -> list[str]:
    jns = cluster.journalnode_ids
    if kind.startswith("one JournalNode"):
        return [rng.choice(jns)]
    if kind == "two JournalNodes":
        return sorted(rng.sample(jns, 2))
    if kind == "rack in a recovery":  # the active first: cut_in_recovery
        active = cluster.dev.wait_active(RESTART_TIMEOUT)
        return [active, *jns, *(nn for nn in cluster.dev.namenode_ids if nn != active)]
    if kind.startswith("rack"):
        return [*jns, *cluster.dev.namenode_ids]
    active = cluster.dev.wait_active(RESTART_TIMEOUT)
    if kind.startswith("standby"):
        return [nn for nn in cluster.dev.namenode_ids if nn != active][:1]
    return [active]


def poll(ready: Callable[[], bool], timeout: float = MOMENT_TIMEOUT) -> bool:
    """Whether ``ready`` said yes within ``timeout`` (asked every 2 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.002)
    return False


def wait_for_moment(kind: str, cluster: PowerCutCluster, names: list[str]) -> Callable[[], bool]:
    """A function that waits (at most MOMENT_TIMEOUT) for the moment ``kind`` cuts at, and
    says whether it came."""

    def newest_segment(jn: str) -> int:
        current = cluster.journal_disk(jn)
        found = [int(m.group(1)) for n in os.listdir(current) if (m := _IN_PROGRESS.fullmatch(n))]
        return max(found, default=0)

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


def paxos_names(cluster: PowerCutCluster) -> set[str]:
    """Every name in the JournalNodes' paxos directories (temp files of a write included), as
    their disks hold them."""
    names: set[str] = set()
    for jn in cluster.journalnode_ids:
        with contextlib.suppress(FileNotFoundError):
            names.update(f"{jn}/{n}" for n in os.listdir(cluster.journal_disk(jn) / "paxos"))
    return names


def tear(path: Path, rng: random.Random) -> str:
    """Damage ``path`` on a disk as a cut can when a file is written in place: a prefix
    ending inside a line (VERSION), or zeros where the data never reached the disk though
    the size did (an epoch file). Says what was done."""
    data = path.read_bytes()
    if path.name == "VERSION":
        newlines = [i for i, byte in enumerate(data) if byte == ord("\n")]
        keep = rng.choice(newlines[1:-1]) + rng.randint(2, 5)  # inside a key=value line
        path.write_bytes(data[:keep])
        return f"{path.name} cut to its first {keep} of {len(data)} bytes"
    path.write_bytes(b"\0" * len(data))
    return f"{path.name}'s {len(data)} bytes zeroed"


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
        self.acks = cluster.acknowledgements()
        self.audit = JournalAudit(cluster.dev)  # remembers the segments it read already
        self.expected_refusals: list[Refusal] = []
        self.moments_missed = 0

    def note(self, line: str) -> None:
        """A line of the run's log, printed at once: a long run (``-s``) shows its progress."""
        self.log.append(f"{time.monotonic() - self.started:7.2f}s {line}")
        print(self.log[-1], flush=True)

    def cut(self, cut_no: int, kind: str) -> None:
        """Cut ``kind`` at a random point (or at its moment), then restart what was cut."""
        cluster, rng = self.cluster, self.rng
        names = victims(kind, cluster, rng)
        acks_first = rng.randint(1, MAX_ACKS_BEFORE_CUT)
        torn = rng.random() < 0.5
        cut_seed = rng.randrange(1 << 30)
        cluster.prepare_starts(names)  # they warm up while the load runs to the cut
        promised = {n: cluster.promised_epoch(n) for n in names if n.startswith("jn")}
        for jn, epoch in promised.items():
            self.acks.promise(jn, epoch)  # an answer the test got: a promise too
        self.load.wait_acks(acks_first, MOMENT_TIMEOUT)
        began = time.monotonic()
        if kind == "rack in a recovery":
            moment, reports = self.cut_in_recovery(names, torn, cut_seed)
        elif kind == "rack in a write":
            moment, reports = self.cut_in_write(names, cut_seed)
        else:
            moment = wait_for_moment(kind, cluster, names)()
            reports = cluster.cut(names, torn=torn, seed=cut_seed)
        self.moments_missed += not moment
        self.note(f"cut {cut_no} ({kind}{'' if moment else ', moment not seen'}: "
                  f"{', '.join(names)}), {self.load.ack_count} acks: "
                  + "; ".join(r.describe() for r in reports))
        self.check_acknowledged(cut_no, [n for n in names if n.startswith("jn")])
        damaged = self.damage(cut_no, kind, names[0]) if "torn" in kind else None
        cut_at = time.monotonic()
        refusals = cluster.power_on(names)
        for refusal in refusals:
            self.note(f"cut {cut_no}: {refusal.daemon} refused: {refusal.line}")
            assert not refusal.traceback, f"{refusal.daemon} refused with a traceback"
            if refusal.daemon.startswith("jn"):
                self.acks.forget(refusal.daemon)  # repaired: its disk was emptied
            if damaged is not None and refusal.daemon == names[0]:
                assert str(damaged) in refusal.line, (
                    f"cut {cut_no}: {refusal.daemon} refused without naming {damaged}")
                self.expected_refusals.append(refusal)
            else:
                storage = str(cluster.storage_dir(refusal.daemon))
                assert storage in refusal.line, (
                    f"cut {cut_no}: {refusal.daemon}'s refusal names no file of {storage}")
        if damaged is not None:
            assert any(r.daemon == names[0] for r in refusals), (
                f"cut {cut_no}: {names[0]} started with a damaged {damaged}")
        for jn, before in promised.items():
            if jn in {r.daemon for r in refusals}:
                continue
            after = cluster.promised_epoch(jn)
            assert after >= before, f"cut {cut_no}: {jn} promised {before}, now {after}"
        self.note(f"cut {cut_no}: cut in {cut_at - began:.2f}s, powered on in "
                  f"{time.monotonic() - cut_at:.2f}s")

    def cut_in_recovery(
        self, names: list[str], torn: bool, seed: int
    ) -> tuple[bool, list[CutReport]]:
        """Cut the active (``names[0]``), then the rest the moment the new active's recovery
        writes an accepted recovery on any JournalNode (a paxos file appears), or a few
        milliseconds later (drawn), so that cuts land before, during and after the accepts
        and the finalize."""
        before = paxos_names(self.cluster)
        reports = self.cluster.cut(names[:1], torn=torn, seed=seed)
        moment = poll(lambda: bool(paxos_names(self.cluster) - before))
        time.sleep(self.rng.choice((0.0, 0.0, 0.002, 0.01, 0.05)))
        reports += self.cluster.cut(names[1:], torn=torn, seed=seed + 1)
        return moment, reports

    def cut_in_write(self, names: list[str], seed: int) -> tuple[bool, list[CutReport]]:
        """Cut ``names`` (the rack) while a JournalNode, drawn, has an append to its open
        segment on its disk's cache and waits to fsync it (``hold_next_write``), with a
        torn write: a cut at a random instant almost never finds a write there (2 torn
        segments in 550 cuts of the long runs), this one always does."""
        jn = self.rng.choice(self.cluster.journalnode_ids)
        mount = self.cluster.mounts[jn]
        mount.hold_next_write("edits_inprogress_")
        moment = mount.wait_held(MOMENT_TIMEOUT)
        return moment, self.cluster.cut(names, torn=True, seed=seed)

    def check_acknowledged(self, cut_no: int, jns: list[str]) -> None:
        """The disks of the JournalNodes just cut hold every promise and accepted recovery
        they acknowledged (read from the logs, now that the writers of the lines are dead)."""
        self.acks.read()
        lost = [line for jn in jns
                for line in forgotten(jn, self.cluster.journal_disk(jn), self.acks.by_jn[jn])]
        if lost:
            pytest.fail(f"cut {cut_no}: a JournalNode forgot what it acknowledged: {lost}")

    def damage(self, cut_no: int, kind: str, name: str) -> Path:
        """Tear a file on ``name``'s disk after its cut: VERSION or an epoch file of a
        JournalNode, VERSION of a NameNode. Returns the path the daemon sees it at."""
        if name.startswith("jn"):
            which = self.rng.choice(("VERSION", "last-promised-epoch", "last-writer-epoch"))
            on_disk = self.cluster.journal_disk(name) / which
            if not on_disk.exists():  # no writer has started a segment here yet
                which, on_disk = "VERSION", self.cluster.journal_disk(name) / "VERSION"
            seen_at = self.cluster.dev.journal_dir(name) / which
        else:
            on_disk = self.cluster.disk(name) / "VERSION"
            seen_at = self.cluster.storage_dir(name) / "VERSION"
        self.note(f"cut {cut_no}: {name}'s disk: {tear(on_disk, self.rng)}")
        return seen_at

    def summary(self, cuts: int) -> None:
        """The closing lines of a run: what was cut, acknowledged, restarted and refused."""
        cluster = self.cluster
        expected = set(map(id, self.expected_refusals))
        other = [r for r in cluster.refusals if id(r) not in expected]
        self.note(
            f"{cuts} cuts ({cluster.cuts} power cuts of daemon sets, {self.moments_missed} "
            f"moments not seen), {self.load.ack_count} acknowledged mkdirs, "
            f"{self.acks.promises_seen} promises and {self.acks.accepts_seen} accepted "
            f"recoveries acknowledged, {cluster.restarts} restarts, "
            f"{len(self.expected_refusals)} refusals of a damaged disk as expected, "
            f"{len(other)} other refusals, {len(self.load.failures)} calls with unknown "
            f"outcome, 0 lost; {cluster.warm.warm} warm starts, {cluster.warm.cold} cold, "
            f"{cluster.port_retries} starts again after a port in use"
        )
        for refusal in other:
            self.note(f"refusal after cut {refusal.cut}: {refusal.daemon}: {refusal.line}")

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

    def full_check_due(self, cut_no: int) -> bool:
        """Whether this cut's check lists every acknowledged mkdir: after every cut while
        there are at most LISTED_EVERY_CUT of them, then after one cut in 1 + acks //
        LISTED_EVERY_CUT (a long run's listing would otherwise grow to seconds a cut); the
        end of a run lists them all."""
        return cut_no % (1 + self.load.ack_count // LISTED_EVERY_CUT) == 0

    def check(self, cut_no: int) -> None:
        cluster, dev = self.cluster, self.cluster.dev
        began = time.monotonic()
        active = dev.wait_active(RESTART_TIMEOUT)
        if not self.load.wait_acks(10, SLOW_PROGRESS):
            # Slow, not yet failed: say where everyone waits now, while it is still slow.
            self.note(f"cut {cut_no}: no progress in {SLOW_PROGRESS:g}s; {dev.states()}; "
                      f"threads wait in {cluster.where_blocked()}")
        if not self.load.wait_acks(10, RESTART_TIMEOUT):
            self.note(f"cut {cut_no}: no progress; {dev.states()}; "
                      f"threads wait in {cluster.where_blocked()}")
            pytest.fail(f"cut {cut_no}: no progress after the cut")
        progress_at = time.monotonic()
        missing = self.missing() if self.full_check_due(cut_no) else []
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
        listed_at = time.monotonic()
        audit = self.audit.check()
        self.note(f"cut {cut_no}: {active} active; audit {audit.describe()}; progress in "
                  f"{progress_at - began:.2f}s, listing {listed_at - progress_at:.2f}s, "
                  f"audit {time.monotonic() - listed_at:.2f}s")
        if audit.mismatches or audit.overlaps or audit.corrupt or audit.repeated_mkdirs:
            for jn in cluster.journalnode_ids:
                self.note(f"{jn}: {sorted(os.listdir(dev.journal_dir(jn)))}")
            pytest.fail(f"cut {cut_no}: {audit.describe()}")


@contextlib.contextmanager
def power_cut_series(tmp_path: Path) -> Iterator[Series]:
    """A ``PowerCutCluster`` under a ``MkdirLoad`` that has had its first acknowledgements
    (the series prints its log as it goes)."""
    seed = int(os.environ.get("POWERCUT_SEED") or time.time_ns() % 1_000_000_007)
    print(f"power cuts: seed {seed} (POWERCUT_SEED={seed} replays the choices)")
    with PowerCutCluster(tmp_path) as cluster, MkdirLoad(
        cluster.dev.settings(), "/cut", writers=WRITERS, pause=0.01
    ) as load:
        series = Series(cluster, load, seed)
        assert load.wait_acks(30, 30), "the load got no acknowledgements"
        yield series


def test_power_cuts_under_load(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    cuts = int(request.config.getoption("--power-cuts"))
    assert cuts >= 1, "--power-cuts must be at least 1"
    with power_cut_series(tmp_path) as series:
        for cut_no in range(1, cuts + 1):
            kind = FIRST_KINDS[cut_no - 1] if cut_no <= len(FIRST_KINDS) else next_kind(series.rng)
            series.cut(cut_no, kind)
            series.check(cut_no)
        series.load.stop()
        assert not series.missing()
        series.summary(cuts)




def test_power_cuts_catch_edits_and_promises_acknowledged_before_they_are_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With two planted bugs, ``append-without-fdatasync`` (every JournalNode acknowledges
    edits its disk does not hold: ``kill -9`` cannot see that, the page cache survives) and
    ``promise-not-persisted`` (no promise ever reaches the epoch file), a rack's power cut
    loses acknowledged mkdirs and the JournalNodes' disks hold less than the promises they
    answered: the series' two checks say so."""
    monkeypatch.setenv(MUTANTS_ENV, ",".join(
        m.switch for m in (Mutant.APPEND_WITHOUT_FDATASYNC, Mutant.PROMISE_NOT_PERSISTED)))
    with power_cut_series(tmp_path) as series:
        cluster, jns = series.cluster, series.cluster.journalnode_ids
        lost: list[str] = []
        for cut_no in range(1, 4):
            series.load.wait_acks(series.rng.randint(1, MAX_ACKS_BEFORE_CUT), MOMENT_TIMEOUT)
            cluster.cut([*jns, *cluster.dev.namenode_ids], torn=False, seed=cut_no)
            series.acks.read()
            forgot = [line for jn in jns
                      for line in forgotten(jn, cluster.journal_disk(jn), series.acks.by_jn[jn])]
            series.note(f"cut {cut_no}: {forgot}")
            # the quorum whose answers the new writer's line names, at least
            assert len(forgot) > len(jns) // 2, "promises were answered, none is on a disk"
            assert all("last-promised-epoch holds 0" in line for line in forgot), forgot
            cluster.power_on([*jns, *cluster.dev.namenode_ids])
            lost = series.missing()
            series.note(f"cut {cut_no}: {len(lost)} acknowledged mkdirs lost")
            if lost:
                break
            assert series.load.wait_acks(30, RESTART_TIMEOUT), f"cut {cut_no}: no progress"
        assert lost, "three rack cuts lost nothing though no JournalNode syncs its appends"
