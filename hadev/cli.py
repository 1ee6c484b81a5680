"""``hadev``: the one-command local cluster (docs/architecture.md §1, ``hadev.devcluster``)::

    hadev up [--dir D] [--journalnodes 3] [--namenodes 2] [--observers 0] [--session-timeout 1s]
             [--journal qjm|zookeeper]
             [--insecure]
    hadev down [--dir D]
    hadev jn-wipe jnN [--dir D] [--timeout 60s]
    hadev start|stop|restart NAME [--dir D] [--timeout 60s]     NAME: zk, jn1..., nn1...

``up`` starts ZooKeeper, the JournalNodes and the NameNodes (automatic failover on) as
processes on free loopback ports, formats them on first use (a later ``up`` on the same
directory reuses the data), writes ``D/conf/ha-site.xml``, prints how to point ``hafs`` and
``hactl`` at it, and stays in the foreground until Ctrl-C or SIGTERM; then it stops every
process it started, by pid. Pids are in ``D/run/<name>.pid`` (``hadev.pid`` is ``up``
itself), logs in ``D/logs/``. Every daemon serves mutual TLS with a certificate carrying
its role, from a CA made in ``D/conf/tls/`` (``hadev.pki``); ``--insecure`` starts a
plaintext cluster instead (benchmarks with native load generators, debugging), and each
daemon then warns so in its log. A daemon that dies meanwhile (``kill -9`` of the active, to
watch the other take over) is reported, and the others keep running.

``down`` stops what ``up`` started in D: it asks ``up`` to stop (SIGTERM) and waits, then
stops every daemon whose pid file is left (SIGTERM, SIGKILL after a timeout), checking that
each pid still runs that daemon. Running it again, or on a directory where nothing runs, only
says so.

``jn-wipe jnN`` replaces the disk of one JournalNode of a running dev cluster: it asks
``hadev up`` (through ``D/run/jn-wipe.jnN.request``) to stop jnN, empty its storage and start
it again, and waits for the answer. The JournalNode formats itself from its peers and fetches
the finalized segments it lost (docs/protocol.md §10, docs/operations.md §7).

``start NAME``, ``stop NAME`` and ``restart NAME`` ask ``hadev up`` the same way to start,
stop or restart one daemon on its ports and data: a NameNode killed with ``kill -9`` comes
back with ``hadev start nn1``. A later ``hadev up`` of the same directory takes the same
ports again (``D/conf/ports.json``), unless another process holds one.

Exit status: 0 on success, 1 with a one-line reason on stderr otherwise.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import NoReturn

import click

import conf.quiet_grpc  # noqa: F401 - before grpc: no gRPC core line on the terminal
from conf import parse_duration
from conf.logging import setup_logging
from hadev.devcluster import (
    DEFAULT_SESSION_TIMEOUT,
    JOURNALS,
    DevCluster,
    DevClusterError,
    DevShape,
    daemon_command,
)
from hadev.holders import Holder, holders
from hadev.zookeeper import MAIN_CLASS, runs, stop_pid_file, terminate

__all__ = ["cli", "default_dir", "main"]

UP_PID = "hadev"
UP_STOP_TIMEOUT = 60.0
DAEMON_STOP_TIMEOUT = 15.0


def default_dir() -> Path:
    """``$TMPDIR/hadev-<user>``: one dev cluster per user unless ``--dir`` says otherwise."""
    return Path(tempfile.gettempdir()) / f"hadev-{getpass.getuser()}"


def _fail(message: str) -> NoReturn:
    click.echo(f"hadev: {message}", err=True)
    sys.exit(1)


def _read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _is_hadev_up(pid: int) -> bool:
    """Whether ``pid`` runs ``hadev up`` (console script or ``python -m hadev.cli``)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"up" in args and any(
        a.endswith(b"hadev") or a == b"hadev.cli" for a in args
    )


def _running_daemons(run_dir: Path) -> dict[str, int]:
    """Daemons (and ``hadev up``) of ``run_dir``'s pid files that still run, by name."""
    found: dict[str, int] = {}
    for pid_file in sorted(run_dir.glob("*.pid")):
        name, pid = pid_file.stem, _read_pid(pid_file)
        if pid is None:
            continue
        alive = _is_hadev_up(pid) if name == UP_PID else runs(pid, daemon_command(name))
        if alive:
            found[name] = pid
    return found


DAEMON_WORDS = (("journalnode", "run"), ("namenoded", "run"), (MAIN_CLASS,))
"""What the command line of a dev cluster daemon holds, however it was started."""


def _others(directory: Path) -> list[Holder]:
    """Processes that use ``directory`` although its pid files do not name them."""
    return list(holders(directory, DAEMON_WORDS, exclude=[os.getpid()]))


def _command_hint(name: str) -> str:
    """``hafs`` if it is on PATH, else its full path beside this interpreter."""
    beside = Path(sys.executable).parent / name
    if shutil.which(name) or not beside.exists():
        return name
    return str(beside)


@click.group()
def cli() -> None:
    """A local HA cluster for development: ZooKeeper, JournalNodes, NameNodes."""


_DIR_OPTION = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=default_dir,
    show_default="$TMPDIR/hadev-$USER",
    help="The cluster's directory: conf/, run/, logs/, data/.",
)


@cli.command()
@_DIR_OPTION
@click.option("--journalnodes", type=click.IntRange(1, 9), default=3, show_default=True)
@click.option("--namenodes", type=click.IntRange(2, 9), default=2, show_default=True)
@click.option(
    "--observers", type=click.IntRange(0, 9), default=0, show_default=True,
    help="Observer NameNodes beside --namenodes (never elected; they serve reads).",
)
@click.option(
    "--session-timeout",
    default=f"{DEFAULT_SESSION_TIMEOUT:g}s",
    show_default=True,
    help="ZooKeeper session timeout (1s, 1500ms; bare: seconds): how long a dead active "
    "goes unnoticed.",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Plaintext RPC instead of mutual TLS with per-role certificates: anybody who "
    "reaches a port may call any RPC.",
)
@click.option(
    "--journal",
    type=click.Choice(JOURNALS),
    default="qjm",
    show_default=True,
    help="The shared edit log: the QJM on --journalnodes JournalNodes, or the ZooKeeper "
    "journal (its live log in the cluster's ZooKeeper; no JournalNode is started).",
)
def up(
    directory: Path,
    journalnodes: int,
    namenodes: int,
    observers: int,
    session_timeout: str,
    insecure: bool,
    journal: str,
) -> None:
    """Start the cluster in the foreground; Ctrl-C stops it."""
    setup_logging("console", "warning")
    try:
        session = parse_duration(session_timeout, "s")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--session-timeout") from None
    directory = directory.absolute()
    run_dir = directory / "run"
    running = _running_daemons(run_dir)
    if running:
        listed = ", ".join(f"{name} (pid {pid})" for name, pid in running.items())
        _fail(f"a dev cluster already runs in {directory}: {listed}; "
              f"stop it with: hadev down --dir {directory}")
    if directory.is_dir() and (others := _others(directory)):
        listed = "; ".join(f"pid {h.pid} {h.why} ({h.command})" for h in others)
        _fail(f"{directory} is in use by processes hadev did not start: {listed}; "
              f"stop them first (hadev down --dir {directory} stops its daemons)")
    if directory.is_dir() and any(directory.iterdir()) and DevShape.read(
        directory / "conf" / "hadev.json"
    ) is None:
        _fail(f"{directory} is not empty and holds no dev cluster; give a new or empty --dir")
    reuse = (directory / "data").is_dir()
    dev = DevCluster(
        directory,
        journalnodes=journalnodes,
        namenodes=namenodes,
        observers=observers,
        session_timeout=session,
        tls=not insecure,
        journal=journal,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    own_pid = dev.pid_file(UP_PID)
    own_pid.write_text(f"{os.getpid()}\n")

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    # Python leaves SIGINT ignored when it was ignored at start, as it is for a job a
    # non-interactive shell puts in the background: Ctrl-C (SIGINT to the process group) must
    # stop the cluster wherever hadev was started from.
    signal.signal(signal.SIGINT, interrupt)
    click.echo(f"hadev: {'reusing' if reuse else 'creating'} the dev cluster in {directory}")
    try:
        try:
            dev.start()  # stops whatever it started when it fails or is interrupted
        except KeyboardInterrupt:
            click.echo("hadev: interrupted while starting; stopped what had started")
            return
        except (DevClusterError, RuntimeError, OSError) as exc:
            _fail(f"could not start the dev cluster: {exc}")
        _print_started(dev)
        _watch(dev)
    except KeyboardInterrupt:
        pass
    finally:
        # A second Ctrl-C must not cut the stop short and leave daemons behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if dev.started:
            click.echo("hadev: stopping NameNodes, JournalNodes and ZooKeeper")
            dev.stop()
            click.echo(f"hadev: stopped; data kept in {dev.data_dir} (hadev up reuses it)")
        own_pid.unlink(missing_ok=True)


def _print_started(dev: DevCluster) -> None:
    states = dev.states()
    rows = [("zk", dev.zookeeper.pid, dev.zookeeper.connect_string,
             f"ZooKeeper, session timeout {dev.session_timeout:g}s, "
             f"tickTime {dev.zookeeper.tick_time_ms} ms")]
    rows += [(jn.jn_id, jn.pid, jn.address, "JournalNode") for jn in dev.journalnodes]
    rows += [
        (nn, dev.namenode(nn).pid, dev.namenode(nn).address, f"NameNode, {states[nn]}")
        for nn in dev.namenode_ids
    ]
    click.echo("")
    for name, pid, address, what in rows:
        click.echo(f"  {name:<4} pid {pid:<7} {address:<16} {what}")
    first, second = dev.namenode_ids[0], dev.namenode_ids[1]
    active = next((nn for nn, state in states.items() if state == "active"), first)
    other = second if active == first else first
    hafs, hactl = _command_hint("hafs"), _command_hint("hactl")
    lines = [
        "",
        f"configuration {dev.conf_path}",
        f"logs          {dev.log_dir}/<name>.log",
        f"pids          {dev.run_dir}/<name>.pid",
        f"transport     mutual TLS, CA and per-role certificates in {dev.tls_dir} "
        f"(hafs presents the client one, hactl --conf {dev.admin_conf_path.name} the admin one)"
        if dev.tls
        else "transport     PLAINTEXT (--insecure): anybody who reaches a port may call any RPC",
        "",
        "Status pages (status.json beside each, for machines):",
        *(f"  {nn:<4} {dev.namenode(nn).status_url}" for nn in dev.namenode_ids),
        *(f"  {jn.jn_id:<4} {jn.status_url}" for jn in dev.journalnodes),
        "",
        "In another shell:",
        f"  export HANAMENODE_CONF={dev.conf_path}",
        f"  {hafs} mkdir -p /user/{getpass.getuser()}",
        f"  {hafs} ls -R /",
        f"  {hactl} --conf {dev.admin_conf_path} get-all-service-state   # as the operator",
        f"  {hactl} --conf {dev.admin_conf_path} failover {active} {other}",
        f"  kill -9 $(cat {dev.pid_file(other)})   # {other}, active since the failover, "
        f"dies; {active} takes over",
        f"  {_command_hint('hadev')} start {other} --dir {dev.base_dir}   # {other} comes back"
        " as standby (also: stop, restart)",
        *(
            f"  {_command_hint('hadev')} jn-wipe {jn.jn_id} --dir {dev.base_dir}"
            "   # it loses its disk, rejoins and syncs"
            for jn in dev.journalnodes[-1:]
        ),
        f"  {_command_hint('hadev')} down --dir {dev.base_dir}   # or Ctrl-C here",
        "",
        "Running until Ctrl-C or SIGTERM.",
    ]
    click.echo("\n".join(lines))


def _watch(dev: DevCluster) -> None:
    """Report daemons that exit, until every one has (or a signal interrupts); carry out
    what other hadev commands ask (``jn-wipe``)."""
    gone: set[str] = set()
    while True:
        time.sleep(0.5)
        for line in dev.serve_requests():
            click.echo(f"hadev: {line}")
        for name in dev.names:
            process = dev.process(name)
            if process.running:
                gone.discard(name)  # started again (hadev start NAME): report its next exit
                continue
            if name in gone or name in dev.stopped_by_request:
                continue
            gone.add(name)
            status = process.proc.returncode if process.proc is not None else None
            how = f"killed by {signal.Signals(-status).name}" if status and status < 0 else (
                f"exited with status {status}"
            )
            dev.pid_file(name).unlink(missing_ok=True)
            click.echo(f"hadev: {name} {how} (log: {dev.log_path(name)}); the others keep running")
        if len(gone) == len(dev.names):
            click.echo("hadev: every daemon has exited")
            return


@cli.command()
@_DIR_OPTION
def down(directory: Path) -> None:
    """Stop the dev cluster of --dir: by its pid files, then every other daemon that uses
    the directory (started by hand, or whose pid file is gone), its locks included."""
    setup_logging("console", "warning")
    directory = directory.absolute()
    run_dir = directory / "run"
    pid_files = sorted(run_dir.glob("*.pid")) if run_dir.is_dir() else []
    if not pid_files:
        if not _stop_others(directory):
            click.echo(f"hadev: nothing runs in {directory}")
        return
    up_pid = _read_pid(run_dir / f"{UP_PID}.pid")
    if up_pid is not None and _is_hadev_up(up_pid):
        click.echo(f"hadev: asking hadev up (pid {up_pid}) to stop its daemons")
        with contextlib.suppress(ProcessLookupError):
            os.kill(up_pid, signal.SIGTERM)
        deadline = time.monotonic() + UP_STOP_TIMEOUT
        while _is_hadev_up(up_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _is_hadev_up(up_pid):
            click.echo(f"hadev: hadev up still runs after {UP_STOP_TIMEOUT:g}s; "
                       "stopping the daemons by pid")
    (run_dir / f"{UP_PID}.pid").unlink(missing_ok=True)
    # NameNodes first (they finalize their segment on the JournalNodes), ZooKeeper last.
    order = {"nn": 0, "jn": 1}
    left = sorted(run_dir.glob("*.pid"), key=lambda p: (order.get(p.stem[:2], 2), p.stem))
    for pid_file in left:
        name, pid = pid_file.stem, _read_pid(pid_file)
        if stop_pid_file(pid_file, DAEMON_STOP_TIMEOUT, command=daemon_command(name)):
            click.echo(f"hadev: stopped {name} (pid {pid})")
        else:
            click.echo(f"hadev: {name} was not running (removed its stale pid file)")
    _stop_others(directory)
    click.echo(f"hadev: the dev cluster in {directory} is stopped; its data is kept")


def _stop_others(directory: Path) -> bool:
    """Stop the daemons that use ``directory`` without a pid file of it (SIGTERM, SIGKILL
    after a timeout); name each process that holds one of its locks and is not a daemon,
    or could not be stopped, and exit 1 then. Whether any was found."""
    if not directory.is_dir():
        return False
    found = _others(directory)
    stuck: list[str] = []
    for holder in found:
        if not holder.is_daemon:
            stuck.append(f"pid {holder.pid} {holder.why} and is no dev cluster daemon "
                         f"({holder.command})")
            continue
        try:
            terminate(holder.pid, DAEMON_STOP_TIMEOUT, ())
        except PermissionError as exc:
            stuck.append(f"pid {holder.pid} {holder.why}: {exc} ({holder.command})")
            continue
        deadline = time.monotonic() + 5.0
        while runs(holder.pid, ()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if runs(holder.pid, ()):
            stuck.append(f"pid {holder.pid} {holder.why} still runs after SIGKILL")
        else:
            click.echo(f"hadev: stopped pid {holder.pid}, which hadev up had not started: "
                       f"{holder.why} ({holder.command})")
    if stuck:
        _fail("could not stop every process using " + f"{directory}: " + "; ".join(stuck))
    return bool(found)


def _ask_up(directory: Path, command: str, target: str, wait: float) -> str:
    """Ask the ``hadev up`` of ``directory`` to carry out ``command`` on ``target`` (through
    ``D/run/<command>.<target>.request``, ``DevCluster.serve_requests``) and wait for its
    answer: what was done. Exits with the reason when there is no ``up`` to ask, no answer
    within ``wait`` seconds, or an error for an answer."""
    run_dir = directory / "run"
    up_pid = _read_pid(run_dir / f"{UP_PID}.pid")
    if up_pid is None or not _is_hadev_up(up_pid):
        _fail(f"hadev up does not run in {directory}; start it with: hadev up --dir {directory}")
    request = run_dir / f"{command}.{target}.request"
    answer = request.with_suffix(".done")
    answer.unlink(missing_ok=True)
    request.touch()
    click.echo(f"hadev: asked hadev up (pid {up_pid}) to {command} {target}")
    deadline = time.monotonic() + wait
    while not answer.exists():
        if time.monotonic() > deadline or not _is_hadev_up(up_pid):
            request.unlink(missing_ok=True)
            _fail(f"no answer from hadev up (pid {up_pid}) within {wait:g}s; see its output")
        time.sleep(0.1)
    text = answer.read_text().strip()
    answer.unlink(missing_ok=True)
    if not text.startswith("ok: "):
        _fail(f"{target}: {text.removeprefix('error: ')}")
    return text.removeprefix("ok: ")


def _shape(directory: Path) -> DevShape:
    shape = DevShape.read(directory / "conf" / "hadev.json")
    if shape is None:
        _fail(f"no dev cluster in {directory}")
    return shape


def _timeout(text: str) -> float:
    try:
        return parse_duration(text, "s")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timeout") from None


_TIMEOUT_OPTION = click.option(
    "--timeout",
    default="60s",
    show_default=True,
    help="How long to wait for hadev up to carry it out (bare: seconds).",
)


@cli.command("jn-wipe")
@click.argument("jn_id", metavar="JN")
@_DIR_OPTION
@_TIMEOUT_OPTION
def jn_wipe(jn_id: str, directory: Path, timeout: str) -> None:
    """Stop JN (jn1, jn2, ...) of the running dev cluster, empty its storage, start it again."""
    wait = _timeout(timeout)
    directory = directory.absolute()
    shape = _shape(directory)
    known = [f"jn{i}" for i in range(1, shape.journalnodes + 1)]
    if jn_id not in known:
        _fail(f"no JournalNode {jn_id!r} in {directory} (known: {', '.join(known)})")
    text = _ask_up(directory, "jn-wipe", jn_id, wait)
    click.echo(f"hadev: {text}; it formats itself from its peers and syncs their segments")


def _daemon_names(shape: DevShape) -> list[str]:
    namenodes = shape.namenodes + shape.observers
    return [
        "zk",
        *(f"jn{i}" for i in range(1, shape.journalnodes + 1)),
        *(f"nn{i}" for i in range(1, namenodes + 1)),
    ]


def _control(command: str, name: str, directory: Path, timeout: str) -> None:
    wait = _timeout(timeout)
    directory = directory.absolute()
    known = _daemon_names(_shape(directory))
    if name not in known:
        _fail(f"no daemon {name!r} in {directory} (known: {', '.join(known)})")
    click.echo(f"hadev: {_ask_up(directory, command, name, wait)}")


def _control_command(command: str, help_text: str) -> None:
    """Add ``hadev <command> NAME`` (start, stop, restart), carried out by ``hadev up``."""

    @cli.command(command, help=help_text)
    @click.argument("name")
    @_DIR_OPTION
    @_TIMEOUT_OPTION
    def run(name: str, directory: Path, timeout: str) -> None:
        _control(command, name, directory, timeout)


_control_command(
    "start",
    "Start daemon NAME (zk, jn1, nn2...) of the running dev cluster again, on its ports and "
    "data: after a kill -9, or a hadev stop.",
)
_control_command(
    "stop", "Stop daemon NAME (SIGTERM, SIGKILL after a timeout); hadev up keeps the others."
)
_control_command(
    "restart", "Stop daemon NAME if it runs and start it again, on its ports and data."
)


def main() -> None:
    """The ``hadev`` console script."""
    cli(prog_name="hadev")


if __name__ == "__main__":
    main()
