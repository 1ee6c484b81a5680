"""HDFS-3077's loggers-in-isolation system test (§7.4.1), on real processes.

Three JournalNode processes (``JournalNodeProcessCluster(3)``) hold one journal. Three
supervisor threads each run a loop: start a LogTester process (``python -m hadev.logtester``,
which takes over the journal by fencing whoever wrote before, then writes batches and records
every acknowledged txid in its own file), let it run until it exits (another LogTester fenced
it) or until the supervisor decides at random to ``kill -9`` it, sleep a little, start a new
one. Supervisors also ``kill -9`` each other's LogTesters now and then. So writers fence each
other many times per minute while they write, and die at any point of the protocol.

At the end a fault-free QJM recovers and reads the whole log, and ``verify_logtesters``
checks: no txid acknowledged to two LogTester runs; every acknowledged txid is in the log
with the same bytes; finalized segment files of the same name are byte-identical on every
JournalNode (md5 of each, verified record by record). The run must also have been
meaningful: several takeovers that acknowledged edits, thousands of acknowledged txids.

The default run is ~20 s; ``LOGTESTER_SECONDS=3600`` makes a soak of it. Interleavings come
from real threads and processes, so the seed (printed; ``LOGTESTER_SEED=<seed>`` reuses it)
fixes the supervisors' choices but not the whole run.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hadev.daemon import child_environment
from hadev.journalnodes import JournalNodeProcessCluster
from hadev.logtester import read_acked, verify_logtesters
from journalnode.file_storage import FileJournalStorage
from proto import edits_pb2
from proto.values import NamespaceInfo
from qjm.journal_manager import QuorumJournalManager

JID = "lt"
NS = NamespaceInfo("CID-logtester", 7)
SUPERVISORS = 3
STOP_TIMEOUT = 10.0
# A LogTester's mkdir paths are /<name>/e<epoch>/d<n> (hadev.logtester).
EPOCH_IN_PATH = re.compile(r"^/[^/]+/e(\d+)/")


@dataclass
class Run:
    """One LogTester process: who started it, how it ended, what it acknowledged."""

    name: str
    acked_file: Path
    returncode: int | None = None
    killed_by: str | None = None  # "self", another supervisor's name, or "end of test"

    @property
    def acked(self) -> dict[int, str]:
        return read_acked(self.acked_file) if self.acked_file.exists() else {}


@dataclass
class Supervisor:
    """Starts, watches, kills and restarts LogTesters named ``name``; a daemon-like thread."""

    name: str
    rng: random.Random
    addresses: list[str]
    workdir: Path
    stop_at: float
    peers: list[Supervisor] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _proc: subprocess.Popen[bytes] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    conf: Path | None = None
    """The JournalNodes' file: its generic certificate is the LogTesters' (mutual TLS)."""

    def command(self, run: Run) -> list[str]:
        return [
            sys.executable,
            "-m",
            "hadev.logtester",
            "--journalnodes",
            ",".join(self.addresses),
            "--journal-id",
            JID,
            "--cluster-id",
            NS.cluster_id,
            "--namespace-id",
            str(NS.namespace_id),
            "--name",
            self.name,
            "--out",
            str(run.acked_file),
            "--seed",
            str(self.rng.randrange(2**32)),
            *(("--conf", str(self.conf)) if self.conf is not None else ()),
        ]

    def kill_current(self, by: str) -> bool:
        """SIGKILL this supervisor's LogTester if one runs; whether one was killed."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                return False
            proc.kill()
            self.runs[-1].killed_by = by
            return True

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # reported by the test thread
            self.errors.append(f"{type(exc).__name__}: {exc}")
            self.kill_current("supervisor error")

    def _loop(self) -> None:
        log_path = self.workdir / f"{self.name}.log"
        while time.monotonic() < self.stop_at:
            run = Run(self.name, self.workdir / f"{self.name}-{len(self.runs) + 1}.acked")
            with open(log_path, "ab") as out, self._lock:
                out.write(f"--- {run.acked_file.name} ---\n".encode())
                out.flush()
                self.runs.append(run)
                self._proc = subprocess.Popen(
                    self.command(run),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=child_environment(),
                )
            proc = self._proc
            while proc.poll() is None:
                if time.monotonic() >= self.stop_at:
                    self.kill_current("end of test")
                    break
                try:
                    proc.wait(self.rng.uniform(0.2, 1.5))
                    break
                except subprocess.TimeoutExpired:
                    pass
                roll = self.rng.random()
                if roll < 0.15:
                    self.kill_current("self")
                elif roll < 0.35:
                    victim = self.rng.choice(self.peers)
                    victim.kill_current(self.name)
            run.returncode = proc.wait(STOP_TIMEOUT)
            time.sleep(self.rng.uniform(0.0, 0.3))


def finalized_md5s(cluster: JournalNodeProcessCluster) -> dict[str, dict[str, str]]:
    """{jn id: {segment file name: md5}} from every (stopped) JournalNode's directory."""
    md5s = {}
    for jn in cluster:
        with FileJournalStorage(jn.edits_dir, JID) as storage:
            md5s[jn.jn_id] = storage.finalized_md5s()
    return md5s


def test_logtesters_fencing_each_other_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    seconds = float(os.environ.get("LOGTESTER_SECONDS", "20"))
    seed = int(os.environ.get("LOGTESTER_SEED", random.SystemRandom().randrange(2**32)))
    print(f"seed={seed} seconds={seconds} (reuse: LOGTESTER_SEED={seed} pytest -k logtesters)")
    rng = random.Random(seed)
    acked_dir = tmp_path / "logtesters"
    acked_dir.mkdir()

    with JournalNodeProcessCluster(3, tmp_path / "jns", journal_id=JID) as cluster:
        tls = cluster.harness_tls
        with QuorumJournalManager.connect(cluster.addresses, JID, NS, tls=tls) as qjm:
            qjm.format()

        stop_at = time.monotonic() + seconds
        supervisors = [
            Supervisor(
                f"lt{i + 1}", random.Random(rng.random()), cluster.addresses, acked_dir, stop_at,
                conf=cluster.conf_path,
            )
            for i in range(SUPERVISORS)
        ]
        for sup in supervisors:
            sup.peers = [other for other in supervisors if other is not sup]
        threads = [
            threading.Thread(target=sup.run, name=f"supervisor-{sup.name}", daemon=True)
            for sup in supervisors
        ]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(seconds + 60)
        finally:
            for sup in supervisors:
                sup.kill_current("end of test")
        assert not any(t.is_alive() for t in threads), "a supervisor did not stop"
        errors = [f"{sup.name}: {e}" for sup in supervisors for e in sup.errors]
        assert not errors, errors

        # A fault-free writer recovers the last segment; then the whole log is finalized.
        with QuorumJournalManager.connect(cluster.addresses, JID, NS, tls=tls) as qjm:
            last = qjm.recover_unfinalized_segments()
            ops = [op for stream in qjm.select_input_streams(1) for op in stream]
        statuses = cluster.stop()
    assert statuses == [0, 0, 0], f"seed={seed}: JournalNode exit statuses {statuses}"

    runs = [run for sup in supervisors for run in sup.runs]
    acked = {run.acked_file.stem: run.acked_file for run in runs if run.acked}
    report = verify_logtesters(acked, ops, finalized_md5s(cluster))
    summary = summarize(runs, ops, last)
    print(summary)
    where = f"seed={seed}; logs in {acked_dir}"
    assert not report.duplicates, f"{where}: txids acked to two LogTesters: {report.duplicates}"
    assert not report.missing_or_different, f"{where}: {report.missing_or_different[:20]}"
    assert not report.finalized_mismatches, f"{where}: {report.finalized_mismatches}"
    assert report.ok

    # The log is whole: txids 1..last without a gap, each once.
    assert [op.txid for op in ops] == list(range(1, (last or 0) + 1)), where

    # The run was meaningful: writers took over from each other repeatedly while writing.
    epochs = acked_epochs(ops, {txid for run in runs for txid in run.acked})
    assert len(acked) >= 3, f"{where}: only {len(acked)} LogTester runs acked edits\n{summary}"
    assert len(epochs) >= 3, f"{where}: acked txids come from epochs {sorted(epochs)}"
    # Enough acknowledged edits to mean something, not a speed: alone this acks about 9,900
    # txids in 20 s, beside the other test worker's heaviest files 1,562 (a two-worker run).
    assert report.acked >= 500 * min(1.0, seconds / 20), f"{where}: {report.acked} acked"


def acked_epochs(ops: list[edits_pb2.EditOp], txids: set[int]) -> Counter[int]:
    """How many acknowledged txids each writer epoch wrote (from the LogTesters' paths)."""
    epochs: Counter[int] = Counter()
    for op in ops:
        if op.txid in txids and (m := EPOCH_IN_PATH.match(op.mkdir.path)):
            epochs[int(m.group(1))] += 1
    return epochs


def summarize(runs: list[Run], ops: list[edits_pb2.EditOp], last: int | None) -> str:
    fenced = sum(run.returncode == 1 and run.killed_by is None for run in runs)
    killed_self = sum(run.killed_by == "self" for run in runs)
    killed_by_peer = sum(run.killed_by not in (None, "self", "end of test") for run in runs)
    acking = [run for run in runs if run.acked]
    acked = sum(len(run.acked) for run in acking)
    return (
        f"{len(runs)} LogTester runs: {fenced} exited when fenced, {killed_self} killed by "
        f"their supervisor, {killed_by_peer} killed by another supervisor; "
        f"{len(acking)} acknowledged edits ({acked} txids); log ends at txid {last} "
        f"({len(ops)} ops read back)"
    )
