"""``python -m hadev.demo`` (``make demo``, the README's first command): the whole system
surviving the death of its active NameNode.

In a temporary directory (or ``--dir``) it starts the dev cluster of ``hadev up``
(``hadev.devcluster``: a real ZooKeeper, three JournalNodes and two NameNodes with
automatic failover, all processes on loopback ports), then:

1. writes a few hundred directories through ``HaFsClient`` from four writer threads, and
   shows some of them with real ``hafs`` commands;
2. runs ``hactl failover nn1 nn2`` (a real process) while the writers keep writing;
3. ``kill -9``s the active NameNode: the standby's elector wins the ZooKeeper lock once the
   dead one's session expires, fences it, recovers the edit log and becomes active; the demo
   times the kill to the first acknowledged write through the client;
4. restarts the killed NameNode, which rejoins as standby;
5. checks that every acknowledged directory is present (a listing of each writer's
   directory, a ``stat`` of each entry, and the count of ``hafs ls -R``), and prints a
   summary.

Exit status 0 on success; 1 with a one-line reason otherwise (the directory, with every
daemon's log, is then kept). It takes well under a minute, and the processes it started are
always stopped.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import conf.quiet_grpc  # noqa: F401 - before grpc: no gRPC core line on the terminal
from conf import TLSSettings, parse_duration
from conf.logging import setup_logging
from hadev.devcluster import (
    DEFAULT_SESSION_TIMEOUT,
    LOAD_POLICY,
    DevCluster,
    MkdirLoad,
)
from hadev.namenodes import get_service_state, run_hafs
from hanamenode.errors import NamenodeError
from hanamenode.ha import HAState

__all__ = ["DemoError", "main", "run_demo"]

TIME_LIMIT = 60.0
WRITERS = 4
CHECKERS = 8
"""Stats in flight while the demo checks every acknowledged directory."""
ROOT = "/demo"


class DemoError(Exception):
    """A step of the demo did not do what it should; the message says which and why."""


# ---------------------------------------------------------------------------------------------
# Output: rich when installed, plain aligned text otherwise.
# ---------------------------------------------------------------------------------------------


class Printer:
    """Steps, notes and tables for a person reading a terminal."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        try:
            console_mod: Any = importlib.import_module("rich.console")
            self._table_mod: Any = importlib.import_module("rich.table")
            self._console: Any = console_mod.Console(highlight=False)
        except ImportError:
            self._console = None

    def _print(self, text: str, style: str = "") -> None:
        if self._console is not None:
            self._console.print(text, style=style or None, markup=False)
        else:
            print(text, flush=True)

    def step(self, text: str) -> None:
        self._print(f"[{time.monotonic() - self._started:5.1f}s] {text}", "bold")

    def note(self, text: str) -> None:
        self._print(f"         {text}")

    def table(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        cells = [[str(c) for c in row] for row in rows]
        if self._console is not None:
            table = self._table_mod.Table(title=title, title_justify="left")
            for header in headers:
                table.add_column(header)
            for row in cells:
                table.add_row(*row)
            self._console.print(table)
            return
        widths = [len(h) for h in headers]
        for row in cells:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
        print(f"\n{title}")
        print("  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
        print("  " + "  ".join("-" * w for w in widths))
        for row in cells:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        print(flush=True)


@dataclass
class Timings:
    """What the summary reports."""

    start_s: float = 0.0
    graceful_s: float = 0.0
    graceful_from: str = ""
    graceful_to: str = ""
    killed: str = ""
    took_over: str = ""
    kill_to_active_s: float = 0.0
    kill_to_ack_s: float = 0.0
    acked: int = 0
    final_states: dict[str, str] = field(default_factory=dict)


class Deadline:
    """The demo's time limit: every wait gets what is left of it, at most ``cap``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self, cap: float = 30.0) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise DemoError(f"the demo did not finish within {self.seconds:g}s")
        return min(cap, remaining)


class _StatePoller:
    """Records when ``address`` first reports ACTIVE (wall-clock time), polling every 20 ms."""

    def __init__(self, address: str, deadline: float, tls: TLSSettings | None) -> None:
        self.address = address
        self.deadline = deadline
        self.tls = tls
        self.active_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-state-poller", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self.deadline:
            try:
                if get_service_state(self.address, self.tls, timeout=0.5) is HAState.ACTIVE:
                    self.active_at = time.time()
                    return
            except NamenodeError:
                pass
            self._stop.wait(0.02)

    def __enter__(self) -> _StatePoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)


def _shell(out: Printer, dev: DevCluster, program: str, *args: str, show: int = 8) -> str:
    """Run ``hafs`` or ``hactl`` as a process and print the command and its output (the first
    ``show`` lines); DemoError when it fails."""
    out.note(f"$ {program} {' '.join(_quote(a) for a in args)}")
    result: subprocess.CompletedProcess[str] = (
        run_hafs(dev.conf_path, *args) if program == "hafs" else dev.hactl(*args)
    )
    lines = result.stdout.splitlines()
    for line in lines[:show]:
        out.note(f"  {line}")
    if len(lines) > show:
        out.note(f"  ... ({len(lines) - show} more lines)")
    if result.returncode != 0:
        raise DemoError(
            f"{program} {' '.join(args)} exited with {result.returncode}: "
            f"{result.stderr.strip() or 'no output'}"
        )
    return result.stdout


def _quote(arg: str) -> str:
    return f"'{arg}'" if " " in arg or "%" in arg else arg


def _timed(what: Callable[[], object]) -> float:
    started = time.monotonic()
    what()
    return time.monotonic() - started


def run_demo(workdir: Path, out: Printer, entries: int, session_timeout: float) -> Timings:
    """The demo's steps (module docstring); DemoError (or a launcher's error) on failure."""
    limit = Deadline(TIME_LIMIT)
    times = Timings()
    dev = DevCluster(workdir, session_timeout=session_timeout)
    out.step("starting ZooKeeper, 3 JournalNodes and 2 NameNodes (the dev cluster of `hadev up`)")
    times.start_s = _timed(dev.start)
    try:
        first = dev.wait_active(limit.left())
        other = next(nn for nn in dev.namenode_ids if nn != first)
        out.step(
            f"up in {times.start_s:.1f}s: automatic failover through ZooKeeper, session timeout "
            f"{session_timeout:g}s; {first} won the election"
        )
        out.note(f"configuration {dev.conf_path} (HANAMENODE_CONF for hafs and hactl)")
        for name in dev.names:
            process = dev.process(name)
            out.note(f"{name:<4} pid {process.pid:<7} log {dev.log_path(name)}")
        _shell(out, dev, "hactl", "get-all-service-state")

        out.step(f"writing directories under {ROOT} with {WRITERS} HaFsClient writers")
        _shell(out, dev, "hafs", "mkdir", "-p", ROOT)
        load = MkdirLoad(dev.settings(), ROOT, writers=WRITERS, pause=0.01)
        try:
            load.start()
            if not load.wait_acks(entries, limit.left()):
                raise DemoError(f"fewer than {entries} directories acknowledged in time")
            out.step(f"{load.ack_count} directories acknowledged by {first}")
            _shell(out, dev, "hafs", "ls", ROOT)
            sample = load.acked[0][0]
            _shell(out, dev, "hafs", "stat", "%F %n, modified %y", sample)

            out.step(f"graceful failover {first} -> {other} while the writers keep writing")
            failures = len(load.failures)
            times.graceful_s = _timed(
                lambda: _shell(out, dev, "hactl", "failover", first, other)
            )
            times.graceful_from, times.graceful_to = first, other
            if dev.wait_active(limit.left()) != other:
                raise DemoError(f"{other} is not active after hactl failover: {dev.states()}")
            before = load.ack_count
            if not load.wait_acks(100, limit.left()):
                raise DemoError(f"the writers got no acknowledgement from {other}")
            out.step(
                f"{other} active after {times.graceful_s:.2f}s; the writers went on "
                f"({load.ack_count - before} more acknowledged, "
                f"{len(load.failures) - failures} failed calls)"
            )
            _shell(out, dev, "hactl", "get-all-service-state")

            victim, survivor = other, first
            out.step(
                f"kill -9 {dev.namenode(victim).pid}: {victim}, the active NameNode, dies"
            )
            survivor_nn = dev.namenode(survivor)
            with _StatePoller(
                survivor_nn.address, time.monotonic() + 30, survivor_nn.tls
            ) as poller:
                killed_at = time.time()
                dev.kill(victim, signal.SIGKILL)
                with dev.client(LOAD_POLICY) as probe:
                    probe.mkdirs(f"{ROOT}/after-kill")
                acked_at = time.time()
                dev.wait_active(limit.left(), exclude=victim)
                poller_deadline = time.monotonic() + 5
                while poller.active_at is None and time.monotonic() < poller_deadline:
                    time.sleep(0.02)
            times.killed, times.took_over = victim, survivor
            times.kill_to_ack_s = acked_at - killed_at
            if poller.active_at is not None:
                times.kill_to_active_s = poller.active_at - killed_at
            out.step(
                f"{survivor} took over: active {times.kill_to_active_s:.2f}s after the kill, "
                f"first acknowledged write {times.kill_to_ack_s:.2f}s after it"
            )
            out.note(
                f"(ZooKeeper expired {victim}'s session after {session_timeout:g}s; "
                f"{survivor}'s elector then won the lock, fenced {victim}, recovered the "
                "edit log with a new epoch)"
            )
            if not load.wait_acks(100, limit.left()):
                raise DemoError(f"the writers got no acknowledgement from {survivor}")
            _shell(out, dev, "hactl", "get-all-service-state")

            out.step(f"restarting {victim}: it rejoins as standby")
            dev.restart(victim, limit.left())
            dev.wait_state(victim, HAState.STANDBY, limit.left())
        finally:
            load.stop(limit.left())
        acked = [*load.acked_paths(), f"{ROOT}/after-kill"]
        out.step(
            f"writers stopped: {len(acked)} directories acknowledged, "
            f"{len(load.failures)} calls failed (outcome unknown)"
        )
        for failure in load.failures[:5]:
            out.note(f"failed: {failure.path}: {failure.error}")
        _check_present(out, dev, load, acked, limit)
        times.acked = len(acked)
        times.final_states = dev.states()
        _shell(out, dev, "hactl", "get-all-service-state")
    finally:
        out.step("stopping every process (NameNodes, JournalNodes, ZooKeeper)")
        dev.stop()
    return times


def _check_present(
    out: Printer, dev: DevCluster, load: MkdirLoad, acked: list[str], limit: Deadline
) -> None:
    with dev.client(LOAD_POLICY) as fs:
        missing = load.missing(fs)
        if missing:
            raise DemoError(f"{len(missing)} acknowledged directories are missing: {missing[:5]}")
        # Eight stats in flight, as eight users would: the active answers each one
        # linearizably, and concurrent reads share its read-index rounds.
        with ThreadPoolExecutor(CHECKERS, thread_name_prefix="demo-stat") as pool:
            for path, status in zip(acked, pool.map(fs.stat, acked), strict=True):
                if not status.is_dir:
                    raise DemoError(f"{path} is not a directory")
                limit.left()
    out.step(f"every acknowledged directory is present: {len(acked)} listed and stat'ed")
    listing = _shell(out, dev, "hafs", "ls", "-R", ROOT, show=3)
    entries = sum(1 for line in listing.splitlines() if line.startswith(("d", "-")))
    expected = len(acked) + load.writers
    out.note(f"hafs ls -R {ROOT}: {entries} entries ({expected} expected: the writers' "
             f"{load.writers} directories and {len(acked)} acknowledged ones)")
    if entries != expected:
        raise DemoError(f"hafs ls -R {ROOT} listed {entries} entries, expected {expected}")


def print_summary(out: Printer, times: Timings) -> None:
    states = ", ".join(f"{nn} {state}" for nn, state in times.final_states.items())
    out.table(
        "summary",
        ["what", "measured"],
        [
            ["cluster start (format on first use)", f"{times.start_s:.1f} s"],
            ["directories acknowledged = present", f"{times.acked}"],
            [
                f"hactl failover {times.graceful_from} {times.graceful_to}",
                f"{times.graceful_s:.2f} s (the command, a process)",
            ],
            [
                f"kill -9 {times.killed} -> {times.took_over} active",
                f"{times.kill_to_active_s:.2f} s",
            ],
            [
                f"kill -9 {times.killed} -> first acknowledged write",
                f"{times.kill_to_ack_s:.2f} s",
            ],
            ["final states", states],
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hadev.demo", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--dir", type=Path, help="work directory (new or empty; kept afterwards)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--entries", type=int, default=300, help="directories written first")
    parser.add_argument(
        "--session-timeout",
        default=f"{DEFAULT_SESSION_TIMEOUT:g}s",
        help="ZooKeeper session timeout (default %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        session_timeout = parse_duration(args.session_timeout, "s")
    except ValueError as exc:
        parser.error(f"--session-timeout: {exc}")
    if args.entries < 1:
        parser.error("--entries must be at least 1")
    setup_logging("console", "critical")

    def demo(workdir: Path, out: Printer) -> None:
        print_summary(out, run_demo(workdir, out, args.entries, session_timeout))

    return run_in_workdir("hanamenode HA demo", args.dir, args.keep, demo)


def run_in_workdir(
    title: str, directory: Path | None, keep: bool, demo: Callable[[Path, Printer], object]
) -> int:
    """Run ``demo(workdir, printer)`` in ``directory`` (new or empty; kept) or in a temporary
    directory (removed unless ``keep`` or the demo failed); the exit status: 0, or 1 after
    one line on stderr saying what failed."""
    if directory is not None:
        workdir = directory.absolute()
        if workdir.exists() and any(workdir.iterdir()):
            print(f"demo: {workdir} is not empty; give a new or empty --dir", file=sys.stderr)
            return 1
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="hanamenode-demo-"))
    out = Printer()
    out.step(f"{title} in {workdir}")
    ok = False
    try:
        demo(workdir, out)
        ok = True
    except Exception as exc:  # DemoError, a QuorumException, a JournalError: one line
        print(f"demo failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        if directory is not None or keep or not ok:
            out.note(f"files and logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if ok:
        out.step("demo finished")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
