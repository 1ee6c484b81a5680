"""``hachaos``: the Jepsen-style harness of issue 11::

    hachaos run [--time 60] [--nemesis all|none|kill,pause,partition-zk,...] [--seed N]
                [--clients 8] [--keys 5] [--pinned-readers 2] [--session-timeout 1s]
                [--journal qjm|zookeeper] [--mutants a,b] [--dir D]
    hachaos check HISTORY.jsonl
    hachaos cleanup [--all]

``run`` needs root (network namespaces, a tmpfs for ``disk-full``, FUSE mounts for
``power-cut``). It exits 0 when every checker passes, 1 when one finds something (the
report says what, with the seed and the replay command), 2 when the harness itself fails
(the cluster does not start, bad options, a nemesis that does not apply to the journal).
``check`` runs the linearizability checker on a history file (exit 0 or 1). ``cleanup``
removes the namespaces and mounts of runs whose process is gone (``--all``: of every run).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from conf import parse_duration
from conf.logging import setup_logging
from conf.mutants import MutantError
from hachaos.checker import HistoryError, check_history, read_history
from hachaos.final import require_segment_check
from hachaos.nemesis import JOURNALS, Fault, parse_faults
from hachaos.netns import NetworkError, cleanup_stale
from hachaos.runner import RunOptions, print_check, run

__all__ = ["cli", "main"]


@click.group()
def cli() -> None:
    """A linearizability harness for hanamenode: real daemons in network namespaces,
    nemeses, a history, and checkers."""


def _seconds(ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        return parse_duration(value, unit="s")
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command("run")
@click.option(
    "--time",
    "seconds",
    default="60",
    callback=_seconds,
    show_default=True,
    help="how long the clients and the nemesis run (seconds, or 2m...)",
)
@click.option(
    "--nemesis",
    "nemesis",
    default="all",
    show_default=True,
    help=f"faults, comma-separated, or all / none: {', '.join(f.value for f in Fault)} "
    "(all: those that apply to --journal)",
)
@click.option(
    "--journal",
    type=click.Choice(JOURNALS),
    default="qjm",
    show_default=True,
    help="the shared edit log: qjm (three JournalNodes) or zookeeper (ZooKeeper keeps it; "
    "the JournalNode faults do not apply)",
)
@click.option(
    "--seed", type=int, default=None, help="the schedule's seed (default: from the clock)"
)
@click.option("--clients", type=click.IntRange(1, 64), default=8, show_default=True)
@click.option("--keys", type=click.IntRange(1, 100), default=5, show_default=True)
@click.option(
    "--pinned-readers",
    "pinned",
    type=click.IntRange(0, 16),
    default=2,
    show_default=True,
    help="more clients, each bound to one NameNode with no failover, reading only",
)
@click.option(
    "--session-timeout",
    default="1s",
    callback=_seconds,
    show_default=True,
    help="the ZooKeeper session timeout of the NameNodes",
)
@click.option(
    "--unary",
    is_flag=True,
    help="the clients make one unary call each instead of pipelining on sessions",
)
@click.option(
    "--mutants",
    default="",
    help="planted bugs to switch on in the daemons (conf.mutants switch names, comma-separated)",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=None,
    help="where the cluster, its logs and the history go (default: a new temp dir)",
)
def run_command(
    unary: bool,
    seconds: float,
    nemesis: str,
    journal: str,
    seed: int | None,
    clients: int,
    keys: int,
    pinned: int,
    session_timeout: float,
    mutants: str,
    directory: Path | None,
) -> None:
    """Run the cluster, the clients and the nemesis, then check everything."""
    try:
        faults = parse_faults(nemesis, journal)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--nemesis'") from None
    if (missing := require_segment_check()) is not None:
        _fail(missing)
    if os.geteuid() != 0:
        _fail("needs root: it makes network namespaces (run it with sudo)")
    setup_logging("console", "warning")
    options = RunOptions(
        time=seconds,
        faults=faults,
        seed=seed if seed is not None else time.time_ns() % 1_000_000_007,
        clients=clients,
        keys=keys,
        pinned=pinned,
        session_timeout=session_timeout,
        mutants=tuple(m.strip() for m in mutants.split(",") if m.strip()),
        directory=directory,
        sessions=not unary,
        journal=journal,
    )
    try:
        report = run(options, sys.stdout)
    except (MutantError, NetworkError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        click.echo("hachaos: interrupted; every namespace was removed", err=True)
        sys.exit(130)
    sys.exit(0 if report.ok else 1)


@cli.command("check")
@click.argument("history", type=click.Path(exists=True, dir_okay=False))
def check_command(history: str) -> None:
    """Check a history file for linearizability, key by key."""
    try:
        parsed = read_history(history)
    except (HistoryError, OSError) as exc:
        _fail(str(exc))
    result = check_history(parsed)
    print(f"{history}: {result.operations} operations on {len(result.keys)} keys")
    print_check(result, sys.stdout)
    print("OK" if result.ok else "FAILED")
    sys.exit(0 if result.ok else 1)


@cli.command("cleanup")
@click.option(
    "--all", "everything", is_flag=True, help="also the namespaces of runs whose process still runs"
)
def cleanup_command(everything: bool) -> None:
    """Remove the namespaces and mounts that runs left behind."""
    if os.geteuid() != 0:
        _fail("needs root")
    removed = cleanup_stale(everything)
    print(f"removed {len(removed)} namespace(s)" + (f": {', '.join(removed)}" if removed else ""))


def _fail(message: str) -> None:
    click.echo(f"hachaos: {message}", err=True)
    sys.exit(2)


def main() -> None:
    cli()
