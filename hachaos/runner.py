"""One ``hachaos run``: build the network, start the cluster in it, run the clients and the
nemesis for the given time, heal, read the final state, run every checker, print the report
(with, on a failure, the smallest anomalous sub-histories, the seed and the command that
replays the schedule), and remove every namespace and mount on the way out, whatever
happens (an error, Ctrl-C, SIGTERM).

The harness process moves itself into the clients' namespace once the namespaces exist
(before any thread starts): its client threads, its health checks and the commands it runs
(``hactl format-zk``, ``hanamenode format``) reach the daemons as any client would.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import structlog

from conf import Settings
from conf.mutants import MUTANTS_ENV, parse_mutants
from hachaos.checker import CheckResult, Op, check_history, format_ops, read_history
from hachaos.cluster import ChaosCluster, daemons
from hachaos.final import (
    Finding,
    check_acks,
    check_packed,
    check_standby_prefix,
    check_txids,
    final_reads,
)
from hachaos.history import History
from hachaos.nemesis import Fault, Nemesis, Step, applicable_faults, schedule
from hachaos.netns import CLIENTS, ChaosNetwork
from hachaos.workload import Workload
from hadev.devcluster import DevCluster

__all__ = ["RunOptions", "RunReport", "print_check", "replay_command", "run"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """What ``hachaos run`` was asked for (its options, one for one)."""

    time: float = 60.0
    faults: tuple[Fault, ...] = tuple(Fault)
    seed: int = 0
    clients: int = 8
    keys: int = 5
    pinned: int = 2
    session_timeout: float = 1.0
    quorum_timeout: str = "4s"
    mutants: tuple[str, ...] = ()
    directory: Path | None = None
    sessions: bool = True
    """The clients pipeline their calls on sessions (the client library's default); False:
    one unary call each (``--unary``)."""
    journal: str = "qjm"
    """The shared edit log: ``qjm`` (three JournalNodes) or ``zookeeper`` (none)."""

    def replay(self) -> str:
        return replay_command(self)


def replay_command(options: RunOptions) -> str:
    """The command line that runs the same schedule (and the same client choices)."""
    parts = [
        "hachaos",
        "run",
        "--time",
        f"{options.time:g}",
        "--nemesis",
        "all"
        if set(options.faults) == set(applicable_faults(options.journal))
        else ",".join(f.value for f in options.faults) or "none",
        "--seed",
        str(options.seed),
        "--clients",
        str(options.clients),
        "--keys",
        str(options.keys),
        "--pinned-readers",
        str(options.pinned),
        "--session-timeout",
        f"{options.session_timeout:g}",
    ]
    if options.journal != "qjm":
        parts += ["--journal", options.journal]
    if options.mutants:
        parts += ["--mutants", ",".join(options.mutants)]
    if not options.sessions:
        parts.append("--unary")
    return shlex.join(parts)


@dataclass
class RunReport:
    """The outcome of a run: figures, the linearizability verdict, the other findings."""

    directory: Path
    history: Path
    operations: dict[str, dict[str, int]] = field(default_factory=dict)
    faults: int = 0
    nemesis_errors: list[str] = field(default_factory=list)
    acks: int = 0
    segments: int = 0
    check: CheckResult | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.check is not None and self.check.ok and not self.findings


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(options: RunOptions, out: TextIO) -> RunReport:
    """Run the whole experiment; the report is also printed to ``out``."""
    if options.mutants:
        parse_mutants(options.mutants)  # an unknown name fails before anything starts
        os.environ[MUTANTS_ENV] = ",".join(options.mutants)  # the daemons inherit it
    directory = options.directory or Path(tempfile.mkdtemp(prefix="hachaos-"))
    directory.mkdir(parents=True, exist_ok=True)
    steps = schedule(options.seed, options.faults, options.time, options.session_timeout)
    print(
        f"hachaos: run directory {directory}, seed {options.seed}, clients on "
        f"{'sessions' if options.sessions else 'unary calls'}, the {options.journal} journal",
        file=out,
    )
    print(f"hachaos: schedule of {len(steps)} faults:", file=out)
    for step in steps:
        print(f"  {step.describe()}", file=out)
    out.flush()
    previous = signal.signal(signal.SIGTERM, _terminate)
    network = ChaosNetwork.create(daemons(options.journal))
    try:
        network.enter(CLIENTS)
        disk_jn = None
        if Fault.DISK_FULL in options.faults:
            disk_jn = f"jn{options.seed % 3 + 1}"
        cluster = ChaosCluster(
            directory / "cluster",
            network,
            session_timeout=options.session_timeout,
            quorum_timeout=options.quorum_timeout,
            disk_jn=disk_jn,
            crash_disks=Fault.POWER_CUT in options.faults,
            journal=options.journal,
        )
        with cluster:
            report = _experiment(options, cluster, steps, directory)
        # The segments are hashed once every daemon has stopped: a JournalNode still running
        # may purge a segment between the listing and the hashing (and a NameNode its packed
        # segments, with the ZooKeeper journal).
        if options.journal == "zookeeper":
            report.segments, txid_findings = check_packed(
                {nn: cluster.packed_dir(nn) for nn in cluster.namenode_ids}
            )
        else:
            report.segments, txid_findings = check_txids(
                [str(cluster.disk_dir(jn)) for jn in cluster.journalnode_ids]
            )
        report.findings += txid_findings
        report.operations = _operations(
            report.history, range(options.clients, options.clients + options.pinned)
        )
        report.check = check_history(read_history(str(report.history)))
        print_report(report, options, out)
        return report
    finally:
        network.destroy()
        signal.signal(signal.SIGTERM, previous)


def _experiment(
    options: RunOptions,
    cluster: ChaosCluster,
    steps: Sequence[Step],
    directory: Path,
) -> RunReport:
    dev = cluster.dev
    settings = dev.settings()
    report = RunReport(directory, directory / "history.jsonl")
    meta = {
        "seed": options.seed,
        "keys": [f"k{i}" for i in range(options.keys)],
        "nemesis": [f.value for f in options.faults],
        "clients": options.clients,
        "replay": options.replay(),
        "mutants": list(options.mutants),
        "journal": options.journal,
        "addresses": cluster.network.addresses,
    }
    with History(report.history, meta) as history:
        workload = Workload(
            settings,
            history,
            clients=options.clients,
            keys=options.keys,
            seed=options.seed,
            pinned=options.pinned,
            sessions=options.sessions,
        )
        workload.start()
        started = time.monotonic()
        try:
            with Nemesis(cluster, steps, history.note, started) as nemesis:
                time.sleep(max(0.0, started + options.time - time.monotonic()))
            report.faults = nemesis.applied
            report.nemesis_errors = nemesis.errors
        finally:
            busy = workload.stop()
        if busy:
            report.findings.append(Finding("clients-stuck", ", ".join(busy)))
        dev.wait_active(60)
        final_reads(settings, history, workload.keys, process=workload.processes)
        report.acks = len(workload.acked)
        report.findings += check_acks(settings, workload.acked)
        report.findings += _standby_prefix(dev, settings)
    return report


def _standby_prefix(dev: DevCluster, settings: Settings, attempts: int = 3) -> list[Finding]:
    """``check_standby_prefix`` against the NameNode active now. An election still settling
    after the last fault can move the active while the check runs (its reads then meet a
    standby where the active was); such a check says nothing about the standbys and is made
    again, up to ``attempts`` times."""
    findings: list[Finding] = []
    for _ in range(attempts):
        active = dev.wait_active(60)
        standbys = {
            nn: dev.namenode(nn).address
            for nn in dev.namenode_ids
            if nn != active and dev.namenode(nn).running
        }
        findings = check_standby_prefix(
            settings, active, standbys, dev.namenode(active).address
        )
        if dev.wait_active(60) == active:
            return findings
        log.info("the active moved during the standby check; checking again", was=active)
    return findings


def _operations(path: Path, pinned: range) -> dict[str, dict[str, int]]:
    """Calls per operation and outcome; the pinned readers' under ``pinned <f>``."""
    counts: dict[str, dict[str, int]] = {}
    pending: dict[int, str] = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            kind = record.get("type")
            if kind == "invoke":
                pending[record["process"]] = record["f"]
            elif kind in ("ok", "info", "fail"):
                f = pending.pop(record["process"])
                if record["process"] in pinned:
                    f = f"pinned {f}"
                counts.setdefault(f, {"ok": 0, "info": 0, "fail": 0})[kind] += 1
    return counts


def _nemesis_events(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines]
    return [r for r in records if r.get("type") == "nemesis"]


def print_check(result: CheckResult, out: TextIO, events: Sequence[dict[str, Any]] = ()) -> None:
    """The linearizability verdict; for each key that fails, its smallest anomalous
    sub-history with the nemesis events around it."""
    verdicts = ", ".join(
        f"{r.key}: {'ok' if r.linearizable else 'UNKNOWN' if r.linearizable is None else 'NOT'}"
        f" ({r.ops} ops)"
        for r in result.keys
    )
    print(f"linearizability per key: {verdicts}", file=out)
    for key, ops in result.anomalies.items():
        print(
            f"\nkey {key} is not linearizable; smallest anomalous sub-history "
            f"(invoked, completed, process, call -> answer):",
            file=out,
        )
        print(format_ops(ops), file=out)
        window = _window(ops)
        near = [e for e in events if window[0] - 2 <= e["time"] <= window[1] + 2]
        if near:
            print("nemesis around it:", file=out)
            for e in near:
                print(
                    f"  {e['time']:9.3f} {e['fault']} {e['phase']} {e.get('target', '')}", file=out
                )
    if result.unknown:
        print(
            f"the search gave up on keys {', '.join(result.unknown)} (too many "
            "concurrent indeterminate operations); not a verdict",
            file=out,
        )


def _window(ops: Sequence[Op]) -> tuple[float, float]:
    start = min(op.invoke for op in ops)
    end = max(op.invoke if op.complete == float("inf") else op.complete for op in ops)
    return start, end


def print_report(report: RunReport, options: RunOptions, out: TextIO) -> None:
    print("", file=out)
    clients = {f: c for f, c in report.operations.items() if not f.startswith("pinned ")}
    total = {k: sum(c[k] for c in clients.values()) for k in ("ok", "info", "fail")}
    pinned = sum(c["ok"] for f, c in report.operations.items() if f not in clients)
    for f, c in sorted(report.operations.items()):
        print(f"  {f:12} ok {c['ok']:6}  indeterminate {c['info']:5}", file=out)
    print(
        f"operations: {sum(total.values())} ({total['ok']} answered, {total['info']} "
        f"indeterminate), and {pinned} reads answered to pinned readers; acknowledged marks "
        f"{report.acks}; faults applied {report.faults}; finalized segments checked "
        f"{report.segments}",
        file=out,
    )
    for error in report.nemesis_errors:
        print(f"nemesis error: {error}", file=out)
    assert report.check is not None
    print_check(report.check, out, _nemesis_events(report.history))
    for finding in report.findings:
        print(f"FINDING {finding.line()}", file=out)
    verdict = "OK" if report.ok else "FAILED"
    print(f"\n{verdict}: history {report.history}", file=out)
    if not report.ok:
        print(f"seed {options.seed}; replay the schedule with:\n  {options.replay()}", file=out)
    summary = {
        "ok": report.ok,
        "operations": sum(total.values()),
        "answered": total["ok"],
        "indeterminate": total["info"],
        "pinned_answered": pinned,
        "faults": report.faults,
        "nemesis_errors": len(report.nemesis_errors),
        "anomalies": sorted(report.check.anomalies),
        "unknown": report.check.unknown,
        "findings": [f.line() for f in report.findings],
        "seed": options.seed,
        "history": str(report.history),
        "replay": options.replay(),
    }
    print(json.dumps(summary, sort_keys=True), file=out)
    out.flush()
